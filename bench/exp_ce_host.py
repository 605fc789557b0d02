"""Experiment: where the host microseconds of one cross-entropy call go (the mean loss, kernelkit.ops.cross_entropy).

In `kernelkit bench` the bf16 32768 x 4096 cell followed the host (h200-2026-11-23-s18): ~55 us of host work per call
against a 72 us kernel. This times, on small CUDA tensors so that the GPU never binds, the public function, the
registered op it calls, the op's CUDA body with its outputs given, its launch alone, and torch's
F.cross_entropy; host time only (exp_host_calls.host_us: batches of calls without waiting for the GPU, the cases in
turn):

    cd bench && python3 exp_ce_host.py

Result (H200 machine, h200-2026-11-23-s18/ce-host.log), when the loss took the forward and a second kernel summing its
partials: the public function 37.7 us against torch's 15.1; the op 33.3; its CUDA body with the outputs given 15.3, of
which the two launches 10.8 (the forward's alone measured 8.5) and the partials buffer (new_empty) 3.8. So the op's
three outputs and its checks cost 18 us: new_empty took 3.8 us per tensor where empty_like took 1.7. That led to one
launch whose last block sums the partials, from a scratch buffer kept per stream, and to outputs allocated without
building a dict of the arguments per output (bench/exp_host_calls.py).
"""

from __future__ import annotations

import importlib

import torch
from exp_host_calls import host_us

import kernelkit
from kernelkit.ops._runtime import scratch

softmax = importlib.import_module("kernelkit.ops.softmax")


def main() -> None:
    rows, cols = 64, 256
    logits = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, cols, (rows,), device="cuda")
    loss = torch.empty((), device="cuda", dtype=torch.bfloat16)
    stats = torch.empty(rows, 2, device="cuda")
    divisor = torch.empty((), device="cuda")
    k, grid, block = softmax._ce_grid(logits, "kk_cross_entropy_loss", torch.bfloat16)
    spill, words = scratch(0, grid)
    args = (logits, target, stats, spill, words, 1, 0, 0, loss, divisor, rows, cols, -100, 0.0)

    cases = {
        "kernelkit.ops.cross_entropy": lambda: kernelkit.ops.cross_entropy(logits, target),
        "_cross_entropy_reduced": lambda: softmax._cross_entropy_reduced(logits, target, -100, 0.0, True, None),
        "_ce_reduced_cuda (outputs given)": lambda: softmax._ce_reduced_cuda(
            logits, target, -100, 0.0, True, None, None, loss, stats, divisor
        ),
        "the launch": lambda: k.launch(grid, block, args),
        "scratch (spill slots and words)": lambda: scratch(0, grid),
        "stats.new_empty(64, 2)": lambda: stats.new_empty(64, 2),
        "torch F.cross_entropy": lambda: torch.nn.functional.cross_entropy(logits, target),
        "torch.empty_like(stats)": lambda: torch.empty_like(stats),
    }
    for name, (med, low) in host_us(cases).items():
        print(f"{name:36s} median {med:7.2f} us  min {low:7.2f} us", flush=True)


if __name__ == "__main__":
    main()
