"""Experiment: the RMSNorm forward on kk_rms_norm_fwd_wide's lean shape against the shipped op and torch.compile.

kk_layer_norm_fwd_wide closed float32 LayerNorm's gap (bench/NOTES.md session 17), and bench/exp_looped_rows.py's
rms_modes had matched torch.compile at 512-thread rows (float32 4096: 252.5 against 251.3 us; bf16 8192: 252.0 against
251.7) where the shipped kernel took 254-255. This times, interleaved (kernelkit.bench._time_interleaved), the op, the
wide kernel at each fit (register packs NP, minimum blocks per SM, threads per row R) and torch.compile, and checks
that the wide kernel gives the bits of kk_rms_norm_fwd at the same fit:

    python3 bench/exp_rms_wide.py --out rms_wide.json

Verdict (H200, h200-2026-11-23-s18/rms-wide.log): the wide kernel at NP 2, 4 blocks per SM was 0.3-0.8% faster than
the op at float32 4096 and bf16 4096/8192, and slower at float32 8192: ops/norms.py _WIDE_FIT.
"""

from __future__ import annotations

import torch
from sweep_common import interleaved, run_cases

import kernelkit
from kernelkit.bench import _rms_norm_reference
from kernelkit.ops._runtime import CTYPE, kernel

# (dtype, cols) -> [(NP, MINB, R)]
FITS = {
    (torch.float32, 4096): [(2, 4, 512), (4, 3, 256), (4, 2, 256)],
    (torch.float32, 8192): [(4, 3, 512), (4, 2, 512)],
    (torch.bfloat16, 8192): [(2, 4, 512), (2, 3, 512), (4, 2, 256)],
    (torch.bfloat16, 4096): [(1, 4, 512), (2, 4, 256), (4, 2, 128)],
}


def time_case(dtype, cols, fits, copy, reps, rows=32768):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    w = (1 + 0.1 * torch.randn(cols, device="cuda")).to(dtype)
    eps = 1e-6
    comp = torch.compile(_rms_norm_reference, dynamic=False)
    calls = {"op": [lambda: kernelkit.ops.rms_norm(x, w, eps)], "torch.compile": [lambda: comp(x, w, eps)]}
    ref = kernelkit.ops.rms_norm(x, w, eps)
    rstd = torch.empty(rows, device="cuda")
    for np_, minb, r in fits:
        k = kernel("norms", f"kk_rms_norm_fwd_wide<{CTYPE[dtype]}, {np_}, {minb}>")
        y = torch.empty_like(x)
        args = (x, w, y, rstd, rows, cols, eps)
        general = kernel("norms", f"kk_rms_norm_fwd<{CTYPE[dtype]}, false, {np_}, {minb}>")
        y2 = torch.empty_like(x)
        general.launch(rows, (r, 1), (x, w, y2, rstd, rows, cols, eps))
        k.launch(rows, (r, 1), args)
        tag = f"wide NP{np_} B{minb} R{r}"
        diff = (y.float() - ref.float()).abs().max().item()
        print(f"  {tag}: same bits as kk_rms_norm_fwd here: {torch.equal(y, y2)}; max |diff| to op {diff:.2e}")
        calls[tag] = [lambda k=k, r=r, args=args: k.launch(rows, (r, 1), args)]
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, 2 * x.nbytes, copy):
        print(f"rms_norm {str(dtype)[6:]:8s} {cols:5d} {tag:22s} {us:8.1f} us {pct:5.1f}%", flush=True)
        out.append(dict(dtype=str(dtype)[6:], cols=cols, impl=tag, us=us))
    return out


def main() -> None:
    run_cases([(dtype, cols, fits) for (dtype, cols), fits in FITS.items()], time_case)


if __name__ == "__main__":
    main()
