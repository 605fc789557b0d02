"""Direct launches of the cross-entropy forward kernels on one case, for the experiments that time their grid,
block or source (exp_ce_grid.py, exp_ce_block_rows.py, exp_ce_finish.py).

    case = CeLaunches(torch.bfloat16, 32768, 4096)
    case.add("mean, shipped", module, reduce=True, block=256, grid=1056)
    results = case.report(copy_gbps, reps)
"""

from __future__ import annotations

import torch
from sweep_common import interleaved

from kernelkit.jit import Module
from kernelkit.ops._runtime import CTYPE


class CeLaunches:
    """Random logits and targets of one (dtype, rows, cols), and the launches added for them: reduce=True is
    kk_cross_entropy_loss (the mean, on its own spill slots and words), else kk_cross_entropy_fwd (per-row
    losses, reported as their mean)."""

    def __init__(self, dtype: torch.dtype, rows: int, cols: int):
        self.dtype, self.rows, self.cols = dtype, rows, cols
        self.x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        self.t = torch.randint(0, cols, (rows,), device="cuda")
        self.stats = torch.empty(rows, 2, device="cuda")
        self.per_row = torch.empty(rows, device="cuda")
        self.calls: dict = {}
        self.outs: dict = {}
        self.info: dict = {}

    def kernel(self, module: Module, reduce: bool):
        ct = CTYPE[self.dtype]
        return module.kernel(f"kk_cross_entropy_loss<{ct}, {ct}>" if reduce else f"kk_cross_entropy_fwd<{ct}>")

    def add(self, tag: str, module: Module, reduce: bool, block: int, grid: int, **info) -> None:
        """A launch of ``module``'s kernel on (grid, block), run once for its loss; ``info`` goes into its result."""
        k = self.kernel(module, reduce)
        rows, cols = self.rows, self.cols
        if reduce:
            spill = torch.full((grid,), -1, dtype=torch.int64, device="cuda")
            words = torch.zeros(2, dtype=torch.int64, device="cuda")
            loss = torch.empty((), dtype=self.dtype, device="cuda")
            divisor = torch.empty((), device="cuda")
            args = (self.x, self.t, self.stats, spill, words, 1, 0, 0, loss, divisor, rows, cols, -100, 0.0)
        else:
            loss = self.per_row
            args = (self.x, self.t, self.per_row, self.stats, rows, cols, -100, 0.0)

        def run():
            k.launch(grid, block, args)

        run()
        self.outs[tag] = (loss if reduce else loss.mean()).float().item()
        self.calls[tag] = [run]
        self.info[tag] = info

    def report(self, copy_gbps: float, reps: int) -> list:
        """Every launch timed in interleaved rounds, printed with its loss against torch's; the results' dicts."""
        ref = torch.nn.functional.cross_entropy(self.x.float(), self.t).item()
        width = max(map(len, self.calls))
        out = []
        for tag, us, pct, _ in interleaved(self.calls, reps, self.x.nbytes, copy_gbps):
            info = "".join(f" {k.replace('_', ' ')} {v:5.2f}" for k, v in self.info[tag].items())
            print(
                f"cross_entropy {str(self.dtype)[6:]:8s} {self.rows}x{self.cols:<5d} {tag:{width}s}{info} {us:7.1f} us "
                f"{pct:5.1f}%  loss {self.outs[tag]:.5f} (torch float32 {ref:.5f})"
            )
            size = f"{self.rows}x{self.cols}"
            out.append(dict(dtype=str(self.dtype)[6:], size=size, variant=tag, us=us, pct_copy=pct, **self.info[tag]))
        return out
