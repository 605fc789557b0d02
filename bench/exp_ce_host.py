"""Experiment: where the host microseconds of one cross-entropy call go (the mean loss, kernelkit.ops.cross_entropy).

In `kernelkit bench` the bf16 32768 x 4096 cell followed the host (h200-2026-11-23-s18): ~55 us of host work per call
against a 72 us kernel. This times, on small CUDA tensors so that the GPU never binds, the public function, the
registered op it calls, the op's CUDA body with its outputs given, the two launches alone, and torch's
F.cross_entropy; host time only (batches of calls without waiting for the GPU, median of batches):

    python3 bench/exp_ce_host.py

Result (H200 machine, h200-2026-11-23-s18/ce-host.log): the public function 37.7 us against torch's 15.1; the op 33.3;
its CUDA body with the outputs given 15.3, of which the two launches 10.8 (the forward's alone measured 8.5) and the
partials buffer (new_empty) 3.8. So the op's three outputs and its checks cost 18 us: new_empty took 3.8 us per
tensor where empty_like took 1.7. The next step is fewer and cheaper allocations there.
"""

from __future__ import annotations

import importlib
import statistics
import time

import torch

import kernelkit

softmax = importlib.import_module("kernelkit.ops.softmax")


def host_us(f, batches: int = 40, n: int = 200) -> float:
    for _ in range(200):
        f()
    torch.cuda.synchronize()
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        out.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def main() -> None:
    rows, cols = 64, 256
    logits = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, cols, (rows,), device="cuda")
    loss = torch.empty((), device="cuda", dtype=torch.bfloat16)
    stats = torch.empty(rows, 2, device="cuda")
    divisor = torch.empty((), device="cuda")
    k, grid, block = softmax._ce_grid(logits, "kk_cross_entropy_fwd")
    partial = torch.empty(2 * grid, device="cuda")
    reduce = softmax._ce_reduce_kernel(torch.float32, torch.bfloat16)

    def launches():
        k.launch(grid, block, (logits, target, 0, stats, partial, rows, cols, -100, 0.0))
        reduce.launch(1, 256, (partial, grid, 1, loss, divisor), dependent=True)

    cases = {
        "kernelkit.ops.cross_entropy": lambda: kernelkit.ops.cross_entropy(logits, target),
        "_cross_entropy_reduced": lambda: softmax._cross_entropy_reduced(logits, target, -100, 0.0, True, None),
        "_ce_reduced_cuda (outputs given)": lambda: softmax._ce_reduced_cuda(
            logits, target, -100, 0.0, True, None, loss, stats, divisor
        ),
        "the two launches": launches,
        "one launch": lambda: k.launch(grid, block, (logits, target, 0, stats, partial, rows, cols, -100, 0.0)),
        "stats.new_empty(2 * grid)": lambda: stats.new_empty(2 * grid),
        "torch F.cross_entropy": lambda: torch.nn.functional.cross_entropy(logits, target),
        "torch.empty_like(stats)": lambda: torch.empty_like(stats),
    }
    for name, f in cases.items():
        print(f"{name:36s} {host_us(f):7.2f} us", flush=True)


if __name__ == "__main__":
    main()
