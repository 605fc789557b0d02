# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""Experiment: 8-byte packs for the flat elementwise kernels, the layout of torch.compile's Triton kernel.

ncu (h200-2026-11-23-s16/ncu-s16.txt) shows Inductor's float32 muladd at 8192 x 8192 as 131072 blocks of 256
threads, two elements (one 8-byte load per input) per thread, 16 registers: 240.1 us against kk_muladd's 240.8
(65536 blocks of 256 threads, one 16-byte pack per input). This builds kernels/elementwise.cu with the other pack
width (kEwVec: 16 bytes for float32 muladd, 8 for the rest) and times it, in interleaved rounds, against the shipped
op and torch.compile:

    python3 bench/exp_flat_packs.py muladd:float32:8192x8192 add:float32:8192x8192

Verdicts: session 16 (h200-2026-11-23-s16/SUMMARY.md), float32 muladd 0.35% faster with 8 bytes, add slower; session
21 (h200-2026-11-23-s21/exp-flat-packs.log), float32 muladd with 8 bytes 243.6 against 244.2 us at 8192^2 (torch.compile
243.4) and 961.6-961.8 against 965.4 at 16384^2 (961.9): adopted for float32 muladd only.
"""

import argparse
import statistics

import torch
from sweep_common import source_variant

import kernelkit
from kernelkit.bench import _gpu_median_ms
from kernelkit.ops._runtime import CTYPE, VEC, cdiv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="OP:DTYPE:ROWSxCOLS, OP add, mul or muladd")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    flip = r"constexpr int kEwVec = NIN == 3 && sizeof\(T\) == 4 \? kVec<T> / 2 : kVec<T>;"
    mod = source_variant(
        "elementwise", [(flip, "constexpr int kEwVec = NIN == 3 && sizeof(T) == 4 ? kVec<T> : kVec<T> / 2;")]
    )
    for spec in a.cases:
        op, dt, size = spec.split(":")
        rows, cols = map(int, size.split("x"))
        dtype = getattr(torch, dt)
        nin = 3 if op == "muladd" else 2
        ins = [torch.randn(rows, cols, device="cuda", dtype=dtype) for _ in range(nin)]
        out = torch.empty_like(ins[0])
        n = out.numel()
        shipped = getattr(kernelkit.ops, op)
        want = shipped(*ins)
        k = mod.kernel(f"kk_{op}<{CTYPE[dtype]}>")
        math = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y, "muladd": lambda x, y, z: x * y + z}[op]
        compiled = torch.compile(math, dynamic=False)  # one static kernel per shape, as kernelkit bench
        compiled(*ins)
        impls = {"shipped": lambda: shipped(*ins), "compile": lambda: compiled(*ins)}
        # the variant's pack: 16 bytes for float32 muladd, else 8
        vec, width = (VEC[dtype], 16) if (op, dtype) == ("muladd", torch.float32) else (VEC[dtype] // 2, 8)
        for block in (128, 256):
            grid = cdiv(n, vec * block)
            tag = f"{width}B block {block}"
            impls[tag] = lambda g=grid, b=block: k.launch(g, b, (*ins, out, n))
            out.fill_(float("nan"))
            impls[tag]()
            assert torch.equal(out, want), f"{spec}: {width}-byte variant differs"
        times = {name: [] for name in impls}
        for _ in range(a.rounds):
            for name, fn in impls.items():
                times[name].append(_gpu_median_ms([fn], reps=20, warmup=3) * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        cells = "  ".join(f"{name} {t:7.1f}" for name, t in med.items())
        print(f"{spec:28s} {cells}  (us; compile/shipped {med['compile'] / med['shipped']:.4f})", flush=True)


if __name__ == "__main__":
    main()
