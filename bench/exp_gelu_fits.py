"""Experiment: the bias_gelu forward's packs per thread, register cap and x load, at kernelkit bench's sizes.

sweep_flat.py (h200-2026-11-23-s22/sweep-gelu-occ.log) had float32 at 8192 x 8192 reach torch.compile's 130.4 us with
2 packs per thread under 40 registers (12 blocks of 128 threads per SM, one pass) against the shipped 4 packs under 64
(8 blocks; 132.3), and bf16 at 68.4 against 69.0. Inductor's kernel is 2 packs at full occupancy. This builds
kernels/gelu.cu at each fit PACKS:MAXNREG[:HINT] (HINT: x's load instruction, one of sweep_flat.py's HINTS),
launches it on a one-pass grid and, for 16-bit types, on grids of 8 and 16 waves too, checks it bitwise against
the shipped op, and times the variants, the shipped op and torch.compile in interleaved rounds:

    python3 bench/exp_gelu_fits.py --fits 2:40 2:32:ld.plain -- float32:8192x8192 bfloat16:512x4096
"""

import argparse
import functools
import statistics

import torch
import torch.nn.functional as F
from sweep_flat import gelu_fwd_variant, parse_gelu_fit

import kernelkit
from kernelkit.bench import _gpu_median_ms
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, resident_blocks

BLOCK = 128


def launch(k, grid, x, bias):
    """The variant into a new output, as the op allocates its own."""
    y = torch.empty_like(x)
    k.launch(grid, BLOCK, (x, bias, y, x.shape[0], x.shape[1]))
    return y


def time_case(spec, mods, approximate, rounds):
    """One DTYPE:ROWSxCOLS case: the medians (us) of the shipped op, torch.compile and each variant and grid."""
    dt, size = spec.split(":")
    rows, cols = map(int, size.split("x"))
    dtype = getattr(torch, dt)
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    bias = torch.randn(cols, device="cuda", dtype=dtype)
    want = kernelkit.ops.bias_gelu(x, bias, approximate)
    compiled = torch.compile(lambda x, b: F.gelu(x + b, approximate=approximate), dynamic=False)
    compiled(x, bias)
    impls = {"shipped": lambda: kernelkit.ops.bias_gelu(x, bias, approximate), "compile": lambda: compiled(x, bias)}
    for (u, r, h), mod in mods.items():
        k = mod.kernel(f"kk_bias_gelu_fwd<{CTYPE[dtype]}, {int(approximate == 'tanh')}>")
        full = cdiv(x.numel(), VEC[dtype] * BLOCK * u)
        grids = {"full": full}
        if dtype.itemsize == 2:  # persistent blocks: the cap that sessions 14-21 shipped, and twice it
            grids["8wave"] = min(full, 8 * resident_blocks(k, BLOCK, 0))
            grids["16wave"] = min(full, 16 * resident_blocks(k, BLOCK, 0))
        for gname, grid in grids.items():
            tag = f"U{u} R{r}{'' if h == 'ld.nc' else ' ' + h} {gname}"
            impls[tag] = functools.partial(launch, k, grid, x, bias)
            assert torch.equal(impls[tag](), want), f"{spec}: {tag} differs from the shipped op"
    times = {name: [] for name in impls}
    for _ in range(rounds):
        for name, fn in impls.items():
            times[name].append(_gpu_median_ms([fn], reps=20, warmup=3) * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="DTYPE:ROWSxCOLS")
    ap.add_argument(
        "--fits",
        nargs="+",
        default=["2:40"],
        help="PACKS:MAXNREG[:HINT] (shipped: float32 2:40, erf 2:32; 16-bit 4:64, erf 2:48 on 8 waves)",
    )
    ap.add_argument("--approximate", default="tanh", choices=["tanh", "none"])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    mods = {fit: gelu_fwd_variant(*fit) for fit in map(parse_gelu_fit, a.fits)}
    for spec in a.cases:
        med = time_case(spec, mods, a.approximate, a.rounds)
        cells = "  ".join(f"{name} {t:7.1f}" for name, t in med.items())
        print(f"{spec:24s} {cells}  (us)", flush=True)


if __name__ == "__main__":
    main()
