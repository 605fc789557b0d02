// kernelkit RMSNorm / add+RMSNorm / LayerNorm: forward, backward with per-chunk weight(/bias)-gradient
// partials, and the deterministic reduction of those partials (kk_column_sum, in common.cuh).
//
// Common layout (all kernels here): x is [rows, cols] row-major contiguous.
//   blockDim = (R, Y): R threads cooperate on one row, Y rows are handled side by side per block.
//   R is a power of two <= 32 or a multiple of 32; R * Y must be a multiple of 32 (full-warp shuffles);
//   R * Y <= the kernel's launch bound. Thread (tx, ty) owns the column packs p = tx + k*R of its row:
//   k < NP (see kNp* below) are held in registers for the whole row ("register part", capacity NP * R packs); packs
//   p >= NP*R ("tail", only when cols > NP * R * VEC) are streamed from global memory once per pass and
//   re-read in later passes (LayerNorm's forward from its shared-memory row cache where that holds them,
//   else L2 hits when the grid is not too large). A pack is VEC = 16/sizeof(T)
//   elements on the 16-byte path (cols % VEC == 0 and all T pointers 16-byte aligned), 1 otherwise.
//   Row sums: xor-shuffle within the R threads, then (R > 32) one shared-memory word per warp summed in
//   warp order. The result is deterministic for a given blockDim (and, for the backward, rows_per_chunk).
//   Statistics (sum of squares, mean, variance) are accumulated in A = Acc<T> (float, double for double).
//   Every kernel is correct for any grid (grid-stride loop over row groups / chunks).
//   rstd (and mean) outputs may be nullptr in the forward kernels (inference).
//   Exact in-place aliasing (y == x, new_residual == x or residual, gx == gy or g_extra) is allowed.
#include "common.cuh"

namespace kk_norms {

using kk::Vec;
using kk::acc_t;
using kk::load_vec;
using kk::row_thread;
using kk::row_threads;
using kk::store_vec;
using kk::to_acc;

// Register packs per thread (NP), chosen for zero spills under the launch bounds (checked with
// check_compile.py): forward float 8, double/half/bf16 4; backward float 4, double/half/bf16 2 (launch
// bound 512). The register part of a row is NP * VEC * R elements: 32 * R for the forward in float and
// 16-bit types, 16 * R for the backward in float and 16-bit types (scalar path: NP * R).
template <typename T> constexpr int kNpFwd = sizeof(T) == 4 ? 8 : 4;
template <typename T> constexpr int kNpBwd = sizeof(T) == 4 ? 4 : 2;

// How the kernels load rows and weights (kk::Load), measured against kNc on an H200 (bench/ab_source.py, bench/NOTES.md
// session 17). kKeep made the RMSNorm forwards 1.7-4.2% faster and the float32 backwards 2-2.6%; LayerNorm's forward
// rows 1-10% slower (weights: within 1%), the 16-bit backwards' rows 1-4% slower; the lean float LayerNorm forward
// (ln_fwd_wide_run) 3-4% faster (bench/exp_looped_rows.py ln_modes). LayerNorm's rows split over a cluster, once their
// weights came from shared memory: float32 8192 x 65536 1141.9 -> 1112.8 us, bf16 598.8 -> 598.7, while its held
// bf16 rows stayed 0.8-1.8% slower (h200-2026-11-23-s20/ab-ln-keep.json). An H100 measured kKeep 0.6-0.8% faster for the
// 16-bit LayerNorm forward's rows beyond 2048 columns: kk_layer_norm_fwd's LD (ops/norms.py _FWD_KEEP_LOW_GBPS).
constexpr int kRmsFwdLd = kk::kKeep, kLnFwdLd = kk::kNc, kLnSplitLd = kk::kKeep, kLnWideLd = kk::kKeep;
// Split forwards on a fixed geometry (the kernels' CTAS, kk::kFixedThreads): LayerNorm's kLnFmaOut
// writes one-pass rows as fma(fma(x, rs, -mu * rs), w, b): 0.6-1.2% faster at 8192 x 65536 and 4096 x 131072, 16-bit
// (bench/ab_source.py, h200-2026-11-23-s26/ab-ln-fma2.json).
constexpr bool kLnFmaOut = true;
// The backwards' weights; their rows (kBwdRowLd) kKeep where a block holds them (16-bit: rms_norm_backward 32768 x 8192
// 419.7 -> 414.7 us, x 1024 0.990, add_rms_norm_backward x 4096 274.1 -> 272.6, x 8192 0.996; bench/ab_source.py,
// h200-2026-11-28-s50/ab-h200-norm-bwd-keep-rows.log; shifted rows the same, not measured apart). Every 16-bit load
// kKeep, split rows' and weights' too, read 1.010x at 8192 x 65536 (h200-2026-11-28-s49/ab-h200-norm-bwd-keep16.log).
template <typename T> constexpr int kBwdLd = sizeof(T) == 4 ? kk::kKeep : kk::kNc;
template <typename T, bool SPLIT> constexpr int kBwdRowLd = SPLIT ? kBwdLd<T> : kk::kKeep;

__device__ __forceinline__ float k_rsqrt(float v) { return rsqrtf(v); }
__device__ __forceinline__ double k_rsqrt(double v) { return rsqrt(v); }

// The same within this CTA (rows split over a cluster are summed further by row_sum). Each warp adds the
// row's nw warp sums with a butterfly over groups of `span` lanes, one shared-memory read per lane (every
// thread reading all nw sums cost the split 16-bit LayerNorm backward 4-7%, bench/ab_source.py): the same
// tree in every group, so the same bits in every thread.
template <int N, typename A> __device__ __forceinline__ void block_row_sum(A (&v)[N], A* sm) {
  const int R = blockDim.x;
  const int width = R < 32 ? R : 32;
  for (int o = width >> 1; o > 0; o >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
  }
  if (R <= 32) return;
  const int tid = threadIdx.y * R + threadIdx.x;
  const int nw = R >> 5;
  if ((tid & 31) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) sm[i * 32 + (tid >> 5)] = v[i];
  }
  __syncthreads();
  const A* const row = sm + threadIdx.y * nw;
  int span = 1;
  while (span < nw) span <<= 1;
  const int q = threadIdx.x & (span - 1);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    A s = q < nw ? row[i * 32 + q] : A(0);
    for (int o = span >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    v[i] = s;
  }
  __syncthreads();
}

// v[i] <- sum of v[i] over the threads of this thread's row (blockDim.x, times gridDim.y CTAs when the
// row is split: cs adds every warp's sums across the cluster); bitwise identical in every thread of the row
// (xor butterfly: a+b == b+a). blockDim.x > 32: all threads of the block must call it (two __syncthreads
// when the row is not split). sm: N*32 words of shared memory.
template <int N, typename A, bool SPLIT, int PARTS>
__device__ __forceinline__ void row_sum(A (&v)[N], A* sm, kk::ClusterRowReduce<N, A, SPLIT, PARTS>& cs) {
  if constexpr (SPLIT) cs(v);
  else block_row_sum(v, sm);
}

template <int N, int W, typename T> struct Packs {
  Vec<T, W> v[N];
};

// src[i] == nullptr -> zero pack. Bit i of PLAIN: coherent load (data this kernel wrote earlier).
template <unsigned PLAIN, int N, int W, typename T>
__device__ __forceinline__ void load_packs(Packs<N, W, T>& a, const T* const (&src)[N], long long p) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if ((PLAIN >> i) & 1u) a.v[i] = kk::load_vec_if<W, false>(src[i] + p * W, src[i] != nullptr);
    else a.v[i] = kk::load_vec_if<W>(src[i] + p * W, src[i] != nullptr);
  }
}

// Tail loop: packs p, p+R, ... < cv, U packs (of all N sources) loaded before they are processed.
template <int U, unsigned PLAIN, int W, int N, typename T, typename F>
__device__ __forceinline__ void tail_loop(const T* const (&src)[N], long long p, long long cv, long long R, F&& f) {
  for (; p + (U - 1) * R < cv; p += U * R) {
    Packs<N, W, T> a[U];
#pragma unroll
    for (int k = 0; k < U; ++k) load_packs<PLAIN>(a[k], src, p + k * R);
#pragma unroll
    for (int k = 0; k < U; ++k) f(p + k * R, a[k]);
  }
  for (; p < cv; p += R) {
    Packs<N, W, T> a;
    load_packs<PLAIN>(a, src, p);
    f(p, a);
  }
}

// Row cache of LayerNorm's forward TAIL rows (one row per block): dynamic shared memory holds the first
// `packs` packs of the tail of the block's row (pack p in slot p - p0), stored by the pass that first reads
// them and read back by the later passes of the same thread, so no barrier guards it. Empty without dynamic
// shared memory or with several rows per block.
template <int W, typename T> struct RowCache {
  T* base;
  long long packs;
  long long p0;  // the row's first tail pack
  __device__ __forceinline__ long long end() const { return p0 + packs; }
  __device__ __forceinline__ void put(long long p, const Vec<T, W>& v) const {
    if (p < end()) kk::sts<W>(base + (p - p0) * W, v);
  }
  __device__ __forceinline__ Vec<T, W> get(long long p) const { return kk::lds<W>(base + (p - p0) * W); }
};
template <int W, typename T> __device__ __forceinline__ RowCache<W, T> row_cache(long long p0) {
  extern __shared__ uint4 kk_norms_dyn[];
  const long long packs = blockDim.y == 1 ? kk::dyn_smem_bytes() / (W * sizeof(T)) : 0;
  return {reinterpret_cast<T*>(kk_norms_dyn), packs, p0};
}

// Thread-owned A values of the backward's register packs kept in dynamic shared memory instead of registers
// (SMEM backwards, one row group per block): array `a`, pack k of thread tx, W values in 16-byte units laid
// out so that a warp's accesses are consecutive (no bank conflicts). Only this thread reads what it wrote,
// so no barrier guards them.
template <int NP, int W, typename A> struct PackSlots {
  static constexpr int kUnits = W * sizeof(A) / 16;
  static constexpr int kPer = 16 / sizeof(A);  // A values per unit
  uint4* base;
  int R, tx;
  __device__ __forceinline__ uint4* at(int a, int k, int u) const {
    return base + ((a * NP + k) * kUnits + u) * R + tx;
  }
  __device__ __forceinline__ void load(int a, int k, A (&v)[W]) const {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const uint4 t = *at(a, k, u);
      const unsigned q[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
      for (int i = 0; i < kPer; ++i) kk::from_words(q + i * sizeof(A) / 4, v[u * kPer + i]);
    }
  }
  __device__ __forceinline__ void store(int a, int k, const A (&v)[W]) const {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      unsigned q[4];
#pragma unroll
      for (int i = 0; i < kPer; ++i) kk::to_words(v[u * kPer + i], q + i * sizeof(A) / 4);
      *at(a, k, u) = make_uint4(q[0], q[1], q[2], q[3]);
    }
  }
};

// Split rows (SPLIT): a CTA takes the same column slice of every row it loops over, so the forwards stage their
// parameter packs (w; LayerNorm's b too) once in dynamic shared memory instead of reading them from L2 in every
// row's output pass (in 16-bit LayerNorm, twice the row's own DRAM bytes). NPARAM x NP slots of 16 bytes per thread,
// [param][pack][thread], so a warp's accesses are consecutive; only the thread that stores a slot reads it, so no
// barrier. A launch with less than NPARAM * NP * 16 bytes per thread traps. At 8192 x 65536 on an H200
// (bench/exp_split_params.py, h200-2026-11-23-s20): LayerNorm bf16 613.9 -> 597.1 us, float32 1190.4 -> 1121.5 (4
// packs over 8 CTAs: 8 packs' slots would not fit two blocks per SM); RMSNorm bf16 553.5 -> 540.2, float32 1075.7 ->
// 1049.8; add_rms_norm bf16 1110.5 -> 1053.7, float32 2124.9 -> 2102.9.
// No state: the slot addresses are recomputed from threadIdx and blockDim where used (kept in registers across the
// row loop, they made the float32 split forwards spill).
template <int NPARAM, int NP, int W, typename T> struct ParamSlots {
  __device__ __forceinline__ T* at(int a, int k) const {
    extern __shared__ uint4 kk_norms_dyn[];
    return reinterpret_cast<T*>(kk_norms_dyn) + ((a * NP + k) * int(blockDim.x) + int(threadIdx.x)) * W;
  }
  __device__ __forceinline__ Vec<T, W> get(int a, int k) const { return kk::lds<W>(at(a, k)); }
};
template <int NPARAM, int NP, int W, typename T>
__device__ __forceinline__ ParamSlots<NPARAM, NP, W, T> stage_params(const T* const (&params)[NPARAM], long long tx,
                                                                     long long R, long long cv) {
  if (kk::dyn_smem_bytes() < NPARAM * NP * 16u * blockDim.x) __trap();
  const ParamSlots<NPARAM, NP, W, T> s;
#pragma unroll
  for (int a = 0; a < NPARAM; ++a)
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      kk::sts<W>(s.at(a, k), p < cv ? load_vec<W, kk::kNc>(params[a] + p * W) : kk::zero_vec<T, W>());
    }
  return s;
}

// tail_loop for a later pass over the tail: source 0 from the row cache where it holds the pack (a prefix
// of the tail), from global memory beyond; the other sources from global memory.
template <int U, unsigned PLAIN, int W, int N, typename T, typename F>
__device__ __forceinline__ void cached_tail_loop(const RowCache<W, T>& c, const T* const (&src)[N], long long p,
                                                 long long cv, long long R, F&& f) {
  const T* rest[N];
  rest[0] = nullptr;  // load_packs leaves it a zero pack, replaced from the cache
#pragma unroll
  for (int i = 1; i < N; ++i) rest[i] = src[i];
  const T* const (&others)[N] = rest;
  const long long end = c.end() < cv ? c.end() : cv;
  for (; p + (U - 1) * R < end; p += U * R) {
    Packs<N, W, T> a[U];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      load_packs<PLAIN>(a[k], others, p + k * R);
      a[k].v[0] = c.get(p + k * R);
    }
#pragma unroll
    for (int k = 0; k < U; ++k) f(p + k * R, a[k]);
  }
  for (; p < end; p += R) {
    Packs<N, W, T> a;
    load_packs<PLAIN>(a, others, p);
    a.v[0] = c.get(p);
    f(p, a);
  }
  tail_loop<U, PLAIN, W>(src, p, cv, R, f);
}

// ------------------------------------------------------------------------------------------------
// RMSNorm forward (ADD: fused residual add). h = x (+ residual, rounded to T and stored to hout);
// rs = rsqrt(sum(h^2)/cols + eps); y = round(h * rs * w) with the products in A. SHIFT (no TAIL): rows of any
// width on the 16-byte path (kk::RowShift; x, residual, y and hout congruent16), w's packs by kk::load_shifted.
template <int NP, int W, bool ADD, bool TAIL, bool SPLIT, typename T, int CTAS = 0, bool SHIFT = false>
__device__ __forceinline__ void rms_fwd_run(const T* __restrict__ x, const T* __restrict__ res,
                                            const T* __restrict__ w, T* __restrict__ y, T* __restrict__ hout,
                                            acc_t<T>* __restrict__ rstd, long long rows, long long cols, double eps) {
  using A = acc_t<T>;
  static_assert(CTAS == 0 || SPLIT, "a fixed geometry is a cluster's");
  constexpr bool kFixed = CTAS > 0;  // as in ln_fwd_run
  __shared__ A sm[32];
  kk::ClusterRowReduce<1, A, SPLIT, kk::kFixedParts<CTAS>> cs;
  const int tx = kFixed ? int(blockIdx.y) * kk::kFixedThreads + int(threadIdx.x) : row_thread<SPLIT>();
  const long long R = kFixed ? (long long)kk::kFixedThreads * CTAS : row_threads<SPLIT>();
  const long long cv = cols / W;
  const long long p_tail = NP * R + tx;
  const A acols = A(cols);
  const T* const wp[1] = {w};
  // Shifted rows are held in registers (split ones too); their w packs come at each row's shift (kk::load_shifted),
  // not staged in shared memory once.
  static_assert(!SHIFT || !TAIL, "shifted rows are held in registers");
  const auto params = SPLIT && !SHIFT ? stage_params<1, NP, W>(wp, tx, R, cv) : ParamSlots<1, NP, W, T>{};
  for (long long rb = (long long)blockIdx.x * blockDim.y; rb < rows; rb += (long long)gridDim.x * blockDim.y) {
    const long long row = rb + threadIdx.y;
    const bool act = kFixed || row < rows;
    kk::RowAt at{};  // SHIFT: the row's first pack, packs and this thread's extra element
    if constexpr (SHIFT) {
      if (act) at = kk::row_at<W, true>(x, row, cols, tx);
    }
    const long long off = SHIFT ? at.first : act ? row * cols : 0;
    const long long nvr = SHIFT ? at.nv : cv;  // the row's packs
    A he = A(0);  // the extra element's h
    if constexpr (SHIFT) {
      if (at.e.has) {
        const long long o = off + at.e.off;
        if constexpr (ADD) {
          const T hv = kk::from_acc<T>(to_acc(kk::load_nc(x + o)) + to_acc(kk::load_nc(res + o)));
          hout[o] = hv;
          he = to_acc(hv);
        } else {
          he = to_acc(kk::load_nc(x + o));
        }
      }
    }
    Vec<T, W> h[NP];
    A ss[1] = {he * he};
    if constexpr (ADD) {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        h[k] = kk::zero_vec<T, W>();
        if (act && p < nvr) {
          A a[W], b[W];
          kk::vec_to_acc(load_vec<W, kRmsFwdLd>(x + off + p * W), a);
          kk::vec_to_acc(load_vec<W, kRmsFwdLd>(res + off + p * W), b);
#pragma unroll
          for (int j = 0; j < W; ++j) a[j] += b[j];
          h[k] = kk::acc_to_vec<T, W>(a);
          store_vec<W, SPLIT && sizeof(T) == 4>(hout + off + p * W, h[k]);
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        // 16-bit packs choose on whole words (a select per element was two byte permutes); the float ones
        // keep the select: through a shared helper (load_vec_if or its own) the float forwards spilled.
        if constexpr (sizeof(T) == 2) h[k] = kk::load_vec_if<W, kRmsFwdLd>(x + off + p * W, act && p < nvr);
        else h[k] = (act && p < nvr) ? load_vec<W, kRmsFwdLd>(x + off + p * W) : kk::zero_vec<T, W>();
      }
    }
#pragma unroll
    for (int k = 0; k < NP; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const A a = kk::acc_at(h[k], j);
        ss[0] = kk::fma_acc(a, a, ss[0]);
      }
    if (TAIL && act && p_tail < cv) {
      if constexpr (ADD) {
        const T* const src[2] = {x + off, res + off};
        tail_loop<4, 0u, W>(src, p_tail, cv, R, [&](long long p, const Packs<2, W, T>& q) {
          A a[W], b[W];
          kk::vec_to_acc(q.v[0], a);
          kk::vec_to_acc(q.v[1], b);
#pragma unroll
          for (int j = 0; j < W; ++j) a[j] += b[j];
          const Vec<T, W> hv = kk::acc_to_vec<T, W>(a);
          store_vec<W>(hout + off + p * W, hv);
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const A t = kk::acc_at(hv, j);
            ss[0] = kk::fma_acc(t, t, ss[0]);
          }
        });
      } else {
        const T* const src[1] = {x + off};
        tail_loop<4, 0u, W>(src, p_tail, cv, R, [&](long long, const Packs<1, W, T>& q) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const A t = kk::acc_at(q.v[0], j);
            ss[0] = kk::fma_acc(t, t, ss[0]);
          }
        });
      }
    }
    row_sum(ss, sm, cs);
    const A rs = k_rsqrt(ss[0] / acols + A(eps));
    if (act && tx == 0 && rstd != nullptr) rstd[row] = rs;
    const T* const wr = w + at.head;  // w's column of the row's first pack
    const unsigned wsb = SHIFT ? unsigned(kk::addr(wr) & 15u) : 0u;
    if constexpr (SHIFT) {
      if (at.e.has) y[off + at.e.off] = kk::from_acc<T>(he * rs * to_acc(wr[at.e.off]));
    }
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      if (act && p < nvr) {
        A a[W], g[W];
        kk::vec_to_acc(h[k], a);
        if constexpr (SHIFT) kk::vec_to_acc(kk::load_shifted<kRmsFwdLd>(wr + p * W, wsb), g);
        else if constexpr (SPLIT) kk::vec_to_acc(params.get(0, k), g);
        else kk::vec_to_acc(load_vec<W, kRmsFwdLd>(w + p * W), g);
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = a[j] * rs * g[j];
        store_vec<W, SPLIT>(y + off + p * W, kk::acc_to_vec<T, W>(a));
      }
    }
    if (TAIL && act && p_tail < cv) {
      const T* const src[2] = {ADD ? (const T*)hout + off : x + off, w};
      tail_loop<4, ADD ? 1u : 0u, W>(src, p_tail, cv, R, [&](long long p, const Packs<2, W, T>& q) {
        A a[W], g[W];
        kk::vec_to_acc(q.v[0], a);
        kk::vec_to_acc(q.v[1], g);
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = a[j] * rs * g[j];
        store_vec<W>(y + off + p * W, kk::acc_to_vec<T, W>(a));
      });
    }
  }
  cs.finish();
}

// ------------------------------------------------------------------------------------------------
// LayerNorm forward: mu = mean(x), var = biased variance, rs = rsqrt(var + eps), y = round((x - mu) * rs * w + b)
// in A. ONEPASS (the kernel sets it for 16-bit, split and float32 tail rows): sum x and x^2 in one pass (one
// reduction, no second pass over the registers: the 16-bit kernels are issue-bound) and take var = mean(x^2) - mu^2
// when mu^2 <= var, where the cancellation at most doubles the rounding error of the two-pass form; otherwise (and
// for NaN) sum (x - mu)^2 in a second pass, as rows without ONEPASS always do. A split row adds its CTAs' sums
// over the cluster: one exchange per row, two where the second pass runs. SHIFT: as rms_fwd_run's (w and b by
// kk::load_shifted).
template <int NP, int W, bool TAIL, bool SPLIT, bool ONEPASS, typename T, int CTAS = 0, int LD = kLnFwdLd,
          bool SHIFT = false>
__device__ __forceinline__ void ln_fwd_run(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                           T* __restrict__ y, acc_t<T>* __restrict__ mean,
                                           acc_t<T>* __restrict__ rstd, long long rows, long long cols, double eps) {
  using A = acc_t<T>;
  static_assert(CTAS == 0 || SPLIT, "a fixed geometry is a cluster's");
  // blockDim (kk::kFixedThreads, 1), clusters of CTAS: the row loop's bounds hold every row
  constexpr bool kFixed = CTAS > 0;
  // row sums of 2 values
  __shared__ A sm[2 * 32];
  kk::ClusterRowReduce<2, A, SPLIT, kk::kFixedParts<CTAS>> cr;
  const int tx = kFixed ? int(blockIdx.y) * kk::kFixedThreads + int(threadIdx.x) : row_thread<SPLIT>();
  const long long R = kFixed ? (long long)kk::kFixedThreads * CTAS : row_threads<SPLIT>();
  const long long cv = cols / W;
  const long long p_tail = NP * R + tx;
  const A acols = A(cols);
  const RowCache<W, T> cache = TAIL ? row_cache<W, T>(NP * R) : RowCache<W, T>{nullptr, 0, 0};
  static_assert(ONEPASS || !SPLIT, "split rows take the one-pass sums");
  constexpr int kRowLd = SPLIT ? kLnSplitLd : LD;
  const T* const wb[2] = {w, b};
  static_assert(!SHIFT || !TAIL, "shifted rows are held in registers");  // w and b as rms_fwd_run's
  const auto params = SPLIT && !SHIFT ? stage_params<2, NP, W>(wb, tx, R, cv) : ParamSlots<2, NP, W, T>{};
  for (long long rb = (long long)blockIdx.x * blockDim.y; rb < rows; rb += (long long)gridDim.x * blockDim.y) {
    const long long row = rb + threadIdx.y;
    const bool act = kFixed || row < rows;
    kk::RowAt at{};  // SHIFT: the row's first pack, packs and this thread's extra element
    if constexpr (SHIFT) {
      if (act) at = kk::row_at<W, true>(x, row, cols, tx);
    }
    const long long off = SHIFT ? at.first : act ? row * cols : 0;
    const long long nvr = SHIFT ? at.nv : cv;  // the row's packs
    const bool tail = TAIL && act && p_tail < cv;
    const T* const src1[1] = {x + off};
    Vec<T, W> h[NP];
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      // As in rms_fwd_run: whole words for 16-bit packs, the select for float ones.
      if constexpr (sizeof(T) == 2) h[k] = kk::load_vec_if<W, kRowLd>(x + off + p * W, act && p < nvr);
      else h[k] = (act && p < nvr) ? load_vec<W, kRowLd>(x + off + p * W) : kk::zero_vec<T, W>();
    }
    const A xe = kk::extra_value(x + off, at.e, A(0));  // the extra element (SHIFT)
    // s[0]: sum of x; s[1]: sum of x^2 (ONEPASS); then s[0]: sum of (x - mu)^2 where the second pass runs.
    A s[2] = {xe, ONEPASS ? xe * xe : A(0)};
#pragma unroll
    for (int k = 0; k < NP; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const A a = kk::acc_at(h[k], j);
        s[0] += a;
        if constexpr (ONEPASS) s[1] = kk::fma_acc(a, a, s[1]);
      }
    if (tail)
      tail_loop<2, 0u, W>(src1, p_tail, cv, R, [&](long long p, const Packs<1, W, T>& q) {
        cache.put(p, q.v[0]);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const A a = kk::acc_at(q.v[0], j);
          s[0] += a;
          if constexpr (ONEPASS) s[1] = kk::fma_acc(a, a, s[1]);
        }
      });
    // The row's sum of s[0] alone: rows without ONEPASS (never split) reduce one value per pass.
    auto block_sum_first = [&]() {
      A s0[1] = {s[0]};
      block_row_sum(s0, sm);
      return s0[0];
    };
    A mu, var;
    bool two_pass = true;
    if constexpr (ONEPASS) {
      row_sum(s, sm, cr);  // the same bits in every thread of the row (every CTA of a split row)
      mu = s[0] / acols;
      var = s[1] / acols - mu * mu;
      two_pass = !(mu * mu <= var);
      // The second pass reduces across the row's threads: every row sharing a warp (R < 32) or, beyond
      // one warp per row, the block (R > 32 with several rows) takes it together.
      if (R < 32) two_pass = __any_sync(0xffffffffu, two_pass);
      else if (R > 32 && blockDim.y > 1) two_pass = __syncthreads_or(two_pass);
    } else {
      mu = block_sum_first() / acols;
    }
    if (two_pass) {
      s[0] = SHIFT && at.e.has ? (xe - mu) * (xe - mu) : A(0);
      s[1] = A(0);
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        if (p < nvr) {  // zero packs beyond nvr would add mu^2
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const A d = kk::acc_at(h[k], j) - mu;
            s[0] = kk::fma_acc(d, d, s[0]);
          }
        }
      }
      if (tail)
        cached_tail_loop<2, 0u, W>(cache, src1, p_tail, cv, R, [&](long long, const Packs<1, W, T>& q) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const A d = kk::acc_at(q.v[0], j) - mu;
            s[0] = kk::fma_acc(d, d, s[0]);
          }
        });
      if constexpr (ONEPASS) row_sum(s, sm, cr);
      else s[0] = block_sum_first();
      var = s[0] / acols;
    }
    const A rs = k_rsqrt(var + A(eps));
    if (act && tx == 0) {
      if (mean != nullptr) mean[row] = mu;
      if (rstd != nullptr) rstd[row] = rs;
    }
    // One-pass rows have mu^2 <= var, so |mu * rs| <= 1 and fma(x, rs, -mu * rs) is within 2^-25 of (x - mu) * rs. A
    // constant nonzero row has mu^2 > var (0 up to rounding) and takes the exact form; a zero row gives b in both.
    // fma_form is a plain bool, constant at each inlined call: NVRTC 13.0 rejects generic lambdas in device code.
    auto out_packs = [&](const bool fma_form) {
      const A nmrs = -mu * rs;
      const T* const wr = w + at.head;  // w's and b's columns of the row's first pack
      const T* const br = b + at.head;
      const unsigned wsb = SHIFT ? unsigned(kk::addr(wr) & 15u) : 0u, bsb = SHIFT ? unsigned(kk::addr(br) & 15u) : 0u;
      if constexpr (SHIFT) {
        if (at.e.has) {
          const A o = fma_form ? kk::fma_acc(xe, rs, nmrs) : (xe - mu) * rs;
          y[off + at.e.off] = kk::from_acc<T>(kk::fma_acc(o, to_acc(wr[at.e.off]), to_acc(br[at.e.off])));
        }
      }
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        if (act && p < nvr) {
          A a[W], g[W], c[W];
          kk::vec_to_acc(h[k], a);
          if constexpr (SHIFT) {
            kk::vec_to_acc(kk::load_shifted<LD>(wr + p * W, wsb), g);
            kk::vec_to_acc(kk::load_shifted<LD>(br + p * W, bsb), c);
          } else if constexpr (SPLIT) {
            kk::vec_to_acc(params.get(0, k), g);
            kk::vec_to_acc(params.get(1, k), c);
          } else {
            kk::vec_to_acc(load_vec<W, LD>(w + p * W), g);
            kk::vec_to_acc(load_vec<W, LD>(b + p * W), c);
          }
#pragma unroll
          for (int j = 0; j < W; ++j)
            a[j] = kk::fma_acc(fma_form ? kk::fma_acc(a[j], rs, nmrs) : (a[j] - mu) * rs, g[j], c[j]);
          store_vec<W, SPLIT>(y + off + p * W, kk::acc_to_vec<T, W>(a));
        }
      }
    };
    if (kLnFmaOut && kFixed && !two_pass) out_packs(true);
    else out_packs(false);
    if (tail) {
      const T* const src[3] = {x + off, w, b};
      cached_tail_loop<1, 0u, W>(cache, src, p_tail, cv, R, [&](long long p, const Packs<3, W, T>& q) {
        A a[W], g[W], c[W];
        kk::vec_to_acc(q.v[0], a);
        kk::vec_to_acc(q.v[1], g);
        kk::vec_to_acc(q.v[2], c);
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = kk::fma_acc((a[j] - mu) * rs, g[j], c[j]);
        store_vec<W>(y + off + p * W, kk::acc_to_vec<T, W>(a));
      });
    }
  }
  cr.finish();
}

// ------------------------------------------------------------------------------------------------
// LayerNorm forward of float rows one block holds, R = blockDim.x a multiple of 32 threads and one row per block
// (the 16-byte path): ln_fwd_run's two passes and results, with 32-bit pack indices and butterflies over whole warps.
// At 32768 x 4096 ln_fwd_run's R = 512 fit executed 1.9x the instructions (230.6M against 121.0M, issue-bound at DRAM
// 61%; bench/results/h200-2026-11-23-s17/ncu-ln.txt). Not a change to block_row_sum, which takes any R and several
// rows per block: with these whole-warp butterflies there, the float32 rms_norm backwards and the 4-pack LayerNorm
// forward spilled (check_compile.py).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's sum of v, in every thread: each warp's butterfly, then the warps' sums (red[0..nw)) by a butterfly
// over lanes that read zeros past nw, which is block_row_sum's tree.
__device__ __forceinline__ float wide_block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = warp_sum(lane < nw ? red[lane] : 0.f);
  __syncthreads();
  return v;
}

// This thread's packs p = k * R + tx (k < NP) of a row xr of cv packs, zeros past cv, loaded as L says: the row part of
// the wide kernels (16-bit packs choose on whole words, as in rms_fwd_run).
template <int L, int NP, typename T, int W>
__device__ __forceinline__ void wide_row_packs(const T* xr, int tx, int R, int cv, Vec<T, W> (&h)[NP]) {
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    const int p = k * R + tx;
    if constexpr (sizeof(T) == 2) h[k] = kk::load_vec_if<W, L>(xr + p * W, p < cv);
    else h[k] = p < cv ? load_vec<W, L>(xr + p * W) : kk::zero_vec<T, W>();
  }
}

template <int NP>
__device__ __forceinline__ void ln_fwd_wide_run(const float* __restrict__ x, const float* __restrict__ w,
                                                const float* __restrict__ b, float* __restrict__ y,
                                                float* __restrict__ mean, float* __restrict__ rstd, long long rows,
                                                int cols, float eps) {
  constexpr int W = 4;
  __shared__ float red[32];
  const int tx = threadIdx.x, R = blockDim.x, cv = cols / W;
  const float acols = float(cols);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    Vec<float, W> h[NP];
    wide_row_packs<kLnWideLd>(x + row * cols, tx, R, cv, h);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < NP; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j) s += h[k].v[j];
    const float mu = wide_block_sum(s, red) / acols;
    s = 0.f;
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      if (k * R + tx < cv) {  // zero packs beyond cv would add mu^2
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float d = h[k].v[j] - mu;
          s = fmaf(d, d, s);
        }
      }
    }
    const float rs = rsqrtf(wide_block_sum(s, red) / acols + eps);
    if (tx == 0) {
      if (mean != nullptr) mean[row] = mu;
      if (rstd != nullptr) rstd[row] = rs;
    }
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int p = k * R + tx;
      if (p < cv) {
        const Vec<float, W> g = load_vec<W, kLnWideLd>(w + p * W), c = load_vec<W, kLnWideLd>(b + p * W);
        float a[W];
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = fmaf((h[k].v[j] - mu) * rs, g.v[j], c.v[j]);
        store_vec<W>(y + row * cols + p * W, kk::acc_to_vec<float, W>(a));
      }
    }
  }
}

// RMSNorm forward of rows one block holds, on ln_fwd_wide_run's shape: rms_fwd_run's sums in its order and its
// results, bit for bit; 0.3-0.8% faster at the fits ops/norms.py _WIDE_FIT gives it (bench/exp_rms_wide.py).
// PREW: once the row's loads are out, each thread copies its packs of w with cp.async into its own shared-memory slots
// (slot k * R + tx) and reads them there after the row's sum (no barrier: no thread reads another's), rather than
// loading them from L2 then, between the sum and the stores. float32 32768 x 8192 at (4, 3) on an H200: against
// torch.compile over 40 rounds 0.9980 -> 1.0026 (bench/exp_wide_prefetch_w.sh of commit 0d986a3, h200-2026-11-28-s54);
// slower at the fits of two packs a thread: float32 x 4096 2.5%, 16-bit x 8192 5% (ops/norms.py _WIDE_PREFETCH).
template <typename T, int NP, bool PREW = false>
__device__ __forceinline__ void rms_fwd_wide_run(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                                 float* __restrict__ rstd, long long rows, int cols, float eps) {
  constexpr int W = kk::kVec<T>;
  __shared__ float red[32];
  __shared__ Vec<T, W> wsm[PREW ? NP * 512 : 1];
  const int tx = threadIdx.x, R = blockDim.x, cv = cols / W;
  const float acols = float(cols);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    Vec<T, W> h[NP];
    wide_row_packs<kRmsFwdLd>(x + row * cols, tx, R, cv, h);
    if constexpr (PREW) {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const int p = k * R + tx;
        if (p < cv) kk::async_copy16(&wsm[p], w + p * W);
      }
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < NP; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float a = kk::acc_at(h[k], j);
        s = fmaf(a, a, s);
      }
    const float rs = rsqrtf(wide_block_sum(s, red) / acols + eps);
    if (tx == 0 && rstd != nullptr) rstd[row] = rs;
    if constexpr (PREW) kk::async_copy_wait_all();
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int p = k * R + tx;
      if (p < cv) {
        float a[W], g[W];
        kk::vec_to_acc(h[k], a);
        kk::vec_to_acc(PREW ? wsm[p] : load_vec<W, kRmsFwdLd>(w + p * W), g);
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = a[j] * rs * g[j];
        store_vec<W>(y + row * cols + p * W, kk::acc_to_vec<T, W>(a));
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// A backward's chunks of rows (norm_bwd_run, norm_bwd_bulk_shifted_run). Shifted rows (SHIFT) take rows of one shift:
// rows r and r' share it where (r - r') * cols is a multiple of W, every P-th row (P = 2^lp = W / gcd(cols, W)), so
// chunk c takes rows cls + (i << lp) of class cls = c % P, for i in [(c / P) * rpc, (c / P + 1) * rpc), and there are
// P * ceil(ceil(rows / P) / rpc) chunks (some may take no rows). Without SHIFT (lp = 0): rpc consecutive rows each.
template <bool SHIFT> struct ShiftChunks {
  int lp;  // log2(P); 0 without SHIFT
  long long rows, rpc;
  __device__ __forceinline__ long long count() const {
    if constexpr (SHIFT) return kk::div_ll((((rows - 1) >> lp) + 1) + rpc - 1, rpc) << lp;
    else return kk::div_ll(rows + rpc - 1, rpc);
  }
  // Chunk c's class (the row its rows start from) and the range [r0, r1) of its rows' i.
  __device__ __forceinline__ long long rows_of(long long c, long long& r0, long long& r1) const {
    const long long cls = SHIFT ? c & ((1ll << lp) - 1) : 0;
    r0 = (c >> lp) * rpc;
    r1 = kk::min_ll(SHIFT ? (rows > cls ? ((rows - cls - 1) >> lp) + 1 : 0) : rows, r0 + rpc);
    return cls;
  }
};
template <int W, bool SHIFT>
__device__ __forceinline__ ShiftChunks<SHIFT> shift_chunks(long long rows, long long cols, long long rpc) {
  constexpr int kLogW = W == 8 ? 3 : W == 4 ? 2 : W == 2 ? 1 : 0;
  const int tz = __ffsll(cols) - 1;  // cols > 0
  return ShiftChunks<SHIFT>{SHIFT && tz < kLogW ? kLogW - tz : 0, rows, rpc};
}

// ------------------------------------------------------------------------------------------------
// Backward (LN = false: RMSNorm, true: LayerNorm), per row with xh = (x - mu) * rs (mu = 0 for RMS),
// g = gy * w (A):
//   RMS: gx = rs * (g - xh * sum(g*xh)/cols) (+ g_extra)
//   LN:  gx = rs * (g - sum(g)/cols - xh * sum(g*xh)/cols)
//   pw[chunk*cols + c] = sum over the chunk's rows of gy*xh, pb[...] = sum of gy (LN only).
// Register-part columns accumulate pw/pb in registers (one set per row group, combined in row-group
// order through shared memory at the end of the chunk). Tail columns accumulate directly in the chunk's
// row of pw/pb (read-modify-write by the owning thread, rows in order; row groups serialized by barriers).
// SMEM (one row group per block, 16-byte path): 1 keeps the pw/pb sums of the register part in dynamic shared
// memory (PackSlots) instead of registers, 2 the float weights too; fewer registers, more blocks per SM.
// SHIFT (no TAIL or SMEM; split rows on clusters of 2 or more CTAs): rows of any width on the 16-byte path
// (kk::RowShift). A thread's weight-gradient sums hold the same columns over its chunk's rows only where those rows
// share their shift, so chunks take rows of one shift (ShiftChunks; a chunk with no rows writes zero partials).
template <int NP, int W, bool LN, bool TAIL, bool EXTRA, bool SPLIT, int SMEM, int MINB, typename T, bool SHIFT = false>
__device__ __forceinline__ void norm_bwd_run(const T* __restrict__ gy, const T* __restrict__ x,
                                             const T* __restrict__ w, const acc_t<T>* __restrict__ mean,
                                             const acc_t<T>* __restrict__ rstd, const T* __restrict__ gextra,
                                             T* __restrict__ gx, acc_t<T>* __restrict__ pw,
                                             acc_t<T>* __restrict__ pb, long long rows, long long cols,
                                             long long rpc) {
  using A = acc_t<T>;
  constexpr int NS = LN ? 2 : 1;  // row sums: LN {sum g, sum g*xh}, RMS {sum g*xh}
  constexpr int NB = LN ? NP : 1;
  __shared__ A sm[NS * 32];
  kk::ClusterRowReduce<NS, A, SPLIT> cs;
  __shared__ A comb[512];  // blockDim.x * blockDim.y <= 512 (launch bound)
  const int tx = row_thread<SPLIT>(), yi = threadIdx.y, Y = blockDim.y;
  const long long R = row_threads<SPLIT>();
  const long long cv = cols / W;
  const long long p_tail = NP * R + tx;
  const bool has_tail = TAIL && NP * R < cv;
  // Split float32 LayerNorm rows have no registers for the next row (56 bytes of spills), nor have the rows with
  // their sums in shared memory at two blocks per SM (64 registers), except 16-bit RMSNorm rows with the weights
  // there too (SMEM 2), since packs convert whole words (kk::acc_at).
  constexpr bool kSmemRoomForNextRow = SMEM == 2 && sizeof(T) == 2 && !LN;
  constexpr bool kPrefetch =
      !TAIL && (SMEM ? MINB == 1 || kSmemRoomForNextRow : !(LN && SPLIT && sizeof(T) == 4));
  const A acols = A(cols);
  static_assert(!SHIFT || (!TAIL && SMEM == 0), "shifted rows (split or not) are held in registers, their sums too");
  const auto chunks = shift_chunks<W, SHIFT>(rows, cols, rpc);
  const int lp = chunks.lp;
  const long long nchunks = chunks.count();
  // Shared-memory slot arrays (SMEM): the weights (SMEM 2), then the pw sums, then the pb sums (LN), then the extra
  // gradient (kAsyncExtra).
  extern __shared__ uint4 kk_norms_dyn[];
  const PackSlots<NP, W, A> slots{kk_norms_dyn, int(blockDim.x), int(threadIdx.x)};
  // The extra gradient (add_rms_norm's residual path, EXTRA) is only needed after the reductions: 16-bit types load
  // it into registers before them, hiding its latency behind them; the others, with no registers for it (76 bytes
  // of spills), copy it asynchronously into a slot array of their own (SMEM): float32 32768 x 8192 1133.5 -> 1039.4
  // us, x 4096 572.9 -> 531.0 (bench/ab_source.py, h200-2026-11-27-s38/ab-add-bwd-async.log), against loading it
  // after them. Split rows do neither (spills).
  constexpr bool kEarlyExtra = EXTRA && sizeof(T) == 2 && !SPLIT;
  constexpr bool kAsyncExtra = EXTRA && sizeof(T) != 2 && SMEM > 0 && !SPLIT;
  constexpr int kSw = 0, kSaw = SMEM >= 2 ? 1 : 0, kSab = kSaw + 1, kSe = kSab + (LN ? 1 : 0);
  if constexpr (SMEM > 0) {
    static_assert(W * sizeof(A) % 16 == 0, "SMEM backwards take the 16-byte path");
    const unsigned need = (kSe + kAsyncExtra) * NP * PackSlots<NP, W, A>::kUnits * blockDim.x * 16;
    if (blockDim.y != 1 || kk::dyn_smem_bytes() < need) __trap();
  }
  // This thread's weights, the same for every row, converted to A once (16-bit types: the conversions
  // were a large part of the instructions of an issue-bound loop).
  A wf[NP][W];
  if constexpr (!SHIFT) {
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      kk::vec_to_acc(kk::load_vec_if<W, kBwdLd<T>>(w + p * W, p < cv), wf[k]);
      if constexpr (SMEM >= 2) slots.store(kSw, k, wf[k]);
    }
  }
  auto weights = [&](int k, A(&o)[W]) {
    if constexpr (SMEM >= 2) slots.load(kSw, k, o);
    else {
#pragma unroll
      for (int j = 0; j < W; ++j) o[j] = wf[k][j];
    }
  };
  for (long long chunk = blockIdx.x; chunk < nchunks; chunk += gridDim.x) {
    long long r0, r1;  // the chunk's rows: cls + (i << lp) for i in [r0, r1)
    const long long cls = chunks.rows_of(chunk, r0, r1);
    // SHIFT: the rows' shift, this thread's extra element and its weight, and its weight packs at the rows' shift.
    kk::RowShift sh{0, cv, 0};
    kk::Extra ex{};
    A we = A(0);
    if constexpr (SHIFT) {
      sh = kk::row_shift(x + cls * cols, cols);
      ex = kk::Extra{tx < sh.extra, (int)sh.extra_offset<W>(tx)};
      const T* const wr = w + sh.first;
      const unsigned wsb = unsigned(kk::addr(wr) & 15u);
      if (ex.has) we = to_acc(wr[ex.off]);
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        kk::vec_to_acc(p < sh.nv ? kk::load_shifted<kBwdLd<T>>(wr + p * W, wsb) : kk::zero_vec<T, W>(), wf[k]);
      }
    }
    const long long nvr = sh.nv;  // the rows' packs (cv without SHIFT)
    A aw[NP][W], ab[NB][W];
#pragma unroll
    for (int k = 0; k < NP; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j) aw[k][j] = A(0);
#pragma unroll
    for (int k = 0; k < NB; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j) ab[k][j] = A(0);
    if constexpr (SMEM > 0) {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        slots.store(kSaw, k, aw[k]);
        if constexpr (LN) slots.store(kSab, k, ab[k]);
      }
    }
    A* const pwr = pw + chunk * cols + sh.first;  // the columns of the rows' first pack
    A* const pbr = LN ? pb + chunk * cols + sh.first : nullptr;
    // Row data of one row group (i: as r0 and r1): gy and x packs, rstd, mean (zeros past the chunk's end).
    auto load_row = [&](long long i, Vec<T, W>(&gv)[NP], Vec<T, W>(&xv)[NP], A& rs, A& mu) {
      const bool act = i < r1;
      const long long row = cls + (i << lp);
      const long long off = act ? row * cols + sh.first : 0;
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        gv[k] = kk::load_vec_if<W, kBwdRowLd<T, SPLIT>>(gy + off + p * W, act && p < nvr);
        xv[k] = kk::load_vec_if<W, kBwdRowLd<T, SPLIT>>(x + off + p * W, act && p < nvr);
      }
      rs = act ? rstd[row] : A(0);
      mu = (LN && act) ? mean[row] : A(0);
    };
    A awe = A(0), abe = A(0);  // SHIFT: the extra element's weight (and bias) gradient sums
    Vec<T, W> gv[NP], xv[NP];
    A rs, mu;
    // Rows held whole (kPrefetch): the next row is loaded before this row's reductions and barriers, so
    // each thread keeps a row's loads in flight through them (the 16-bit types move half the bytes per
    // row, and without this ran at 53-65% of copy).
    if constexpr (kPrefetch) load_row(r0 + yi, gv, xv, rs, mu);
    for (long long rb = r0; rb < r1; rb += Y) {
      const long long i = rb + yi;
      const bool act = i < r1;
      const long long row = cls + (i << lp);
      const long long off = act ? row * cols + sh.first : 0;
      Vec<T, W> gn[NP], xn[NP];
      A rsn, mun;
      Vec<T, W> ev[NP];
      if constexpr (!kPrefetch) load_row(i, gv, xv, rs, mu);
      else load_row(i + Y, gn, xn, rsn, mun);
      const bool has_extra = SHIFT && act && ex.has;
      const kk::Extra ea{has_extra, ex.off};  // the extra element, in a row of this chunk
      const A ge = kk::extra_value(gy + off, ea, A(0)), xe = kk::extra_value(x + off, ea, A(0));
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        if constexpr (kEarlyExtra)
          ev[k] = kk::load_vec_if<W, kBwdRowLd<T, SPLIT>>(gextra + off + p * W, act && p < nvr);
        // Its slot was last read by this thread's previous row, whose stores used the value before this issues.
        if constexpr (kAsyncExtra)
          if (act && p < nvr) kk::async_copy16(slots.at(kSe, k, 0), gextra + off + p * W);
      }
      // The first pass sums g * (x - mu) and scales it by rs once after the row sum where that measured faster:
      // 16-bit types and add_rms_norm 1-3%; float32 rms_norm and LayerNorm 1.5-2% slower (bench/ab_source.py,
      // h200-2026-11-22-s13/ab-bwd-pass1.json).
      constexpr bool kScaleOnce = sizeof(T) == 2 || EXTRA;
      auto centered = [&](A v) { return kScaleOnce ? (LN ? v - mu : v) : (v - mu) * rs; };
      A s[NS];
#pragma unroll
      for (int q = 0; q < NS; ++q) s[q] = A(0);
      if (has_extra) {
        const A g = ge * we;
        if constexpr (LN) s[0] = g;
        s[NS - 1] = g * centered(xe);
      }
      // zero packs contribute 0: g = 0
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        A wk[W];
        weights(k, wk);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const A g = kk::acc_at(gv[k], j) * wk[j];
          if constexpr (LN) s[0] += g;
          s[NS - 1] = kk::fma_acc(g, centered(kk::acc_at(xv[k], j)), s[NS - 1]);
        }
      }
      if (act && has_tail) {
        const T* const src[3] = {gy + off, x + off, w};
        tail_loop<1, 0u, W>(src, p_tail, cv, R, [&](long long, const Packs<3, W, T>& q) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const A g = kk::acc_at(q.v[0], j) * kk::acc_at(q.v[2], j);
            if constexpr (LN) s[0] += g;
            s[NS - 1] = kk::fma_acc(g, centered(kk::acc_at(q.v[1], j)), s[NS - 1]);
          }
        });
      }
      row_sum(s, sm, cs);
      // gx = rs * (g - c1 - xh * c2) + e with c1 = sum(g)/cols and c2 = sum(g*xh)/cols. (xh stays (x - mu) * rs:
      // as x * rs - mu * rs it would not be exactly 0 where x == mu.)
      const A c1 = LN ? s[0] / acols : A(0);
      const A c2 = (kScaleOnce ? rs * s[NS - 1] : s[NS - 1]) / acols;
      if constexpr (kAsyncExtra) kk::async_copy_wait_all();
      if (has_extra) {
        const A g = ge * we, xh = (xe - mu) * rs;
        const A e = EXTRA ? to_acc(kk::load_nc(gextra + off + ex.off)) : A(0);
        gx[off + ex.off] = kk::from_acc<T>(kk::fma_acc(rs, g - c1 - xh * c2, e));
        awe = kk::fma_acc(ge, xh, awe);
        if constexpr (LN) abe += ge;
      }
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const long long p = k * R + tx;
        if (act && p < nvr) {
          A e[W], o[W];
          if constexpr (kEarlyExtra) kk::vec_to_acc(ev[k], e);
          else if constexpr (kAsyncExtra) slots.load(kSe, k, e);
          else if (EXTRA) kk::vec_to_acc(load_vec<W, kBwdRowLd<T, SPLIT>>(gextra + off + p * W), e);
          else {
#pragma unroll
            for (int j = 0; j < W; ++j) e[j] = A(0);
          }
          A wk[W];
          weights(k, wk);
          if constexpr (SMEM > 0) {
            slots.load(kSaw, k, aw[k]);
            if constexpr (LN) slots.load(kSab, k, ab[k]);
          }
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const A dy = kk::acc_at(gv[k], j);
            const A g = dy * wk[j];
            const A xh = (kk::acc_at(xv[k], j) - mu) * rs;
            o[j] = kk::fma_acc(rs, g - c1 - xh * c2, e[j]);
            aw[k][j] = kk::fma_acc(dy, xh, aw[k][j]);
            if constexpr (LN) ab[k][j] += dy;
          }
          if constexpr (SMEM > 0) {
            slots.store(kSaw, k, aw[k]);
            if constexpr (LN) slots.store(kSab, k, ab[k]);
          }
          store_vec<W, SPLIT || SMEM != 0>(gx + off + p * W, kk::acc_to_vec<T, W>(o));
        }
      }
      if (has_tail) {
        const bool first = row == r0;
        auto tail2 = [&]() {
          const T* const src[4] = {gy + off, x + off, w, EXTRA ? gextra + off : nullptr};
          tail_loop<1, 0u, W>(src, p_tail, cv, R, [&](long long p, const Packs<4, W, T>& q) {
            A o[W];
#pragma unroll
            for (int j = 0; j < W; ++j) {
              const A dy = kk::acc_at(q.v[0], j);
              const A g = dy * kk::acc_at(q.v[2], j);
              const A xh = (kk::acc_at(q.v[1], j) - mu) * rs;
              o[j] = kk::fma_acc(rs, g - c1 - xh * c2, kk::acc_at(q.v[3], j));
              A* const qw = pwr + p * W + j;
              *qw = first ? dy * xh : kk::fma_acc(dy, xh, *qw);
              if constexpr (LN) {
                A* const qb = pbr + p * W + j;
                *qb = first ? dy : *qb + dy;
              }
            }
            store_vec<W>(gx + off + p * W, kk::acc_to_vec<T, W>(o));
          });
        };
        if (Y == 1) {
          if (act) tail2();
        } else {
          for (int q = 0; q < Y; ++q) {  // row order within the block (partial read-modify-write)
            if (q == yi && act) tail2();
            __syncthreads();
          }
        }
      }
      if constexpr (kPrefetch) {
#pragma unroll
        for (int k = 0; k < NP; ++k) {
          gv[k] = gn[k];
          xv[k] = xn[k];
        }
        rs = rsn;
        mu = mun;
      }
    }
    // v summed over the Y row groups in order, in row group 0; every thread takes the barriers. Y > 1 rows are never
    // split (kk::check_split): threadIdx.x is tx and blockDim.x is R.
    auto groups_sum = [&](A v) {
      if (Y > 1) {
        comb[yi * R + tx] = v;
        __syncthreads();
        if (yi == 0)
          for (int q = 1; q < Y; ++q) v += comb[q * R + tx];
        __syncthreads();
      }
      return v;
    };
    // Register-part partials: one row of pw/pb per chunk.
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      if constexpr (SMEM > 0) {
        slots.load(kSaw, k, aw[k]);
        if constexpr (LN) slots.load(kSab, k, ab[k]);
      }
#pragma unroll
      for (int j = 0; j < W; ++j) {
#pragma unroll
        for (int t = 0; t < (LN ? 2 : 1); ++t) {
          const A v = groups_sum(t == 0 ? aw[k][j] : ab[LN ? k : 0][j]);
          if (yi == 0 && p < nvr) (t == 0 ? pwr : pbr)[p * W + j] = v;
        }
      }
    }
    if constexpr (SHIFT) {  // the extra element's sums
#pragma unroll
      for (int t = 0; t < (LN ? 2 : 1); ++t) {
        const A v = groups_sum(t == 0 ? awe : abe);
        if (yi == 0 && ex.has) (t == 0 ? pwr : pbr)[ex.off] = v;
      }
    }
  }
  cs.finish();
}

// ------------------------------------------------------------------------------------------------
// The N row sums of a block's threads (blockDim.x a multiple of 32), in every thread: the warps' butterflies, then
// every thread adds the warp sums in warp order (the same bits in every thread) from buffer `parity` of red's two, so
// that one barrier per reduction suffices; after it no thread reads the rows' stages.
template <int N> __device__ __forceinline__ void bulk_block_sum(float (&v)[N], float* red, int parity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int q = 0; q < N; ++q) v[q] += __shfl_xor_sync(0xffffffffu, v[q], o);
  float* const rb = red + parity * N * 32;
  if (lane == 0)
#pragma unroll
    for (int q = 0; q < N; ++q) rb[q * 32 + warp] = v[q];
  __syncthreads();
#pragma unroll
  for (int q = 0; q < N; ++q) v[q] = 0.f;
  for (int u = 0; u < nw; ++u)
#pragma unroll
    for (int q = 0; q < N; ++q) v[q] += rb[q * 32 + u];
}

// The backward of 16-bit LayerNorm (LN) or RMSNorm rows one block holds, or (SPLIT) a cluster of gridDim.y blocks
// holds (sm_90+, 16-byte path; kk_layer_norm_bwd_bulk, kk_rms_norm_bwd_bulk): each row's x and gy (SPLIT: the block's
// slice of them) arrive in one of S shared-memory stages by two bulk copies, issued S rows ahead by thread 0 once every
// thread has read the stage the row replaces. The register prefetch of norm_bwd_run keeps one row ahead, which at two
// blocks per SM left 32 KB in flight per SM at 4096 columns (81-88% of copy); the bulk copies hold none of the
// registers. The math and the rounding are norm_bwd_run's for 16-bit rows (kScaleOnce), 2 packs per thread and tensor:
// thread tx of the block of rank q in its cluster (0 unless SPLIT) owns packs P + tx and P + R + tx, P = 2 * R * q, so
// that each block's slice of a row is one contiguous copy. Block (or cluster) b takes rows b, b + gridDim.x, ... and
// writes their weight (and bias) gradient sums to partial row b: the blocks' rows in flight lie together, 3-4% faster
// than chunks of consecutive rows (bench/exp_ln_bwd_launch.py, h200-2026-11-23-s24/ln-bwd-launch2.log).
// K rows share one reduction (their sums travel together): at one 512-thread CTA per SM, a split row's cluster
// reduction is a round trip no other block overlaps, and K = 2 halves them (bf16 LayerNorm 8192 x 65536 965 -> 838 us
// at six stages, h200-2026-11-23-s25/split-bulk2.log); rows one block holds measured slower at K = 2.
template <bool LN, int S, bool SPLIT, int K, typename T, int CTAS = 0>
__device__ __forceinline__ void norm_bwd_bulk_run(const T* __restrict__ gy, const T* __restrict__ x,
                                                const T* __restrict__ w, const float* __restrict__ mean,
                                                const float* __restrict__ rstd, T* __restrict__ gx,
                                                float* __restrict__ pw, float* __restrict__ pb, long long rows,
                                                int cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int W = kk::kVec<T>, NP = 2, NS = LN ? 2 : 1, N = NS * K;
  static_assert(N <= 4, "one reduction carries at most 4 sums (one st.async of 4 words when SPLIT)");
  using P = Vec<T, W>;
  static_assert(CTAS == 0 || SPLIT, "a fixed geometry is a cluster's");
  // SPLIT: initialized across the cluster before any row; CTAS > 0: a fixed geometry (kk::kFixedThreads)
  kk::ClusterRowReduce<N, float, SPLIT, kk::kFixedParts<CTAS>> cs;
  extern __shared__ uint4 kk_norms_dyn[];
  __shared__ unsigned long long bars[S];
  __shared__ float red[2 * N * 32];  // two alternating buffers of the warps' row sums
  kk::check_fixed_geometry<CTAS>();
  const int tx = threadIdx.x, R = CTAS ? kk::kFixedThreads : int(blockDim.x);
  const int cv = cols / W;
  const int p0 = SPLIT ? NP * R * int(blockIdx.y) : 0;  // the block's first pack
  // The block's bytes of a row per tensor: a whole row, or (SPLIT) up to NP * R packs from p0.
  const unsigned bytes =
      SPLIT ? unsigned(kk::min_ll(kk::max_ll(cv - p0, 0), NP * R)) * 16u : unsigned(cols) * sizeof(T);
  if (blockDim.y != 1 || R % 32 != 0 || R * NP * (SPLIT ? int(gridDim.y) : 1) < cv ||
      kk::dyn_smem_bytes() < 2u * S * (SPLIT ? NP * R * 16u : bytes))
    __trap();
  const long long G = gridDim.x;
  unsigned char* const stages = reinterpret_cast<unsigned char*>(kk_norms_dyn);
  auto bar = [&](int s) { return kk::smem_address(&bars[s]); };
  auto stage = [&](int s) { return stages + 2u * s * bytes; };  // x, then gy
  auto fill = [&](int s, long long r) {  // thread 0
    if (r >= rows) return;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after the generic reads of the stage
    kk::mbarrier_expect_tx(bar(s), 2 * bytes);
    if (SPLIT && bytes == 0) return;
    const long long at = r * cols + (long long)p0 * W;
    kk::bulk_load(kk::smem_address(stage(s)), x + at, bytes, bar(s));
    kk::bulk_load(kk::smem_address(stage(s) + bytes), gy + at, bytes, bar(s));
  };
  if (tx == 0) {
    for (int s = 0; s < S; ++s) kk::mbarrier_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tx == 0)
    for (int s = 0; s < S; ++s) fill(s, blockIdx.x + s * G);
  float wf[NP][W], aw[NP][W], ab[NP][W];
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    const int p = p0 + k * R + tx;
    kk::vec_to_acc(kk::load_vec_if<W, kBwdLd<T>>(w + p * W, p < cv), wf[k]);
#pragma unroll
    for (int j = 0; j < W; ++j) aw[k][j] = ab[k][j] = 0.f;
  }
  const float acols = float(cols);
  // The stats of the block's rows row + q * G, q < K (0 past the end).
  auto stats = [&](long long row, float(&rs)[K], float(&mu)[K]) {
#pragma unroll
    for (int q = 0; q < K; ++q) {
      const long long r = row + q * G;
      rs[q] = r < rows ? rstd[r] : 0.f;
      mu[q] = LN && r < rows ? mean[r] : 0.f;
    }
  };
  float rs[K], mu[K];
  stats(blockIdx.x, rs, mu);
  // K rows per reduction: the block's rows i, ..., i + K - 1 (rows row, row + G, ...) in stages (i + q) % S, phase
  // ((i + q) / S) & 1. (Rows differ only in which of them exist; the whole cluster agrees on that.)
  long long row = blockIdx.x;
  for (int i = 0; row < rows; row += K * G, i += K) {
    float rsn[K], mun[K];
    stats(row + K * G, rsn, mun);
    P xv[K][NP], gv[K][NP];
    float v[N];
#pragma unroll
    for (int q = 0; q < N; ++q) v[q] = 0.f;
#pragma unroll
    for (int q = 0; q < K; ++q) {
      if (q > 0 && row + q * G >= rows) break;
      const int s = (i + q) % S;
      kk::mbarrier_wait(bar(s), unsigned((i + q) / S) & 1u);
      const P* const sx = reinterpret_cast<const P*>(stage(s));
      const P* const sg = reinterpret_cast<const P*>(stage(s) + bytes);
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const int p = p0 + k * R + tx;
        if (p < cv) {
          xv[q][k] = sx[k * R + tx];
          gv[q][k] = sg[k * R + tx];
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float g = kk::acc_at(gv[q][k], j) * wf[k][j];
            if constexpr (LN) v[q * NS] += g;
            v[q * NS + NS - 1] =
                fmaf(g, LN ? kk::acc_at(xv[q][k], j) - mu[q] : kk::acc_at(xv[q][k], j), v[q * NS + NS - 1]);
          }
        }
      }
    }
    // Across the cluster (kk::ClusterRowReduce): when it returns, every warp of this block has sent its sums, and so
    // has read the stages of these rows.
    if constexpr (SPLIT) cs(v);
    else bulk_block_sum(v, red, (i / K) & 1);
    if (tx == 0)
#pragma unroll
      for (int q = 0; q < K; ++q) fill((i + q) % S, row + (q + S) * G);
#pragma unroll
    for (int q = 0; q < K; ++q) {
      const long long r = row + q * G;
      if (q > 0 && r >= rows) break;
      const float c1 = LN ? v[q * NS] / acols : 0.f, c2 = rs[q] * v[q * NS + NS - 1] / acols;
      T* const gxr = gx + r * cols;
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const int p = p0 + k * R + tx;
        if (p < cv) {
          float o[W];
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float dy = kk::acc_at(gv[q][k], j);
            const float g = dy * wf[k][j];
            const float xh = (LN ? kk::acc_at(xv[q][k], j) - mu[q] : kk::acc_at(xv[q][k], j)) * rs[q];
            o[j] = rs[q] * (LN ? g - c1 - xh * c2 : g - xh * c2);
            aw[k][j] = fmaf(dy, xh, aw[k][j]);
            if constexpr (LN) ab[k][j] += dy;
          }
          store_vec<W, SPLIT>(gxr + p * W, kk::acc_to_vec<T, W>(o));
        }
      }
    }
#pragma unroll
    for (int q = 0; q < K; ++q) {
      rs[q] = rsn[q];
      mu[q] = mun[q];
    }
  }
  // Rows one block holds, launched as clusters of C blocks in x: the cluster's blocks add their sums (rank order) and its
  // rank 0 writes them to partial row blockIdx.x / C. At two blocks per SM and 4096 columns the partials were 2% of the
  // bytes; C = 2 took 215.3 -> 208.3 us (bf16 LayerNorm 32768 x 4096, h200-2026-11-23-s25/held-pairs.log).
  const unsigned C = SPLIT ? 1u : kk::cluster_ctas();
  long long part = blockIdx.x;
  if (!SPLIT && C > 1) {
    const unsigned rank = blockIdx.x % C;
    float4* const mine = reinterpret_cast<float4*>(stages);  // the stages are free: every copy has been waited on
    constexpr int kPer = NP * W / 4, kUnits = (LN ? 2 : 1) * kPer;  // 16-byte units of this thread's sums
    if (kk::dyn_smem_bytes() < kUnits * R * 16u) __trap();
    auto unit = [&](int u) -> float* {  // aw's, then ab's
      return u < kPer ? &aw[u / (W / 4)][u % (W / 4) * 4] : &ab[(u - kPer) / (W / 4)][u % (W / 4) * 4];
    };
    if (rank != 0)
#pragma unroll
      for (int u = 0; u < kUnits; ++u) mine[u * R + tx] = *reinterpret_cast<const float4*>(unit(u));
    kk::cluster_barrier();
    if (rank == 0)
      for (unsigned r = 1; r < C; ++r)
#pragma unroll
        for (int u = 0; u < kUnits; ++u) {
          const float4 o = kk::load_cluster_f4(kk::cluster_address(&mine[u * R + tx], r));
          float* const a = unit(u);
          a[0] += o.x;
          a[1] += o.y;
          a[2] += o.z;
          a[3] += o.w;
        }
    kk::cluster_barrier();  // the other blocks' shared memory stays until rank 0 has read it
    if (rank != 0) return;
    part = blockIdx.x / C;
  }
  float* const pwr = pw + part * cols;
  float* const pbr = LN ? pb + part * cols : nullptr;
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    const int p = p0 + k * R + tx;
    if (p < cv) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        pwr[p * W + j] = aw[k][j];
        if constexpr (LN) pbr[p * W + j] = ab[k][j];
      }
    }
  }
  cs.finish();
#else
  __trap();  // bulk copies need sm_90+
#endif
}

// norm_bwd_bulk_run on shifted rows one block holds (kk_*_norm_bwd_bulk with SHIFT; rows of any width, gy, x and gx
// congruent16): a row is the U 16-byte units that hold it, from the one holding its first element (`lead` elements of
// the unit before it) to the one holding its last, and each arrives whole by bulk copies (the units' bytes outside the
// row lie in the same units of the tensors, which the loads of kk::load_shifted read too). Thread tx owns units tx and
// R + tx; lanes outside the row are zeroed as they are read, so that they add nothing to the sums, and are not stored.
// Chunks of rows of one shift (ShiftChunks: every row of a chunk has the same lead, so a thread's weight-gradient
// sums keep their columns): block b takes chunks b, b + gridDim.x, ..., each into its partial row; its stages take its
// rows in that order, S ahead, across chunks. Blocks are any multiple of 32 threads, where the register kernel's are
// powers of two. Rows split over a cluster this way measured slower than the register kernel's (bf16 rms_norm_backward
// 8192 x 50257 1043.5 against 975.5 us, h200-2026-11-28-s47/ab-h200-shifted-bulk.log): not kept.
template <bool LN, int S, typename T>
__device__ __forceinline__ void norm_bwd_bulk_shifted_run(const T* __restrict__ gy, const T* __restrict__ x,
                                                        const T* __restrict__ w, const float* __restrict__ mean,
                                                        const float* __restrict__ rstd, T* __restrict__ gx,
                                                        float* __restrict__ pw, float* __restrict__ pb, long long rows,
                                                        long long cols, long long rpc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int W = kk::kVec<T>, NP = 2, NS = LN ? 2 : 1;
  using P = Vec<T, W>;
  extern __shared__ uint4 kk_norms_dyn[];
  __shared__ unsigned long long bars[S];
  __shared__ float red[2 * NS * 32];  // two alternating buffers of the warps' row sums
  const int tx = threadIdx.x, R = int(blockDim.x);
  const long long most = (cols + 2 * W - 2) / W;  // the units of a row, at most
  const unsigned stage_bytes = unsigned(most) * 16u;  // per tensor
  if (blockDim.y != 1 || R % 32 != 0 || (long long)NP * R < most ||
      kk::dyn_smem_bytes() < 2u * S * stage_bytes)
    __trap();
  const auto chunks = shift_chunks<W, true>(rows, cols, rpc);
  const int lp = chunks.lp;
  const long long nchunks = chunks.count();
  const long long G = gridDim.x;
  auto units_of = [&](int lead) { return (lead + cols + W - 1) / W; };  // a row's 16-byte units
  unsigned char* const stages = reinterpret_cast<unsigned char*>(kk_norms_dyn);
  auto bar = [&](int s) { return kk::smem_address(&bars[s]); };
  auto stage = [&](int s) { return stages + 2u * s * stage_bytes; };  // x, then gy
  // Thread 0's cursor over the block's rows (chunk, i, r1), S rows ahead of the reading; chunk >= nchunks at the end.
  // In shared memory: the other threads would hold its registers too.
  __shared__ long long cursor[3];
  long long &fc = cursor[0], &fi = cursor[1], &fr1 = cursor[2];
  auto seek = [&]() {  // from chunk fc on, to its first row
    for (; fc < nchunks; fc += G) {
      chunks.rows_of(fc, fi, fr1);
      if (fi < fr1) return;
    }
  };
  auto fill = [&](int s) {  // thread 0: the cursor's row into stage s, then the cursor on
    if (fc >= nchunks) return;
    long long r0, r1;
    const long long row = chunks.rows_of(fc, r0, r1) + (fi << lp);
    const int lead = kk::unit_lead(x + row * cols);
    const unsigned bytes = unsigned(units_of(lead)) * 16u;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after the generic reads of the stage
    kk::mbarrier_expect_tx(bar(s), 2 * bytes);
    const long long at = row * cols - lead;  // 16-byte aligned in x and gy (congruent16)
    kk::bulk_load(kk::smem_address(stage(s)), x + at, bytes, bar(s));
    kk::bulk_load(kk::smem_address(stage(s) + stage_bytes), gy + at, bytes, bar(s));
    if (++fi >= fr1) {
      fc += G;
      seek();
    }
  };
  if (tx == 0) {
    for (int s = 0; s < S; ++s) kk::mbarrier_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fc = blockIdx.x;
    seek();
    for (int s = 0; s < S; ++s) fill(s);
  }
  __syncthreads();
  const float acols = float(cols);
  long long n = 0;  // the block's rows read so far: row n sits in stage n % S, phase (n / S) & 1
  for (long long chunk = blockIdx.x; chunk < nchunks; chunk += G) {
    long long r0, r1;
    const long long cls = chunks.rows_of(chunk, r0, r1);
    const int lead = kk::unit_lead(x + cls * cols);
    const long long units = units_of(lead);
    // This thread's units k: their first column (u * W - lead; rows of fewer than kk::kShiftMaxCols columns), the
    // lanes [lo, hi) in the row (lo = hi: none).
    int c0[NP], lo[NP], hi[NP];
    float wf[NP][W], aw[NP][W], ab[NP][W];
    const unsigned wsb = unsigned((kk::addr(w) - unsigned(lead) * sizeof(T)) & 15ull);
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int u = k * R + tx;
      c0[k] = int(u * W - lead);
      lo[k] = u < units ? max(-c0[k], 0) : 0;
      hi[k] = u < units ? int(kk::min_ll(cols - c0[k], W)) : 0;
      if (lo[k] == 0 && hi[k] == W) {
        kk::vec_to_acc(kk::load_shifted<kBwdLd<T>>(w + c0[k], wsb), wf[k]);
      } else {
#pragma unroll
        for (int j = 0; j < W; ++j) wf[k][j] = j >= lo[k] && j < hi[k] ? to_acc(w[c0[k] + j]) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < W; ++j) aw[k][j] = ab[k][j] = 0.f;
    }
    float rs = 0.f, mu = 0.f;
    if (r0 < r1) {
      rs = rstd[cls + (r0 << lp)];
      mu = LN ? mean[cls + (r0 << lp)] : 0.f;
    }
    for (long long i = r0; i < r1; ++i, ++n) {
      const long long row = cls + (i << lp);
      const bool more = i + 1 < r1;  // the next row's stats, loaded ahead
      const float rsn = more ? rstd[row + (1ll << lp)] : 0.f;
      const float mun = LN && more ? mean[row + (1ll << lp)] : 0.f;
      const int s = int(n % S);
      kk::mbarrier_wait(bar(s), unsigned(n / S) & 1u);
      const P* const sx = reinterpret_cast<const P*>(stage(s));
      const P* const sg = reinterpret_cast<const P*>(stage(s) + stage_bytes);
      P xv[NP], gv[NP];
      float v[NS];
#pragma unroll
      for (int q = 0; q < NS; ++q) v[q] = 0.f;
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        if (lo[k] < hi[k]) {
          xv[k] = sx[k * R + tx];
          gv[k] = sg[k * R + tx];
          if (lo[k] > 0 || hi[k] < W)
#pragma unroll
            for (int j = 0; j < W; ++j)
              if (j < lo[k] || j >= hi[k]) xv[k].v[j] = gv[k].v[j] = T(0.f);
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float g = kk::acc_at(gv[k], j) * wf[k][j];
            if constexpr (LN) v[0] += g;
            v[NS - 1] = fmaf(g, LN ? kk::acc_at(xv[k], j) - mu : kk::acc_at(xv[k], j), v[NS - 1]);
          }
        }
      }
      bulk_block_sum(v, red, int(n & 1));  // after it no thread reads this row's stage
      if (tx == 0) fill(s);
      const float c1 = LN ? v[0] / acols : 0.f, c2 = rs * v[NS - 1] / acols;
      T* const gxr = gx + row * cols;
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        if (lo[k] < hi[k]) {
          float o[W];
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float dy = kk::acc_at(gv[k], j);
            const float g = dy * wf[k][j];
            const float xh = (LN ? kk::acc_at(xv[k], j) - mu : kk::acc_at(xv[k], j)) * rs;
            o[j] = rs * (LN ? g - c1 - xh * c2 : g - xh * c2);
            aw[k][j] = fmaf(dy, xh, aw[k][j]);
            if constexpr (LN) ab[k][j] += dy;
          }
          if (lo[k] == 0 && hi[k] == W) {
            store_vec<W>(gxr + c0[k], kk::acc_to_vec<T, W>(o));
          } else {
#pragma unroll
            for (int j = 0; j < W; ++j)
              if (j >= lo[k] && j < hi[k]) gxr[c0[k] + j] = kk::from_acc<T>(o[j]);
          }
        }
      }
      rs = rsn;
      mu = mun;
    }
    // The chunk's partial row (zeros where it took no rows).
    float* const pwr = pw + chunk * cols;
    float* const pbr = LN ? pb + chunk * cols : nullptr;
#pragma unroll
    for (int k = 0; k < NP; ++k)
#pragma unroll
      for (int j = 0; j < W; ++j)
        if (j >= lo[k] && j < hi[k]) {
          pwr[c0[k] + j] = aw[k][j];
          if constexpr (LN) pbr[c0[k] + j] = ab[k][j];
        }
  }
#else
  __trap();  // bulk copies need sm_90+
#endif
}

}  // namespace kk_norms

// ================================================================================================
// Entry points. VEC = 8 (half, bf16), 4 (float), 2 (double).
// Forwards, TAIL = false: the whole row is held in registers (cols <= NP * VEC * R on the vector path,
// NP * R on the scalar path; a launch that breaks this traps). Without the streamed-tail code these
// instantiations fit 64 registers (MINB = 2 blocks per SM) without spilling; the TAIL = true ones do not.
// NP (register packs per thread) defaults to the values above; the host may pick another (checked for
// spills by check_compile.py).

// Traps when a TAIL = false kernel is launched for rows longer than its register part, and on a launch
// that does not match SPLIT (kk::check_split).
template <bool TAIL, int NP, bool SPLIT> __device__ __forceinline__ void check_fits(long long cols, int W) {
  static_assert(!(TAIL && SPLIT), "split rows are held whole in registers");
  kk::check_split<SPLIT>();
  if (!TAIL && cols > (long long)NP * W * kk::row_threads<SPLIT>()) __trap();
}
// Shifted rows (held in one block, or split over a cluster's): at most cols / V whole packs, NP per thread, and a
// thread of the row for each extra element (fewer than 2 * V; kk::RowShift), so that rows one element past a multiple
// of NP * V * R keep R threads.
template <int NP, int V, bool SPLIT> __device__ __forceinline__ void check_fits_shifted(long long cols) {
  kk::check_split<SPLIT>();
  const long long r = kk::row_threads<SPLIT>();
  if (cols >= (NP * r + 1) * V || r < 2 * V - 1) __trap();
}
// The VEC_ONLY forwards' launch (kk_rms_norm_fwd says when): block 0, called once its rows are done, traps unless
// 0 < cols, cols % V == 0, every pointer in `ptrs` is 16-byte aligned, and the row fits (check_fits).
template <int NP, int V>
__device__ __forceinline__ void check_vec_only_launch(long long cols, unsigned long long ptrs) {
  if (blockIdx.x != 0) return;
  if (cols <= 0 || cols % V != 0 || !kk::aligned16(ptrs)) __trap();
  check_fits<false, NP, false>(cols, V);  // the row fit and gridDim.y == 1
}

// RMSNorm forward entry (ADD: fused residual add; res, hout nullptr otherwise): the 16-byte path when
// cols % VEC == 0 and every T pointer is aligned, else scalar; SHIFT: shifted rows (x, res, y and hout congruent16,
// else it traps); VEC_ONLY: the 16-byte path alone, its conditions checked as kk_rms_norm_fwd says.
template <int NP, bool ADD, bool TAIL, bool SPLIT, typename T, int CTAS = 0, bool SHIFT = false, bool VEC_ONLY = false>
__device__ __forceinline__ void rms_fwd(const T* x, const T* res, const T* w, T* y, T* hout, kk::acc_t<T>* rstd,
                                        long long rows, long long cols, double eps) {
  if (kk::split_unsupported<SPLIT>()) return;
  constexpr int V = kk::kVec<T>;
  if constexpr (VEC_ONLY) {
    static_assert(!TAIL && !SPLIT && !SHIFT, "rows held in one block, on the 16-byte path");
    kk_norms::rms_fwd_run<NP, V, ADD, false, false, T>(x, res, w, y, hout, rstd, rows, cols, eps);
    check_vec_only_launch<NP, V>(cols, kk::addr(x) | kk::addr(res) | kk::addr(w) | kk::addr(y) | kk::addr(hout));
  } else if constexpr (SHIFT) {
    const unsigned long long rows_apart = (kk::addr(x) ^ kk::addr(y)) |
                                          (ADD ? (kk::addr(x) ^ kk::addr(res)) | (kk::addr(x) ^ kk::addr(hout)) : 0ull);
    if (!kk::congruent16(rows_apart)) __trap();
    check_fits_shifted<NP, V, SPLIT>(cols);
    kk::check_fixed_geometry<CTAS>();
    kk_norms::rms_fwd_run<NP, V, ADD, TAIL, SPLIT, T, CTAS, true>(x, res, w, y, hout, rstd, rows, cols, eps);
  } else if (cols % V == 0 && kk::aligned16(kk::addr(x) | kk::addr(res) | kk::addr(w) | kk::addr(y) | kk::addr(hout))) {
    check_fits<TAIL, NP, SPLIT>(cols, V);
    kk::check_fixed_geometry<CTAS>();
    kk_norms::rms_fwd_run<NP, V, ADD, TAIL, SPLIT, T, CTAS>(x, res, w, y, hout, rstd, rows, cols, eps);
  } else if constexpr (SPLIT) {
    __trap();  // rows are split on the 16-byte path only
  } else {
    check_fits<TAIL, NP, SPLIT>(cols, 1);
    kk_norms::rms_fwd_run<NP, 1, ADD, TAIL, SPLIT, T>(x, res, w, y, hout, rstd, rows, cols, eps);
  }
}

// Backward entry: the 16-byte path when cols % VEC == 0 and every T pointer is aligned, else scalar; SHIFT: shifted
// rows (gy, x, gx and g_extra congruent16, else it traps; chunks as norm_bwd_run says).
template <int NP, bool LN, bool TAIL, bool EXTRA, bool SPLIT, int SMEM, int MINB, typename T, bool SHIFT = false>
__device__ __forceinline__ void norm_bwd(const T* gy, const T* x, const T* w, const kk::acc_t<T>* mean,
                                         const kk::acc_t<T>* rstd, const T* g_extra, T* gx, kk::acc_t<T>* pw,
                                         kk::acc_t<T>* pb, long long rows, long long cols, long long rpc) {
  if (kk::split_unsupported<SPLIT>()) return;
  constexpr int V = kk::kVec<T>;
  if constexpr (SHIFT) {
    const unsigned long long apart =
        (kk::addr(gy) ^ kk::addr(x)) | (kk::addr(gx) ^ kk::addr(x)) | (EXTRA ? kk::addr(g_extra) ^ kk::addr(x) : 0ull);
    if (!kk::congruent16(apart)) __trap();
    check_fits_shifted<NP, V, SPLIT>(cols);
    kk_norms::norm_bwd_run<NP, V, LN, TAIL, EXTRA, SPLIT, SMEM, MINB, T, true>(gy, x, w, mean, rstd, g_extra, gx, pw,
                                                                               pb, rows, cols, rpc);
  } else if (cols % V == 0 &&
      kk::aligned16(kk::addr(gy) | kk::addr(x) | kk::addr(w) | kk::addr(g_extra) | kk::addr(gx))) {
    check_fits<TAIL, NP, SPLIT>(cols, V);
    kk_norms::norm_bwd_run<NP, V, LN, TAIL, EXTRA, SPLIT, SMEM, MINB, T>(gy, x, w, mean, rstd, g_extra, gx, pw, pb,
                                                                         rows, cols, rpc);
  } else if constexpr (SPLIT || SMEM > 0) {
    __trap();  // rows are split, and sums kept in shared memory, on the 16-byte path only
  } else {
    check_fits<TAIL, NP, SPLIT>(cols, 1);
    kk_norms::norm_bwd_run<NP, 1, LN, TAIL, EXTRA, SPLIT, SMEM, MINB, T>(gy, x, w, mean, rstd, g_extra, gx, pw, pb,
                                                                         rows, cols, rpc);
  }
}

// RMSNorm forward: y = round(x * rstd * w), rstd[r] = rsqrt(sum(x^2)/cols + eps) (A; rstd may be nullptr).
// Launch: blockDim = (R, Y), R * Y <= 512 (launch bound), R a power of two <= 32 or a multiple of 32,
//   R * Y % 32 == 0. NP = kNpFwd (float 8, others 4); E = NP * VEC elements per thread in registers
//   (float/half/bf16: 32, double: 8). R = clamp(pow2ceil(ceil(cols / E)), 32, 512), e.g. bf16/f32 4096:
//   128, 8192: 256, >= 16384: 512 (beyond 16384 columns the rest of the row is a tail, re-read from L2:
//   TAIL = true). Small rows (cols < 32*E): R = pow2ceil(ceil(cols/E)) (>= 1) and Y = max(1, 128 / R).
//   Any grid is correct (grid-stride over row groups); without a tail one row group per block
//   (grid = ceil(rows / Y)) is fastest; with a tail grid = occ * num_SMs keeps the re-read part in L2
//   (occ = cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, R*Y, S)). No dynamic shared memory
//   (S = 0), except for kk_layer_norm_fwd (below).
//   SPLIT = true (sm_90+, 16-byte path, TAIL = false): each row is split over the S CTAs of a cluster,
//   grid (G, S), cluster dims (1, S, 1), block (R, 1), cols <= NP * VEC * R * S, S <= 8 (16 with CTAS); G = the
//   resident clusters (cuOccupancyMaxActiveClusters) looping over rows is fastest. A mismatched launch traps.
//   Split rows store y (and the backwards gx) evict-first (st.global.cs); at 8192 x 65536 on an H200
//   (bench/ab_source.py, h200-2026-11-22-s15): bf16 rms_norm 617.5 -> 571.7 us, layer_norm 652.6 -> 617.5,
//   float32 layer_norm 1247.8 -> 1188.8, layer_norm_backward 1613.8 -> 1566.3, the rest within 1%. add_rms_norm's
//   h only in float32 (2258.5 -> 2191.1 us; bf16 1105.8 against 1120.8 without). Held rows measured up to
//   2.7% slower with it (float32 rms_norm 32768 x 8192), except the backwards with shared-memory slots (SMEM):
//   float32 layer_norm_backward 32768 x 8192 842.7 -> 818.8 us, the others within 0.8%.
//   CTAS > 0 (SPLIT): blocks of 512 threads in clusters of CTAS <= 16 (non-portable beyond 8: the launch opts the
//   kernel in), fixed at compile time, as kk_layer_norm_fwd's (anything else traps). bf16 8192 x 65536 535.7 ->
//   526.0 us, bitwise equal (h200-2026-11-24-s27/ab-fixed-rms.json).
//   SHIFT = true (TAIL = false): rows of any width on the 16-byte path (kk::RowShift), launched as the 16-byte
//   path's, held or split (sized by their cols / VEC whole packs; a split row's cluster has 2 or more CTAs).
//   VEC_ONLY = true (TAIL, SPLIT and SHIFT false): rows held in one block on the 16-byte path alone, launched where the
//   host found that path (ops/norms.py row_path). No block tests the path or the row fit before its loads: block 0
//   checks both, with cols > 0 and gridDim.y == 1, once its rows are done (check_vec_only_launch), and traps; a
//   misaligned pointer faults first. Against the kernel that chooses its path in every block, on an H200
//   (bench/exp_held_vec_ceiling.sh, h200-2026-11-29-s52/ab-h200-held-vec-ceiling.log): add_rms_norm bf16 32768 x 8192
//   509.0 -> 502.7 us, float32 rms_norm and add_rms_norm x 8192 0.999, bitwise equal.
template <typename T, bool TAIL, int NP = kk_norms::kNpFwd<T>, int MINB = TAIL ? 1 : 2, bool SPLIT = false,
          int CTAS = 0, bool SHIFT = false, bool VEC_ONLY = false>
__global__ void __launch_bounds__(512, MINB)
kk_rms_norm_fwd(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                typename kk::Acc<T>::type* __restrict__ rstd, long long rows, long long cols, double eps) {
  if (!VEC_ONLY && (rows <= 0 || cols <= 0)) return;
  rms_fwd<NP, false, TAIL, SPLIT, T, CTAS, SHIFT, VEC_ONLY>(x, nullptr, w, y, nullptr, rstd, rows, cols, eps);
}

// Fused residual add + RMSNorm: h = round(x + residual) -> new_residual; y = rms_norm(h) (rounded h).
// Launch: as kk_rms_norm_fwd (CTAS and VEC_ONLY included).
template <typename T, bool TAIL, int NP = kk_norms::kNpFwd<T>, int MINB = TAIL ? 1 : 2, bool SPLIT = false,
          int CTAS = 0, bool SHIFT = false, bool VEC_ONLY = false>
__global__ void __launch_bounds__(512, MINB)
kk_add_rms_norm_fwd(const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ w,
                    T* __restrict__ y, T* __restrict__ new_residual, typename kk::Acc<T>::type* __restrict__ rstd,
                    long long rows, long long cols, double eps) {
  if (!VEC_ONLY && (rows <= 0 || cols <= 0)) return;
  rms_fwd<NP, true, TAIL, SPLIT, T, CTAS, SHIFT, VEC_ONLY>(x, residual, w, y, new_residual, rstd, rows, cols, eps);
}

// LayerNorm forward: y = round((x - mean) * rstd * w + b); mean/rstd per row in A (each may be nullptr).
// Launch: as kk_rms_norm_fwd, but TAIL rows with Y = 1 may have S bytes of dynamic shared memory (a multiple of
//   the pack size: 16 bytes on the vector path, sizeof(T) otherwise), which caches the first packs of the tail
//   for the later passes (RowCache); SPLIT rows take 2 * NP * 16 bytes per thread of dynamic shared memory (their w and
//   b packs; less traps). CTAS > 0 (SPLIT): blocks of 512 threads in clusters of CTAS, fixed at compile time (anything
//   else traps): the pack addresses become immediate offsets from the row's, the row loop needs no bounds check per
//   row, and the cluster reduction's gather unrolls. bf16 8192 x 65536 on an H200: 587.7 -> 549.5 us, float16 588.6
//   -> 553.3, bitwise equal (bench/ab_source.py, h200-2026-11-23-s26/ab-ln-fixed.json); float32 with kLnFmaOut
//   1107.1 -> 1071.5 (h200-2026-11-24-s27/ab-fixed-rms.json). LD: how rows that are not split, and their w and b,
//   load (kk::Load). SHIFT and VEC_ONLY: as kk_rms_norm_fwd's. VEC_ONLY against the kernel that chooses its path in
//   every block, on an H200 (bench/exp_vec_only_ceilings.sh, h200-2026-11-28-s53/ab-h200-vec-only-ln-fwd.log): bf16
//   32768 x 4096 134.9 -> 132.5 us, x 8192 271.3 -> 269.1, float16 x 4096 134.3 -> 132.5, bitwise equal.
template <typename T, bool TAIL, int NP = kk_norms::kNpFwd<T>, int MINB = TAIL ? 1 : 2, bool SPLIT = false,
          int CTAS = 0, int LD = kk_norms::kLnFwdLd, bool SHIFT = false, bool VEC_ONLY = false>
__global__ void __launch_bounds__(512, MINB)
kk_layer_norm_fwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                  typename kk::Acc<T>::type* __restrict__ mean, typename kk::Acc<T>::type* __restrict__ rstd,
                  long long rows, long long cols, double eps) {
  if (kk::split_unsupported<SPLIT>() || (!VEC_ONLY && (rows <= 0 || cols <= 0))) return;
  constexpr int V = kk::kVec<T>;
  // One pass for the 16-bit types (bf16 8192 columns: 300 -> 285 us on an H200), split rows and float32 rows with a
  // streamed tail, which each pass reads again from DRAM (2048 x 262144: 2733.8 -> 2151.6 us,
  // h200-2026-11-24-s28/ab-ln-f32-onepass.json); float32 rows held in one CTA measured the same at 4096 columns, and
  // spill at the other fits.
  constexpr bool kOnePass = sizeof(T) == 2 || SPLIT || (TAIL && sizeof(T) == 4);
  if constexpr (VEC_ONLY) {
    static_assert(!TAIL && !SPLIT && !SHIFT && CTAS == 0, "rows held in one block, on the 16-byte path");
    kk_norms::ln_fwd_run<NP, V, false, false, kOnePass, T, 0, LD>(x, w, b, y, mean, rstd, rows, cols, eps);
    check_vec_only_launch<NP, V>(cols, kk::addr(x) | kk::addr(w) | kk::addr(b) | kk::addr(y));
  } else if constexpr (SHIFT) {  // shifted rows (kk::RowShift): x and y congruent16, else it traps
    if (!kk::congruent16(kk::addr(x) ^ kk::addr(y))) __trap();
    check_fits_shifted<NP, V, SPLIT>(cols);
    kk::check_fixed_geometry<CTAS>();
    kk_norms::ln_fwd_run<NP, V, TAIL, SPLIT, kOnePass, T, CTAS, LD, true>(x, w, b, y, mean, rstd, rows, cols, eps);
  } else if (cols % V == 0 && kk::aligned16(kk::addr(x) | kk::addr(w) | kk::addr(b) | kk::addr(y))) {
    check_fits<TAIL, NP, SPLIT>(cols, V);
    kk::check_fixed_geometry<CTAS>();
    kk_norms::ln_fwd_run<NP, V, TAIL, SPLIT, kOnePass, T, CTAS, LD>(x, w, b, y, mean, rstd, rows, cols, eps);
  } else if constexpr (SPLIT) {
    __trap();  // rows are split on the 16-byte path only
  } else {
    check_fits<TAIL, NP, SPLIT>(cols, 1);
    kk_norms::ln_fwd_run<NP, 1, TAIL, SPLIT, kOnePass, T, 0, LD>(x, w, b, y, mean, rstd, rows, cols, eps);
  }
}

// The wide kernels' launch: 0 < cols <= NP * W * blockDim.x, cols % W == 0, blockDim = (R, 1) with R a multiple of 32,
// every pointer in `ptrs` 16-byte aligned; anything else traps. Block 0 alone checks, once its rows are done: its trap
// fails the launch, and a launch they do not fit stays within its rows (a partial warp's shuffles read undefined
// lanes). Each check ahead of a one-row block's first loads delays them. In every block: layer_norm float32 32768 x
// 4096 257.2 us against 253.0 without (H200, h200-2026-11-23-s18/op-path2.log). In block 0, with every block's test of
// blockIdx.x and early return, 0.4% (bench/exp_wide_check_late.sh, h200-2026-11-29-s52: 254.2 -> 253.2 us; against
// torch.compile over 40 rounds 0.9959 -> 1.0052).
template <int W, int NP> __device__ __forceinline__ void check_wide_launch(long long cols, unsigned long long ptrs) {
  if (blockIdx.x == 0 && (cols <= 0 || cols % W != 0 || cols > NP * (long long)W * blockDim.x ||
                          blockDim.x % 32 != 0 || blockDim.y != 1 || !kk::aligned16(ptrs)))
    __trap();
}

// The same for float rows (T = float) on the 16-byte path only, launched as check_wide_launch<4, NP> checks:
// kk_norms::ln_fwd_wide_run.
template <typename T, int NP, int MINB>
__global__ void __launch_bounds__(512, MINB)
kk_layer_norm_fwd_wide(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                       float* __restrict__ mean, float* __restrict__ rstd, long long rows, long long cols, double eps) {
  static_assert(sizeof(T) == 4, "float rows");
  kk_norms::ln_fwd_wide_run<NP>(x, w, b, y, mean, rstd, rows, int(cols), float(eps));
  check_wide_launch<4, NP>(cols, kk::addr(x) | kk::addr(w) | kk::addr(b) | kk::addr(y));
}

// The same for RMSNorm rows of float, half or bf16 (kk_norms::rms_fwd_wide_run), launched as
// check_wide_launch<16 / sizeof(T), NP> checks.
template <typename T, int NP, int MINB, bool PREW = false>
__global__ void __launch_bounds__(512, MINB)
kk_rms_norm_fwd_wide(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, float* __restrict__ rstd,
                     long long rows, long long cols, double eps) {
  static_assert(sizeof(T) <= 4, "float, half or bf16 rows");
  kk_norms::rms_fwd_wide_run<T, NP, PREW>(x, w, y, rstd, rows, int(cols), float(eps));
  check_wide_launch<kk::kVec<T>, NP>(cols, kk::addr(x) | kk::addr(w) | kk::addr(y));
}

// RMSNorm backward: gx = round(rstd*(gy*w - xhat*sum(gy*w*xhat)/cols) + g_extra), xhat = x*rstd
// (g_extra: for add_rms_norm the gradient flowing into new_residual, with EXTRA = true; without it,
// EXTRA = false and g_extra == nullptr, else the kernel traps);
// partial[chunk*cols + c] = sum over the chunk's rows of gy*xhat (A), chunk k = rows
// [k*rows_per_chunk, min(rows, (k+1)*rows_per_chunk)). Reduce with kk_column_sum(partial, dw, nullptr, nchunks, cols)
// from common.cuh.
// Launch: blockDim = (R, Y), R * Y <= 512, R a power of two <= 32 or a multiple of 32, R*Y % 32 == 0.
//   NP = kNpBwd (float 4, others 2): E = NP * VEC = 16 elements per thread (double 4).
//   R = clamp(pow2ceil(ceil(cols / E)), 32, 512): bf16/f32 4096: 256, 8192: 512; small cols: Y = max(1, 128/R).
//   Beyond E * 512 columns (8192 for bf16/f32) the rest is a tail: gy/x re-read once more (L2) and the
//   weight partials accumulated straight into partial (read-modify-write, L2): slower.
//   nchunks = min(ceil(rows / Y), occ * num_SMs)  (occ = cuOccupancyMaxActiveBlocksPerMultiprocessor)
//   rows_per_chunk = ceil(rows / nchunks) (any value >= 1 is correct; a multiple of Y wastes no lanes);
//   nchunks = ceil(rows / rows_per_chunk); grid = nchunks (any grid is correct: grid-stride over chunks,
//   but grid == nchunks loads w into registers only once per block).
//   partial: nchunks * cols A values, fully written (no zero fill needed). No dynamic shared memory.
//   TAIL = false (rows held whole, cols <= E * R, else the kernel traps) loads the next row before this
//   row's reductions. (Tried: the partials in shared memory with 4 packs for 16-bit types: no faster in
//   `kernelkit bench llm`, bench/NOTES.md session 3.)
//   SPLIT = true: rows split over a cluster as in kk_rms_norm_fwd; chunks = grid.x = the resident clusters.
//   SMEM = 1 or 2 (16-byte path, Y = 1, else the kernel traps): the chunk's weight-gradient sums (1), and the float
//   weights too (2), in dynamic shared memory instead of registers: S >= A * NP * VEC * R * sizeof(acc) bytes
//   with A = (SMEM == 2) + 1 (+ 1 for LayerNorm's bias sums, + 1 for the extra gradient of float rows not split).
//   With MINB = 1 these load the next row ahead; at two blocks per SM only 16-bit RMSNorm rows with SMEM = 2 have
//   the registers for it (norm_bwd_run kPrefetch).
template <typename T, bool TAIL = true, int NP = kk_norms::kNpBwd<T>, int MINB = 1, bool EXTRA = false,
          bool SPLIT = false, int SMEM = 0, bool SHIFT = false>
__global__ void __launch_bounds__(512, MINB)
kk_rms_norm_bwd(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                const typename kk::Acc<T>::type* __restrict__ rstd, const T* __restrict__ g_extra,
                T* __restrict__ gx, typename kk::Acc<T>::type* __restrict__ partial, long long rows, long long cols,
                long long rows_per_chunk) {
  kk::pdl_trigger();  // kk_column_sum, launched dependent, may be scheduled now; it waits for this grid
  if (rows <= 0 || cols <= 0 || rows_per_chunk <= 0) return;
  if (EXTRA != (g_extra != nullptr)) __trap();
  norm_bwd<NP, false, TAIL, EXTRA, SPLIT, SMEM, MINB, T, SHIFT>(gy, x, w, nullptr, rstd, g_extra, gx, partial, nullptr,
                                                                rows, cols, rows_per_chunk);
}

// LayerNorm backward: xhat = (x - mean)*rstd, g = gy*w:
//   gx = round(rstd*(g - sum(g)/cols - xhat*sum(g*xhat)/cols));
//   partial_w[chunk*cols + c] = chunk sum of gy*xhat, partial_b[...] = chunk sum of gy (A). With partial_b =
//   partial_w + nchunks*cols, one kk_column_sum(partial_w, dw, db, nchunks, cols) on a grid of two rows sums both.
// Launch: exactly as kk_rms_norm_bwd.
template <typename T, bool TAIL = true, int NP = kk_norms::kNpBwd<T>, int MINB = 1, bool SPLIT = false, int SMEM = 0,
          bool SHIFT = false>
__global__ void __launch_bounds__(512, MINB)
kk_layer_norm_bwd(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                  const typename kk::Acc<T>::type* __restrict__ mean,
                  const typename kk::Acc<T>::type* __restrict__ rstd, T* __restrict__ gx,
                  typename kk::Acc<T>::type* __restrict__ partial_w, typename kk::Acc<T>::type* __restrict__ partial_b,
                  long long rows, long long cols, long long rows_per_chunk) {
  kk::pdl_trigger();  // as in kk_rms_norm_bwd
  if (rows <= 0 || cols <= 0 || rows_per_chunk <= 0) return;
  norm_bwd<NP, true, TAIL, false, SPLIT, SMEM, MINB, T, SHIFT>(gy, x, w, mean, rstd, (const T*)nullptr, gx, partial_w,
                                                               partial_b, rows, cols, rows_per_chunk);
}

// LayerNorm backward of 16-bit rows that one block of at most NT threads holds (2 packs per thread and tensor), or
// (SPLIT) a cluster of gridDim.y such blocks, their x and gy brought by bulk copies into S shared-memory stages, K rows
// per row-sum reduction (sm_90+; kk_norms::norm_bwd_bulk_run). Results and partials as kk_layer_norm_bwd's.
// Launch: block (R, 1), R a multiple of 32 with 2 * VEC * R * C >= cols, C = gridDim.y, 1 unless SPLIT, where the grid
//   is clusters of (1, C, 1); cols % VEC == 0 and every pointer 16-byte aligned (the 16-byte path); dynamic shared
//   memory >= 2 * S * cols * sizeof(T), or 64 * S * R bytes when SPLIT (anything else traps; S is the stages, ops/norms.py
//   _BWD_BULK_STAGES). Any grid G in x: block (cluster) b takes rows b, b + G, ... and writes partial row b (G rows in
//   all; the resident blocks are fastest). Without SPLIT the grid may be clusters of (P, 1, 1): their blocks add up their
//   sums into partial row b / P (G / P rows; the stages must then hold 64 * R bytes, 32 * R for RMSNorm).
//   rows_per_chunk is not read: the signature is kk_layer_norm_bwd's, so that the host launches both alike.
//   SHIFT (K = 1, CTAS = 0, no SPLIT): shifted rows one block holds, in chunks of rows_per_chunk rows of one shift as
//   kk_layer_norm_bwd's with SHIFT (kk_norms::norm_bwd_bulk_shifted_run); gy, x and gx congruent16; a block of any
//   multiple of 32 threads, two 16-byte units of a row each, its stages 2 * S * floor((cols + 2 * VEC - 2) / VEC) * 16
//   bytes.
template <typename T, int NT, int MINB, int S, bool SPLIT, int K, int CTAS = 0, bool SHIFT = false>
__global__ void __launch_bounds__(NT, MINB)
kk_layer_norm_bwd_bulk(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                       const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ gx,
                       float* __restrict__ partial_w, float* __restrict__ partial_b, long long rows, long long cols,
                       long long rows_per_chunk) {
  static_assert(sizeof(T) == 2, "16-bit rows");
  static_assert(!SHIFT || (K == 1 && CTAS == 0 && !SPLIT), "shifted rows: held in one block, one row per reduction");
  kk::pdl_trigger();  // as in kk_rms_norm_bwd
  if (rows <= 0 || cols <= 0) return;
  if constexpr (SPLIT) kk::check_split<true>();
  if constexpr (SHIFT) {
    if (!kk::congruent16((kk::addr(gy) ^ kk::addr(x)) | (kk::addr(gx) ^ kk::addr(x)))) __trap();
    kk_norms::norm_bwd_bulk_shifted_run<true, S>(gy, x, w, mean, rstd, gx, partial_w, partial_b, rows, cols,
                                                 rows_per_chunk);
    return;
  }
  if (cols % kk::kVec<T> != 0 || cols > 2LL * kk::kVec<T> * NT * (SPLIT ? gridDim.y : 1) ||
      !kk::aligned16(kk::addr(gy) | kk::addr(x) | kk::addr(w) | kk::addr(gx)))
    __trap();
  kk_norms::norm_bwd_bulk_run<true, S, SPLIT, K, T, CTAS>(gy, x, w, mean, rstd, gx, partial_w, partial_b, rows,
                                                          int(cols));
}

// RMSNorm backward of 16-bit rows that one block (SPLIT: one cluster) of at most NT threads holds, their x and gy
// brought by bulk copies as in kk_layer_norm_bwd_bulk. Results and partials as kk_rms_norm_bwd's without g_extra (which
// must be nullptr). Launch: as kk_layer_norm_bwd_bulk.
template <typename T, int NT, int MINB, int S, bool SPLIT, int K, bool SHIFT = false>
__global__ void __launch_bounds__(NT, MINB)
kk_rms_norm_bwd_bulk(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                     const float* __restrict__ rstd, const T* __restrict__ g_extra, T* __restrict__ gx,
                     float* __restrict__ partial, long long rows, long long cols, long long rows_per_chunk) {
  static_assert(sizeof(T) == 2, "16-bit rows");
  static_assert(!SHIFT || (K == 1 && !SPLIT), "shifted rows: held in one block, one row per reduction");
  kk::pdl_trigger();  // as in kk_rms_norm_bwd
  if (rows <= 0 || cols <= 0) return;
  if constexpr (SPLIT) kk::check_split<true>();
  if constexpr (SHIFT) {
    if (g_extra != nullptr || !kk::congruent16((kk::addr(gy) ^ kk::addr(x)) | (kk::addr(gx) ^ kk::addr(x)))) __trap();
    kk_norms::norm_bwd_bulk_shifted_run<false, S>(gy, x, w, nullptr, rstd, gx, partial, nullptr, rows, cols,
                                                  rows_per_chunk);
    return;
  }
  if (g_extra != nullptr || cols % kk::kVec<T> != 0 || cols > 2LL * kk::kVec<T> * NT * (SPLIT ? gridDim.y : 1) ||
      !kk::aligned16(kk::addr(gy) | kk::addr(x) | kk::addr(w) | kk::addr(gx)))
    __trap();
  kk_norms::norm_bwd_bulk_run<false, S, SPLIT, K>(gy, x, w, nullptr, rstd, gx, partial, nullptr, rows, int(cols));
}

// ------------------------------------------------------------------------------------------------
// Backward of rows too wide for a cluster to hold (beyond the split kernels' 8 or 16 CTAs; the 16-byte path), in column
// segments of kSegPacks packs for each of kSegThreads threads. Three launches over a grid (segments, chunks of rows),
// then kk_column_sum over the chunks as for the other backwards:
//   kk_norm_bwd_seg_sums: each segment's row sums (LayerNorm {sum g, sum g*(x - mu)}, RMSNorm {sum g*x}) -> part;
//   kk_norm_bwd_seg_rows: per row, those sums over its segments in segment order, as c1, c2 of norm_bwd_run -> tot;
//   kk_norm_bwd_seg:      gx of the segment's columns for the chunk's rows, and the columns' weight (LayerNorm: and
//                         bias) gradient sums over those rows in registers -> pw (pb) row `chunk`.
// x and gy are read twice and gx written once. The streamed-tail kernels, which these replace there, added each tail
// element's gradient terms into the chunk's partial rows in global memory for every row: at 4096 x 131072 bf16
// LayerNorm took 9973 us against torch.compile's 1949 (h200-2026-11-24-s27/wide.log).
// Launch (all three): block (kSegThreads, 1); grid (S, C) with S = ceil(cols / (VEC * kSegPacks * kSegThreads)) and
// C chunks of rows_per_chunk rows; cols % VEC == 0 and every pointer 16-byte aligned (anything else traps).
// part holds rows * S * NS values and tot rows * NS (NS = 2 for LayerNorm, else 1); mean is nullptr for RMSNorm,
// g_extra nullptr unless EXTRA (add_rms_norm: added to gx).
namespace kk_norms {
constexpr int kSegThreads = 256, kSegPacks = 2;

template <typename T>
__device__ __forceinline__ void seg_check(long long cols, long long segs, unsigned long long ptrs) {
  constexpr int W = kk::kVec<T>;
  if (cols % W != 0 || !kk::aligned16(ptrs) || blockDim.x != kSegThreads || blockDim.y != 1 || gridDim.z != 1 ||
      segs * kSegPacks * kSegThreads * W < cols)
    __trap();
}

// The float weights of this thread's packs in segment blockIdx.x (0 beyond the row).
template <typename T, int W = kk::kVec<T>>
__device__ __forceinline__ void seg_weights(const T* w, long long cv, acc_t<T> (&wf)[kSegPacks][W]) {
#pragma unroll
  for (int k = 0; k < kSegPacks; ++k) {
    const long long p = ((long long)blockIdx.x * kSegPacks + k) * kSegThreads + threadIdx.x;
    kk::vec_to_acc(kk::load_vec_if<W, kk::kNc>(w + p * W, p < cv), wf[k]);
  }
}
}  // namespace kk_norms

template <typename T, bool LN>
__global__ void __launch_bounds__(kk_norms::kSegThreads)
kk_norm_bwd_seg_sums(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                     const typename kk::Acc<T>::type* __restrict__ mean,
                     const typename kk::Acc<T>::type* __restrict__ rstd, typename kk::Acc<T>::type* __restrict__ part,
                     long long rows, long long cols, long long rows_per_chunk) {
  using namespace kk_norms;
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>, NS = LN ? 2 : 1;
  __shared__ A sm[NS * 32];
  const long long cv = cols / W, segs = gridDim.x;
  seg_check<T>(cols, segs, kk::addr(gy) | kk::addr(x) | kk::addr(w));
  A wf[kSegPacks][W];
  seg_weights<T>(w, cv, wf);
  const long long r0 = blockIdx.y * rows_per_chunk, r1 = kk::min_ll(rows, r0 + rows_per_chunk);
#pragma unroll 1
  for (long long row = r0; row < r1; ++row) {
    const A mu = LN ? mean[row] : A(0);
    A s[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) s[i] = A(0);
#pragma unroll
    for (int k = 0; k < kSegPacks; ++k) {
      const long long p = ((long long)blockIdx.x * kSegPacks + k) * kSegThreads + threadIdx.x;
      if (p < cv) {
        const Vec<T, W> gv = load_vec<W, kk::kNc>(gy + row * cols + p * W);
        const Vec<T, W> xv = load_vec<W, kk::kNc>(x + row * cols + p * W);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const A g = kk::acc_at(gv, j) * wf[k][j];
          if constexpr (LN) s[0] += g;
          s[NS - 1] = kk::fma_acc(g, kk::acc_at(xv, j) - mu, s[NS - 1]);
        }
      }
    }
    block_row_sum(s, sm);
    if (threadIdx.x == 0)
#pragma unroll
      for (int i = 0; i < NS; ++i) part[(row * segs + blockIdx.x) * NS + i] = s[i];
  }
}

// tot[row * NS + i]: c1 = sum(g) / cols (LayerNorm), c2 = rstd * sum(g * (x - mu)) / cols, from the segments' sums in
// segment order (deterministic). Launch: one thread per row, any 1-D grid covering the rows.
template <typename A, int NS>
__global__ void kk_norm_bwd_seg_rows(const A* __restrict__ part, const A* __restrict__ rstd, A* __restrict__ tot,
                                     long long rows, long long segs, long long cols) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  A s[NS];
#pragma unroll
  for (int i = 0; i < NS; ++i) s[i] = A(0);
  for (long long q = 0; q < segs; ++q)
#pragma unroll
    for (int i = 0; i < NS; ++i) s[i] += part[(row * segs + q) * NS + i];
  if constexpr (NS == 2) tot[row * NS] = s[0] / A(cols);
  tot[row * NS + NS - 1] = rstd[row] * s[NS - 1] / A(cols);
}

template <typename T, bool LN, bool EXTRA>
__global__ void __launch_bounds__(kk_norms::kSegThreads)
kk_norm_bwd_seg(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                const typename kk::Acc<T>::type* __restrict__ mean, const typename kk::Acc<T>::type* __restrict__ rstd,
                const typename kk::Acc<T>::type* __restrict__ tot, const T* __restrict__ g_extra, T* __restrict__ gx,
                typename kk::Acc<T>::type* __restrict__ pw, typename kk::Acc<T>::type* __restrict__ pb, long long rows,
                long long cols, long long rows_per_chunk) {
  using namespace kk_norms;
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>, NS = LN ? 2 : 1;
  kk::pdl_trigger();  // kk_column_sum, launched dependent, may be scheduled now; it waits for this grid
  const long long cv = cols / W;
  seg_check<T>(cols, gridDim.x, kk::addr(gy) | kk::addr(x) | kk::addr(w) | kk::addr(g_extra) | kk::addr(gx));
  if (EXTRA != (g_extra != nullptr)) __trap();
  A wf[kSegPacks][W], aw[kSegPacks][W], ab[LN ? kSegPacks : 1][W];
  seg_weights<T>(w, cv, wf);
#pragma unroll
  for (int k = 0; k < kSegPacks; ++k)
#pragma unroll
    for (int j = 0; j < W; ++j) {
      aw[k][j] = A(0);
      if constexpr (LN) ab[k][j] = A(0);
    }
  const long long r0 = blockIdx.y * rows_per_chunk, r1 = kk::min_ll(rows, r0 + rows_per_chunk);
#pragma unroll 1
  for (long long row = r0; row < r1; ++row) {
    const A rs = rstd[row], mu = LN ? mean[row] : A(0);
    const A c1 = LN ? tot[row * NS] : A(0), c2 = tot[row * NS + NS - 1];
#pragma unroll
    for (int k = 0; k < kSegPacks; ++k) {
      const long long p = ((long long)blockIdx.x * kSegPacks + k) * kSegThreads + threadIdx.x;
      if (p < cv) {
        const long long at = row * cols + p * W;
        const Vec<T, W> gv = load_vec<W, kk::kNc>(gy + at), xv = load_vec<W, kk::kNc>(x + at);
        A e[W], o[W];
        if constexpr (EXTRA) kk::vec_to_acc(load_vec<W, kk::kNc>(g_extra + at), e);
        else
#pragma unroll
          for (int j = 0; j < W; ++j) e[j] = A(0);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const A dy = kk::acc_at(gv, j);
          const A xh = (kk::acc_at(xv, j) - mu) * rs;
          o[j] = kk::fma_acc(rs, dy * wf[k][j] - c1 - xh * c2, e[j]);
          aw[k][j] = kk::fma_acc(dy, xh, aw[k][j]);
          if constexpr (LN) ab[k][j] += dy;
        }
        store_vec<W>(gx + at, kk::acc_to_vec<T, W>(o));
      }
    }
  }
  // Chunks without rows (past the end) write zeros, which kk_column_sum adds like any other chunk.
#pragma unroll
  for (int k = 0; k < kSegPacks; ++k) {
    const long long p = ((long long)blockIdx.x * kSegPacks + k) * kSegThreads + threadIdx.x;
    if (p < cv)
#pragma unroll
      for (int j = 0; j < W; ++j) {
        pw[blockIdx.y * cols + p * W + j] = aw[k][j];
        if constexpr (LN) pb[blockIdx.y * cols + p * W + j] = ab[LN ? k : 0][j];
      }
  }
}
