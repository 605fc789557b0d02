"""Experiment (session 32, not shipped): the reduced cross-entropy loss writing its gradient in the same pass
(kk_cross_entropy_loss_grad: each row read for its stats, then again, mostly from L2, for its gradient), at several
grids, against the loss kernel and the backward kernel launched apart; bf16 32768 x 4096 and 8192, float32 4096.
Timed in interleaved rounds (sweep_common.interleaved); % of copy for the fused form's 2N bytes (a read of the
logits and a write of the gradient).

The kernel and its op live in a patch: apply it, build the wheel, then run

    git apply bench/results/h200-2026-11-24-s32/ce-grad-in-forward.diff
    python3 bench/exp_ce_grad_in_forward.py --out ce_grad_in_forward.json
"""

import importlib

import torch
from sweep_common import interleaved, run_cases

from kernelkit.ops._runtime import kernel, scratch, sm_count

S = importlib.import_module("kernelkit.ops.softmax")
CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]


def time_case(dtype, rows, cols, copy, reps):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    ct = S.CTYPE[dtype]
    loss, stats, div = S._cross_entropy_reduced(x, t, -100, 0.0, False, None)  # the backward's stats and divisor
    grad = torch.empty_like(x)
    one = torch.ones((), device="cuda", dtype=dtype)
    fused = kernel("softmax", f"kk_cross_entropy_loss_grad<{ct}, {ct}>")
    sms = sm_count(0)
    loss_grid = S._ce_grid(x, "kk_cross_entropy_loss_grad", dtype)[1]

    def at(grid):
        spill, words = scratch(0, grid)
        args = (x, t, stats, spill, words, 0, loss, div, grad, rows, cols, -100, 0.0)
        return [lambda: fused.launch(grid, 256, args)]

    def apart():
        S._cross_entropy_reduced(x, t, -100, 0.0, False, None)
        S.cross_entropy_backward(x, t, stats, one, -100, 0.0, div)

    calls = {
        "loss + backward apart": [apart],
        "loss alone": [lambda: S._cross_entropy_reduced(x, t, -100, 0.0, False, None)],
    }
    for per_sm in (1, 2, 3, 4):
        calls[f"fused, {per_sm} blocks per SM"] = at(per_sm * sms)
    calls[f"fused, the loss's grid ({loss_grid / sms:.0f} per SM)"] = at(loss_grid)
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, 2 * x.nbytes, copy):
        print(f"{str(dtype)[6:]:8s} {rows}x{cols:<5d} {tag:36s} {us:7.1f} us {pct:5.1f}% of copy (2N)", flush=True)
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


if __name__ == "__main__":
    run_cases(CASES, time_case)
