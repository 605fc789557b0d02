"""Experiment: the cross-entropy forward's grid, one wave of resident blocks (shipped) against more.

The forward takes 8 rows per 256-thread block (warp rows, up to 2048 packs) and loops over the rows of a grid capped
at one wave (ops/softmax.py _ce_shape). At 32768 x 4096 that is 4096 row groups on 528 blocks (4 per SM on an H200):
7.76 per block, so the last of 8 passes runs with three quarters of the blocks. This times the reduced (mean) loss,
kk_cross_entropy_loss as _ce_reduced_cuda launches it, at caps of 1, 2 and 4 waves and with one block per row group
(no cap), interleaved (kernelkit.bench._time_interleaved):

    python3 bench/exp_ce_grid.py --out ce_grid.json

Verdict (H200, h200-2026-11-23-s18/ce-grid.log, when the forward and a second kernel summing its partials made the
loss): 1, 2 and 4 waves within 1.5% of one another, no cap 0.5-3% slower; the grid stayed at one wave. Session 19's
run on the one-launch loss (h200-2026-11-23-s19/ce-grid.log) had bf16 32768 x 4096 at 73.8 us on one wave and 72.1 on
two, as session 18's had (73.3, 72.2), and the other bf16 sizes 0.1-0.8% faster on two, float32 within 0.6% either
way: the 16-bit forwards take two waves since.
"""

from __future__ import annotations

import importlib

import torch
from sweep_common import interleaved, run_cases

from kernelkit.ops._runtime import cdiv, resident_blocks, tickets

# the module (kernelkit.ops.softmax is the op function)
softmax = importlib.import_module("kernelkit.ops.softmax")
SIZES = [(32768, 4096), (32768, 8192), (8192, 65536)]
WAVES = [1, 2, 4, None]  # None: no cap


def time_case(rows, cols, dtype, copy, reps):
    logits = torch.randn(rows, cols, dtype=dtype, device="cuda")
    target = torch.randint(0, cols, (rows,), device="cuda")
    k, block, per_block, _ = softmax._ce_shape("kk_cross_entropy_loss", dtype, cols, 0, dtype)
    one_wave = resident_blocks(k, block, 0)
    stats = torch.empty(rows, 2, device="cuda")
    ticket = tickets(0, 1)
    calls, outs = {}, {}
    for waves in WAVES:
        grid = cdiv(rows, per_block) if waves is None else min(cdiv(rows, per_block), waves * one_wave)
        partial = torch.empty(2 * grid, device="cuda")
        loss = torch.empty((), dtype=dtype, device="cuda")
        divisor = torch.empty((), device="cuda")

        def run(grid=grid, partial=partial, loss=loss, divisor=divisor):
            args = (logits, target, stats, partial, ticket, 1, loss, divisor, rows, cols, -100, 0.0)
            k.launch(grid, block, args)

        tag = f"grid {grid}" + (" (no cap)" if waves is None else f" ({waves} wave{'s' if waves > 1 else ''})")
        calls[tag] = [run]
        run()
        outs[tag] = loss.float().item()
    ref = torch.nn.functional.cross_entropy(logits.float(), target).item()
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, logits.nbytes, copy):
        print(
            f"cross_entropy {str(dtype)[6:]:8s} {rows}x{cols:<6d} {tag:22s} {us:7.1f} us {pct:5.1f}%  "
            f"loss {outs[tag]:.6f} (torch float32 {ref:.6f})"
        )
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


def main() -> None:
    run_cases([(rows, cols, dtype) for rows, cols in SIZES for dtype in (torch.bfloat16, torch.float32)], time_case)


if __name__ == "__main__":
    main()
