"""The grid of the held cross-entropy's backward launch (kk_cross_entropy_bwd's KEEP_AT_ONE, ops/softmax.py
_KEEP_WAVES): at a loss gradient of 1 its blocks return at once, at any other it rewrites the gradient from the logits.
Forward and torch.autograd.grad at loss gradients 1 and 0.5, with the launch capped at 4 waves of resident blocks and
at 1, interleaved over rounds.

    python3 bench/exp_ce_keep_waves.py
"""

import importlib
import statistics

import torch

import kernelkit.ops as K
from kernelkit.bench import _gpu_median_ms

S = importlib.import_module("kernelkit.ops.softmax")


def main() -> None:
    shipped = S._KEEP_WAVES
    cases = ((torch.bfloat16, 8192, 65536), (torch.float32, 8192, 65536), (torch.float32, 32768, 8192))
    for dtype, rows, cols in cases:
        x = torch.randn(rows, cols, device="cuda", dtype=dtype).requires_grad_()
        t = torch.randint(0, cols, (rows,), device="cuda")
        for g in (1.0, 0.5):
            grad_loss = torch.tensor(g, device="cuda", dtype=dtype)

            def step(x=x, t=t, grad_loss=grad_loss):
                return torch.autograd.grad(K.cross_entropy(x, t), x, grad_loss)

            times = {4: [], 1: []}
            for r in range(6):  # round 0 not kept
                for waves in times:
                    S._KEEP_WAVES = waves
                    S._ce_shape.cache_clear()
                    us = _gpu_median_ms([step], reps=20, warmup=3) * 1e3
                    if r:
                        times[waves].append(us)
            four, one = (statistics.median(times[w]) for w in (4, 1))
            print(
                f"{str(dtype)[6:]} {rows}x{cols} loss gradient {g}: 4 waves {four:.1f} us, 1 wave {one:.1f} us, "
                f"1/4 {one / four:.3f}",
                flush=True,
            )
    S._KEEP_WAVES = shipped
    S._ce_shape.cache_clear()


if __name__ == "__main__":
    main()
