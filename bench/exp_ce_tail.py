"""Probe: what the reduced cross-entropy loss's last-block sum costs on the GPU.

reduction="none" launches kk_cross_entropy_fwd; "mean" and "sum" launch kk_cross_entropy_loss, whose last block (a
ticket) adds every block's partial after the rows are done: a serial tail of a few L2 round trips. This times the
three through kernelkit.ops.cross_entropy in 7 interleaved rounds of 50 calls (CUDA events), medians in us:

    python3 bench/exp_ce_tail.py

H200 (h200-2026-11-23-s23/ce-tail.log): bf16 32768 x 4096 none 70.91, mean 72.61; float32 126.77 against 129.55;
bf16 32768 x 8192 130.48 against 132.30. Without the tail, bf16 32768 x 4096 would be at 89.1% of that run's copy
bandwidth (4248 GB/s), still short of 90%.
"""

import statistics

import torch

from kernelkit.ops import cross_entropy

CASES = [(torch.bfloat16, 32768, 4096), (torch.float32, 32768, 4096), (torch.bfloat16, 32768, 8192)]


def main() -> None:
    torch.manual_seed(0)
    for dtype, rows, cols in CASES:
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        t = torch.randint(0, cols, (rows,), device="cuda")
        fns = {r: (lambda r=r, x=x, t=t: cross_entropy(x, t, reduction=r)) for r in ("none", "mean", "sum")}
        res = {k: [] for k in fns}
        for _ in range(3):
            for f in fns.values():
                f()
        torch.cuda.synchronize()
        for _ in range(7):
            for k, f in fns.items():
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(50):
                    f()
                e.record()
                e.synchronize()
                res[k].append(s.elapsed_time(e) * 1e3 / 50)
        print(dtype, rows, cols, {k: round(statistics.median(v), 2) for k, v in res.items()}, flush=True)


if __name__ == "__main__":
    main()
