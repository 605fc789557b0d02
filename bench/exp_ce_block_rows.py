"""Experiment: the cross-entropy forward on block teams of one row each, as the held norm and softmax forwards run.

The shipped forward takes a warp per row up to 2048 packs, 8 rows per 256-thread block, on a grid of two waves. The
held norm forwards instead take one row per block (grid = rows) and reach 98% of copy at bf16 32768 x 4096 reading and
writing the row, while more rows per block measured slower there (h200-2026-11-24-s30/ab-norm-held-*waves.json). This
times kk_cross_entropy_fwd (reduction none, per-row losses) and kk_cross_entropy_loss (the mean) from a variant of
softmax.cu whose rows take block teams (kWarpRowPacks 0: ce_fwd_run's BLOCK path, team_allreduce over shared memory)
at B threads per row and a grid of G blocks, interleaved with the shipped warp rows (sweep_common.interleaved):

    python3 bench/exp_ce_block_rows.py --out ce_block_rows.json
"""

import torch
from ce_launches import CeLaunches
from sweep_common import run_cases, source_variant

from kernelkit.ops import _runtime
from kernelkit.ops._runtime import resident_blocks

CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]
BLOCKS = [64, 128, 256]
CAPS = [None, 8, 2]  # grid: a block per row, or that many waves of resident blocks


def time_case(dtype, rows, cols, copy, reps):
    case = CeLaunches(dtype, rows, cols)
    variant = source_variant("softmax", [(r"constexpr int kWarpRowPacks = 2048;", "constexpr int kWarpRowPacks = 0;")])
    shipped = _runtime._module("softmax")
    waves = 2 if dtype.itemsize == 2 else 1
    for reduce in (False, True):
        kind = "mean" if reduce else "none"
        grid = min(rows, waves * resident_blocks(case.kernel(shipped, reduce), 256, 0))
        case.add(f"{kind} shipped warp rows", shipped, reduce, 256, grid)
        for block in BLOCKS:
            for cap in CAPS:
                if reduce and cap is None:
                    continue  # a ticket per row: every block's atomic on one address
                k = case.kernel(variant, reduce)
                grid = rows if cap is None else min(rows, cap * resident_blocks(k, block, 0))
                span = "per row" if cap is None else f"{cap} waves"
                case.add(f"{kind} block {block} {span}", variant, reduce, block, grid)
    return case.report(copy, reps)


def main() -> None:
    run_cases(CASES, time_case)


if __name__ == "__main__":
    main()
