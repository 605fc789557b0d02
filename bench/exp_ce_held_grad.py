"""Experiment (session 33, not shipped): cross-entropy's forward and gradient in one read of the logits, each row held
in its block's registers.

Session 32's fused kernel (`exp_ce_grad_in_forward.py`) streamed a row for its stats, then read it again, mostly
from L2, for its gradient: 170 us at best against 210 for the loss and backward kernels apart (bf16 32768 x 4096),
where one read and one write (2N) would take ~127 us at the copy bandwidth. Here a block of R threads holds its row
in P 16-byte packs per thread, as the wide LayerNorm forward does (kernels/norms.cu ln_fwd_wide_run, 100% of copy):
one (max, sum exp) block reduction, then the gradient written from registers with the backward's own formula
(kk_sm::ce_bwd_pack) for a loss gradient of 1. The whole sequence a mean needs: kk_exp_ce_count (the rows not
ignored, which divide the gradient), the held kernel launched dependent (it waits for the count only before its first
gradient), kk_exp_ce_mean (the mean of the row losses). Timed in interleaved rounds (sweep_common.interleaved), with
the held kernel alone, against the shipped loss and backward kernels apart; % of copy for 2N bytes. The gradient is
checked bitwise against kk_cross_entropy_bwd run on the held kernel's stats and divisor.

    python3 bench/exp_ce_held_grad.py --out ce_held_grad.json
"""

import importlib

import torch
from sweep_common import interleaved, run_cases

import kernelkit
from kernelkit import _native
from kernelkit.ops._runtime import CTYPE, VEC, acc_dtype, cdiv

S = importlib.import_module("kernelkit.ops.softmax")
CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]

HELD_GRAD = r"""
// The sum over this block's PER * 256 items (item r < rows is value(r)), in double and in a fixed order (each thread
// its PER items, then team_allreduce's tree), in every thread: the count's and the mean's blocks.
template <int PER, class F> __device__ __forceinline__ double block_total(long long rows, F value) {
  __shared__ double red[2 * 32];
  int parity = 0;
  double s = 0.0;
  const long long base = (long long)blockIdx.x * 256 * PER + threadIdx.x;
#pragma unroll
  for (int k = 0; k < PER; ++k) {  // loads in flight together
    const long long r = base + k * 256;
    if (r < rows) s += value(r);
  }
  kk_sm::Red<double, 1> v{{s}};
  return kk_sm::team_allreduce<kk_sm::SumOp<double>, true>(v, red, parity).f[0];
}

// The mean's divisor before any gradient is written: rows not ignored, counted by blocks of 256 threads taking PER
// targets each, one atomic add per block into word[0] (exact in any order; zero before the launch, set back to zero
// by kk_exp_ce_mean).
template <int PER>
__global__ void __launch_bounds__(256) kk_exp_ce_count(const long long* __restrict__ target, long long rows,
                                                      long long ignore_index, unsigned long long* word) {
  kk::pdl_trigger();  // the held kernel, launched dependent, loads its rows meanwhile
  const double c = block_total<PER>(rows, [&](long long r) { return target[r] != ignore_index ? 1.0 : 0.0; });
  if (threadIdx.x == 0) atomicAdd(word, (unsigned long long)c);
}

// One row per block iteration, held whole: thread tx has packs p = k * R + tx (k < P). Stats and the row's loss as
// kk_cross_entropy_fwd writes them (no label smoothing), and the gradient for a loss gradient of 1 with the
// backward's own formula (ce_bwd_pack, sc = 1 / divisor, zeros for ignored rows), after waiting for the count.
template <typename T, int P, int MINB>
__global__ void __launch_bounds__(512, MINB) kk_exp_ce_held_grad(const T* __restrict__ x,
    const long long* __restrict__ target, kk::acc_t<T>* __restrict__ stats, kk::acc_t<T>* __restrict__ loss,
    T* __restrict__ grad, const unsigned long long* word, int mean, long long rows, long long cols,
    long long ignore_index) {
  using namespace kk_sm;
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>;
  __shared__ A red[2 * 32 * 2];
  kk::pdl_trigger();  // the mean, launched dependent, waits for this whole grid
  int parity = 0;
  const long long nv = cols / W;
  const int tx = threadIdx.x, R = blockDim.x;
  const int n = tx < nv ? (int)min((long long)P, (nv - tx + R - 1) / R) : 0;  // this thread's packs
  bool waited = false;
  A sc = A(0);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    const long long t = target[row];
    Vec<T, W> u[P];
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < n) u[k] = load_vec<W, kCeLd>(xr + (k * (long long)R + tx) * W);
    A m = ninf<A>(), s = A(0);
    ms_update<T, W, P>(u, n, m, s);
    Red<A, 2> st;
    st.f[0] = m;
    st.f[1] = s;
    st = team_allreduce<MaxSumOp<T, 2>, true>(st, red, parity);
    // MaxSumOp's combine, contracted into an fma, is not bitwise commutative: the butterfly leaves lanes with sums
    // that differ in their last bits. Every warp's lane 0 computed thread 0's, which the stats keep: take it.
    st.f[0] = __shfl_sync(0xffffffffu, st.f[0], 0);
    st.f[1] = __shfl_sync(0xffffffffu, st.f[1], 0);
    const A mr = safe_ref(st.f[0]), ls_m = lg(st.f[1]);
    const bool ignored = t == ignore_index;
    if (tx == 0) {
      stats[2 * row] = mr;
      stats[2 * row + 1] = ls_m;
      loss[row] = ignored ? A(0) : (t < 0 || t >= cols) ? qnan<A>() : ls_m - (to_acc(xr[t]) - mr);
    }
    if (!waited) {
      kk::pdl_wait();
      sc = A(1) / (mean ? (A)*word : A(1));  // ce_row_meta's row_scale / div for a loss gradient of 1
      waited = true;
    }
    T* gr = grad + row * cols;
    if (ignored) {
      A z[W];
#pragma unroll
      for (int j = 0; j < W; ++j) z[j] = A(0);
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (k < n) store_vec<W>(gr + (k * (long long)R + tx) * W, kk::acc_to_vec<T, W>(z));
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (k < n) {
          const long long p = k * (long long)R + tx;
          store_vec<W>(gr + p * W, ce_bwd_pack<T, W>(u[k], p * W, t, mr, ls_m, sc, A(0), A(1)));
        }
    }
  }
}

// The reduced loss from the rows' losses: blocks of 256 threads sum PER rows each (block_total), store their partial,
// and the last to arrive adds the partials in block order, writes the loss and the divisor, and sets the count word
// back to zero.
template <typename A, typename O, int PER>
__global__ void __launch_bounds__(256) kk_exp_ce_mean(const A* __restrict__ row_loss, unsigned long long* word,
                                                     double* partial, unsigned* ticket, long long rows, int mean,
                                                     O* __restrict__ loss, A* __restrict__ divisor) {
  kk::pdl_wait();
  const double s = block_total<PER>(rows, [&](long long r) { return (double)row_loss[r]; });
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
  if (kk::last_arrival(ticket, gridDim.x) && threadIdx.x == 0) {
    double t = 0.0;
    for (unsigned b = 0; b < gridDim.x; ++b) t += __ldcg(partial + b);
    const A count = (A)*word;
    *word = 0ull;
    divisor[0] = mean ? count : A(1);
    loss[0] = kk::from_acc<O>((kk::acc_t<O>)(mean ? t / (double)count : t));
  }
}
"""

_module = None
COUNT_PER = 8  # targets (row losses) per thread of the count's (mean's) blocks of 256 threads


def held_module():
    global _module
    if _module is None:
        src = _native.op_source("softmax.cu") + HELD_GRAD
        headers = {"common.cuh": _native.op_source("common.cuh")}
        _module = kernelkit.load_inline("exp_ce_held_grad", src, headers=headers)
    return _module


# (dtype, cols) -> [(packs per thread, minimum blocks per SM)]: the fits that measured best in the first run
# (ce-held-grad-first.log), a block of R = cols / (VEC * packs) threads per row.
FITS = {
    (torch.bfloat16, 4096): [(8, 2)],
    (torch.bfloat16, 8192): [(8, 2)],
    (torch.float32, 4096): [(4, 2), (8, 2)],
}


def time_case(dtype, rows, cols, copy, reps):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    t[::7] = -100  # some rows ignored, as padding is
    acc = acc_dtype(dtype)
    f32 = torch.float32
    loss, stats, div = S._cross_entropy_reduced(x, t, -100, 0.0, True, f32)
    one = torch.ones((), device="cuda", dtype=dtype)
    h_stats, h_loss = torch.empty(rows, 2, device="cuda", dtype=acc), torch.empty(rows, device="cuda", dtype=acc)
    h_div, h_mean = torch.empty((), device="cuda", dtype=acc), torch.empty((), device="cuda", dtype=f32)
    grad = torch.empty_like(x)
    ct, at = CTYPE[dtype], CTYPE[acc]
    count = held_module().kernel(f"kk_exp_ce_count<{COUNT_PER}>")
    mean = held_module().kernel(f"kk_exp_ce_mean<{at}, float, {COUNT_PER}>")
    word = torch.zeros(1, device="cuda", dtype=torch.int64)
    ticket = torch.zeros(1, device="cuda", dtype=torch.int32)
    blocks = cdiv(rows, 256 * COUNT_PER)
    partial = torch.empty(blocks, device="cuda", dtype=torch.float64)

    def apart():
        S._cross_entropy_reduced(x, t, -100, 0.0, True, f32)
        S.cross_entropy_backward(x, t, stats, one, -100, 0.0, div)

    calls = {"loss + backward apart": [apart]}
    for packs, minb in FITS[dtype, cols]:
        threads = cdiv(cols // VEC[dtype], packs)
        k = held_module().kernel(f"kk_exp_ce_held_grad<{ct}, {packs}, {minb}>")
        tag = f"held P={packs} R={threads} minb={minb} ({k.attributes()['num_regs']} regs)"

        def fused(k=k, threads=threads):
            count.launch(blocks, 256, (t, rows, -100, word))
            k.launch(rows, threads, (x, t, h_stats, h_loss, grad, word, 1, rows, cols, -100), dependent=True)
            mean.launch(blocks, 256, (h_loss, word, partial, ticket, rows, 1, h_mean, h_div), dependent=True)

        calls[f"{tag}, count + mean"] = [fused]
        alone = (x, t, h_stats, h_loss, grad, word, 0, rows, cols, -100)  # mean 0: the count is not read
        calls[f"{tag} alone"] = [lambda k=k, threads=threads, a=alone: k.launch(rows, threads, a)]
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, 2 * x.nbytes, copy):
        extra = ""
        if tag.endswith("count + mean"):
            grad.zero_()
            calls[tag][0]()
            fresh = S.cross_entropy_backward(x, t, h_stats, one, -100, 0.0, h_div)  # the backward on its stats
            equal = torch.equal(grad, fresh)
            extra = (
                f"  grad {'bitwise equal to' if equal else 'DIFFERS from'} the backward kernel's on its stats;"
                f" divisor {h_div.item():.0f} ({div.item():.0f}); loss {h_mean.item():.7f} (shipped {loss.item():.7f});"
                f" stats max |diff| {(h_stats - stats).abs().max().item():.3g}"
            )
        head = f"{str(dtype)[6:]:8s} {rows}x{cols:<5d} {tag:52s}"
        print(f"{head} {us:7.1f} us {pct:5.1f}% of copy (2N){extra}", flush=True)
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct, check=extra))
    return out


if __name__ == "__main__":
    run_cases(CASES, time_case, reps=60)
