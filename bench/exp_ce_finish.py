"""Experiment: how the reduced cross-entropy loss finishes, once every block has its partial.

Session 30's kk_cross_entropy_loss ended each block with kk::last_arrival (barrier, an acq_rel ticket, barrier), and
its last block loaded every partial and added them: bf16 32768 x 4096 at 71.1 us against 68.1 for the same blocks with
neither (h200-2026-11-24-s30, probe-ce-no-ticket.json). The shipped kernel adds each block's partial to two 64-bit
words in fixed point with relaxed atomics (kk_sm::loss_arrive). This times, interleaved with it and the per-row
forward (reduction none):

- "partials only": the blocks store their partials and end (no ticket, no sum): the floor of any finish;
- "+ sum kernel": that, then a one-block kernel that adds the partials in block order (a second launch);
- "+ sum kernel, dependent": the same launched dependent (programmatic dependent launch: the loss kernel triggers at
  its start, the sum kernel's block waits in griddepcontrol.wait);
- "one word": a probe of the least a finish can cost: thread 0 of each block adds (1 << 52) + its partial in units of
  2^-20 to one 64-bit word with one relaxed atomic, and the arrival that reads arrivals == grid - 1 has the sum (no
  row count, no range check: it fits this case only);
- with --old FILE (session 30's softmax.cu, e.g. `git show 0c7156d:kernels/softmax.cu`): its ticket and last-block
  sum.

    python3 bench/exp_ce_finish.py [--old softmax_s30.cu] --out ce_finish.json
"""

import torch
from ce_launches import CeLaunches
from sweep_common import run_cases, source_variant

from kernelkit._native import op_source
from kernelkit.ops import _runtime
from kernelkit.ops._runtime import CTYPE, resident_blocks

CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]

EXTRA = r"""
// The block's partial to partial[2 * blockIdx.x], as session 30's blocks stored theirs.
template <typename T, int U = kk_sm::kU<T>>
__global__ void __maxnreg__(64) xp_ce_partials(const T* logits, const long long* target, kk::acc_t<T>* stats,
                                               kk::acc_t<T>* partial, long long rows, long long cols, int trigger) {
  __shared__ kk::acc_t<T> red[2 * 32 * 3];
  if (trigger) kk::pdl_trigger();
  kk::acc_t<T> part[2];
  kk_sm::ce_fwd<T, U>(logits, target, nullptr, stats, part, rows, cols, -100, 0.0, red);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = part[0];
    partial[2 * blockIdx.x + 1] = part[1];
  }
}

// Session 30's last-block sum, as a one-block kernel.
template <typename O>
__global__ void xp_ce_sum(const float* partial, unsigned n, O* loss, float* divisor, int wait) {
  if (wait) kk::pdl_wait();
  float s = 0.f;
  double c = 0.0;
  constexpr int kAhead = 8;
  float ps[kAhead], pc[kAhead];
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    const unsigned i = threadIdx.x + k * blockDim.x;
    ps[k] = i < n ? __ldcg(partial + 2 * i) : 0.f;
    pc[k] = i < n ? __ldcg(partial + 2 * i + 1) : 0.f;
  }
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    s += ps[k];
    c += (double)pc[k];
  }
  for (unsigned i = threadIdx.x + kAhead * blockDim.x; i < n; i += blockDim.x) {
    s += __ldcg(partial + 2 * i);
    c += (double)__ldcg(partial + 2 * i + 1);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_down_sync(0xffffffffu, s, o);
    c += __shfl_down_sync(0xffffffffu, c, o);
  }
  __shared__ float warp_sums[32];
  __shared__ double warp_counts[32];
  if ((threadIdx.x & 31) == 0) {
    warp_sums[threadIdx.x >> 5] = s;
    warp_counts[threadIdx.x >> 5] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {
      s += warp_sums[w];
      c += warp_counts[w];
    }
    divisor[0] = (float)c;
    loss[0] = kk::from_acc<O>((kk::acc_t<O>)(s / (float)c));
  }
}

// Probe: the whole sum in one 64-bit word (arrivals in bits 52-63, the sum in units of 2^-20 below), rows not counted.
template <typename T, typename O, int U = kk_sm::kU<T>>
__global__ void __maxnreg__(64) xp_ce_one_word(const T* logits, const long long* target, kk::acc_t<T>* stats,
                                               unsigned long long* word, O* loss, long long rows, long long cols) {
  __shared__ kk::acc_t<T> red[2 * 32 * 3];
  kk::acc_t<T> part[2];
  kk_sm::ce_fwd<T, U>(logits, target, nullptr, stats, part, rows, cols, -100, 0.0, red);
  if (threadIdx.x != 0) return;
  const unsigned long long mine = (1ull << 52) + (unsigned long long)llrint((double)part[0] * 1048576.0);
  unsigned long long before;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(before) : "l"(word), "l"(mine) : "memory");
  if ((before >> 52) != gridDim.x - 1) return;
  *word = 0ull;
  const unsigned long long total = (before + mine) & ((1ull << 52) - 1);
  loss[0] = kk::from_acc<O>((kk::acc_t<O>)((double)total * (1.0 / 1048576.0) / (double)rows));
}
"""


def time_case(dtype, rows, cols, copy, reps, old=None):
    case = CeLaunches(dtype, rows, cols)
    shipped = _runtime._module("softmax")
    variant = source_variant("softmax", source=op_source("softmax.cu") + EXTRA)
    ct = CTYPE[dtype]
    grid = min(rows // 8, (2 if dtype.itemsize == 2 else 1) * resident_blocks(case.kernel(shipped, True), 256, 0))
    case.add("none (per-row losses)", shipped, False, 256, grid)
    case.add("mean, shipped (two words)", shipped, True, 256, grid)

    x, t, stats = case.x, case.t, case.stats
    partial = torch.empty(2 * grid, device="cuda")
    loss = torch.empty((), dtype=dtype, device="cuda")
    divisor = torch.empty((), device="cuda")
    word = torch.zeros(1, dtype=torch.int64, device="cuda")
    parts = variant.kernel(f"xp_ce_partials<{ct}>")
    summ = variant.kernel(f"xp_ce_sum<{ct}>")
    one_word = variant.kernel(f"xp_ce_one_word<{ct}, {ct}>")
    runs = {
        "partials only": lambda: parts.launch(grid, 256, (x, t, stats, partial, rows, cols, 0)),
        "+ sum kernel": lambda: (
            parts.launch(grid, 256, (x, t, stats, partial, rows, cols, 0)),
            summ.launch(1, 256, (partial, grid, loss, divisor, 0)),
        ),
        "+ sum kernel, dependent": lambda: (
            parts.launch(grid, 256, (x, t, stats, partial, rows, cols, 1)),
            summ.launch(1, 256, (partial, grid, loss, divisor, 1), dependent=True),
        ),
        "one word (probe)": lambda: one_word.launch(grid, 256, (x, t, stats, word, loss, rows, cols)),
    }
    if old:
        k = source_variant("softmax", source=open(old).read()).kernel(f"kk_cross_entropy_loss<{ct}, {ct}>")
        ticket = torch.zeros(1, dtype=torch.int32, device="cuda")
        args = (x, t, stats, partial, ticket, 1, loss, divisor, rows, cols, -100, 0.0)
        runs["session 30 (ticket, last block sums)"] = lambda: k.launch(grid, 256, args)
    for tag, run in runs.items():
        run()
        case.outs[tag] = float("nan") if tag == "partials only" else loss.float().item()
        case.calls[tag] = [run]
        case.info[tag] = {}
    return case.report(copy, reps)


def main() -> None:
    run_cases(CASES, time_case, options={"--old": dict(help="session 30's softmax.cu, timed as well")})


if __name__ == "__main__":
    main()
