"""Experiment (session 33, not shipped): cross-entropy's forward and gradient in one read of the logits, each row held
in its block's registers.

Session 32's fused kernel (`exp_ce_grad_in_forward.py`) streamed a row for its stats, then read it again, mostly
from L2, for its gradient: 170 us at best against 210 for the loss and backward kernels apart (bf16 32768 x 4096),
where one read and one write (2N) would take ~127 us at the copy bandwidth. Here a block of R threads holds its row
in P 16-byte packs per thread, as the wide LayerNorm forward does (kernels/norms.cu ln_fwd_wide_run, 100% of copy):
one (max, sum exp) block reduction, then the gradient written from registers with the backward's own formula
(kk_sm::ce_bwd_pack) for a loss gradient of 1 and a mean over every row. It writes the rows' stats and losses but
not their mean: the time of the fused pass alone, the upper bound of what fusing can give. Timed in interleaved
rounds (sweep_common.interleaved) against the shipped loss and backward kernels apart; % of copy for 2N bytes. The
gradient is checked against the backward kernel's (bitwise equal or not, and the largest difference).

    python3 bench/exp_ce_held_grad.py --out ce_held_grad.json
"""

import importlib

import torch
from sweep_common import interleaved, run_cases

import kernelkit
from kernelkit import _native
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, resident_blocks

S = importlib.import_module("kernelkit.ops.softmax")
CASES = [(torch.bfloat16, 32768, 4096), (torch.bfloat16, 32768, 8192), (torch.float32, 32768, 4096)]

HELD_GRAD = r"""
// One row per block iteration, held whole: thread tx has packs p = k * R + tx (k < P).
template <typename T, int P, int MINB>
__global__ void __launch_bounds__(512, MINB) kk_exp_ce_held_grad(const T* __restrict__ x,
    const long long* __restrict__ target, kk::acc_t<T>* __restrict__ stats, kk::acc_t<T>* __restrict__ loss,
    T* __restrict__ grad, long long rows, long long cols, long long ignore_index, kk::acc_t<T> sc) {
  using namespace kk_sm;
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>;
  __shared__ A red[2 * 32 * 2];
  int parity = 0;
  const long long nv = cols / W;
  const int tx = threadIdx.x, R = blockDim.x;
  const int n = tx < nv ? (int)min((long long)P, (nv - tx + R - 1) / R) : 0;  // this thread's packs
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
    const A mr = safe_ref(st.f[0]), ls_m = lg(st.f[1]);
    const bool ignored = t == ignore_index;
    if (tx == 0) {
      stats[2 * row] = mr;
      stats[2 * row + 1] = ls_m;
      loss[row] = ignored ? A(0) : (t < 0 || t >= cols) ? qnan<A>() : ls_m - (to_acc(xr[t]) - mr);
    }
    T* gr = grad + row * cols;
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < n) {
        const long long p = k * (long long)R + tx;
        store_vec<W>(gr + p * W, ce_bwd_pack<T, W>(u[k], p * W, t, ignored ? A(0) : mr, ignored ? A(0) : ls_m,
                                                   ignored ? A(0) : sc, A(0), A(1)));
      }
  }
}
"""

_module = None


def held_module():
    global _module
    if _module is None:
        src = _native.op_source("softmax.cu") + HELD_GRAD
        headers = {"common.cuh": _native.op_source("common.cuh")}
        _module = kernelkit.load_inline("exp_ce_held_grad", src, headers=headers)
    return _module


def time_case(dtype, rows, cols, copy, reps):
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    loss, stats, div = S._cross_entropy_reduced(x, t, -100, 0.0, True, None)
    one = torch.ones((), device="cuda", dtype=dtype)
    ref = S.cross_entropy_backward(x, t, stats, one, -100, 0.0, div)
    h_stats, h_loss = torch.empty(rows, 2, device="cuda", dtype=acc), torch.empty(rows, device="cuda", dtype=acc)
    grad = torch.empty_like(x)
    sc = 1.0 / rows  # every target is in range: the mean's divisor is rows
    nv = cols // VEC[dtype]

    def apart():
        S._cross_entropy_reduced(x, t, -100, 0.0, True, None)
        S.cross_entropy_backward(x, t, stats, one, -100, 0.0, div)

    calls = {"loss + backward apart": [apart]}
    checks = []
    for packs in (2, 4, 8):
        threads = cdiv(nv, packs)
        if threads > 512 or threads < 32 or threads % 32:
            continue
        for minb in (1, 2, 3, 4):
            k = held_module().kernel(f"kk_exp_ce_held_grad<{CTYPE[dtype]}, {packs}, {minb}>")
            regs = k.attributes()["num_regs"]
            for per_sm in (None, resident_blocks(k, threads, 0)):
                grid = rows if per_sm is None else per_sm
                args = (x, t, h_stats, h_loss, grad, rows, cols, -100, sc)
                tag = f"held P={packs} R={threads} minb={minb} ({regs} regs) grid={'rows' if per_sm is None else grid}"
                calls[tag] = [lambda k=k, grid=grid, threads=threads, args=args: k.launch(grid, threads, args)]
                checks.append(tag)
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, 2 * x.nbytes, copy):
        extra = ""
        if tag in checks:
            grad.zero_()
            calls[tag][0]()
            torch.cuda.synchronize()
            diff = (grad.float() - ref.float()).abs().max().item()
            extra = f"  grad {'bitwise equal' if torch.equal(grad, ref) else f'max |diff| {diff:.3g}'}"
        head = f"{str(dtype)[6:]:8s} {rows}x{cols:<5d} {tag:52s}"
        print(f"{head} {us:7.1f} us {pct:5.1f}% of copy (2N){extra}", flush=True)
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


if __name__ == "__main__":
    run_cases(CASES, time_case, reps=60)
