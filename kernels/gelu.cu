// kernelkit fused bias + GELU: forward, backward with per-chunk bias-gradient partials, and the
// deterministic reduction of those partials.
//
// v = x + bias[col] is formed in Acc<T> without rounding it to T (fused-kernel semantics).
// APPROX = 1, tanh form 0.5*v*(1+tanh(u)), u = sqrt(2/pi)*(v + 0.044715 v^3), evaluated through
//   0.5*(1+tanh(u)) = sigmoid(2u) with m = exp(-2|u|) in (0, 1]: no cancellation for negative v (unlike
//   1 + tanhf(u)), no overflow. float: expf + div.approx, relative error vs the formula evaluated in double
//   from the same v ~(3 + |u|)*6e-8: <= 1e-6 for v >= -5.5 (below that |gelu| < 1e-8, the error is exp's
//   conditioning on a tiny value). double: exp and a Newton reciprocal (~1e-16). 16-bit I/O: ex2.approx
//   and rcp.approx (rel. error ~2^-21, far below the output rounding).
//   At v = +-inf gelu' is 1 / 0 (the limits), where PyTorch's formula gives NaN.
// APPROX = 0, exact form 0.5*v*(1+erf(v/sqrt2)): float erff, double erf, exactly PyTorch's formula.
//   16-bit I/O: erfc from Abramowitz & Stegun 7.1.26 (|error of Phi| <= 7.5e-8, ~10^4 below bf16/fp16
//   rounding), computing the lower tail directly; it costs ~1/3 of erff's instructions, which matters
//   because bf16 at ~4 TB/s leaves only ~30 instructions per element.
#include "common.cuh"

namespace kk {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kKappa = 0.044715;
constexpr double kSqrtHalf = 0.70710678118654752440;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2*pi)

constexpr double kLog2e = 1.44269504088896340736;

// FAST (16-bit I/O): single-instruction MUFU approximations, rel. error ~2^-22, far below the output rounding.
__device__ __forceinline__ float ex2_approx(float x) {  // 2^x; -inf -> 0
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float rcp_approx(float x) {  // 1/x; inf -> 0
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// 1/(1+m) for m in [0, 1] (denominator in [1, 2]: no special cases). float: div.approx (<= 2 ulp);
// double: float estimate + 2 Newton steps (2^-22 -> 2^-88). Avoids IEEE division and its slow-path call.
__device__ __forceinline__ float g_recip1p(float m) { return __fdividef(1.0f, 1.0f + m); }
__device__ __forceinline__ double g_recip1p(double m) {
  const double d = 1.0 + m;
  double y = (double)__fdividef(1.0f, (float)d);
  y = fma(y, fma(-d, y, 1.0), y);
  return fma(y, fma(-d, y, 1.0), y);
}
__device__ __forceinline__ float g_exp(float x) { return expf(x); }
__device__ __forceinline__ double g_exp(double x) { return exp(x); }
__device__ __forceinline__ float g_erf(float x) { return erff(x); }
__device__ __forceinline__ double g_erf(double x) { return erf(x); }
__device__ __forceinline__ float g_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double g_abs(double x) { return fabs(x); }
__device__ __forceinline__ float g_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
__device__ __forceinline__ double g_clamp(double x, double lo, double hi) { return fmin(fmax(x, lo), hi); }

// Tanh form: s = 0.5*(1+tanh(u)) = sigmoid(2u) = 1/(1+exp(z)) with z = -2u = v*(-2k0 - 2k0*kappa*v^2),
// and oms = 1-s, both from m = exp(-|z|) in (0, 1] so neither cancels nor overflows:
//   z <= 0: s = 1/(1+m), oms = m/(1+m);  z > 0: s = m/(1+m), oms = 1/(1+m).  NaN v propagates.
template <bool FAST, typename A> __device__ __forceinline__ void tanh_gate(A v, A& s, A& oms) {
  A z, m, r;
  if constexpr (FAST) {  // z pre-scaled by log2(e)
    z = v * fmaf(float(-2.0 * kSqrt2OverPi * kKappa * kLog2e), v * v, float(-2.0 * kSqrt2OverPi * kLog2e));
    m = ex2_approx(-fabsf(z));
    r = rcp_approx(1.0f + m);
  } else {
    z = v * fma_acc(A(-2.0 * kSqrt2OverPi * kKappa), v * v, A(-2.0 * kSqrt2OverPi));
    m = g_exp(-g_abs(z));
    r = g_recip1p(m);
  }
  const A mr = m * r;
  const bool neg = z <= A(0);
  s = neg ? r : mr;
  oms = neg ? mr : r;
}

// FAST exact form (16-bit I/O): Phi(v) = 0.5*(1+erf(v/sqrt2)) with erfc from Abramowitz & Stegun 7.1.26,
// |error| <= 1.5e-7 * 0.5 on Phi (10^4 below bf16/fp16 rounding), sharing e = exp(-v^2/2) with phi(v):
//   q = 0.5*erfc(|v|/sqrt2) = t*(A1 + t*(A2 + ... + t*A5)) * e,  t = 1/(1 + P*|v|/sqrt2);  Phi = v < 0 ? q : 1-q
// (the lower tail is computed directly, without the cancellation of 1 + erff(x)).
__device__ __forceinline__ void fast_cdf(float v, float& cdf, float& e) {
  const float t = rcp_approx(fmaf(float(0.3275911 * kSqrtHalf), fabsf(v), 1.0f));
  float p = fmaf(t, float(0.5 * 1.061405429), float(0.5 * -1.453152027));
  p = fmaf(t, p, float(0.5 * 1.421413741));
  p = fmaf(t, p, float(0.5 * -0.284496736));
  p = fmaf(t, p, float(0.5 * 0.254829592));
  e = ex2_approx(v * v * float(-0.5 * kLog2e));
  const float q = t * p * e;
  cdf = v < 0.0f ? q : 1.0f - q;
}

// gelu(v)
template <int APPROX, bool FAST, typename A> __device__ __forceinline__ A gelu_f(A v) {
  if constexpr (APPROX) {
    A s, oms;
    tanh_gate<FAST>(v, s, oms);
    return v * s;
  } else if constexpr (FAST) {
    float cdf, e;
    fast_cdf(v, cdf, e);
    return v * cdf;
  } else {
    return v * A(0.5) * (A(1) + g_erf(v * A(kSqrtHalf)));
  }
}

// gelu'(v)
template <int APPROX, bool FAST, typename A> __device__ __forceinline__ A gelu_grad_f(A v) {
  if constexpr (APPROX) {
    // gelu = v*s: gelu' = s + s*(1-s) * v*2k0*(1+3*kappa*v^2)  (= torch's 0.5(1+t) + 0.5v(1-t^2)k0(1+3kappa v^2))
    A s, oms;
    tanh_gate<FAST>(v, s, oms);
    // For |v| > 30, s*oms is exactly 0 even in double; clamping keeps the polynomial finite (no 0*inf).
    const A vc = g_clamp(v, A(-30), A(30));
    const A dz = vc * fma_acc(A(6.0 * kSqrt2OverPi * kKappa), vc * vc, A(2.0 * kSqrt2OverPi));
    return fma_acc(s * oms, dz, s);
  } else if constexpr (FAST) {
    float cdf, e;
    fast_cdf(v, cdf, e);
    return fmaf(v * float(kInvSqrt2Pi), e, cdf);  // Phi(v) + v*phi(v)
  } else {
    // Phi(v) + v*phi(v)
    const A cdf = A(0.5) * (A(1) + g_erf(v * A(kSqrtHalf)));
    const A pdf = A(kInvSqrt2Pi) * g_exp(A(-0.5) * v * v);
    return fma_acc(v, pdf, cdf);
  }
}

// Minimum resident blocks of 256 threads for the backward (its register budget), see U there.
template <typename T> constexpr int kGeluBwdMinBlocks = sizeof(T) == 4 ? 4 : 2;

// Pack width: 16 bytes, except double, whose exp/erf need the registers (8-byte loads coalesce as well).
template <typename T> constexpr int kGeluVec = sizeof(T) == 8 ? 1 : kVec<T>;

// ---- forward: flat grid-stride over rows*cols/W packs; one division per thread and pass gives the column
// of its first pack, the other U - 1 follow incrementally.
template <int APPROX, int W, typename T>
__device__ __forceinline__ void fwd_pack(const T* x, const T* bias, T* y, long long i, long long col) {
  using A = acc_t<T>;
  A a[W], b[W], r[W];
  vec_to_acc(load_vec<W>(x + i * W), a);
  vec_to_acc(load_vec<W>(bias + col * W), b);  // L1-resident
#pragma unroll
  for (int j = 0; j < W; ++j) r[j] = gelu_f<APPROX, (sizeof(T) < 4)>(a[j] + b[j]);
  store_vec<W>(y + i * W, acc_to_vec<T, W>(r));
}

// Packs per thread and pass, and the register cap, per dtype and GELU form (the host's grid follows: ops/gelu.py).
// On an H200 at 8192^2 (bench/exp_gelu_fits.py, h200-2026-11-23-s22):
// - float: 2 packs (Inductor's 8 elements per thread); tanh in 40 registers, 12 blocks of 128 threads per SM: 129.5 us
//   against 131.4 at 4 packs in 64 and 130.9 in 32; erf in 32, 16 blocks: 130.7 against 135.9 at 4 packs in 64.
// - 16-bit: tanh 4 packs in 64 registers on one pass; erf (A&S, more registers per element) 2 packs in 48 on 8 waves
//   of persistent blocks: bf16 69.5 against 73.4 at 4 packs in 64 on one pass (70.2 in 56, without its spill).
// - double: 2 packs (its exp/erf), 64 registers.
template <typename T, int APPROX> constexpr int kGeluFwdPacks = sizeof(T) == 2 && APPROX ? kUnroll : 2;
template <typename T, int APPROX>
constexpr int kGeluFwdRegs = sizeof(T) == 4 ? (APPROX ? 40 : 32) : sizeof(T) == 2 && !APPROX ? 48 : 64;

template <typename I> __device__ __forceinline__ I mod_i(I a, I b) {
  if constexpr (sizeof(I) == 4) return a % b;
  else return mod_ll(a, b);
}

// I: the index type, unsigned when every pack index of the grid fits (fewer instructions and registers,
// a native 32-bit division), else long long.
template <typename T, int APPROX, int W, typename I>
__device__ __forceinline__ void bias_gelu_fwd_run(const T* x, const T* bias, T* y, I total, I cv) {
  using A = acc_t<T>;
  constexpr int U = kGeluFwdPacks<T, APPROX>;
  const I bd = blockDim.x;
  const I step = (I)gridDim.x * bd * U;
  I i = (I)blockIdx.x * bd * U + threadIdx.x;
  const int bd_mod = (int)(bd < cv ? bd : mod_i(bd, cv));  // column advance from pack i to pack i + bd
  for (; i + (U - 1) * bd < total; i += step) {
    // The x loads go out before the column arithmetic (a division): in a one-pass grid each thread
    // runs this once, and whatever precedes its loads adds to its lifetime.
    Vec<T, W> vx[U];
#pragma unroll
    for (int k = 0; k < U; ++k) vx[k] = load_vec<W>(x + (long long)(i + k * bd) * W);
    I ck = mod_i(i, cv);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      A a[W], b[W], r[W];
      vec_to_acc(vx[k], a);
      vec_to_acc(load_vec<W>(bias + (long long)ck * W), b);  // L1-resident
      ck += bd_mod;
      if (ck >= cv) ck -= cv;
#pragma unroll
      for (int j = 0; j < W; ++j) r[j] = gelu_f<APPROX, (sizeof(T) < 4)>(a[j] + b[j]);
      store_vec<W>(y + (long long)(i + k * bd) * W, acc_to_vec<T, W>(r));
    }
  }
  if (i >= total) return;
  I ck = mod_i(i, cv);
#pragma unroll
  for (int k = 0; k < U - 1; ++k) {  // last partial iteration (fixed count: no trip-count division)
    if (i + k * bd < total) fwd_pack<APPROX, W>(x, bias, y, (long long)(i + k * bd), (long long)ck);
    ck += bd_mod;
    if (ck >= cv) ck -= cv;
  }
}

template <typename T, int APPROX, int W>
__device__ __forceinline__ void bias_gelu_fwd_dispatch(const T* x, const T* bias, T* y, long long rows,
                                                       long long cv) {
  const long long total = rows * cv;  // packs
  const long long span = (long long)gridDim.x * blockDim.x * kGeluFwdPacks<T, APPROX>;
  if (total < (1ll << 31) && span < (1ll << 31))  // i < total + span < 2^32: no unsigned wrap
    bias_gelu_fwd_run<T, APPROX, W, unsigned>(x, bias, y, (unsigned)total, (unsigned)cv);
  else
    bias_gelu_fwd_run<T, APPROX, W, long long>(x, bias, y, total, cv);
}

// ---- backward: block = (tile of tcv column packs) x (row chunk). Thread (g, lc) owns column pack
// tile*tcv + lc and walks rows r0+g, r0+g+rg, ... in a 2-stage software pipeline of U rows, keeping W
// column sums in registers; the rg row-group sums are then added in fixed order through shared memory.

// N rows of one column pack, loaded (all 2*N loads issued together) and then processed.
template <int N, int W, typename T> struct Rows {
  Vec<T, W> gy[N], x[N];
};
template <int N, int W, typename T>
__device__ __forceinline__ void load_rows(Rows<N, W, T>& r, const T* gy, const T* x, long long row_step) {
#pragma unroll
  for (int k = 0; k < N; ++k) {
    r.gy[k] = load_vec<W>(gy + k * row_step);
    r.x[k] = load_vec<W>(x + k * row_step);
  }
}
template <int APPROX, int N, int W, typename T>
__device__ __forceinline__ void bwd_rows(const Rows<N, W, T>& r, T* gx, const acc_t<T> (&b)[W], acc_t<T> (&acc)[W],
                                         long long row_step) {
  using A = acc_t<T>;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    A dy[W], xa[W], d[W];
    vec_to_acc(r.gy[k], dy);
    vec_to_acc(r.x[k], xa);
#pragma unroll
    for (int j = 0; j < W; ++j) d[j] = dy[j] * gelu_grad_f<APPROX, (sizeof(T) < 4)>(xa[j] + b[j]);
    const Vec<T, W> o = acc_to_vec<T, W>(d);
    store_vec<W>(gx + k * row_step, o);
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] += kk::acc_at(o, j);  // sum the values as stored in grad_x
  }
}

template <typename T, int APPROX, int W>
__device__ __forceinline__ void bias_gelu_bwd_run(const T* gy, const T* x, const T* bias, T* gx, acc_t<T>* partial,
                                                  T* gbias, unsigned* tickets, long long rows, long long cols,
                                                  long long rpc) {
  using A = acc_t<T>;
  // Rows per pipeline stage (each 2 tensors x 16 B per thread): 16-bit types 2 (at 2 blocks per SM);
  // float 1 at 4 blocks per SM (4% faster on the H200); double 1 (exp/erf registers).
  constexpr int U = sizeof(T) == 2 ? 2 : 1;
  __shared__ A red[256 * W];  // blockDim.x <= 256 (launch bounds)
  const long long cv = cols / W;
  const int nt = blockDim.x;
  // Tile width in packs: 16 x 16 B = two 128 B lines per row (8 packs: 3% slower in bf16 on the H200,
  // bench/sweep_flat.py); the scalar path keeps 32 elements per row for coalescing.
  const int tcv = (int)min_ll(min_ll(nt, W > 1 ? 16 : 32), cv);
  const int rg = nt / tcv;                           // row groups
  const int tid = threadIdx.x;
  const int g = tid / tcv;
  const int lc = tid - g * tcv;
  const long long ntiles = div_ll(cv + tcv - 1, tcv);
  const long long nchunks = div_ll(rows + rpc - 1, rpc);
  const long long row_step = (long long)rg * cols;   // elements between a thread's consecutive rows
  for (long long chunk = blockIdx.y; chunk < nchunks; chunk += gridDim.y) {
    const long long r0 = chunk * rpc + g;           // this thread's first row
    const long long r1 = min_ll(rows, chunk * rpc + rpc);
    // rows r0, r0+rg, ... < r1
    const long long nr = r0 < r1 ? div_ll(r1 - r0 + rg - 1, rg) : 0;
    for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
      const long long c = tile * tcv + lc;     // column pack
      const bool own = g < rg && c < cv;       // g >= rg only when nt % tcv != 0
      A acc[W];
#pragma unroll
      for (int j = 0; j < W; ++j) acc[j] = A(0);
      if (own) {
        A b[W];
        vec_to_acc(load_vec<W>(bias + c * W), b);
        const long long off = r0 * cols + c * W;
        const T* pgy = gy + off;
        const T* px = x + off;
        T* pgx = gx + off;
        long long left = nr;
        if (left >= U) {
          // Software pipeline: the next U rows are loaded before the current U rows are processed, so
          // each warp keeps loads in flight through its (long, for 16-bit) arithmetic.
          Rows<U, W, T> cur;
          load_rows(cur, pgy, px, row_step);
          for (; left >= 2 * U; left -= U) {
            Rows<U, W, T> nxt;
            load_rows(nxt, pgy + U * row_step, px + U * row_step, row_step);
            bwd_rows<APPROX>(cur, pgx, b, acc, row_step);
            cur = nxt;
            pgy += U * row_step;
            px += U * row_step;
            pgx += U * row_step;
          }
          bwd_rows<APPROX>(cur, pgx, b, acc, row_step);
          pgy += U * row_step;
          px += U * row_step;
          pgx += U * row_step;
          left -= U;
        }
#pragma unroll
        for (int k = 0; k < U - 1; ++k) {  // fixed-count tail (< U rows): no 64-bit trip-count division
          if (k < left) {
            Rows<1, W, T> one;
            load_rows(one, pgy + k * row_step, px + k * row_step, row_step);
            bwd_rows<APPROX>(one, pgx + k * row_step, b, acc, row_step);
          }
        }
      }
      // Fixed-order reduction over the rg row groups through shared memory, laid out so that the
      // final pass reads consecutive words and writes a contiguous run of partial (coalesced).
#pragma unroll
      for (int j = 0; j < W; ++j) red[tid * W + j] = acc[j];  // == red[(g * tcv + lc) * W + j]
      __syncthreads();
      const long long base = chunk * cols + tile * tcv * W;  // partial row of this chunk, tile start
      const int npairs = (int)min_ll((long long)tcv * W, cols - tile * tcv * W);
      for (int p = tid; p < npairs; p += nt) {
        A s = red[p];
        for (int h = 1; h < rg; ++h) s += red[h * tcv * W + p];
        partial[base + p] = s;
      }
      // The tile's last chunk to finish adds the tile's partials in chunk order and writes grad_bias: no
      // second launch. Its ticket goes back to 0 for the next launch.
      if (kk::last_arrival(tickets + tile, (unsigned)nchunks)) {
        const long long c0 = tile * tcv * W;
        for (int p = tid; p < npairs; p += nt) {
          A s = A(0);
          for (long long k = 0; k < nchunks; ++k) s += __ldcg(partial + k * cols + c0 + p);
          gbias[c0 + p] = from_acc<T>(s);
        }
      }
    }
  }
}

}  // namespace kk

// y[r, c] = gelu(x[r, c] + bias[c]); x, y contiguous [rows, cols], bias [cols].
// Launch: 1-D block of any size <= 1024, 1-D grid of any size (grid-stride loop). Measured on an
// H200 (bench/exp_gelu_fits.py, kernelkit bench's sizes), VEC = 8 (half, bf16), 4 (float), 1 (double),
// U = kGeluFwdPacks: block 128, grid = ceil(rows * cols / (VEC * 128 * U)), one pass, except the 16-bit erf form:
// at most 8 * occ * num_SMs persistent blocks. (16-bit tanh on 8 waves, shipped until session 22: 1.1-1.7% slower at
// 16384^2, 0.7% faster at 8192^2.)
// 16-byte path when cols % VEC == 0 and x, bias, y are 16-byte aligned; scalar path otherwise.
template <typename T, int APPROX>
__global__ void __maxnreg__((kk::kGeluFwdRegs<T, APPROX>))
kk_bias_gelu_fwd(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y, long long rows,
                 long long cols) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int V = kk::kGeluVec<T>;
  if (cols % V == 0 && kk::aligned16(kk::addr(x) | kk::addr(bias) | kk::addr(y)))
    kk::bias_gelu_fwd_dispatch<T, APPROX, V>(x, bias, y, rows, cols / V);
  else
    kk::bias_gelu_fwd_dispatch<T, APPROX, 1>(x, bias, y, rows, cols);
}

// grad_x[r, c] = grad_y[r, c] * gelu'(x[r, c] + bias[c]) (rounded to T), and
// partial[chunk * cols + c] = sum of grad_x[r, c] over the rows r of the chunk, accumulated in Acc<T> from
// the values as stored in grad_x (i.e. after rounding to T), in a fixed order (deterministic for a given
// blockDim). chunk = blockIdx.y covers rows [chunk*rows_per_chunk, min(rows, (chunk+1)*rows_per_chunk)).
// tickets: one zeroed counter per column tile (ceil(cols / 32) always suffice: a tile is 16 packs on the vector
// path, 32 elements on the scalar one). The last chunk of each tile to finish adds the tile's partials in chunk
// order into grad_bias (rounded to T) and sets its counter back to 0, so the same counters serve the next
// launch in stream order.
// Launch: 1-D block, blockDim.x <= 256 (launch bounds; 256 recommended), 2-D grid:
//   VEC = 8 (half, bf16), 4 (float), 1 (double)
//   grid.x = cols % VEC == 0 && VEC > 1 ? ceil(cols / (16 * VEC)) : ceil(cols / 32)   (column tiles)
//   C      = occ * num_SMs, occ = cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, 256, 0)
//            (kGeluBwdMinBlocks: float 4 at 64 registers, others 2)
//   chunks = clamp(floor(waves * C / grid.x), 1, min(ceil(rows / 16), 64)), waves = 2 for float, else 1
//   rows_per_chunk = ceil(rows / chunks);  grid.y = ceil(rows / rows_per_chunk)
//   i.e. one or two full waves of large blocks: per-block overhead favours few large blocks, a partly
//   filled last wave costs up to 15% (H200), and partial (chunks * cols Acc values) stays small.
//   e.g. on H200 8192x8192: fp32 -> 128 x 8 (rpc 1024), bf16 -> 64 x 4 (rpc 2048).
//   Any grid.x / grid.y is still correct (blocks loop over tiles and chunks); rows_per_chunk >= 1.
// Vector path when cols % VEC == 0 and grad_y, x, bias, grad_x are 16-byte aligned; scalar otherwise.
template <typename T, int APPROX>
__global__ void __launch_bounds__(256, kk::kGeluBwdMinBlocks<T>)
kk_bias_gelu_bwd(const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ bias,
                 T* __restrict__ grad_x, typename kk::Acc<T>::type* __restrict__ partial, T* __restrict__ grad_bias,
                 unsigned* __restrict__ tickets, long long rows, long long cols, long long rows_per_chunk) {
  if (rows <= 0 || cols <= 0 || rows_per_chunk <= 0) return;
  constexpr int V = kk::kGeluVec<T>;
  if (cols % V == 0 && kk::aligned16(kk::addr(grad_y) | kk::addr(x) | kk::addr(bias) | kk::addr(grad_x)))
    kk::bias_gelu_bwd_run<T, APPROX, V>(grad_y, x, bias, grad_x, partial, grad_bias, tickets, rows, cols,
                                        rows_per_chunk);
  else
    kk::bias_gelu_bwd_run<T, APPROX, 1>(grad_y, x, bias, grad_x, partial, grad_bias, tickets, rows, cols,
                                        rows_per_chunk);
}
