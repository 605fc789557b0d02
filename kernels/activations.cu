// kernelkit activations: SwiGLU (forward, backward) on contiguous tensors and rotary position embedding (HF
// apply_rotary_pos_emb, forward and backward) on strided q and k (last dim contiguous), 64-bit indexing, math in
// A = kk::Acc<T>, one rounding to T.
//
// sigmoid(v) is formed from m = exp(-|v|) in (0, 1] and r = 1/(1+m) (denominator in [1, 2]: no overflow,
// no cancellation): s = v >= 0 ? r : m*r, 1 - s = v >= 0 ? m*r : r. float: expf + div.approx (<= 2 ulp);
// double: exp + Newton reciprocal; 16-bit I/O: ex2.approx + rcp.approx (~2^-21, far below output rounding).
// silu(v) = v * s (torch: v / (1 + exp(-v)); equal to a few ulp). silu'(v) = s * (1 + v * (1 - s)).
#include "common.cuh"

namespace kk_act {

using kk::acc_t;
using kk::load_vec;
using kk::store_vec;
using kk::to_acc;
using kk::Vec;

// swiglu's and rope's inputs (rope's cos/sin tables too) load as kk::kKeep: 1.1-4.2% faster than kNc (bench/NOTES.md
// session 17).
constexpr int kLd = kk::kKeep;

__device__ __forceinline__ float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// s = sigmoid(v), oms = 1 - s. FAST: 16-bit I/O.
template <bool FAST> __device__ __forceinline__ void sigmoid2(float v, float& s, float& oms) {
  float m, r;
  if constexpr (FAST) {
    m = ex2_approx(fabsf(v) * -1.44269504088896340736f);
    r = rcp_approx(1.0f + m);
  } else {
    m = expf(-fabsf(v));
    r = __fdividef(1.0f, 1.0f + m);
  }
  const float mr = m * r;
  const bool pos = v >= 0.0f;
  s = pos ? r : mr;
  oms = pos ? mr : r;
}
template <bool FAST> __device__ __forceinline__ void sigmoid2(double v, double& s, double& oms) {
  const double m = exp(-fabs(v));
  const double d = 1.0 + m;
  double r = (double)__fdividef(1.0f, (float)d);
  r = fma(r, fma(-d, r, 1.0), r);
  r = fma(r, fma(-d, r, 1.0), r);
  const double mr = m * r;
  const bool pos = v >= 0.0;
  s = pos ? r : mr;
  oms = pos ? mr : r;
}

template <typename T> constexpr bool kFast = sizeof(T) < 4;

// ---------------------------------------------------------------- SwiGLU
// N packs of W elements at pack indices i + k*bd; all loads issued before any math (see elementwise.cu).
template <int N, int W, typename T>
__device__ __forceinline__ void swiglu_fwd_group(const T* g, const T* u, T* o, long long i, long long bd) {
  using A = acc_t<T>;
  Vec<T, W> vg[N], vu[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const long long p = (i + k * bd) * W;
    vg[k] = load_vec<W, kLd>(g + p);
    vu[k] = load_vec<W, kLd>(u + p);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    A r[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const A a = kk::acc_at(vg[k], j);
      A s, oms;
      sigmoid2<kFast<T>>(a, s, oms);
      r[j] = a * s * kk::acc_at(vu[k], j);
    }
    store_vec<W>(o + (i + k * bd) * W, kk::acc_to_vec<T, W>(r));
  }
}

template <int N, int W, typename T>
__device__ __forceinline__ void swiglu_bwd_group(const T* gr, const T* g, const T* u, T* gg, T* gu, long long i,
                                                 long long bd) {
  using A = acc_t<T>;
  Vec<T, W> vd[N], vg[N], vu[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const long long p = (i + k * bd) * W;
    vd[k] = load_vec<W, kLd>(gr + p);
    vg[k] = load_vec<W, kLd>(g + p);
    vu[k] = load_vec<W, kLd>(u + p);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    A rg[W], ru[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const A d = kk::acc_at(vd[k], j), a = kk::acc_at(vg[k], j), b = kk::acc_at(vu[k], j);
      A s, oms;
      sigmoid2<kFast<T>>(a, s, oms);
      ru[j] = d * (a * s);                                 // d/d up   = grad * silu(gate)
      rg[j] = (d * b) * (s * kk::fma_acc(a, oms, A(1)));  // d/d gate = grad * up * silu'(gate)
    }
    const long long p = (i + k * bd) * W;
    store_vec<W>(gg + p, kk::acc_to_vec<T, W>(rg));
    store_vec<W>(gu + p, kk::acc_to_vec<T, W>(ru));
  }
}

// Grid-stride over nv packs; each block iteration covers blockDim*U consecutive packs (coalesced), full
// iterations unguarded, then a fixed-count tail (no 64-bit trip-count division).
template <bool BWD, int U, int W, typename T>
__device__ __forceinline__ void swiglu_run(const T* a, const T* b, const T* c, T* o1, T* o2, long long nv) {
  const long long bd = blockDim.x;
  const long long step = (long long)gridDim.x * bd * U;
  long long i = (long long)blockIdx.x * bd * U + threadIdx.x;
#pragma unroll 1
  for (; i + (U - 1) * bd < nv; i += step) {
    if constexpr (BWD) swiglu_bwd_group<U, W>(a, b, c, o1, o2, i, bd);
    else swiglu_fwd_group<U, W>(a, b, o1, i, bd);
  }
#pragma unroll
  for (int k = 0; k < U - 1; ++k)
    if (i + k * bd < nv) {
      if constexpr (BWD) swiglu_bwd_group<1, W>(a, b, c, o1, o2, i + k * bd, bd);
      else swiglu_fwd_group<1, W>(a, b, o1, i + k * bd, bd);
    }
}

// fwd: (a, b) = (gate, up) -> o1 = out. bwd: (a, b, c) = (grad, gate, up) -> (o1, o2) = (g_gate, g_up).
template <bool BWD, int U, typename T>
__device__ __forceinline__ void swiglu(const T* a, const T* b, const T* c, T* o1, T* o2, long long n) {
  if (n <= 0) return;
  constexpr int V = kk::kVec<T>;
  unsigned long long ptrs = kk::addr(a) | kk::addr(b) | kk::addr(o1);
  if constexpr (BWD) ptrs |= kk::addr(c) | kk::addr(o2);
  if (kk::aligned16(ptrs)) {
    const long long nv = n / V;
    swiglu_run<BWD, U, V>(a, b, c, o1, o2, nv);
    if (blockIdx.x == 0 && threadIdx.x == 0) {  // < V leftover elements
#pragma unroll
      for (int k = 0; k < V - 1; ++k) {
        const long long t = nv * V + k;
        if (t < n) {
          if constexpr (BWD) swiglu_bwd_group<1, 1>(a, b, c, o1, o2, t, 0);
          else swiglu_fwd_group<1, 1>(a, b, o1, t, 0);
        }
      }
    }
  } else {
    swiglu_run<BWD, U, 1>(a, b, c, o1, o2, n);
  }
}

// ---------------------------------------------------------------- RoPE
// q and k in one pass. Work item = one pair of packs (d, d + half) of one (batch, head, seq) row, d in [0, half)
// step W; heads [0, q_heads) are q's, [q_heads, H) k's (H = q_heads + k_heads). Items are numbered pack-fastest,
// then by row, rows either heads inner ((b*seq + s)*H + head: Hugging Face's (batch, seq, heads, dim) memory order,
// and consecutive rows share one cos/sin row) or seq inner ((b*H + head)*seq + s: contiguous (batch, heads, seq,
// dim) memory order).

// Element strides of (batch, head, seq, dim) of q, k, out_q, out_k; the dim stride is 1 (host-checked). Host packs
// it with struct format "<16q".
struct RopeStrides {
  long long q[4], k[4], oq[4], ok[4];
};
static_assert(sizeof(RopeStrides) == 128, "kk_act::RopeStrides must match host struct \"<16q\"");

struct RopeGeom {
  long long hv;  // pair packs per row = half / W
  long long heads, seq, q_heads, dim, half, cbs;
};

// Offset of element (b, h, s, d) of q's or k's (isk) tensor; unsigned 32-bit math only when the kernel found that
// every offset fits.
template <typename I>
__device__ __forceinline__ I rope_offset(const long long (&st)[4], const long long (&sk)[4], bool isk, I b, I h, I s,
                                         I d) {
  const I sb = (I)(isk ? sk[0] : st[0]), sh = (I)(isk ? sk[1] : st[1]), ss = (I)(isk ? sk[2] : st[2]);
  return b * sb + h * sh + s * ss + d;
}

template <typename I> __device__ __forceinline__ I rope_div(I a, I b) {
  if constexpr (sizeof(I) == 8) return (I)kk::udiv64(a, b);
  else return a / b;
}

// HI: rows numbered heads inner, else seq inner (a template parameter: a runtime select costs the registers of
// 16-bit types' second item in flight).
template <int N, int BWD, int W, bool HI, typename I, typename T>
__device__ __forceinline__ void rope_items(const T* q, const T* k, const T* cs, const T* sn, T* oq, T* ok,
                                           I i0, I bd, const RopeGeom& g, const RopeStrides& st) {
  using A = acc_t<T>;
  // N items in flight: their x loads are issued first; cos/sin (L1/L2-resident, shared by all heads) are
  // loaded per item, which keeps 16-bit types within 64 registers.
  Vec<T, W> x1[N], x2[N];
  T* op[N];
  I co[N];
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const I i = i0 + u * bd;
    const I row = rope_div(i, (I)g.hv);
    const I n1 = (I)(HI ? g.heads : g.seq), n2 = (I)(HI ? g.seq : g.heads);
    const I t = rope_div(row, n1);
    const I b = rope_div(t, n2);
    const I jp = i - row * (I)g.hv, inner = row - t * n1, mid = t - b * n2;
    const I hh = HI ? inner : mid, s = HI ? mid : inner;
    const bool isk = hh >= (I)g.q_heads;
    const I h = isk ? hh - (I)g.q_heads : hh;
    const I d = jp * W;
    const T* xp = (isk ? k : q) + rope_offset<I>(st.q, st.k, isk, b, h, s, d);
    op[u] = (isk ? ok : oq) + rope_offset<I>(st.oq, st.ok, isk, b, h, s, d);
    co[u] = b * (I)g.cbs + s * (I)g.dim + d;
    x1[u] = load_vec<W, kLd>(xp);
    x2[u] = load_vec<W, kLd>(xp + g.half);
  }
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const Vec<T, W> c1 = load_vec<W, kLd>(cs + co[u]), c2 = load_vec<W, kLd>(cs + co[u] + g.half);
    const Vec<T, W> s1 = load_vec<W, kLd>(sn + co[u]), s2 = load_vec<W, kLd>(sn + co[u] + g.half);
    A o1[W], o2[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const A a = kk::acc_at(x1[u], j), b = kk::acc_at(x2[u], j);
      if constexpr (BWD) {
        // gx[d] = g[d] cos[d] + g[d+h] sin[d+h];  gx[d+h] = g[d+h] cos[d+h] - g[d] sin[d]
        o1[j] = kk::fma_acc(a, kk::acc_at(c1, j), b * kk::acc_at(s2, j));
        o2[j] = kk::fma_acc(b, kk::acc_at(c2, j), -(a * kk::acc_at(s1, j)));
      } else {
        // out[d] = x[d] cos[d] - x[d+h] sin[d];  out[d+h] = x[d+h] cos[d+h] + x[d] sin[d+h]
        o1[j] = kk::fma_acc(a, kk::acc_at(c1, j), -(b * kk::acc_at(s1, j)));
        o2[j] = kk::fma_acc(b, kk::acc_at(c2, j), a * kk::acc_at(s2, j));
      }
    }
    store_vec<W>(op[u], kk::acc_to_vec<T, W>(o1));
    store_vec<W>(op[u] + g.half, kk::acc_to_vec<T, W>(o2));
  }
}

// I = unsigned when every element offset fits in 31 bits (cheap hardware division, 32-bit loop counters), else
// 64-bit. The counters cannot wrap: i < total + step, step <= total and total < 2^30 on the 32-bit path.
template <int ITEMS, int BWD, int W, bool HI, typename I, typename T>
__device__ __forceinline__ void rope_run(const T* q, const T* k, const T* cs, const T* sn, T* oq, T* ok,
                                         long long total, const RopeGeom& g, const RopeStrides& st) {
  constexpr int U = sizeof(I) == 4 ? ITEMS : 1;  // 64-bit index math needs the registers of a second item
  const long long first = (long long)blockIdx.x * blockDim.x * U + threadIdx.x;
  if (first >= total) return;
  const I bd = blockDim.x, n = (I)total;
  const I step = (I)kk::min_ll((long long)gridDim.x * blockDim.x * U, total);
  I i = (I)first;
#pragma unroll 1
  for (; i + (U - 1) * bd < n; i += step) rope_items<U, BWD, W, HI, I>(q, k, cs, sn, oq, ok, i, bd, g, st);
#pragma unroll
  for (int u = 0; u < U - 1; ++u)  // < U leftover items
    if (i + u * bd < n) rope_items<1, BWD, W, HI, I>(q, k, cs, sn, oq, ok, i + u * bd, bd, g, st);
}

// One past the largest element offset of a (batch, heads, seq, dim) tensor with strides st (<= 0 when empty).
__device__ __forceinline__ long long rope_extent(const long long (&st)[4], long long batch, long long heads,
                                                 long long seq, long long dim) {
  return (batch - 1) * st[0] + (heads - 1) * st[1] + (seq - 1) * st[2] + dim;
}

// OR of the strides of q, k, out_q and out_k over the dims of size > 1 (a size-1 dim's stride is never used).
__device__ __forceinline__ long long rope_stride_bits(const long long (&st)[4], long long batch, long long heads,
                                                      long long seq) {
  return (batch > 1 ? st[0] : 0) | (heads > 1 ? st[1] : 0) | (seq > 1 ? st[2] : 0);
}

template <int ITEMS, int BWD, int W, typename T>
__device__ __forceinline__ void rope_dispatch(const T* q, const T* k, const T* cs, const T* sn, T* oq, T* ok,
                                              long long total, bool fits32, bool heads_inner, const RopeGeom& g,
                                              const RopeStrides& st) {
  if (fits32 && heads_inner) rope_run<ITEMS, BWD, W, true, unsigned>(q, k, cs, sn, oq, ok, total, g, st);
  else if (fits32) rope_run<ITEMS, BWD, W, false, unsigned>(q, k, cs, sn, oq, ok, total, g, st);
  else if (heads_inner) rope_run<ITEMS, BWD, W, true, unsigned long long>(q, k, cs, sn, oq, ok, total, g, st);
  else rope_run<ITEMS, BWD, W, false, unsigned long long>(q, k, cs, sn, oq, ok, total, g, st);
}

}  // namespace kk_act

// ================================================================= kernels
// Launch (SwiGLU): 1-D block of any size <= 1024, 1-D grid of any size (grid-stride). Fastest (bench/sweep_llm.py,
//   H200): block 256, grid = ceil(n / (VEC * 256 * U)) (one pass), VEC = 16 / sizeof(T), U packs per thread and
//   tensor: the defaults (forward 2 for 16-bit types, else 1; backward 1). No dynamic shared memory.
// 16-byte path when all pointers are 16-byte aligned (scalar tail for n % VEC), scalar otherwise.
// Outputs may alias inputs exactly (each element is read before the same thread writes it).

// out = silu(gate) * up
template <typename T, int U = sizeof(T) == 2 ? 2 : 1>
__global__ void __maxnreg__(64) kk_swiglu_fwd(const T* gate, const T* up, T* out, long long n) {
  kk_act::swiglu<false, U>(gate, up, (const T*)nullptr, out, (T*)nullptr, n);
}

// g_gate = grad * up * silu'(gate), g_up = grad * silu(gate)
template <typename T, int U = 1>
__global__ void __maxnreg__(64) kk_swiglu_bwd(const T* grad, const T* gate, const T* up, T* g_gate, T* g_up,
                                              long long n) {
  kk_act::swiglu<true, U>(grad, gate, up, g_gate, g_up, n);
}

// RoPE on q [batch, q_heads, seq, dim] and k [batch, k_heads, seq, dim] in one launch, into out_q and out_k of the
// same shapes. Every tensor has its own (batch, head, seq) element strides (RopeStrides: any strides >= 0, 0
// broadcasts an input, the outputs' elements must not overlap; the dim stride must be 1: the host makes an input
// whose last dim is strided contiguous);
// cos/sin element (b, s, d) at b*cos_batch_stride + s*dim + d (stride 0 broadcasts over batch); dim even
// (host-validated). out_q may be q and out_k k (exact in place: same pointer and strides).
//   BACKWARD = 0: out = x*cos + rotate_half(x)*sin                     (x = q, k)
//   BACKWARD = 1: gx  = g*cos + cat((g*sin)[d/2:], -(g*sin)[:d/2])   (x = g)
// heads_inner != 0 numbers the rows (b, s, head) (the host sets it when the heads lie closer together in memory
// than the positions, as in Hugging Face's transposed (batch, seq, heads, dim) projections), else (b, head, s):
// correct either way, the order only sets which rows a warp touches together (and shares a cos/sin row).
// 32-bit index math when batch*(q_heads+k_heads)*seq*dim and every tensor's extent (largest offset + 1) are below
// 2^31, else 64-bit (the kernel decides).
// Launch: 1-D block of any size <= 1024 (see below), 1-D grid of any size (grid-stride):
//   items = batch*(q_heads+k_heads)*seq*(dim/2)/W, W = VEC on the vector path ((dim/2) % VEC == 0,
//   cos_batch_stride % VEC == 0, the strides of every dim of size > 1 of q, k, out_q, out_k % VEC == 0, all six
//   pointers 16-byte aligned), else 1 (the host sizes the grid from dim and cos_batch_stride alone: any grid is
//   correct). ITEMS: items per thread in one block pass on the 32-bit path (64-bit index math: 1). Fastest
//   (bench/sweep_llm.py, H200): block 128, ITEMS 2, grid = ceil(items / (128 * 2)) (one pass; an H100: ITEMS 1,
//   ops/activations.py _rope_shape); 56 registers
//   (64 for double, which spills at 56): more threads per SM than at 64. No dynamic shared memory.
template <typename T, int BACKWARD, int ITEMS = 2>
__global__ void __maxnreg__(sizeof(T) == 8 ? 64 : 56)
kk_rope(const T* q, const T* k, const T* cos, const T* sin, T* out_q, T* out_k, long long batch, long long q_heads,
        long long k_heads, long long seq, long long dim, long long cos_batch_stride, int heads_inner,
        kk_act::RopeStrides strides) {
  const long long heads = q_heads + k_heads;
  if (batch <= 0 || heads <= 0 || seq <= 0 || dim < 2) return;
  constexpr int V = kk::kVec<T>;
  const kk_act::RopeStrides& st = strides;
  kk_act::RopeGeom g;
  g.heads = heads;
  g.seq = seq;
  g.q_heads = q_heads;
  g.dim = dim;
  g.half = dim / 2;
  g.cbs = cos_batch_stride;
  const long long rows = batch * heads * seq;
  constexpr long long kMax32 = 0x7fffffffll;
  // q (k) with no heads is never read or written: its extent is <= 0.
  const bool fits32 = rows * dim < kMax32 && kk_act::rope_extent(st.q, batch, q_heads, seq, dim) < kMax32 &&
                      kk_act::rope_extent(st.k, batch, k_heads, seq, dim) < kMax32 &&
                      kk_act::rope_extent(st.oq, batch, q_heads, seq, dim) < kMax32 &&
                      kk_act::rope_extent(st.ok, batch, k_heads, seq, dim) < kMax32 &&
                      (batch - 1) * cos_batch_stride + seq * dim < kMax32;
  const long long bits = cos_batch_stride | g.half | kk_act::rope_stride_bits(st.q, batch, q_heads, seq) |
                         kk_act::rope_stride_bits(st.k, batch, k_heads, seq) |
                         kk_act::rope_stride_bits(st.oq, batch, q_heads, seq) |
                         kk_act::rope_stride_bits(st.ok, batch, k_heads, seq);
  if (bits % V == 0 && kk::aligned16(kk::addr(q) | kk::addr(k) | kk::addr(cos) | kk::addr(sin) | kk::addr(out_q) |
                                     kk::addr(out_k))) {
    g.hv = g.half / V;
    kk_act::rope_dispatch<ITEMS, BACKWARD, V>(q, k, cos, sin, out_q, out_k, rows * g.hv, fits32, heads_inner != 0, g,
                                               st);
  } else {
    g.hv = g.half;
    kk_act::rope_dispatch<ITEMS, BACKWARD, 1>(q, k, cos, sin, out_q, out_k, rows * g.hv, fits32, heads_inner != 0, g,
                                               st);
  }
}
