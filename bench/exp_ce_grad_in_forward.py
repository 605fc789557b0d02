"""Experiment (session 32, not shipped): the reduced cross-entropy loss writing its gradient in the same pass
(kk_cross_entropy_loss_grad: each row read for its stats, then again, mostly from L2, for its gradient), at several
grids, against the loss kernel and the backward kernel launched apart; bf16 32768 x 4096 and 8192, float32 4096.
CUDA events, median of 20 batches of 10 launches.

The kernel and its op live in a patch: apply it, build the wheel, then run this from bench/:

    git apply bench/results/h200-2026-11-24-s32/ce-grad-in-forward.diff
    cd bench && python3 exp_ce_grad_in_forward.py
"""

import importlib
import statistics

import torch

from kernelkit.ops._runtime import kernel, scratch, sm_count

S = importlib.import_module("kernelkit.ops.softmax")


def timed(fn, reps=10, batches=20):
    for _ in range(5):
        fn()
    out = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(out)


def case(dtype, rows, cols):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    ct = S.CTYPE[dtype]
    loss = torch.empty((), device="cuda", dtype=dtype)
    stats = torch.empty(rows, 2, device="cuda")
    div = torch.empty((), device="cuda")
    grad = torch.empty_like(x)
    one = torch.ones((), device="cuda", dtype=dtype)
    kf = kernel("softmax", f"kk_cross_entropy_loss_grad<{ct}, {ct}>")
    sms = sm_count(0)
    base = S._ce_grid(x, "kk_cross_entropy_loss_grad", dtype)[1]
    print(dtype, rows, cols, "loss grid", base, flush=True)

    def fused(grid):
        spill, words = scratch(0, grid)
        return lambda: kf.launch(grid, 256, (x, t, stats, spill, words, 0, loss, div, grad, rows, cols, -100, 0.0))

    def apart():
        S._cross_entropy_reduced(x, t, -100, 0.0, False, None)
        S.cross_entropy_backward(x, t, stats, one, -100, 0.0, div)

    print(f"  loss + backward apart      {timed(apart):8.1f} us", flush=True)
    print(
        f"  loss alone                 {timed(lambda: S._cross_entropy_reduced(x, t, -100, 0.0, False, None)):8.1f} us"
    )
    for grid in (sms, 2 * sms, 3 * sms, 4 * sms, base):
        print(f"  fused grid {grid:5d} ({grid / sms:.1f}/SM) {timed(fused(grid)):8.1f} us", flush=True)


for dtype, rows, cols in ((torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)):
    case(dtype, rows, cols)
