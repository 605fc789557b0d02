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
from sweep_common import interleaved, run_cases, source_variant

from kernelkit.ops import _runtime
from kernelkit.ops._runtime import resident_blocks, tickets

CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]
BLOCKS = [64, 128, 256]
CAPS = [None, 8, 2]  # grid: a block per row, or that many waves of resident blocks


def time_case(dtype, rows, cols, copy, reps):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    ct = _runtime.CTYPE[dtype]
    variant = source_variant("softmax", [(r"constexpr int kWarpRowPacks = 2048;", "constexpr int kWarpRowPacks = 0;")])
    shipped = _runtime._module("softmax")
    stats = torch.empty(rows, 2, device="cuda")
    per_row = torch.empty(rows, device="cuda")
    ticket = tickets(0, 1)
    calls, outs = {}, {}

    def add(tag, mod, reduce, block, grid):
        name = "kk_cross_entropy_loss" if reduce else "kk_cross_entropy_fwd"
        k = mod.kernel(f"{name}<{ct}, {ct}>" if reduce else f"{name}<{ct}>")
        if grid is None:
            grid = rows
        elif grid < 0:
            grid = min(rows, -grid * resident_blocks(k, block, 0))
        partial = torch.empty(2 * grid, device="cuda")
        loss = torch.empty((), dtype=dtype, device="cuda")
        divisor = torch.empty((), device="cuda")
        if reduce:
            args = (x, t, stats, partial, ticket, 1, loss, divisor, rows, cols, -100, 0.0)
        else:
            args = (x, t, per_row, stats, rows, cols, -100, 0.0)

        def run():
            k.launch(grid, block, args)

        run()
        torch.cuda.synchronize()
        outs[tag] = (loss if reduce else per_row.mean()).float().item()
        calls[tag] = [run]

    for reduce in (False, True):
        kind = "mean" if reduce else "none"
        waves = 2 if dtype.itemsize == 2 else 1
        add(f"{kind} shipped warp rows", shipped, reduce, 256, -waves)
        for block in BLOCKS:
            for cap in CAPS:
                if reduce and cap is None:
                    continue  # a ticket per row: every block's atomic on one address
                add(
                    f"{kind} block {block} " + ("per row" if cap is None else f"{cap} waves"),
                    variant,
                    reduce,
                    block,
                    None if cap is None else -cap,
                )
    ref = torch.nn.functional.cross_entropy(x.float(), t).item()
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, x.nbytes, copy):
        print(
            f"cross_entropy {str(dtype)[6:]:8s} {rows}x{cols:<5d} {tag:28s} {us:7.1f} us {pct:5.1f}%  "
            f"loss {outs[tag]:.5f} (torch float32 {ref:.5f})"
        )
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


def main() -> None:
    run_cases(CASES, time_case)


if __name__ == "__main__":
    main()
