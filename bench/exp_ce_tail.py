"""Probe: what the reduced cross-entropy loss's last-block sum costs on the GPU.

reduction="none" launches kk_cross_entropy_fwd; "mean" and "sum" launch kk_cross_entropy_loss, whose last block (a
ticket) adds every block's partial after the rows are done: a serial tail of a few L2 round trips. This times the
three through kernelkit.ops.cross_entropy in interleaved rounds (sweep_common.interleaved):

    python3 bench/exp_ce_tail.py --out ce_tail.json

H200 (h200-2026-11-23-s23/ce-tail.log, from this script's first form, which timed 7 interleaved rounds of 50 calls
with its own CUDA events; medians in us): bf16 32768 x 4096 none 70.91, mean 72.61, sum 72.43; float32 126.77 /
129.55 / 129.56; bf16 32768 x 8192 130.48 / 132.30 / 132.22. Without the tail, bf16 32768 x 4096 would be at 89.1% of
that run's copy bandwidth (4248 GB/s), still short of 90%.
"""

import torch
from sweep_common import interleaved, run_cases

from kernelkit.ops import cross_entropy

CASES = [(torch.bfloat16, 32768, 4096), (torch.float32, 32768, 4096), (torch.bfloat16, 32768, 8192)]


def time_case(dtype, rows, cols, copy, reps):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    calls = {r: [lambda r=r: cross_entropy(x, t, reduction=r)] for r in ("none", "mean", "sum")}
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, x.nbytes, copy):
        print(f"cross_entropy {str(dtype)[6:]:8s} {rows}x{cols:<5d} reduction={tag:4s} {us:7.2f} us {pct:5.1f}%")
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", reduction=tag, us=us, pct_copy=pct))
    return out


def main() -> None:
    torch.manual_seed(0)
    run_cases(CASES, time_case)


if __name__ == "__main__":
    main()
