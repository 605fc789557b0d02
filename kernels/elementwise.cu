// kernelkit elementwise kernels: add, mul, muladd, in-place scale; contiguous and strided/broadcast.
//
// Launch (all kernels here): 1-D block of any size <= 1024 (__maxnreg__(64)), 1-D grid of any size; every
// kernel is a grid-stride loop, so any grid is correct. Recommended for speed:
//   block = 256; contiguous: grid = ceil(n / (VEC * 256 * U)) (one pass), VEC = 16 / sizeof(T),
//   U = 1 (kk_scale_: 8); strided: grid = ceil(n / (256 * 4)).
//   (bench/sweep_flat.py on an H200, 64M elements: one pack per thread and input beat 2, 4 and 8 by
//   0.3-4%, and ties torch.compile; cache-streaming stores made no difference, loads were slower.)
// out may alias an input exactly (in place), never partially.
#include "common.cuh"

namespace kk {

struct AddOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b, A) const { return a + b; }
};
struct MulOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b, A) const { return a * b; }
};
struct MulAddOp {  // a*b+c with a single rounding in Acc, then one rounding to T
  template <typename A> __device__ __forceinline__ A operator()(A a, A b, A c) const { return fma_acc(a, b, c); }
};
template <typename A> struct ScaleOp {
  A s;
  __device__ __forceinline__ A operator()(A a, A, A) const { return a * s; }
};

// N packs of W elements at pack indices i + k*bd (k < N): all N*NIN loads are issued before any use.
template <int N, int NIN, bool NC, int W, typename T, typename Op>
__device__ __forceinline__ void ew_group(const T* a, const T* b, const T* c, T* out, long long i, long long bd, Op op) {
  using A = acc_t<T>;
  Vec<T, W> va[N], vb[N], vc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const long long p = (i + k * bd) * W;
    va[k] = load_vec<W, NC>(a + p);
    if constexpr (NIN > 1) vb[k] = load_vec<W, NC>(b + p);
    if constexpr (NIN > 2) vc[k] = load_vec<W, NC>(c + p);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    A xa[W], xb[W], xc[W], r[W];
    vec_to_acc(va[k], xa);
    if constexpr (NIN > 1) vec_to_acc(vb[k], xb);
    if constexpr (NIN > 2) vec_to_acc(vc[k], xc);
#pragma unroll
    for (int j = 0; j < W; ++j) r[j] = op(xa[j], NIN > 1 ? xb[j] : A(0), NIN > 2 ? xc[j] : A(0));
    store_vec<W>(out + (i + k * bd) * W, acc_to_vec<T, W>(r));
  }
}

// Processes nv packs of W elements. Each block iteration covers a contiguous run of blockDim*U packs;
// thread t handles packs base + k*blockDim + t (k < U), so each load instruction is coalesced.
// Full iterations run unguarded; the thread's last partial iteration (< U packs) one pack at a time
// (guarded loads in one unrolled group make the compiler merge 16-bit lanes across iterations: spills).
template <int NIN, bool NC, int W, typename T, typename Op>
__device__ __forceinline__ void ew_contig_run(const T* a, const T* b, const T* c, T* out, long long nv, Op op) {
  constexpr int U = NIN == 1 ? 2 * kUnroll : 1;  // packs per thread and input in one block pass
  const long long bd = blockDim.x;
  const long long step = (long long)gridDim.x * bd * U;
  long long i = (long long)blockIdx.x * bd * U + threadIdx.x;
  for (; i + (U - 1) * bd < nv; i += step) ew_group<U, NIN, NC, W>(a, b, c, out, i, bd, op);
  // Fixed-count tail (a `for (; i < nv; i += bd)` loop makes the compiler emit a 64-bit trip-count division).
#pragma unroll
  for (int k = 0; k < U - 1; ++k)
    if (i + k * bd < nv) ew_group<1, NIN, NC, W>(a, b, c, out, i + k * bd, bd, op);
}

// Pack width: 16 bytes, except float32 muladd's 8 (Inductor's layout for it): 0.3% faster at 8192^2 and 16384^2,
// which tied torch.compile (243.6 against 243.4 us, 961.6 against 961.9) where 16 bytes took 244.2 and 965.4
// (bench/exp_flat_packs.py, h200-2026-11-23-s21/exp-flat-packs.log); add and mul measured slower with 8 (session 16).
template <int NIN, typename T> constexpr int kEwVec = NIN == 3 && sizeof(T) == 4 ? kVec<T> / 2 : kVec<T>;

// The pack path when every pointer is aligned to the pack (uniform branch), scalar path otherwise,
// scalar tail for the last n % V elements.
template <int NIN, bool NC, typename T, typename Op>
__device__ __forceinline__ void ew_contig(const T* a, const T* b, const T* c, T* out, long long n, Op op) {
  if (n <= 0) return;
  constexpr int V = kEwVec<NIN, T>;
  unsigned long long ptrs = addr(a) | addr(out);
  if constexpr (NIN > 1) ptrs |= addr(b);
  if constexpr (NIN > 2) ptrs |= addr(c);
  if ((ptrs & (V * sizeof(T) - 1)) == 0) {
    const long long nv = n / V;
    ew_contig_run<NIN, NC, V>(a, b, c, out, nv, op);
    // < V leftover elements: thread 0 of block 0 (a grid-stride loop here would make the compiler emit a
    // 64-bit trip-count division).
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      using A = acc_t<T>;
#pragma unroll
      for (int k = 0; k < V - 1; ++k) {
        const long long t = nv * V + k;
        if (t < n) {
          const A xa = to_acc(NC ? load_nc(a + t) : load_plain(a + t));
          const A xb = NIN > 1 ? to_acc(load_nc(b + t)) : A(0);
          const A xc = NIN > 2 ? to_acc(load_nc(c + t)) : A(0);
          out[t] = from_acc<T>(op(xa, xb, xc));
        }
      }
    }
  } else {
    ew_contig_run<NIN, NC, 1>(a, b, c, out, n, op);
  }
}

// Element offsets of linear output index idx for each input (div/mod over dims, innermost last).
// I = unsigned (when n <= 2^32, much cheaper division) or unsigned long long.
// Static dim indices keep the by-value struct in the parameter space (no local-memory copy).
template <int NIN, typename I>
__device__ __forceinline__ void strided_offsets(I idx, const Strided& s, long long (&off)[NIN]) {
#pragma unroll
  for (int t = 0; t < NIN; ++t) off[t] = 0;
#pragma unroll
  for (int d = 7; d >= 1; --d) {
    if (d < s.ndim) {
      const I sz = (I)s.size[d];
      I q;
      if constexpr (sizeof(I) == 8) q = udiv64(idx, sz); else q = idx / sz;
      const long long r = (long long)(idx - q * sz);
#pragma unroll
      for (int t = 0; t < NIN; ++t) off[t] += r * s.stride[t][d];
      idx = q;
    }
  }
  if (s.ndim > 0) {  // outermost dim: idx < size[0] already, no division
#pragma unroll
    for (int t = 0; t < NIN; ++t) off[t] += (long long)idx * s.stride[t][0];
  }
}

// Strided/broadcast, N elements at linear indices i + k*bd: out[i] contiguous (or, INPLACE, x written
// back at its own strided offset off[0]).
template <int N, int NIN, bool INPLACE, typename I, typename T, typename Op>
__device__ __forceinline__ void ew_strided_group(const T* a, const T* b, const T* c, T* out, long long i, long long bd,
                                                 const Strided& s, Op op) {
  using A = acc_t<T>;
  long long off[N][NIN];
  A xa[N], xb[N], xc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    strided_offsets<NIN, I>((I)(i + k * bd), s, off[k]);
    xa[k] = to_acc(INPLACE ? load_plain(a + off[k][0]) : load_nc(a + off[k][0]));
    if constexpr (NIN > 1) xb[k] = to_acc(load_nc(b + off[k][1]));
    if constexpr (NIN > 2) xc[k] = to_acc(load_nc(c + off[k][2]));
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const A r = op(xa[k], NIN > 1 ? xb[k] : A(0), NIN > 2 ? xc[k] : A(0));
    out[INPLACE ? off[k][0] : i + k * bd] = from_acc<T>(r);
  }
}

template <int NIN, bool INPLACE, typename I, typename T, typename Op>
__device__ __forceinline__ void ew_strided_run(const T* a, const T* b, const T* c, T* out, long long n,
                                               const Strided& s, Op op) {
  constexpr int U = kUnroll;
  const long long bd = blockDim.x;
  const long long step = (long long)gridDim.x * bd * U;
  long long i = (long long)blockIdx.x * bd * U + threadIdx.x;
  for (; i + (U - 1) * bd < n; i += step) ew_strided_group<U, NIN, INPLACE, I>(a, b, c, out, i, bd, s, op);
#pragma unroll
  for (int k = 0; k < U - 1; ++k)  // fixed-count tail, see ew_contig_run
    if (i + k * bd < n) ew_strided_group<1, NIN, INPLACE, I>(a, b, c, out, i + k * bd, bd, s, op);
}

template <int NIN, bool INPLACE, typename T, typename Op>
__device__ __forceinline__ void ew_strided(const T* a, const T* b, const T* c, T* out, long long n,
                                           const Strided& s, Op op) {
  if (n <= 0) return;
  if (n <= 0xFFFFFFFFll) ew_strided_run<NIN, INPLACE, unsigned>(a, b, c, out, n, s, op);
  else ew_strided_run<NIN, INPLACE, unsigned long long>(a, b, c, out, n, s, op);
}

}  // namespace kk

// ---------------------------------------------------------------- contiguous
// out[i] = a[i] + b[i], i < n; a, b, out contiguous (out may be a or b).
template <typename T>
__global__ void __maxnreg__(64)
kk_add(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n) {
  kk::ew_contig<2, true>(a, b, (const T*)nullptr, out, n, kk::AddOp{});
}

// out[i] = a[i] * b[i].
template <typename T>
__global__ void __maxnreg__(64)
kk_mul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n) {
  kk::ew_contig<2, true>(a, b, (const T*)nullptr, out, n, kk::MulOp{});
}

// out[i] = fma(a[i], b[i], c[i]) in Acc<T>, rounded once to T.
template <typename T>
__global__ void __maxnreg__(64)
kk_muladd(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c, T* __restrict__ out,
          long long n) {
  kk::ew_contig<3, true>(a, b, c, out, n, kk::MulAddOp{});
}

// In place: x[i] = x[i] * s (s in Acc<T>), i < n, x contiguous.
template <typename T>
__global__ void __maxnreg__(64)
kk_scale_(T* x, typename kk::Acc<T>::type s, long long n) {
  kk::ew_contig<1, false>((const T*)x, (const T*)nullptr, (const T*)nullptr, x, n,
                          kk::ScaleOp<typename kk::Acc<T>::type>{s});
}

// ---------------------------------------------------------------- strided / broadcast
// n = product of st.size[0..ndim-1] output elements; out contiguous with that shape;
// input t is read at sum_d idx_d * st.stride[t][d] (stride 0 = broadcast). ndim == 0 -> scalar, n == 1.
template <typename T>
__global__ void __maxnreg__(64)
kk_add_strided(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n, kk::Strided st) {
  kk::ew_strided<2, false>(a, b, (const T*)nullptr, out, n, st, kk::AddOp{});
}

template <typename T>
__global__ void __maxnreg__(64)
kk_mul_strided(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n, kk::Strided st) {
  kk::ew_strided<2, false>(a, b, (const T*)nullptr, out, n, st, kk::MulOp{});
}

template <typename T>
__global__ void __maxnreg__(64)
kk_muladd_strided(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c, T* __restrict__ out,
                  long long n, kk::Strided st) {
  kk::ew_strided<3, false>(a, b, c, out, n, st, kk::MulAddOp{});
}

// In place through strides: x[off(i)] *= s, off from st.stride[0]. x must not have overlapping
// elements (no 0 strides), else threads race on the same element.
template <typename T>
__global__ void __maxnreg__(64)
kk_scale_strided_(T* x, typename kk::Acc<T>::type s, long long n, kk::Strided st) {
  kk::ew_strided<1, true>((const T*)x, (const T*)nullptr, (const T*)nullptr, x, n, st,
                          kk::ScaleOp<typename kk::Acc<T>::type>{s});
}
