"""Experiment: the reduced cross-entropy loss's ticket, one counter against a counter per group of blocks.

exp_ce_block_rows.py timed the shipped kk_cross_entropy_fwd (reduction none) at 67.5 us and kk_cross_entropy_loss
(the mean) at 71.7 on bf16 32768 x 4096, in one interleaved run (h200-2026-11-24-s30/ce-block-rows.log), and the loss
on grids of more blocks far slower still (block teams of 64 threads on 8 waves: 68.1 us without the ticket, 171.4
with it): every block's acq_rel atomic on one address queues behind the others, and the last wave's blocks end
together. This times the loss from a variant of softmax.cu whose blocks arrive on one of K counters (block b on
ticket[1 + b % K]) and whose last arrival in each group arrives on ticket[0], interleaved with the shipped loss and
the per-row forward (sweep_common.interleaved):

    python3 bench/exp_ce_tickets.py --out ce_tickets.json
"""

import torch
from ce_launches import CeLaunches
from sweep_common import run_cases, source_variant

from kernelkit.ops import _runtime
from kernelkit.ops._runtime import resident_blocks

CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]
GROUPS = [4, 16, 64]
GROUPED = r"""
template <unsigned K> __device__ __forceinline__ bool last_arrival_grouped(unsigned* ticket, unsigned arrivals) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned g = blockIdx.x % K, members = arrivals / K + (g < arrivals % K);
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(ticket + 1 + g) : "memory");
    bool lst = false;
    if (before == members - 1) {
      ticket[1 + g] = 0u;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(ticket) : "memory");
      lst = before == (arrivals < K ? arrivals : K) - 1;
      if (lst) ticket[0] = 0u;
    }
    last = lst;
  }
  __syncthreads();
  return last;
}

// kk_cross_entropy_loss: the mean"""


def time_case(dtype, rows, cols, copy, reps):
    case = CeLaunches(dtype, rows, cols)
    shipped = _runtime._module("softmax")
    grid = min(rows // 8, (2 if dtype.itemsize == 2 else 1) * resident_blocks(case.kernel(shipped, True), 256, 0))
    case.add("none (per-row losses)", shipped, False, 256, grid)
    case.add("mean, one ticket", shipped, True, 256, grid)
    for k in GROUPS:
        subs = [
            (r"// kk_cross_entropy_loss: the mean", GROUPED),
            (r"kk::last_arrival\(ticket, gridDim.x\)", f"last_arrival_grouped<{k}>(ticket, gridDim.x)"),
        ]
        case.add(f"mean, {k} ticket groups", source_variant("softmax", subs), True, 256, grid)
    return case.report(copy, reps)


def main() -> None:
    run_cases(CASES, time_case)


if __name__ == "__main__":
    main()
