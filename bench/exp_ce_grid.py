"""Experiment: the cross-entropy forward's grid and block, the shipped shape against others.

The forward takes one row per warp (warp rows, up to 2048 packs) in 256-thread blocks and loops over the rows of a
grid capped at two waves of resident blocks for 16-bit types (ops/softmax.py _ce_shape). At 32768 x 4096 on an H200
that is 32 warps per SM, 4224 in all: 7.76 rows each, so the last of 8 row times runs with three quarters of the
warps. A variant (W, P, waves) takes blocks of W warps, at most P warps per SM (blocks per SM = min(occupancy,
P // W)) and a grid of that many waves. Its row times, rows / (P * SMs) rounded up and scaled by P / 32, are what a
bandwidth-bound launch would take in units of the shipped shape's row time: (7, 28) takes 9 row times of 28 warps,
252 / 256 of the shipped 8 of 32. This times the reduced (mean) loss, kk_cross_entropy_loss as _ce_reduced_cuda
launches it, interleaved (kernelkit.bench._time_interleaved):

    python3 bench/exp_ce_grid.py --out ce_grid.json
    python3 bench/exp_ce_grid.py --source DIR --out ce_grid.json   # softmax.cu and common.cuh from DIR

Verdicts (H200): h200-2026-11-23-s18/ce-grid.log, when the forward and a second kernel summing its partials made the
loss: 1, 2 and 4 waves of the shipped block within 1.5% of one another, no cap 0.5-3% slower. Session 19's run on the
one-launch loss (h200-2026-11-23-s19/ce-grid.log) had bf16 32768 x 4096 at 73.8 us on one wave and 72.1 on two, as
session 18's had (73.3, 72.2), and the other bf16 sizes 0.1-0.8% faster on two, float32 within 0.6% either way: the
16-bit forwards take two waves since. Session 30 (h200-2026-11-24-s30/ce-grid.log): the shipped shape fastest; the
variants with fewer row times (28 warps per SM) 0.3-5% slower at bf16 32768 x 4096 (73.3-74.0 us against 72.1, and 79.0
and 97.7 at 2 and 1 warps per block): a warp's row time does not scale with the warps per SM as a bandwidth-bound
launch's would, so the last row time's idle quarter is not what holds the forward. With the release ticket
(ce-grid2.log) 3, 4 and 8 waves and no cap took 74.1, 74.2, 79.3 and 79.2 us against 71.9 on two.
"""

from __future__ import annotations

import argparse
import sys

import torch
from ce_launches import CeLaunches
from sweep_common import run_cases, source_variant

from kernelkit.ops import _runtime
from kernelkit.ops._runtime import cdiv, sm_count

SIZES = [(32768, 4096), (32768, 8192)]
# (warps per block, warps per SM at most, waves: 0 for a block per W rows, no cap); the first is the shipped shape for
# 16-bit types
VARIANTS = [(8, 32, 2), (8, 32, 1), (8, 32, 3), (8, 32, 4), (8, 32, 8), (8, 32, 0), (7, 28, 2), (7, 28, 1), (4, 28, 1)]
VARIANTS += [(2, 28, 1), (1, 28, 1), (9, 27, 1), (6, 30, 1)]
_source = None  # --source: the softmax module to time instead of the shipped one


def time_case(rows, cols, dtype, copy, reps):
    case = CeLaunches(dtype, rows, cols)
    module = _source or _runtime._module("softmax")
    k = case.kernel(module, True)
    sms = sm_count(0)
    for warps, per_sm, waves in VARIANTS:
        block = 32 * warps
        blocks_per_sm = min(k.occupancy(block, 0, 0), per_sm // warps)
        grid = min(cdiv(rows, warps), (waves or rows) * blocks_per_sm * sms)
        resident = blocks_per_sm * warps
        span = f"{waves} wave{'s' if waves > 1 else ''}" if waves else "no cap"
        row_times = cdiv(rows, resident * sms) * resident / 32
        case.add(f"{warps} warps x {blocks_per_sm}/SM, {span}", module, True, block, grid, row_times=row_times)
    return case.report(copy, reps)


def main() -> None:
    global _source
    # --source DIR: time softmax.cu and common.cuh from DIR (a variant of the kernel) instead of the shipped ones
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--source")
    a, sys.argv[1:] = ap.parse_known_args()
    if a.source:
        with open(f"{a.source}/softmax.cu") as src, open(f"{a.source}/common.cuh") as common:
            _source = source_variant("softmax", source=src.read(), common=common.read())
    run_cases([(rows, cols, dtype) for rows, cols in SIZES for dtype in (torch.bfloat16, torch.float32)], time_case)


if __name__ == "__main__":
    main()
