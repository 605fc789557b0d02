// kernelkit activations: SwiGLU (forward, backward) and rotary position embedding (HF apply_rotary_pos_emb,
// forward and backward), contiguous tensors, 64-bit indexing, math in A = kk::Acc<T>, one rounding to T.
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
    vg[k] = load_vec<W>(g + p);
    vu[k] = load_vec<W>(u + p);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    A r[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const A a = to_acc(vg[k].v[j]);
      A s, oms;
      sigmoid2<kFast<T>>(a, s, oms);
      r[j] = a * s * to_acc(vu[k].v[j]);
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
    vd[k] = load_vec<W>(gr + p);
    vg[k] = load_vec<W>(g + p);
    vu[k] = load_vec<W>(u + p);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    A rg[W], ru[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const A d = to_acc(vd[k].v[j]), a = to_acc(vg[k].v[j]), b = to_acc(vu[k].v[j]);
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
// Work item = one pair of packs (d, d + half) of one (b, h, s) row, d in [0, half) step W.
struct RopeGeom {
  long long hv;     // pair packs per row = half / W
  long long seq, heads, dim, half, cbs;
};

template <int BWD, int W, typename I, typename T>
__device__ __forceinline__ void rope_items(const T* x, const T* cs, const T* sn, T* out, long long i0, long long bd,
                                           int n, const RopeGeom& g) {
  using A = acc_t<T>;
  constexpr int N = 2;  // items in flight: their x loads are issued first; cos/sin (L1/L2-resident, shared
                        // by all heads) are loaded per item, which keeps 16-bit types within 64 registers
  Vec<T, W> x1[N], x2[N];
  long long xo[N], co[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (k < n) {
      const I i = (I)(i0 + k * bd);
      I row, q;
      if constexpr (sizeof(I) == 8) {
        row = kk::udiv64(i, (I)g.hv);
        q = kk::udiv64(row, (I)g.seq);
      } else {
        row = i / (I)g.hv;
        q = row / (I)g.seq;
      }
      const I jp = i - row * (I)g.hv;
      const I s = row - q * (I)g.seq;
      const I b = sizeof(I) == 8 ? (I)kk::udiv64(q, (I)g.heads) : q / (I)g.heads;
      xo[k] = (long long)row * g.dim + (long long)jp * W;
      co[k] = (long long)b * g.cbs + (long long)s * g.dim + (long long)jp * W;
      x1[k] = load_vec<W>(x + xo[k]);
      x2[k] = load_vec<W>(x + xo[k] + g.half);
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (k < n) {
      const Vec<T, W> c1 = load_vec<W>(cs + co[k]), c2 = load_vec<W>(cs + co[k] + g.half);
      const Vec<T, W> s1 = load_vec<W>(sn + co[k]), s2 = load_vec<W>(sn + co[k] + g.half);
      A o1[W], o2[W];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const A a = to_acc(x1[k].v[j]), b = to_acc(x2[k].v[j]);
        if constexpr (BWD) {
          // gx[d] = g[d] cos[d] + g[d+h] sin[d+h];  gx[d+h] = g[d+h] cos[d+h] - g[d] sin[d]
          o1[j] = kk::fma_acc(a, to_acc(c1.v[j]), b * to_acc(s2.v[j]));
          o2[j] = kk::fma_acc(b, to_acc(c2.v[j]), -(a * to_acc(s1.v[j])));
        } else {
          // out[d] = x[d] cos[d] - x[d+h] sin[d];  out[d+h] = x[d+h] cos[d+h] + x[d] sin[d+h]
          o1[j] = kk::fma_acc(a, to_acc(c1.v[j]), -(b * to_acc(s1.v[j])));
          o2[j] = kk::fma_acc(b, to_acc(c2.v[j]), a * to_acc(s2.v[j]));
        }
      }
      store_vec<W>(out + xo[k], kk::acc_to_vec<T, W>(o1));
      store_vec<W>(out + xo[k] + g.half, kk::acc_to_vec<T, W>(o2));
    }
  }
}

// I = unsigned when every linear element index fits in 32 bits (cheap hardware division), else 64-bit.
template <int BWD, int W, typename I, typename T>
__device__ __forceinline__ void rope_run(const T* x, const T* cs, const T* sn, T* out, long long total,
                                         const RopeGeom& g) {
  constexpr int U = sizeof(I) == 4 ? 2 : 1;  // 64-bit index math needs the registers of a second item
  const long long bd = blockDim.x;
  const long long step = (long long)gridDim.x * bd * U;
  long long i = (long long)blockIdx.x * bd * U + threadIdx.x;
#pragma unroll 1
  for (; i + (U - 1) * bd < total; i += step) rope_items<BWD, W, I>(x, cs, sn, out, i, bd, U, g);
  if (U > 1 && i < total) rope_items<BWD, W, I>(x, cs, sn, out, i, bd, 1, g);  // <= U - 1 == 1 leftover item
}

template <int BWD, int W, typename T>
__device__ __forceinline__ void rope_dispatch(const T* x, const T* cs, const T* sn, T* out, long long rows,
                                              const RopeGeom& g) {
  // i + gridDim*blockDim*U may exceed total by < 2^32 before the loop exits: stay below 2^31 items.
  if (rows * g.dim < 0x7fffffffll) rope_run<BWD, W, unsigned>(x, cs, sn, out, rows * g.hv, g);
  else rope_run<BWD, W, unsigned long long>(x, cs, sn, out, rows * g.hv, g);
}

}  // namespace kk_act

// ================================================================= kernels
// Launch (SwiGLU): 1-D block of any size <= 1024 (256 recommended), 1-D grid of any size (grid-stride):
//   grid = min(ceil(n / (VEC * 256 * U)), 4 * occ * num_SMs), VEC = 16 / sizeof(T), U = 4 (fwd), 2 (bwd)
//   (double: 1),
//   occ = cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, 256, 0). No dynamic shared memory.
// 16-byte path when all pointers are 16-byte aligned (scalar tail for n % VEC), scalar otherwise.
// Outputs may alias inputs exactly (each element is read before the same thread writes it).

// out = silu(gate) * up
template <typename T>
__global__ void __maxnreg__(64) kk_swiglu_fwd(const T* gate, const T* up, T* out, long long n) {
  kk_act::swiglu<false, sizeof(T) == 8 ? 1 : kk::kUnroll>(gate, up, (const T*)nullptr, out, (T*)nullptr, n);
}

// g_gate = grad * up * silu'(gate), g_up = grad * silu(gate)
template <typename T>
__global__ void __maxnreg__(64) kk_swiglu_bwd(const T* grad, const T* gate, const T* up, T* g_gate, T* g_up,
                                                      long long n) {
  kk_act::swiglu<true, sizeof(T) == 8 ? 1 : 2>(grad, gate, up, g_gate, g_up, n);
}

// RoPE on x, out [batch, heads, seq, dim] contiguous; cos/sin element (b, s, d) at b*cos_batch_stride + s*dim
// + d (stride 0 broadcasts over batch); dim even (host-validated). out may be x (exact in place).
//   BACKWARD = 0: out = x*cos + rotate_half(x)*sin
//   BACKWARD = 1: gx  = g*cos + cat((g*sin)[d/2:], -(g*sin)[:d/2])   (x = g)
// Launch: 1-D block of any size <= 1024 (256 recommended), 1-D grid of any size (grid-stride):
//   items = batch*heads*seq*(dim/2)/W, W = VEC on the vector path ((dim/2) % VEC == 0,
//   cos_batch_stride % VEC == 0, all pointers 16-byte aligned), else 1;
//   grid = min(ceil(items / (256 * 2)), 4 * occ * num_SMs). No dynamic shared memory.
template <typename T, int BACKWARD>
__global__ void __maxnreg__(64) kk_rope(const T* x, const T* cos, const T* sin, T* out, long long batch,
                                                long long heads, long long seq, long long dim,
                                                long long cos_batch_stride) {
  if (batch <= 0 || heads <= 0 || seq <= 0 || dim < 2) return;
  constexpr int V = kk::kVec<T>;
  kk_act::RopeGeom g;
  g.seq = seq;
  g.heads = heads;
  g.dim = dim;
  g.half = dim / 2;
  g.cbs = cos_batch_stride;
  const long long rows = batch * heads * seq;
  if (g.half % V == 0 && cos_batch_stride % V == 0 &&
      kk::aligned16(kk::addr(x) | kk::addr(cos) | kk::addr(sin) | kk::addr(out))) {
    g.hv = g.half / V;
    kk_act::rope_dispatch<BACKWARD, V>(x, cos, sin, out, rows, g);
  } else {
    g.hv = g.half;
    kk_act::rope_dispatch<BACKWARD, 1>(x, cos, sin, out, rows, g);
  }
}
