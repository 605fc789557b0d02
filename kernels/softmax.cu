// kernelkit row softmax (forward, backward) and fused cross-entropy (forward: loss + logsumexp; backward:
// gradient from the saved logsumexp, never materializing the softmax).
//
// Common to every kernel here:
//   * x is row-major contiguous [rows, cols]; 64-bit indexing everywhere; rows, cols <= 0 -> nothing (but
//     kk_cross_entropy_loss still writes its loss and divisor).
//   * 16-byte vector path when cols % VEC == 0 and every tensor pointer is 16-byte aligned (then every row
//     is), scalar path otherwise. VEC = 16 / sizeof(T): 8 (half, bf16), 4 (float), 2 (double).
//     A "pack" below is VEC elements on the vector path, 1 element on the scalar path; nv = packs per row.
//     The softmax kernels' SHIFT instantiations take rows of any width on the 16-byte path (kk::RowShift: the packs
//     between a row's 16-byte boundaries, nv or nv - 1 of them, and the head and tail elements one each by the row's
//     first threads); their tensors must be congruent16 (else they trap). Launch them as the vector path's.
//   * blockDim.x must be a multiple of 32, at most 512 (kMaxWarps warps) and the launch bound; other block sizes
//     trap.
//   * Rows are handled by a "team": one warp per row for short rows (per kernel below), otherwise one block
//     per row. Teams loop over rows grid-stride, so ANY grid is correct (but kk_softmax_fwd's held block rows, one
//     per block); recommended grids below.
//   * Deterministic: fixed-order per-thread accumulation, xor-butterfly warp reductions (the combine
//     functions are commutative, so all lanes hold bit-identical results), then a fixed-order pass over
//     the per-warp partials. Results depend on blockDim (reduction tree) but not on the grid.
//   * Math in A = kk::Acc<T> (float for 16-bit types). exp: double exp, else ex2.approx (see ex() below).
//   * -inf entries give 0; a row whose entries are all -inf gives NaN (as torch); NaN or +inf in a row
//     gives a NaN row (as torch). This falls out of one rule: sums of exp(x - r) are taken relative to
//     r = (max == -inf ? 0 : max).
#include "common.cuh"

namespace kk_sm {

using kk::acc_t;
using kk::dyn_smem_bytes;
using kk::lds;
using kk::load_vec;
using kk::store_vec;
using kk::sts;
using kk::to_acc;
using kk::Vec;

// How rows are loaded (kk::Load): the softmax kernels read each row once per pass as kKeep, 1.2-5% faster than kNc
// (double: 8 bytes of spills).
template <typename T> constexpr int kSoftmaxLd = sizeof(T) == 8 ? kk::kNc : kk::kKeep;
// Cross-entropy's rows load kKeep too. Against kNc on an H200 (bench/ab_source.py --queued, h200-2026-11-28-s49/
// ab-h200-ce-*keep*.log): the backward's streamed and flat rows 1.3-4.8% less GPU time (float32 32768 x 8192 527.8 ->
// 503.0 us), the held loss's 16-bit rows 2.0-3.3% at 4096-16384 columns (x 1024 within 0.4%), the forward's rows
// unchanged. (Session 17 had measured kKeep 3-4% slower, on kernels since rewritten.)
constexpr int kCeLd = kk::kKeep;

// Softmax's held rows take their max and their sum in two block reductions from this many threads (fwd_row); smaller
// blocks, one reduction of (max, sum) pairs, whose combines take two exponentials each. Against the pairs for all
// (bench/ab_source.py --queued, h200-2026-11-27-s41/ab-h200-softmax-two-reductions-128.log), H200: bf16 32768 x 4096
// 133.9 -> 129.3 us, x 1001 127.7 -> 121.5, float32 x 1001 92.9 -> 86.9; bf16 x 2048 (64 threads) had measured 69.3 ->
// 70.5 with two. H100 (h100-2026-11-27-s41/ab-h100-softmax-two-reductions*.log): bf16 x 1001 181.2 -> 132.4, float32
// x 1001 101.1 -> 98.0, 4096-16384 columns within 0.2%.
constexpr int kTwoReductionThreads = 128;
// Those rows keep their exponentials (taken against the row's max) for the output instead of taking them again, where
// they are at most 16 floats a thread under a cap of at least 40 registers: on an H100 (ab_source.py --queued,
// h100-2026-11-28-s42/ab-h100-softmax-once16.log) bf16 32768 x 4096 181.4 -> 180.5 us (40 registers for 32 at three
// 256-thread blocks per SM), float32 unchanged, bitwise equal. One row per block (softmax_fwd_run) brought them back
// to 32 (ops/softmax.py _HELD_WARPS_LOW_GBPS says what that did). More floats, or a tighter cap, spill (kernels/
// check_compile.py); at one pack a thread (Liger's rows) bf16 x 4096 ran 19% slower, 14% keeping them
// (ab-h100-softmax-*-1pack.log).
template <int RP, int W, int MAXT, int MINB> constexpr bool kKeepExps = RP * W <= 16 && 65536 / (MAXT * MINB) >= 40;
template <typename T> constexpr int kU = sizeof(T) == 8 ? 2 : 4;  // streamed packs in flight per thread and tensor
// cross-entropy: a warp per row when nv <= this (a single streaming pass: no block barriers, more rows in flight)
constexpr int kWarpRowPacks = 2048;

// Warp rows (rows of at most 32 lanes' packs) go to teams of G lanes, 32 / G rows to a warp at once: a row of a warp's
// lanes left most of them idle where it was narrow (bf16 rows of 256 columns: one 16-byte pack a lane, 512 bytes a warp
// in flight). team_lanes: G, the fewest of 32, 16 and 8 lanes whose `per` packs each cover a row of nv packs (TEAMS
// false: 32); the callers instantiate each G, so that pack offsets stay immediates (a generic lambda would do it more
// briefly, but NVRTC 13.0 takes one for a host function). Against whole warps, GPU time alone at 32768 rows on an H200
// (bench/exp_warp_teams.sh, h200-2026-11-28-s56/ab-h200-warp-teams.log): softmax bf16 x 256 14.4 -> 11.6 us, x 128
// 14.4 -> 8.0, float32 x 128 11.9 -> 9.4; its backward bf16 x 128 10.3 -> 7.2 (x 256 the same); the cross-entropy
// backward float32 x 256 24.7 -> 22.5.
// The kernels whose warp rows go to teams: the warp-row fits of 2 packs a lane (ops/softmax.py _WARP_FITS), launched
// for rows of up to 64 packs; others kept their registers (the held fit of 2 packs at three 512-thread blocks per SM
// went from 32 to 40 with team rows compiled in).
template <int RP, int MAXT> constexpr bool kWarpTeams = RP <= 2 && MAXT <= 256;
// `least`: a team's fewest lanes (shifted rows: 2 * W, one for each of a row's extra elements, kk::RowShift).
template <bool TEAMS> __device__ __forceinline__ int team_lanes(long long nv, int per, int least) {
  const int g = !TEAMS || nv > 16LL * per ? 32 : nv > 8LL * per ? 16 : 8;
  return g < least ? least : g;
}
template <int G> __device__ __forceinline__ long long team_base() {
  return (blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5)) * (32 / G);
}
template <int G> __device__ __forceinline__ long long team_stride() {
  return (long long)gridDim.x * (blockDim.x >> 5) * (32 / G);
}

__device__ __forceinline__ float ex2_approx(float x) {  // 2^x; -inf -> 0, NaN -> NaN
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// exp(d) in A; float and 16-bit types through ex2.approx (as Triton's exp, which torch.compile and Liger use):
// d <= 0 here, so the error is d's own rounding carried through (|d| * 2^-24 relative) plus 2 ulp, and results
// below 2^-126 flush to 0. expf took ~10 instructions per call, twice per element in the float32 forward (73% of
// issue slots busy at 8192 x 65536): 1175.8 -> 1113.6 us there, cross-entropy 527.4 -> 480.8 (bench/ab_source.py,
// h200-2026-11-23-s16).
template <typename T> __device__ __forceinline__ acc_t<T> ex(acc_t<T> d) {
  if constexpr (kk::same_t<T, double>::value) return exp(d);
  else return ex2_approx(d * 1.44269504088896340736f);
}
__device__ __forceinline__ float lg(float v) { return logf(v); }
__device__ __forceinline__ double lg(double v) { return log(v); }
__device__ __forceinline__ float amax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double amax(double a, double b) { return fmax(a, b); }
template <typename A> __device__ __forceinline__ A ninf() {
  if constexpr (sizeof(A) == 8) return -__longlong_as_double(0x7ff0000000000000ll);
  else return -__int_as_float(0x7f800000);
}
template <typename A> __device__ __forceinline__ A qnan() {
  if constexpr (sizeof(A) == 8) return __longlong_as_double(0x7ff8000000000000ll);
  else return __int_as_float(0x7fc00000);
}
// Reference point for sums of exp(x - r): the max, or 0 when the max is -inf (no -inf - -inf NaN).
template <typename A> __device__ __forceinline__ A safe_ref(A m) { return m == ninf<A>() ? A(0) : m; }

// ---------------------------------------------------------------- reductions
template <typename A, int N> struct Red {
  A f[N];
};

// f[0] = max, f[1] = sum of exp(x - safe_ref(f[0])), f[2..N) plain sums. combine() is commutative.
template <typename T, int N> struct MaxSumOp {
  using A = acc_t<T>;
  __device__ __forceinline__ static Red<A, N> identity() {
    Red<A, N> r;
    r.f[0] = ninf<A>();
#pragma unroll
    for (int i = 1; i < N; ++i) r.f[i] = A(0);
    return r;
  }
  __device__ __forceinline__ static Red<A, N> combine(const Red<A, N>& a, const Red<A, N>& b) {
    Red<A, N> o;
    o.f[0] = amax(a.f[0], b.f[0]);
    const A r = safe_ref(o.f[0]);
    // Products rounded apart, never contracted into an fma: fma(a, x, b * y) is not fma(b, y, a * x) bitwise, and
    // the butterfly combines (a, b) in one lane and (b, a) in its partner, whose sums must be equal.
    o.f[1] = kk::mul_rn(a.f[1], ex<T>(a.f[0] - r)) + kk::mul_rn(b.f[1], ex<T>(b.f[0] - r));
#pragma unroll
    for (int i = 2; i < N; ++i) o.f[i] = a.f[i] + b.f[i];
    return o;
  }
};
template <typename T> struct MaxOp {
  using A = acc_t<T>;
  __device__ __forceinline__ static Red<A, 1> identity() { return Red<A, 1>{{ninf<A>()}}; }
  __device__ __forceinline__ static Red<A, 1> combine(const Red<A, 1>& a, const Red<A, 1>& b) {
    return Red<A, 1>{{amax(a.f[0], b.f[0])}};
  }
};
template <typename T> struct SumOp {
  using A = acc_t<T>;
  __device__ __forceinline__ static Red<A, 1> identity() { return Red<A, 1>{{A(0)}}; }
  __device__ __forceinline__ static Red<A, 1> combine(const Red<A, 1>& a, const Red<A, 1>& b) {
    return Red<A, 1>{{a.f[0] + b.f[0]}};
  }
};

// Op on arrays (kk::ClusterRowReduce's form).
template <class Op, typename A, int N> struct ArrayOp {
  __device__ __forceinline__ static void identity(A (&v)[N]) {
    const Red<A, N> r = Op::identity();
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = r.f[i];
  }
  __device__ __forceinline__ static void combine(A (&v)[N], const A (&o)[N]) {
    Red<A, N> a, b;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      a.f[i] = v[i];
      b.f[i] = o[i];
    }
    a = Op::combine(a, b);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = a.f[i];
  }
};

// Blocks take at most this many warps (check_block; the launch bounds say 512 threads where they bound threads).
constexpr int kMaxWarps = 16;

// Butterfly over aligned groups of WIDTH lanes (a power of two <= 32), or of g <= WIDTH where g is given (a power of two:
// team_lanes' teams): every lane of a group ends with the same bits. A group of g lanes takes the last log2(g) of
// WIDTH's steps, in their order.
template <class Op, int WIDTH = 32, typename A, int N>
__device__ __forceinline__ Red<A, N> warp_allreduce(Red<A, N> v, int g = WIDTH) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) {
    if (o < g) {
      Red<A, N> w;
#pragma unroll
      for (int i = 0; i < N; ++i) w.f[i] = __shfl_xor_sync(0xffffffffu, v.f[i], o);
      v = Op::combine(v, w);
    }
  }
  return v;
}

// The nw warp partials, each aligned group of WIDTH >= nw lanes reading all of them (the rest the identity), reduced
// over the group: log2(WIDTH) butterfly steps where 32 lanes took 5. The steps it drops combined with the identity,
// which is exact (max; +0 to sums that are never -0), so the bits are the same. With WIDTH 16 (kMaxWarps), on an H100
// (bench/exp_softmax_span.sh, h100-2026-11-28-s43/ab-h100-softmax-span16.log): bf16 32768 x 4096 forward 180.9 ->
// 180.3 us, x 1001 159.1 -> 156.6, the rest within 0.2%. Choosing WIDTH from nw at run time (8 for 256 threads)
// spilled the 16-bit and float32 held rows' fits (kernels/check_compile.py).
template <class Op, int WIDTH, typename A, int N>
__device__ __forceinline__ Red<A, N> warp_partials_allreduce(const A* b, int nw) {
  const int q = threadIdx.x & (WIDTH - 1);
  Red<A, N> w = Op::identity();
  if (q < nw) {
#pragma unroll
    for (int i = 0; i < N; ++i) w.f[i] = b[q * N + i];
  }
  return warp_allreduce<Op, WIDTH>(w);
}

// BLOCK: all threads of the block (one __syncthreads); red holds 2 * 32 * N values, used alternately by
// parity so that one barrier per row suffices. Otherwise the calling team of `lanes` lanes (team_lanes), every lane of
// its warp calling.
template <class Op, bool BLOCK, typename A, int N>
__device__ __forceinline__ Red<A, N> team_allreduce(Red<A, N> v, A* red, int& parity, int lanes = 32) {
  v = warp_allreduce<Op>(v, BLOCK ? 32 : lanes);
  if constexpr (BLOCK) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    A* b = red + parity * 32 * N;
    parity ^= 1;
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < N; ++i) b[warp * N + i] = v.f[i];
    }
    __syncthreads();
    v = warp_partials_allreduce<Op, kMaxWarps, A, N>(b, nw);
  }
  return v;
}

// The max of the first n of N 16-bit packs (and m), taken on 16-bit pairs (HMNMX2): half the max instructions,
// and no conversion of the elements for them. Max is exact and drops NaN as fmaxf does, so the results are bitwise
// those of the float max. H200 (bench/ab_source.py, h200-2026-11-23-s23/ab-ce-pairmax-vs-old.json): bf16
// cross-entropy 8192 x 65536 268.5 -> 259.2 us, softmax 558.8 -> 551.9; the warp rows within 0.6%.
template <typename T> struct Pair;
template <> struct Pair<__half> {
  using type = __half2;
  static constexpr unsigned kNinf = 0xfc00fc00u;
};
template <> struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static constexpr unsigned kNinf = 0xff80ff80u;
};
template <typename T, int W, int N>
__device__ __forceinline__ acc_t<T> pair_max(const Vec<T, W> (&u)[N], int n, acc_t<T> m) {
  using T2 = typename Pair<T>::type;
  T2 mx;
  *reinterpret_cast<unsigned*>(&mx) = Pair<T>::kNinf;
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (k < n) {
#pragma unroll
      for (int j = 0; j < W / 2; ++j) mx = __hmax2(mx, reinterpret_cast<const T2*>(&u[k])[j]);
    }
  return amax(m, amax(kk::to_acc(mx.x), kk::to_acc(mx.y)));
}

// The max of the first n of N packs (and m), element by element.
template <typename T, int W, int N>
__device__ __forceinline__ acc_t<T> pack_max(const Vec<T, W> (&u)[N], int n, acc_t<T> m) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (k < n) {
#pragma unroll
      for (int j = 0; j < W; ++j) m = amax(m, kk::acc_at(u[k], j));
    }
  return m;
}

// s plus exp(x - r) of each element of the first n of N packs, in order.
template <typename T, int W, int N>
__device__ __forceinline__ acc_t<T> exp_sum(const Vec<T, W> (&u)[N], int n, acc_t<T> r, acc_t<T> s) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (k < n) {
#pragma unroll
      for (int j = 0; j < W; ++j) s += ex<T>(kk::acc_at(u[k], j) - r);
    }
  return s;
}

// Online (max, sum exp) update with N packs: one rescale per group, one exp per element.
template <typename T, int W, int N>
__device__ __forceinline__ void ms_update(const Vec<T, W> (&u)[N], int n, acc_t<T>& m, acc_t<T>& s) {
  using A = acc_t<T>;
  A cm;
  if constexpr (sizeof(T) == 2 && W % 2 == 0) cm = pair_max<T, W, N>(u, n, m);
  else cm = pack_max<T, W, N>(u, n, m);
  const A r = safe_ref(cm);
  s *= ex<T>(m - r);  // rescale from safe_ref(m) to r (m == -inf: s is 0 or NaN, factor 0)
  s = exp_sum<T, W, N>(u, n, r, s);
  m = cm;
}

// ---------------------------------------------------------------- softmax forward, one row
// Packs p = ti + k*nt (k < RP) stay in registers; packs beyond RP*nt (block teams only) are streamed:
// pass 1 reads them (the first cache_packs of them also into shared memory), pass 2 re-reads them (shared
// memory, else global/L2) and writes y. Each pack is read and written by the same thread only, so y == x
// (exact in place) is safe. STREAM = false: no streamed part (the caller guarantees nv <= RP * nt), which
// leaves the registers of the streaming loops to more blocks per SM.
template <typename T, int W, bool BLOCK, int RP, bool STREAM, bool SPLIT = false, int PARTS = 0>
__device__ __forceinline__ void fwd_row(const T* xr, T* yr, long long nv, int ti, int nt, T* cache,
                                        long long cache_packs, acc_t<T>* red, int& parity,
                                        kk::Extra e = {},
                                        kk::ClusterRowReduce<2, acc_t<T>, SPLIT, PARTS>* cluster = nullptr) {
  using A = acc_t<T>;
  Vec<T, W> v[RP];
#pragma unroll
  for (int k = 0; k < RP; ++k) {
    const long long p = ti + (long long)k * nt;
    if (p < nv) v[k] = load_vec<W, kSoftmaxLd<T>>(xr + p * W);
  }
  const A xe = kk::extra_value(xr, e, ninf<A>());
  A m = xe, s = A(0);
#pragma unroll
  for (int k = 0; k < RP; ++k)
    if (ti + (long long)k * nt < nv) {
#pragma unroll
      for (int j = 0; j < W; ++j) m = amax(m, kk::acc_at(v[k], j));
    }
  {
    const A r = safe_ref(m);
    if (e.has) s = ex<T>(xe - r);
#pragma unroll
    for (int k = 0; k < RP; ++k)
      if (ti + (long long)k * nt < nv) {
#pragma unroll
        for (int j = 0; j < W; ++j) s += ex<T>(kk::acc_at(v[k], j) - r);
      }
  }
  const long long base = (long long)RP * nt;  // first streamed pack
  const long long nq = nv - base;             // streamed packs (> 0 only for block teams)
  if constexpr (BLOCK && STREAM) {
    if (nq > 0) {
      const T* xs = xr + base * W;
      long long q = ti;
#pragma unroll 1
      for (; q + (kU<T> - 1) * (long long)nt < nq; q += (long long)kU<T> * nt) {
        Vec<T, W> u[kU<T>];
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) u[k] = load_vec<W, kSoftmaxLd<T>>(xs + (q + k * nt) * W);
#pragma unroll
        for (int k = 0; k < kU<T>; ++k)
          if (q + k * nt < cache_packs) sts<W>(cache + (q + k * nt) * W, u[k]);
        ms_update<T, W, kU<T>>(u, kU<T>, m, s);
      }
#pragma unroll
      for (int k = 0; k < kU<T> - 1; ++k) {  // fixed-count tail: no 64-bit trip-count division
        const long long qq = q + k * nt;
        if (qq < nq) {
          Vec<T, W> u[1];
          u[0] = load_vec<W, kSoftmaxLd<T>>(xs + qq * W);
          if (qq < cache_packs) sts<W>(cache + qq * W, u[0]);
          ms_update<T, W, 1>(u, 1, m, s);
        }
      }
    }
  }
  Red<A, 2> st;
  st.f[0] = m;
  st.f[1] = s;
  if constexpr (SPLIT) (*cluster)(st.f, ArrayOp<MaxSumOp<T, 2>, A, 2>{});
  else st = team_allreduce<MaxSumOp<T, 2>, BLOCK>(st, red, parity, nt);
  const A r = safe_ref(st.f[0]);
  const A inv = A(1) / st.f[1];  // all -inf row: 1/0 = inf, times exp(-inf) = 0 -> NaN
  if (e.has) yr[e.off] = kk::from_acc<T>(ex<T>(xe - r) * inv);
#pragma unroll
  for (int k = 0; k < RP; ++k) {
    const long long p = ti + (long long)k * nt;
    if (p < nv) {
      A o[W];
#pragma unroll
      for (int j = 0; j < W; ++j) o[j] = ex<T>(kk::acc_at(v[k], j) - r) * inv;
      store_vec<W, SPLIT>(yr + p * W, kk::acc_to_vec<T, W>(o));
    }
  }
  if constexpr (BLOCK && STREAM) {
    if (nq > 0) {
      const T* xs = xr + base * W;
      T* ys = yr + base * W;
      long long q = ti;
#pragma unroll 1
      for (; q < nq; q += (long long)kU<T> * nt) {
        Vec<T, W> u[kU<T>];
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) {
          const long long qq = q + k * nt;
          if (qq < cache_packs) u[k] = lds<W>(cache + qq * W);
          else if (qq < nq) u[k] = load_vec<W, kSoftmaxLd<T>>(xs + qq * W);
        }
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) {
          const long long qq = q + k * nt;
          if (qq < nq) {
            A o[W];
#pragma unroll
            for (int j = 0; j < W; ++j) o[j] = ex<T>(kk::acc_at(u[k], j) - r) * inv;
            store_vec<W>(ys + qq * W, kk::acc_to_vec<T, W>(o));
          }
        }
      }
    }
  }
}

// A held row of a block of at least kTwoReductionThreads: the row's max first, then the sum of exponentials against
// it, in two block reductions with no exponential in their combines (fwd_row's one reduction of (max, sum) pairs
// takes two per combine). Pack indices are ints (nv <= RP * 512). KEEP: the exponentials stay in registers for the
// output instead of being taken again; apart from fwd_row, the packs are dead once they are taken.
template <typename T, int W, int RP, bool KEEP>
__device__ __forceinline__ void held_two_row(const T* xr, T* yr, int nv, int ti, int nt, acc_t<T>* red, int& parity,
                                             kk::Extra e) {
  using A = acc_t<T>;
  Vec<T, W> v[RP];
#pragma unroll
  for (int k = 0; k < RP; ++k)
    if (ti + k * nt < nv) v[k] = load_vec<W, kSoftmaxLd<T>>(xr + (ti + k * nt) * W);
  const A xe = kk::extra_value(xr, e, ninf<A>());
  A m = xe;
#pragma unroll
  for (int k = 0; k < RP; ++k)
    if (ti + k * nt < nv) {
#pragma unroll
      for (int j = 0; j < W; ++j) m = amax(m, kk::acc_at(v[k], j));
    }
  const A r = safe_ref(team_allreduce<MaxOp<T>, true>(Red<A, 1>{{m}}, red, parity).f[0]);
  const A te = e.has ? ex<T>(xe - r) : A(0);
  A s = te, kept[KEEP ? RP : 1][KEEP ? W : 1];
#pragma unroll
  for (int k = 0; k < RP; ++k)
    if (ti + k * nt < nv) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const A t = ex<T>(kk::acc_at(v[k], j) - r);
        s += t;
        if constexpr (KEEP) kept[k][j] = t;
      }
    }
  const A inv = A(1) / team_allreduce<SumOp<T>, true>(Red<A, 1>{{s}}, red, parity).f[0];  // all -inf: 1/0, then NaN
  if (e.has) yr[e.off] = kk::from_acc<T>(te * inv);
#pragma unroll
  for (int k = 0; k < RP; ++k)
    if (ti + k * nt < nv) {
      A o[W];
#pragma unroll
      for (int j = 0; j < W; ++j) o[j] = (KEEP ? kept[k][j] : ex<T>(kk::acc_at(v[k], j) - r)) * inv;
      store_vec<W>(yr + (ti + k * nt) * W, kk::acc_to_vec<T, W>(o));
    }
}

// Warp rows in teams of G lanes (team_lanes): f(the RowAt of this lane's row in x, its place in the team, G) at each of
// the warp's turns. All its lanes take every turn, since its butterflies take every lane: a team with no row gets no
// packs.
template <int G, int W, bool SHIFT, typename T, class F>
__device__ __forceinline__ void team_turns(const T* x, long long rows, long long cols, F&& f) {
  const int ti = (threadIdx.x & 31) % G;
#pragma unroll 1
  for (long long base = team_base<G>(); base < rows; base += team_stride<G>()) {
    const long long row = base + (threadIdx.x & 31) / G;
    f(row < rows ? kk::row_at<W, SHIFT>(x, row, cols, ti) : kk::RowAt{}, ti, G);
  }
}
// team_turns at team_lanes' G for rows of nv packs, `per` a lane.
template <bool TEAMS, int W, bool SHIFT, typename T, class F>
__device__ __forceinline__ void warp_rows(const T* x, long long rows, long long cols, long long nv, int per, F&& f) {
  const int g = team_lanes<TEAMS>(nv, per, SHIFT ? 2 * W : 8);
  if (g == 32) team_turns<32, W, SHIFT>(x, rows, cols, f);
  else if (g == 16) team_turns<16, W, SHIFT>(x, rows, cols, f);
  else team_turns<8, W, SHIFT>(x, rows, cols, f);
}

// HELD: rows held whole in the registers of one block (traps otherwise); no streaming code. SHIFT: rows of any width
// on the 16-byte path (kk::RowShift; x and y congruent16).
template <typename T, int W, int RP, bool HELD, bool KEEP, bool SHIFT, bool TEAMS>
__device__ __forceinline__ void softmax_fwd_run(const T* x, T* y, long long rows, long long cols, acc_t<T>* red) {
  extern __shared__ uint4 kk_sm_dyn[];
  const long long nv = cols / W;  // a shifted row's packs: nv or nv - 1
  int parity = 0;
  if (nv <= RP * 32) {  // warp rows in teams (team_lanes): the whole row fits in the team's registers (no streaming)
    warp_rows<TEAMS, W, SHIFT>(x, rows, cols, nv, RP, [&](const kk::RowAt& a, int ti, int g) {
      fwd_row<T, W, false, RP, true>(x + a.first, y + a.first, a.nv, ti, g, nullptr, 0, red, parity, a.e);
    });
  } else {
    if constexpr (HELD) {
      // One row per block, no grid-stride loop, whose state took 8 registers more (40 for 32 in the 16-bit rows of 2
      // packs, kernels/check_compile.py; ops/softmax.py _HELD_WARPS_LOW_GBPS says what that did).
      if (nv > RP * (long long)blockDim.x || gridDim.x < rows) __trap();
      const long long row = blockIdx.x;
      if (row >= rows) return;
      const kk::RowAt a = kk::row_at<W, SHIFT>(x, row, cols, threadIdx.x);
      if (blockDim.x >= kTwoReductionThreads)
        held_two_row<T, W, RP, KEEP>(x + a.first, y + a.first, (int)a.nv, threadIdx.x, blockDim.x, red, parity, a.e);
      else
        fwd_row<T, W, true, RP, false>(x + a.first, y + a.first, a.nv, threadIdx.x, blockDim.x, nullptr, 0, red, parity,
                                       a.e);
    } else {
      T* cache = reinterpret_cast<T*>(kk_sm_dyn);
      const long long cache_packs = dyn_smem_bytes() / (W * sizeof(T));
#pragma unroll 1
      for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const kk::RowAt a = kk::row_at<W, SHIFT>(x, row, cols, threadIdx.x);
        fwd_row<T, W, true, RP, true>(x + a.first, y + a.first, a.nv, threadIdx.x, blockDim.x, cache, cache_packs, red,
                                      parity, a.e);
      }
    }
  }
}

// ---------------------------------------------------------------- softmax backward, one row
// gx = y * (gy - dot), dot = sum(gy * y) in A. Same register / stream / shared-cache scheme as forward
// with RP packs of each tensor in registers; the cache holds (gy, y) pack pairs. gx may alias gy or y
// exactly (each pack is read and written by the same thread).
template <typename T, int W>
__device__ __forceinline__ void dot_update(const Vec<T, W>& g, const Vec<T, W>& yv, acc_t<T>& d) {
#pragma unroll
  for (int j = 0; j < W; ++j) d = kk::fma_acc(kk::acc_at(g, j), kk::acc_at(yv, j), d);
}
template <typename T, int W>
__device__ __forceinline__ Vec<T, W> bwd_out(const Vec<T, W>& g, const Vec<T, W>& yv, acc_t<T> dot) {
  acc_t<T> o[W];
#pragma unroll
  for (int j = 0; j < W; ++j) o[j] = kk::acc_at(yv, j) * (kk::acc_at(g, j) - dot);
  return kk::acc_to_vec<T, W>(o);
}

template <typename T, int W, bool BLOCK, int RP, bool STREAM, bool SPLIT = false, int PARTS = 0>
__device__ __forceinline__ void bwd_row(const T* gr, const T* yr, T* gxr, long long nv, int ti, int nt, T* cache,
                                        long long cache_packs, acc_t<T>* red, int& parity,
                                        kk::Extra e = {},
                                        kk::ClusterRowReduce<1, acc_t<T>, SPLIT, PARTS>* cluster = nullptr) {
  using A = acc_t<T>;
  Vec<T, W> vg[RP], vy[RP];
#pragma unroll
  for (int k = 0; k < RP; ++k) {
    const long long p = ti + (long long)k * nt;
    if (p < nv) {
      vg[k] = load_vec<W, kSoftmaxLd<T>>(gr + p * W);
      vy[k] = load_vec<W, kSoftmaxLd<T>>(yr + p * W);
    }
  }
  const A ge = kk::extra_value(gr, e, A(0)), ye = kk::extra_value(yr, e, A(0));
  A d = e.has ? ge * ye : A(0);
#pragma unroll
  for (int k = 0; k < RP; ++k)
    if (ti + (long long)k * nt < nv) dot_update<T, W>(vg[k], vy[k], d);
  const long long base = (long long)RP * nt;
  const long long nq = nv - base;
  if constexpr (BLOCK && STREAM) {
    if (nq > 0) {
      const T* gs = gr + base * W;
      const T* ys = yr + base * W;
      long long q = ti;
#pragma unroll 1
      for (; q + (kU<T> - 1) * (long long)nt < nq; q += (long long)kU<T> * nt) {
        Vec<T, W> ug[kU<T>], uy[kU<T>];
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) {
          ug[k] = load_vec<W, kSoftmaxLd<T>>(gs + (q + k * nt) * W);
          uy[k] = load_vec<W, kSoftmaxLd<T>>(ys + (q + k * nt) * W);
        }
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) {
          const long long qq = q + k * nt;
          if (qq < cache_packs) {
            sts<W>(cache + 2 * qq * W, ug[k]);
            sts<W>(cache + (2 * qq + 1) * W, uy[k]);
          }
          dot_update<T, W>(ug[k], uy[k], d);
        }
      }
#pragma unroll
      for (int k = 0; k < kU<T> - 1; ++k) {
        const long long qq = q + k * nt;
        if (qq < nq) {
          const Vec<T, W> g1 = load_vec<W, kSoftmaxLd<T>>(gs + qq * W), y1 = load_vec<W, kSoftmaxLd<T>>(ys + qq * W);
          if (qq < cache_packs) {
            sts<W>(cache + 2 * qq * W, g1);
            sts<W>(cache + (2 * qq + 1) * W, y1);
          }
          dot_update<T, W>(g1, y1, d);
        }
      }
    }
  }
  Red<A, 1> st;
  st.f[0] = d;
  if constexpr (SPLIT) (*cluster)(st.f);
  else st = team_allreduce<SumOp<T>, BLOCK>(st, red, parity, nt);
  const A dot = st.f[0];
  if (e.has) gxr[e.off] = kk::from_acc<T>(ye * (ge - dot));
#pragma unroll
  for (int k = 0; k < RP; ++k) {
    const long long p = ti + (long long)k * nt;
    if (p < nv) store_vec<W, SPLIT>(gxr + p * W, bwd_out<T, W>(vg[k], vy[k], dot));
  }
  if constexpr (BLOCK && STREAM) {
    if (nq > 0) {
      const T* gs = gr + base * W;
      const T* ys = yr + base * W;
      T* gxs = gxr + base * W;
      long long q = ti;
#pragma unroll 1
      for (; q < nq; q += (long long)kU<T> * nt) {
        Vec<T, W> ug[kU<T>], uy[kU<T>];
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) {
          const long long qq = q + k * nt;
          if (qq < cache_packs) {
            ug[k] = lds<W>(cache + 2 * qq * W);
            uy[k] = lds<W>(cache + (2 * qq + 1) * W);
          } else if (qq < nq) {
            ug[k] = load_vec<W, kSoftmaxLd<T>>(gs + qq * W);
            uy[k] = load_vec<W, kSoftmaxLd<T>>(ys + qq * W);
          }
        }
#pragma unroll
        for (int k = 0; k < kU<T>; ++k) {
          const long long qq = q + k * nt;
          if (qq < nq) store_vec<W>(gxs + qq * W, bwd_out<T, W>(ug[k], uy[k], dot));
        }
      }
    }
  }
}

template <typename T, int W, int RP, bool HELD, bool SHIFT, bool TEAMS>
__device__ __forceinline__ void softmax_bwd_run(const T* gy, const T* y, T* gx, long long rows, long long cols,
                                                acc_t<T>* red) {
  extern __shared__ uint4 kk_sm_dyn[];
  const long long nv = cols / W;  // a shifted row's packs: nv or nv - 1
  int parity = 0;
  if (nv <= RP * 32) {  // warp teams, as softmax_fwd_run's
    warp_rows<TEAMS, W, SHIFT>(y, rows, cols, nv, RP, [&](const kk::RowAt& a, int ti, int g) {
      const long long o = a.first;
      bwd_row<T, W, false, RP, true>(gy + o, y + o, gx + o, a.nv, ti, g, nullptr, 0, red, parity, a.e);
    });
  } else {
    if (HELD && nv > RP * (long long)blockDim.x) __trap();
    T* cache = reinterpret_cast<T*>(kk_sm_dyn);
    const long long cache_packs = dyn_smem_bytes() / (2 * W * sizeof(T));
#pragma unroll 1
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const kk::RowAt a = kk::row_at<W, SHIFT>(y, row, cols, threadIdx.x);
      const long long o = a.first;
      bwd_row<T, W, true, RP, !HELD>(gy + o, y + o, gx + o, a.nv, threadIdx.x, blockDim.x, cache, cache_packs, red,
                                     parity, a.e);
    }
  }
}

// ---------------------------------------------------------------- cross-entropy forward, one row
// Single streaming pass: (max, sum exp, and with SX, which label smoothing needs, sum x); then the team's thread 0
// writes. It loads the target before the pass and x[target] after it, so that no branch on the target waits for its
// load before the row's loads go out: within 0.6% of loading both first (H200, bench/ab_source.py,
// h200-2026-11-23-s18/ab-ce-target-late.json, whose bf16 4096 row was its run's first case, which reads high).
// xr: the row's first pack, `head` columns into the row (shifted rows, kk::RowShift); e: this thread's extra element.
template <typename T, int W, bool BLOCK, int U, bool SX>
__device__ __forceinline__ void ce_fwd_row(const T* xr, long long head, long long row, long long nv, long long cols,
                                           int ti, int nt, const long long* target, acc_t<T>* loss, acc_t<T>* stats,
                                           long long ignore_index, double label_smoothing, acc_t<T>* red,
                                           int& parity, acc_t<T> (&part)[2], kk::Extra e) {
  using A = acc_t<T>;
  long long t = 0;
  A xt = A(0);
  if (ti == 0) t = target[row];
  const A xe = kk::extra_value(xr, e, ninf<A>());
  A m = xe, s = e.has ? ex<T>(xe - safe_ref(xe)) : A(0), sx = e.has ? xe : A(0);
  long long q = ti;
#pragma unroll 1
  for (; q + (U - 1) * (long long)nt < nv; q += (long long)U * nt) {
    Vec<T, W> u[U];
#pragma unroll
    for (int k = 0; k < U; ++k) u[k] = load_vec<W, kCeLd>(xr + (q + k * nt) * W);
    ms_update<T, W, U>(u, U, m, s);
    if constexpr (SX) {
#pragma unroll
      for (int k = 0; k < U; ++k)
#pragma unroll
        for (int j = 0; j < W; ++j) sx += kk::acc_at(u[k], j);
    }
  }
#pragma unroll
  for (int k = 0; k < U - 1; ++k) {
    const long long qq = q + k * nt;
    if (qq < nv) {
      Vec<T, W> u[1];
      u[0] = load_vec<W, kCeLd>(xr + qq * W);
      ms_update<T, W, 1>(u, 1, m, s);
      if constexpr (SX) {
#pragma unroll
        for (int j = 0; j < W; ++j) sx += kk::acc_at(u[0], j);
      }
    }
  }
  if (ti == 0 && t >= 0 && t < cols) xt = to_acc(xr[t - head]);
  Red<A, SX ? 3 : 2> st;
  st.f[0] = m;
  st.f[1] = s;
  if constexpr (SX) st.f[2] = sx;
  st = team_allreduce<MaxSumOp<T, SX ? 3 : 2>, BLOCK>(st, red, parity);
  if (ti == 0) {
    // lse = m + ls_m, kept as its two parts: with logits of ~1e30 tied at the max, m + ls_m rounds to m
    // and loses the O(1) part that the loss and the gradient need.
    const A m = safe_ref(st.f[0]);
    const A ls_m = lg(st.f[1]);  // all -inf: log(0) = -inf
    stats[2 * row] = m;
    stats[2 * row + 1] = ls_m;
    A out;
    if (t == ignore_index) {
      out = A(0);
    } else if (t < 0 || t >= cols) {
      out = qnan<A>();
    } else {
      out = ls_m - (xt - m);
      if constexpr (SX) {
        const A ls = (A)label_smoothing;
        out = (A(1) - ls) * out + ls * (ls_m + (m - st.f[2] / (A)cols));
      }
    }
    if (loss != nullptr) loss[row] = out;
    part[0] += out;
    part[1] += t == ignore_index ? A(0) : A(1);
  }
}

template <typename T, int W, int U, bool SX, bool SHIFT>
__device__ __forceinline__ void ce_fwd_run(const T* x, const long long* target, acc_t<T>* loss, acc_t<T>* stats,
                                           acc_t<T>* partial, long long rows, long long cols,
                                           long long ignore_index, double ls, acc_t<T>* red) {
  using A = acc_t<T>;
  const long long nv = cols / W;  // a shifted row's packs: nv or nv - 1
  int parity = 0;
  A part[2] = {A(0), A(0)};  // this team's (sum of losses, rows not ignored), in its thread 0
  const bool warp_team = nv <= kWarpRowPacks;
  if (warp_team) {
    const long long nw = blockDim.x >> 5;
    const int lane = threadIdx.x & 31;
#pragma unroll 1
    for (long long row = blockIdx.x * nw + (threadIdx.x >> 5); row < rows; row += (long long)gridDim.x * nw) {
      const kk::RowAt a = kk::row_at<W, SHIFT>(x, row, cols, lane);
      ce_fwd_row<T, W, false, U, SX>(x + a.first, a.head, row, a.nv, cols, lane, 32, target, loss, stats,
                                     ignore_index, ls, red, parity, part, a.e);
    }
  } else {
#pragma unroll 1
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const kk::RowAt a = kk::row_at<W, SHIFT>(x, row, cols, threadIdx.x);
      ce_fwd_row<T, W, true, U, SX>(x + a.first, a.head, row, a.nv, cols, threadIdx.x, blockDim.x, target, loss,
                                    stats, ignore_index, ls, red, parity, part, a.e);
    }
  }
  if (partial == nullptr) return;
  // The block's partial, in thread 0's partial[0..1]: its teams' sums added in warp order (deterministic for a given
  // grid and block).
  __shared__ A teams[2 * 32];
  const int warp = threadIdx.x >> 5;
  if (warp_team && (threadIdx.x & 31) == 0) {
    teams[2 * warp] = part[0];
    teams[2 * warp + 1] = part[1];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (warp_team) {
      part[0] = part[1] = A(0);
      for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
        part[0] += teams[2 * w];
        part[1] += teams[2 * w + 1];
      }
    }
    partial[0] = part[0];
    partial[1] = part[1];
  }
}

// The forward over every row: the 16-byte path where cols % VEC == 0 and logits are 16-byte aligned, else shifted rows
// (kk::RowShift: one tensor is always congruent with itself; rows of kk::kShiftMaxCols or more one element at a time).
// Without label smoothing the rows' sums of x are not needed (SX = false): one add per element and a third of each
// row's reduction fewer (H200: bf16 8192 x 65536 268.7 -> 263.9 us, the other sizes within 0.8%;
// h200-2026-11-23-s18/ab-ce-no-sx2.json).
template <typename T, int U, bool SX>
__device__ __forceinline__ void ce_fwd_any(const T* logits, const long long* target, acc_t<T>* loss, acc_t<T>* stats,
                                           acc_t<T>* partial, long long rows, long long cols, long long ignore_index,
                                           double ls, acc_t<T>* red) {
  constexpr int V = kk::kVec<T>;
  if (cols % V == 0 && kk::aligned16(kk::addr(logits)))
    ce_fwd_run<T, V, U, SX, false>(logits, target, loss, stats, partial, rows, cols, ignore_index, ls, red);
  else if (cols < kk::kShiftMaxCols)
    ce_fwd_run<T, V, U, SX, true>(logits, target, loss, stats, partial, rows, cols, ignore_index, ls, red);
  else
    ce_fwd_run<T, 1, U, SX, false>(logits, target, loss, stats, partial, rows, cols, ignore_index, ls, red);
}
template <typename T, int U>
__device__ __forceinline__ void ce_fwd(const T* logits, const long long* target, acc_t<T>* loss, acc_t<T>* stats,
                                       acc_t<T>* partial, long long rows, long long cols, long long ignore_index,
                                       double ls, acc_t<T>* red) {
  if (ls != 0.0) ce_fwd_any<T, U, true>(logits, target, loss, stats, partial, rows, cols, ignore_index, ls, red);
  else ce_fwd_any<T, U, false>(logits, target, loss, stats, partial, rows, cols, ignore_index, 0.0, red);
}

// ---------------------------------------------------------------- cross-entropy backward, one row
// grad = scale * (exp((x - m) - ls_m) - ls/cols - (c == t ? 1 - ls : 0)); ignored rows: 0 (logits not read).
// Each pack is read once by the thread that then writes it: grad == logits is safe. TARGET_BRANCH: packs without the
// target column take a branch with no per-element select, where a label smoothing of 0 folds the subtraction away
// (x - 0 is x: the same bits). It made the held rows 2.3-3.8% faster (bf16 8192 x 65536 fwd_bwd 565.4 -> 552.6 us,
// 2048 x 262144 648.3 -> 623.4) and the streamed backward 0.4-0.9% slower (bench/ab_source.py,
// h200-2026-11-27-s38/ab-ce-v3.log, ab-ce-held-branch.log), so only kk_cross_entropy_held takes it.
template <typename T, int W, bool TARGET_BRANCH = false>
__device__ __forceinline__ Vec<T, W> ce_bwd_pack(const Vec<T, W>& u, long long c0, long long t, acc_t<T> m,
                                                 acc_t<T> ls_m, acc_t<T> sc, acc_t<T> smooth, acc_t<T> hit) {
  using A = acc_t<T>;
  const long long dt = t - c0;
  const bool has_target = dt >= 0 && dt < W;
  A o[W];
  if (TARGET_BRANCH && !has_target) {
#pragma unroll
    for (int j = 0; j < W; ++j) o[j] = sc * (ex<T>((kk::acc_at(u, j) - m) - ls_m) - smooth);
  } else {
    const int jt = has_target ? (int)dt : -1;
#pragma unroll
    for (int j = 0; j < W; ++j) o[j] = sc * (ex<T>((kk::acc_at(u, j) - m) - ls_m) - (j == jt ? hit : smooth));
  }
  return kk::acc_to_vec<T, W>(o);
}

// xr, gr: the row's first pack; t: the target's column from it (shifted rows: kk::RowShift); e: the extra element;
// LD: how the logits load (kk::Load).
template <typename T, int W, int LD>
__device__ __forceinline__ void ce_bwd_row(const T* xr, T* gr, long long nv, int ti, int nt, long long t, acc_t<T> m,
                                           acc_t<T> ls_m, acc_t<T> sc, acc_t<T> smooth, acc_t<T> hit, bool ignored,
                                           kk::Extra e) {
  using A = acc_t<T>;
  if (e.has) {  // an ignored row's logits are not read
    A v = A(0);
    if (!ignored) v = sc * (ex<T>((to_acc(kk::load_nc(xr + e.off)) - m) - ls_m) - (e.off == t ? hit : smooth));
    gr[e.off] = kk::from_acc<T>(v);
  }
  if (ignored) {
    A z[W];
#pragma unroll
    for (int j = 0; j < W; ++j) z[j] = A(0);
    const Vec<T, W> zv = kk::acc_to_vec<T, W>(z);
#pragma unroll 1
    for (long long q = ti; q < nv; q += nt) store_vec<W>(gr + q * W, zv);
    return;
  }
  long long q = ti;
#pragma unroll 1
  for (; q + (kU<T> - 1) * (long long)nt < nv; q += (long long)kU<T> * nt) {
    Vec<T, W> u[kU<T>];
#pragma unroll
    for (int k = 0; k < kU<T>; ++k) u[k] = load_vec<W, LD>(xr + (q + k * nt) * W);
#pragma unroll
    for (int k = 0; k < kU<T>; ++k)
      store_vec<W>(gr + (q + k * nt) * W, ce_bwd_pack<T, W>(u[k], (q + k * nt) * W, t, m, ls_m, sc, smooth, hit));
  }
#pragma unroll
  for (int k = 0; k < kU<T> - 1; ++k) {
    const long long qq = q + k * nt;
    if (qq < nv)
      store_vec<W>(gr + qq * W,
                   ce_bwd_pack<T, W>(load_vec<W, LD>(xr + qq * W), qq * W, t, m, ls_m, sc, smooth, hit));
  }
}

// ce_bwd_pack's label-smoothing terms for rows of cols columns: every column's ls / cols, and the target's
// (1 - ls) + ls / cols.
template <typename A> struct CeSmooth {
  A smooth, hit;
};
template <typename A> __device__ __forceinline__ CeSmooth<A> ce_smooth(double label_smoothing, long long cols) {
  const A ls = (A)label_smoothing;
  const A smooth = ls / (A)cols;
  return CeSmooth<A>{smooth, (A(1) - ls) + smooth};
}

// A row's inputs to the gradient besides its logits: the target, the forward's (m, ls_m) and the scale.
template <typename A> struct CeRow {
  long long t;
  A m, ls_m, sc;
};

// Loaded without depending on each other (stats and row_scale exist for every row, ignored or not).
template <typename A, typename S>
__device__ __forceinline__ CeRow<A> ce_row_meta(const long long* target, const A* stats, const S* row_scale,
                                               long long scale_stride, A div, long long row) {
  return CeRow<A>{target[row], stats[2 * row], stats[2 * row + 1],
                  static_cast<A>(to_acc(row_scale[row * scale_stride])) / div};
}

template <typename T, int W, bool SHIFT, int LD, bool TEAMS, typename S>
__device__ __forceinline__ void ce_bwd_run(const T* x, const long long* target, const acc_t<T>* stats,
                                           const S* row_scale, long long scale_stride, const acc_t<T>* divisor,
                                           T* grad, long long rows, long long cols, long long ignore_index,
                                           double label_smoothing) {
  using A = acc_t<T>;
  const long long nv = cols / W;
  const CeSmooth<A> sm = ce_smooth<A>(label_smoothing, cols);  // not a structured binding: lambdas capture it
  // The next row's target, stats and scale are loaded before this row's logits, so that their latency is
  // not paid before each row's first logit load (double: no registers left for them, 24 bytes of spills).
  constexpr bool kPrefetch = sizeof(A) == 4;
  const A div = divisor != nullptr ? *divisor : A(1);
  // Rows first, first + stride, ... of thread ti of nt.
  auto run = [&](int ti, int nt, long long first, long long stride) {
    if (first >= rows) return;
    CeRow<A> cur = ce_row_meta(target, stats, row_scale, scale_stride, div, first);
#pragma unroll 1
    for (long long row = first; row < rows; row += stride) {
      const long long nxt = row + stride < rows ? row + stride : row;
      CeRow<A> next;
      if constexpr (kPrefetch) next = ce_row_meta(target, stats, row_scale, scale_stride, div, nxt);
      const bool ignored = cur.t == ignore_index;
      const kk::RowAt a = kk::row_at<W, SHIFT>(x, row, cols, ti);
      ce_bwd_row<T, W, LD>(x + a.first, grad + a.first, a.nv, ti, nt, cur.t - a.head, ignored ? A(0) : cur.m,
                           ignored ? A(0) : cur.ls_m, ignored ? A(0) : cur.sc, sm.smooth, sm.hit, ignored, a.e);
      if constexpr (!kPrefetch) next = ce_row_meta(target, stats, row_scale, scale_stride, div, nxt);
      cur = next;
    }
  };
  if (nv > kWarpRowPacks) {
    run(threadIdx.x, blockDim.x, blockIdx.x, gridDim.x);
  } else {
    // Warp rows in teams (team_lanes) whose lanes take kU packs at once; a team's lanes do not shuffle, so each loops
    // over its own team's rows.
    const int g = team_lanes<TEAMS>(nv, kU<T>, SHIFT ? 2 * W : 8), lane = threadIdx.x & 31;
    if (g == 32) run(lane, 32, team_base<32>(), team_stride<32>());
    else if (g == 16) run(lane % 16, 16, team_base<16>() + lane / 16, team_stride<16>());
    else run(lane % 8, 8, team_base<8>() + lane / 8, team_stride<8>());
  }
}

// Rows split over a cluster of gridDim.y CTAs (sm_90+, 16-byte path), held whole in their registers: thread
// ti = kk::row_thread<true>() of the row's nt = kk::row_threads<true>() holds packs ti + k * nt (k < RP; the
// kernel traps where nv > RP * nt). The row's N values are reduced over every warp of the cluster
// (kk::ClusterRowReduce). Clusters loop over rows:
// row(offset of the row's first element, nv, ti, nt, parity, the cluster's ClusterRowReduce).
// CTAS > 0: blocks of kk::kFixedThreads in clusters of CTAS, fixed at compile time (else it traps), so that nt is a
// constant in the inlined row: pack offsets become immediates and the cluster reduction's gather unrolls.
template <int N, typename A, int CTAS> using SplitReduce = kk::ClusterRowReduce<N, A, true, kk::kFixedParts<CTAS>>;
// SHIFT: rows of any width (kk::row_at on x).
template <int N, typename T, int W, int RP, int CTAS = 0, bool SHIFT = false, class Row>
__device__ __forceinline__ void split_rows(const T* x, long long rows, long long cols, Row&& row) {
  using A = acc_t<T>;
  SplitReduce<N, A, CTAS> cluster;
  kk::check_fixed_geometry<CTAS>();
  const int nt = CTAS ? kk::kFixedThreads * CTAS : (int)kk::row_threads<true>();
  const int ti = CTAS ? int(blockIdx.y) * kk::kFixedThreads + int(threadIdx.x) : kk::row_thread<true>();
  if (cols / W > RP * (long long)nt) __trap();
  int parity = 0;
#pragma unroll 1
  for (long long r = blockIdx.x; r < rows; r += gridDim.x)
    row(r, kk::row_at<W, SHIFT>(x, r, cols, ti), ti, nt, parity, cluster);
  cluster.finish();
}

template <typename T, int W, int RP, int CTAS, bool SHIFT>
__device__ __forceinline__ void softmax_fwd_split(const T* x, T* y, long long rows, long long cols, acc_t<T>* red) {
  split_rows<2, T, W, RP, CTAS, SHIFT>(x, rows, cols, [&](long long, const kk::RowAt& a, int ti, int nt, int& parity,
                                                          SplitReduce<2, acc_t<T>, CTAS>& cluster) {
    fwd_row<T, W, true, RP, false, true, kk::kFixedParts<CTAS>>(x + a.first, y + a.first, a.nv, ti, nt, nullptr, 0, red,
                                                                parity, a.e, &cluster);
  });
}

template <typename T, int W, int RP, int CTAS, bool SHIFT>
__device__ __forceinline__ void softmax_bwd_split(const T* gy, const T* y, T* gx, long long rows, long long cols,
                                                  acc_t<T>* red) {
  split_rows<1, T, W, RP, CTAS, SHIFT>(y, rows, cols, [&](long long, const kk::RowAt& a, int ti, int nt, int& parity,
                                                          SplitReduce<1, acc_t<T>, CTAS>& cluster) {
    const long long o = a.first;
    bwd_row<T, W, true, RP, false, true, kk::kFixedParts<CTAS>>(gy + o, y + o, gx + o, a.nv, ti, nt, nullptr, 0, red,
                                                                parity, a.e, &cluster);
  });
}

__device__ __forceinline__ void check_block() {
  if (blockDim.x & 31u || blockDim.x > 32 * kMaxWarps) __trap();  // teams are whole warps, at most kMaxWarps
}

// ---------------------------------------------------------------- the reduced loss's finish
// Two 64-bit words per launch, zeroed before it and set back to 0 by its last block. words[0]: arrivals (bits 53-63)
// and the blocks' partial sums in fixed point, units of 2^-frac_bits (bits 0-52); words[1]: arrivals, blocks whose
// partial spilled (bits 42-52) and rows counted (bits 0-41). Integer adds are exact in any order, so the sum is
// deterministic with relaxed atomics and no fence: each block's end is one L2 round trip, and the last block has the
// whole sum without reading anything back.
constexpr int kArrivalShift = 53, kSpilledShift = 42;
constexpr unsigned long long kArrival = 1ull << kArrivalShift, kSpilled = 1ull << kSpilledShift;
constexpr unsigned kLossMaxBlocks = 2047;       // arrivals fit 11 bits
constexpr double kFixedLimit = 4398046511104.0;  // 2^42: 2047 blocks' units stay below 2^53
constexpr unsigned long long kSpillEmpty = ~0ull;  // a spill slot with no partial (a NaN partial is stored canonical)

struct LossTotals {
  unsigned long long sum, tally;  // both words once every block has arrived
};

// The fixed point's units, 2^-frac_bits: 36 - ceil(log2(the most rows a block takes)), clamped to [0, 36], so that a
// block's partial stays below 2^42 units while its rows' mean loss is below 64. A block of nw warps takes at most
// nw * ceil(rows / (nw * grid)) rows (warp teams; block teams take fewer), so the rounding errs by less than
// (rows + nw * grid) * 2^-36 in the total.
__device__ __forceinline__ int loss_frac_bits(long long rows) {
  const long long nw = blockDim.x >> 5, per_wave = nw * gridDim.x;
  const long long most = nw * (((rows > 0 ? rows : 1) + per_wave - 1) / per_wave);
  const int ceil_log2 = most > 1 ? 64 - __clzll(most - 1) : 0;
  return ceil_log2 < 36 ? 36 - ceil_log2 : 0;
}

// Thread 0 of each block, once: adds the block's partial (sum p of its rows' losses, c rows counted) to both words.
// A partial outside [0, 2^(42 - frac_bits)) (NaN, inf, a negative rounding, a huge loss) and every double partial
// is stored to spill[blockIdx.x] instead, published by a release on words[1]. True in the block that arrives last,
// with the totals: it has polled words[0] until every block's sum is in, set both words back to 0 and, where a
// partial spilled, fenced so that the spill slots read after it are current.
template <typename A>
__device__ __forceinline__ bool loss_arrive(A p, A c, int frac_bits, double* spill, unsigned long long* words,
                                            LossTotals& w) {
  const double scaled = ldexp((double)p, frac_bits);
  const bool spills = sizeof(A) == 8 || !(scaled >= 0.0 && scaled < kFixedLimit);
  const unsigned long long add = kArrival + (spills ? 0ull : (unsigned long long)llrint(scaled));
  const unsigned long long tally = kArrival + (spills ? kSpilled : 0ull) + (unsigned long long)c;
  unsigned long long sum, count;
  if (spills) {
    spill[blockIdx.x] = p == p ? (double)p : __longlong_as_double(0x7ff8000000000000ll);  // never kSpillEmpty's bits
    asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(sum) : "l"(words), "l"(add) : "memory");
    asm volatile("atom.release.gpu.global.add.u64 %0, [%1], %2;" : "=l"(count) : "l"(words + 1), "l"(tally) : "memory");
  } else {
    asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(sum) : "l"(words), "l"(add) : "memory");
    asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(count) : "l"(words + 1), "l"(tally) : "memory");
  }
  w.sum = sum + add;
  w.tally = count + tally;
  if ((w.tally >> kArrivalShift) != gridDim.x) return false;
  // Every block's sum is on its way (each adds it before its tally); it is usually in already.
  while ((w.sum >> kArrivalShift) != gridDim.x)
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w.sum) : "l"(words) : "memory");
  words[0] = 0ull;
  words[1] = 0ull;
  // Acquire: the spilling blocks' releases head release sequences that this block's read of words[1] is in.
  if (w.tally & (kArrival - kSpilled)) asm volatile("fence.acq_rel.gpu;" ::: "memory");
  return true;
}

// The last block, every thread: the spilled partials added in a fixed order (each thread's slots in turn, then a tree
// over the block: deterministic for a given grid and block), their slots set back to empty; the total in thread 0.
__device__ __forceinline__ double spilled_sum(double* spill) {
  double s = 0.0;
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) {
    const unsigned long long bits = (unsigned long long)__ldcg((const long long*)spill + i);
    if (bits == kSpillEmpty) continue;
    s += __longlong_as_double((long long)bits);
    ((unsigned long long*)spill)[i] = kSpillEmpty;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  __shared__ double warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) s += warp_sums[w];
  return s;
}

// ---------------------------------------------------------------- cross-entropy with its gradient in one pass
// The sum over one block of kTotalThreads threads of value(r) for its PER * kTotalThreads items r < rows, in double
// and in a fixed order (each thread its PER items, then team_allreduce's tree), in every thread.
constexpr int kTotalThreads = 256;
template <int PER, class F> __device__ __forceinline__ double block_total(long long rows, F value) {
  __shared__ double red[2 * 32];
  int parity = 0;
  double s = 0.0;
  const long long base = (long long)blockIdx.x * kTotalThreads * PER + threadIdx.x;
#pragma unroll
  for (int k = 0; k < PER; ++k) {  // PER loads in flight together
    const long long r = base + (long long)k * kTotalThreads;
    if (r < rows) s += value(r);
  }
  return team_allreduce<SumOp<double>, true>(Red<double, 1>{{s}}, red, parity).f[0];
}

// A reduced loss's denominator given by the caller (`by`, one element, read where it is used: any earlier kernel on
// the stream may write it): kind 1 float, 2 double, 3 int, 4 long long (ops/softmax.py _DIVISOR_KINDS); kind 0: none.
template <typename A> __device__ __forceinline__ A given_divisor(const void* by, int kind) {
  switch (kind) {
    case 1: return (A) * static_cast<const float*>(by);
    case 2: return (A) * static_cast<const double*>(by);
    case 3: return (A) * static_cast<const int*>(by);
    default: return (A) * static_cast<const long long*>(by);
  }
}

}  // namespace kk_sm

// ================================================================= kernels
// kk_softmax_fwd: y[r, :] = softmax(x[r, :]). y may be x (exact in place).
// Launch: block B (multiple of 32, <= MAXT), 1-D grid of any size; dynamic shared memory optional.
//   nv = cols / VEC on the vector path (cols % VEC == 0, x, y 16-byte aligned), else cols.
//   nv <= 32 * RP: warp rows (row in registers), 2 packs a lane at 256 threads in teams of 8-16 lanes where the row
//         fits them (kk_sm::team_lanes): B = 256, grid = min(ceil(rows / 8), occ * SMs).
//   else: block per row; up to RP packs per thread stay in registers, the next S bytes of the row in
//         dynamic shared memory (S <= max_optin_smem - static), the rest (if any) is streamed twice (L2).
//         Smaller blocks with more of the row in shared memory are faster (fewer warps per reduction):
//         B = clamp(row bytes / 128, 128, 256), doubled while the row does not fit RP * B packs + S;
//         grid = rows (bench/sweep_rows.py, H200). Needs the MAX_DYNAMIC_SHARED_SIZE attribute (Kernel.launch).
//   HELD = true: rows held whole in registers (nv <= RP * B, else the kernel traps), no shared memory and no
//         streaming code, which leaves registers for more blocks per SM: B = roundup(ceil(nv / RP), 32),
//         grid >= rows (one row per block, no grid-stride loop: a smaller grid traps; warp rows loop as above).
//         Fastest where the row fits (bench/sweep_llm.py, H200): 16-bit RP 4 with MINB 2 up to 4096 columns, then
//         RP 8 with MINB 2; float32 RP 8 with MINB 2 (94-96% of copy at 4096 and 8192).
//   SPLIT = true (with HELD; sm_90+, 16-byte path, else it traps): a row split over a cluster of S <= 8 CTAs (16
//         with CTAS), grid (G, S) with cluster dims (1, S, 1), each CTA holding its part in registers
//         (nv <= RP * B * S); G = the resident clusters, which loop over rows. ops/softmax.py's _SPLIT_FITS says
//         where it is faster.
//         y (gx) stored evict-first, as in kernels/norms.cu: bf16 8192 x 65536 584.3 -> 568.8 us, the rest within 1%.
//   occ = cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, B, S).
// RP: register packs per thread (default 4). MAXT, MINB:
// __launch_bounds__(MAXT, MINB), which caps registers at 65536 / (MAXT * MINB) (float32 with (512, 2) runs twice
// the blocks per SM without spilling, 91-93% of copy against 70% at 4096-8192 columns).
template <typename T, int MINB = 1, int RP = 4, int MAXT = 512, bool HELD = false, bool SPLIT = false, int CTAS = 0,
          bool SHIFT = false>
__global__ void __launch_bounds__(MAXT, MINB) kk_softmax_fwd(const T* x, T* y, long long rows, long long cols) {
  using A = typename kk::Acc<T>::type;
  __shared__ A red[2 * 32 * 2];
  static_assert(HELD || !SPLIT, "split rows are held whole in registers");
  if (kk::split_unsupported<SPLIT>()) return;
  if (rows <= 0 || cols <= 0) return;
  kk_sm::check_block();
  kk::check_split<SPLIT>();
  constexpr int V = kk::kVec<T>;
  constexpr bool KEEP = kk_sm::kKeepExps<RP, V, MAXT, MINB>;
  constexpr bool kTeams = kk_sm::kWarpTeams<RP, MAXT>;
  if constexpr (SHIFT) {
    if (!kk::congruent16(kk::addr(x) ^ kk::addr(y))) __trap();
    if constexpr (SPLIT) kk_sm::softmax_fwd_split<T, V, RP, CTAS, true>(x, y, rows, cols, red);
    else kk_sm::softmax_fwd_run<T, V, RP, HELD, KEEP, true, kTeams>(x, y, rows, cols, red);
  } else if (cols % V == 0 && kk::aligned16(kk::addr(x) | kk::addr(y))) {
    if constexpr (SPLIT) kk_sm::softmax_fwd_split<T, V, RP, CTAS, false>(x, y, rows, cols, red);
    else kk_sm::softmax_fwd_run<T, V, RP, HELD, KEEP, false, kTeams>(x, y, rows, cols, red);
  } else if constexpr (SPLIT) {
    __trap();  // rows are split on the 16-byte path only
  } else {
    kk_sm::softmax_fwd_run<T, 1, RP, HELD, kk_sm::kKeepExps<RP, 1, MAXT, MINB>, false, kTeams>(x, y, rows, cols, red);
  }
}

// kk_softmax_bwd: gx = y * (gy - sum(gy * y)) per row. gx may be gy or y (exact in place).
// Launch: as kk_softmax_fwd, with RP register packs per tensor per thread (default 2):
//   nv <= 32 * RP: warp rows (in teams as kk_softmax_fwd's), B = 256, grid = min(ceil(rows / 8), occ * SMs).
//   else:          block per row, B = clamp(roundup(ceil(nv / RP), 32), 128, MAXT); packs beyond RP * B
//                  stream; dynamic shared memory S = min(max_optin_smem - static, (nv - RP * B) * 32 bytes)
//                  caches them; grid = 2 * occ * SMs.
//   HELD = true: as kk_softmax_fwd's. Fastest where the row fits (bench/sweep_llm.py, H200): 16-bit RP 2 with
//                  MINB 2, float32 RP 8 (102-104% of copy at 4096 and 8192 columns).
//   SPLIT = true: as kk_softmax_fwd's.
template <typename T, int RP = 2, int MINB = 1, int MAXT = 512, bool HELD = false, bool SPLIT = false, int CTAS = 0,
          bool SHIFT = false>
__global__ void __launch_bounds__(MAXT, MINB) kk_softmax_bwd(const T* gy, const T* y, T* gx, long long rows,
                                                              long long cols) {
  using A = typename kk::Acc<T>::type;
  __shared__ A red[2 * 32 * 1];
  static_assert(HELD || !SPLIT, "split rows are held whole in registers");
  if (kk::split_unsupported<SPLIT>()) return;
  if (rows <= 0 || cols <= 0) return;
  kk_sm::check_block();
  kk::check_split<SPLIT>();
  constexpr int V = kk::kVec<T>;
  // (float32 shifted rows keep whole warps: in teams they spill 4 bytes on sm_80, kernels/check_compile.py)
  constexpr bool kTeams = kk_sm::kWarpTeams<RP, MAXT> && !(SHIFT && sizeof(T) == 4);
  if constexpr (SHIFT) {
    if (!kk::congruent16((kk::addr(gy) ^ kk::addr(y)) | (kk::addr(gx) ^ kk::addr(y)))) __trap();
    if constexpr (SPLIT) kk_sm::softmax_bwd_split<T, V, RP, CTAS, true>(gy, y, gx, rows, cols, red);
    else kk_sm::softmax_bwd_run<T, V, RP, HELD, true, kTeams>(gy, y, gx, rows, cols, red);
  } else if (cols % V == 0 && kk::aligned16(kk::addr(gy) | kk::addr(y) | kk::addr(gx))) {
    if constexpr (SPLIT) kk_sm::softmax_bwd_split<T, V, RP, CTAS, false>(gy, y, gx, rows, cols, red);
    else kk_sm::softmax_bwd_run<T, V, RP, HELD, false, kTeams>(gy, y, gx, rows, cols, red);
  } else if constexpr (SPLIT) {
    __trap();  // rows are split on the 16-byte path only
  } else {
    kk_sm::softmax_bwd_run<T, 1, RP, HELD, false, kTeams>(gy, y, gx, rows, cols, red);
  }
}

// kk_cross_entropy_fwd: stats[r] = (m, ls_m) with logsumexp(logits[r, :]) = m + ls_m (A): m the row max (0
// when it is -inf), ls_m = log(sum(exp(x - m))); loss[r] as documented in the header
// (0 for ignore_index, NaN for any other target outside [0, cols)). Single read of the logits.
// U: packs loaded per thread before they are reduced (default kU); MAXR: the register cap. 64 registers give
// 4 blocks of 256 threads per SM (80 gave 3; 2 blocks of 512 against 1 for the 65536-wide rows): 84-105% of
// copy against 72-101% (bench/sweep_llm.py, H200; U 2 and U 8 were slower). double keeps 80 (it spills at 64).
// Launch: block B (multiple of 32, <= 512; __maxnreg__(MAXR)), any grid, no dynamic shared memory:
//   nv <= 2048 (kWarpRowPacks): warp per row, B = 256, grid = min(ceil(rows / 8), waves * occ * SMs)
//   else:      block per row, B = 512, grid = min(rows, waves * occ * SMs)
//   waves: 2 for 16-bit T (0.1-2.3% faster than 1, bench/exp_ce_grid.py), else 1.
template <typename T, int U = kk_sm::kU<T>, int MAXR = sizeof(T) == 8 ? 80 : 64>
__global__ void __maxnreg__(MAXR) kk_cross_entropy_fwd(const T* logits, const long long* target,
                                                             typename kk::Acc<T>::type* loss,
                                                             typename kk::Acc<T>::type* stats, long long rows,
                                                             long long cols, long long ignore_index,
                                                             double label_smoothing) {
  __shared__ typename kk::Acc<T>::type red[2 * 32 * 3];
  if (rows <= 0 || cols <= 0) return;
  kk_sm::check_block();
  kk_sm::ce_fwd<T, U>(logits, target, loss, stats, nullptr, rows, cols, ignore_index, label_smoothing, red);
}

// kk_cross_entropy_loss: the mean (mean != 0) or sum of kk_cross_entropy_fwd's row losses in one launch, and its
// stats. Each block adds its (sum of losses, rows not ignored) to words (kk_sm::loss_arrive: fixed point in units of
// 2^-frac_bits, exact integer adds, one relaxed round trip per block), and the block that arrives last writes
// loss[0] = round_O(total / d) when mean (0 / 0 = NaN when every target is ignored, as torch), else round_O(total),
// in double, with d the count, or the caller's denominator where one is given (by_kind != 0, kk_sm::given_divisor);
// divisor[0] = d (mean) or 1 (sum), the backward's scale divisor. Deterministic: the words' integers
// do not depend on the order of arrival, and spilled partials (see loss_arrive) are added in a fixed order.
// The units (kk_sm::loss_frac_bits) keep a block's partial in the fixed point while its rows' mean loss is below 64.
// H200, bf16 32768 x 4096: 71.8 -> 70.1 us against session 30's ticket and last block reading every partial back
// (h200-2026-11-24-s31/ce-finish.log).
// Launch: as kk_cross_entropy_fwd, with a grid of 1 to kLossMaxBlocks (else it traps; rows may be 0); words: two
// zeroed 64-bit words, spill: grid doubles whose bits are all ones (both left so for the next launch).
template <typename T, typename O, int U = kk_sm::kU<T>, int MAXR = sizeof(T) == 8 ? 80 : 64>
__global__ void __maxnreg__(MAXR) kk_cross_entropy_loss(const T* logits, const long long* target,
                                                              typename kk::Acc<T>::type* stats, double* spill,
                                                              unsigned long long* words, int mean,
                                                              const void* by, int by_kind,
                                                              O* loss, typename kk::Acc<T>::type* divisor,
                                                              long long rows, long long cols, long long ignore_index,
                                                              double label_smoothing) {
  using A = typename kk::Acc<T>::type;
  __shared__ A red[2 * 32 * 3];
  __shared__ int spilled;  // in the last block: how many partials spilled; -1 in the others
  kk_sm::check_block();
  if (gridDim.x > kk_sm::kLossMaxBlocks) __trap();
  // Every block arrives, so none returns early; rows without columns count as none.
  A part[2] = {A(0), A(0)};  // thread 0's
  kk_sm::ce_fwd<T, U>(logits, target, nullptr, stats, part, cols > 0 ? rows : 0, cols, ignore_index, label_smoothing,
                      red);
  kk_sm::LossTotals w;
  const int frac_bits = kk_sm::loss_frac_bits(rows);  // used by thread 0 only
  if (threadIdx.x == 0) {
    const bool last = kk_sm::loss_arrive(part[0], part[1], frac_bits, spill, words, w);
    spilled = last ? (int)((w.tally >> kk_sm::kSpilledShift) & kk_sm::kLossMaxBlocks) : -1;
  }
  __syncthreads();
  if (spilled < 0) return;
  const double extra = spilled ? kk_sm::spilled_sum(spill) : 0.0;
  if (threadIdx.x == 0) {
    const double total = ldexp((double)(w.sum & (kk_sm::kArrival - 1)), -frac_bits) + extra;
    const double d = by_kind ? (double)kk_sm::given_divisor<A>(by, by_kind) : (double)(w.tally & (kk_sm::kSpilled - 1));
    divisor[0] = mean ? (A)d : A(1);
    loss[0] = kk::from_acc<O>((kk::acc_t<O>)(mean ? total / d : total));
  }
}

// kk_cross_entropy_bwd: grad[r, c] = sc_r * (exp((x - m) - ls_m) - ((1-ls)*[c == t] + ls/cols)) with
// sc_r = row_scale[r * scale_stride] / divisor[0] (divisor nullptr: 1), row_scale of any float type S (a
// reduced loss's gradient, in the loss's dtype, with scale_stride 0), (m, ls_m) = stats[r] from the forward;
// rows with target == ignore_index get 0. grad may be logits (exact in place).
// KEEP_AT_ONE: grad already holds the gradient for a loss gradient of 1 (kk_cross_entropy_held's, with scale_stride
// 0): every block returns at once when row_scale[0] is 1, and otherwise rewrites grad, to the same bits. Launched
// dependent (programmatic dependent launch): its blocks wait in kk::pdl_wait for the kernel before it.
// MAXR: the host takes 48 for rows of at most 1024 columns (ops/softmax.py _CE_BWD_LEAN_COLS; not float64, whose scale
// spills at 48): 5 blocks of 256 threads per SM. Otherwise 64 for 16-bit rows (4 blocks): with kKeep loads, bf16
// 32768 x 4096 141.4 -> 136.7 us, 3.3-5.0% less at 2048-16384 columns, 8192 x 65536 6.3% (h200-2026-11-28-s49/
// ab-h200-ce-bwd-keep-r64.log, ab-h200-ce-keep64.log); float32 measured the same at 64 and keeps 80 (3 blocks),
// float64 spills at 64.
// Launch: block B (multiple of 32, <= 512; __maxnreg__(MAXR)), any grid, no dynamic shared memory:
//   nv <= 2048 (kWarpRowPacks): warp rows (in teams of 8-16 lanes where they fit, but at MAXR 48 in 16 bits),
//              B = 256, grid = min(ceil(rows / 8), 4 * occ * SMs)
//   else:      block per row, B = 512, grid = min(rows, 4 * occ * SMs)
template <typename T, typename S = typename kk::Acc<T>::type, bool KEEP_AT_ONE = false,
          int MAXR = sizeof(T) == 2 ? 64 : 80>
__global__ void __maxnreg__(MAXR) kk_cross_entropy_bwd(const T* logits, const long long* target,
                                                             const typename kk::Acc<T>::type* stats,
                                                             const S* row_scale, long long scale_stride,
                                                             const typename kk::Acc<T>::type* divisor, T* grad,
                                                             long long rows, long long cols, long long ignore_index,
                                                             double label_smoothing) {
  // Launched dependent: row_scale and grad come from kernels before it. Every block waits, so that this grid ends
  // after them (a kernel launched dependent on it waits for it alone).
  if constexpr (KEEP_AT_ONE) kk::pdl_wait();
  if (rows <= 0 || cols <= 0) return;
  kk_sm::check_block();
  if constexpr (KEEP_AT_ONE) {
    if (kk::to_acc(row_scale[0]) == 1) return;  // grad already holds this gradient
  }
  constexpr int V = kk::kVec<T>;
  // The 48-register instantiations load kNc (kKeep's cache policy spills 16-24 bytes there), and keep shifted rows on
  // the scalar path (below).
  constexpr bool kLean = MAXR <= 48;
  constexpr bool kShift = sizeof(T) < 8 && !kLean;
  constexpr int kLd = kLean ? kk::kNc : kk_sm::kCeLd;
  // Warp rows in teams, but in the 16-bit 48-register instantiations, where team rows spill 32 bytes.
  constexpr bool kTeams = !(kLean && sizeof(T) == 2);
  if (cols % V == 0 && kk::aligned16(kk::addr(logits) | kk::addr(grad)))
    kk_sm::ce_bwd_run<T, V, false, kLd, kTeams>(logits, target, stats, row_scale, scale_stride, divisor, grad, rows,
                                                cols, ignore_index, label_smoothing);
  // Shifted rows (kk::RowShift), but float64's and the 48-register instantiations' (8 and 28-32 bytes of spills,
  // kernels/check_compile.py), which keep the scalar path.
  else if (kShift && cols < kk::kShiftMaxCols && kk::congruent16(kk::addr(logits) ^ kk::addr(grad)))
    kk_sm::ce_bwd_run<T, V, kShift, kLd, kTeams>(logits, target, stats, row_scale, scale_stride, divisor, grad, rows,
                                                 cols, ignore_index, label_smoothing);
  else
    kk_sm::ce_bwd_run<T, 1, false, kLd, kTeams>(logits, target, stats, row_scale, scale_stride, divisor, grad, rows,
                                                cols, ignore_index, label_smoothing);
}

// kk_cross_entropy_bwd_flat: kk_cross_entropy_bwd's gradient (without KEEP_AT_ONE), the same bits, in one pass of a
// flat grid with no grid-stride loop (the bandwidth of a one-pass copy, bench/exp_copy_roofline.py): block b takes P
// packs per thread, thread i packs q0 + i + k * B (k < P) of row b / cpr with q0 = (b % cpr) * P * B, and loads them
// all before it writes any (grad may be logits). A row whose target is ignore_index gets 0 without its logits being
// read. 16-byte path only: cols % VEC == 0, logits and grad 16-byte aligned (else it traps).
// Launch: block B (multiple of 32, <= 256), grid rows * cpr (cpr = ceil(cols / (VEC * P * B))), no dynamic shared
// memory.
template <typename T, typename S, int P>
__global__ void __launch_bounds__(256) kk_cross_entropy_bwd_flat(const T* logits,
    const long long* __restrict__ target, const typename kk::Acc<T>::type* __restrict__ stats,
    const S* __restrict__ row_scale, long long scale_stride, const typename kk::Acc<T>::type* __restrict__ divisor,
    T* grad, long long rows, long long cols, long long ignore_index, double label_smoothing, long long cpr) {
  using namespace kk_sm;
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>;
  if (cols % W || !kk::aligned16(kk::addr(logits) | kk::addr(grad))) __trap();
  const long long b = blockIdx.x;
  const long long row = kk::div_ll(b, cpr);
  if (row >= rows) return;
  const long long nv = cols / W, nt = blockDim.x;
  const long long q0 = (b - row * cpr) * P * nt + threadIdx.x;
  const T* xr = logits + row * cols;
  T* gr = grad + row * cols;
  const auto [smooth, hit] = ce_smooth<A>(label_smoothing, cols);
  const long long t = target[row];
  if (t == ignore_index) {
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (q0 + k * nt < nv) store_vec<W>(gr + (q0 + k * nt) * W, kk::zero_vec<T, W>());
    return;
  }
  Vec<T, W> u[P];
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (q0 + k * nt < nv) u[k] = load_vec<W, kCeLd>(xr + (q0 + k * nt) * W);
  const A div = divisor != nullptr ? *divisor : A(1);
  const CeRow<A> meta = ce_row_meta(target, stats, row_scale, scale_stride, div, row);
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const long long q = q0 + k * nt;
    if (q < nv) store_vec<W>(gr + q * W, ce_bwd_pack<T, W>(u[k], q * W, t, meta.m, meta.ls_m, meta.sc, smooth, hit));
  }
}

namespace kk_sm {
// One row of kk_cross_entropy_held at offset o: thread ti of the row's nt loads its n packs, the row's (max, sum exp)
// comes from its team (the block, or the cluster when SPLIT), its first thread writes the stats and loss, then the
// gradient is written from registers, after the count (pdl_wait) on the block's first row. Blocks of at least
// kTwoReductionThreads take the max and then the sum against it, as softmax's held rows: on an H100 (GPU time of a
// mean's forward and backward, h100-2026-11-28-s43/ab-h100-ce-held-two*.log; bench/exp_ce_two_h200.sh repeats it)
// float32 32768 x 4096-8192 0.997, and with the H100's 16-bit fits of 4 packs (ops/softmax.py) bf16 x 4096 192.4 ->
// 190.5 us, x 8192 369.5 -> 365.4, float16 x 4096 0.992.
template <typename T, int P, bool SPLIT, int CTAS>
__device__ __forceinline__ void held_ce_row(const T* logits, const long long* target, acc_t<T>* stats,
                                            acc_t<T>* row_loss, T* grad, const unsigned long long* count, int mean,
                                            const void* by, int by_kind, long long cols, long long ignore_index,
                                            long long o, long long head, long long row,
                                            long long nv, int ti, int nt, acc_t<T>* red, int& parity,
                                            SplitReduce<2, acc_t<T>, CTAS>* cluster, bool& waited, acc_t<T>& sc,
                                            kk::Extra e) {
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>;
  const T* xr = logits + o;  // the row's first pack, `head` columns into it (shifted rows, kk::RowShift)
  const long long t = target[row], tp = t - head;  // the target's column from the first pack
  const int n = ti < nv ? (int)min((long long)P, (nv - ti + nt - 1) / nt) : 0;
  Vec<T, W> u[P];
#pragma unroll
  for (int k = 0; k < P; ++k)
    if (k < n) u[k] = load_vec<W, kCeLd>(xr + (k * (long long)nt + ti) * W);
  const A xe = kk::extra_value(xr, e, ninf<A>());
  A m = xe, s = A(0);
  Red<A, 2> st;
  if (!SPLIT && nt >= kTwoReductionThreads) {
    m = team_allreduce<MaxOp<T>, true>(Red<A, 1>{{pack_max<T, W, P>(u, n, m)}}, red, parity).f[0];
    if (e.has) s = ex<T>(xe - safe_ref(m));
    s = exp_sum<T, W, P>(u, n, safe_ref(m), s);
    st.f[0] = m;
    st.f[1] = team_allreduce<SumOp<T>, true>(Red<A, 1>{{s}}, red, parity).f[0];
  } else {
    if (e.has) s = ex<T>(xe - safe_ref(xe));  // the sum against the extra element as the max so far
    ms_update<T, W, P>(u, n, m, s);
    st.f[0] = m;
    st.f[1] = s;
    if constexpr (SPLIT) (*cluster)(st.f, ArrayOp<MaxSumOp<T, 2>, A, 2>{});
    else st = team_allreduce<MaxSumOp<T, 2>, true>(st, red, parity);
  }
  const A mr = safe_ref(st.f[0]), ls_m = lg(st.f[1]);
  const bool ignored = t == ignore_index;
  if (ti == 0) {
    stats[2 * row] = mr;
    stats[2 * row + 1] = ls_m;
    row_loss[row] = ignored ? A(0) : (t < 0 || t >= cols) ? qnan<A>() : ls_m - (to_acc(xr[tp]) - mr);
  }
  if (!waited) {
    kk::pdl_wait();
    // ce_row_meta's row_scale / div for a row_scale of 1
    sc = A(1) / (!mean ? A(1) : by_kind ? given_divisor<A>(by, by_kind) : (A)*count);
    waited = true;
  }
  T* gr = grad + o;
  if (e.has) gr[e.off] = kk::from_acc<T>(ignored ? A(0) : sc * (ex<T>((xe - mr) - ls_m) - A(e.off == tp)));
  if (ignored) {
    A z[W];
#pragma unroll
    for (int j = 0; j < W; ++j) z[j] = A(0);
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < n) store_vec<W>(gr + (k * (long long)nt + ti) * W, kk::acc_to_vec<T, W>(z));
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < n) {
        const long long p = k * (long long)nt + ti;
        store_vec<W>(gr + p * W, ce_bwd_pack<T, W, true>(u[k], p * W, tp, mr, ls_m, sc, A(0), A(1)));
      }
  }
}

// Rows split over clusters (kk_cross_entropy_held's SPLIT), as softmax_fwd_split.
template <typename T, int P, int CTAS, bool SHIFT>
__device__ __forceinline__ void held_ce_split(const T* logits, const long long* target, acc_t<T>* stats,
                                              acc_t<T>* row_loss, T* grad, const unsigned long long* count, int mean,
                                              const void* by, int by_kind, long long rows, long long cols,
                                              long long ignore_index, acc_t<T>* red,
                                              bool& waited, acc_t<T>& sc) {
  split_rows<2, T, kk::kVec<T>, P, CTAS, SHIFT>(logits, rows, cols, [&](long long r, const kk::RowAt& a, int ti,
                                                                         int nt, int& parity,
                                                                         SplitReduce<2, acc_t<T>, CTAS>& cluster) {
    held_ce_row<T, P, true, CTAS>(logits, target, stats, row_loss, grad, count, mean, by, by_kind, cols, ignore_index,
                                  a.first, a.head, r, a.nv, ti, nt, red, parity, &cluster, waited, sc, a.e);
  });
}
}  // namespace kk_sm

// kk_cross_entropy_held: kk_cross_entropy_fwd's stats and row losses (no label smoothing), and the gradient
// kk_cross_entropy_bwd<T, S> writes for a loss gradient of 1 with divisor[0] = (mean ? d : 1), bit for bit, in
// one read of the logits: each row is held whole in registers, thread ti of the row's nt holding packs ti + k * nt
// (k < P), so the gradient is written from registers after the row's one (max, sum exp) reduction. The gradient
// waits for the count only before its first store (kk::pdl_wait): launch it dependent on kk_cross_entropy_count,
// which computes it meanwhile; kk_cross_entropy_mean, launched dependent on this one, sums the row losses. d: *count,
// or the caller's denominator where one is given (by_kind != 0, kk_sm::given_divisor; then no count is needed). Vector
// path only: cols % VEC == 0, logits and grad 16-byte aligned, cols <= P * nt * VEC (else it traps); with SHIFT, rows
// of any width (kk::RowShift; logits and grad congruent16, else it traps).
// Launch: block R (multiple of 32, <= 512), any grid: one block per row (grid rows) measured fastest. SPLIT (sm_90+):
// a row over a cluster of gridDim.y CTAs (nt = R * gridDim.y, reduced through kk::ClusterRowReduce), as
// kk_softmax_fwd's split rows; CTAS > 0: blocks of kk::kFixedThreads in clusters of CTAS, fixed at compile time.
template <typename T, int P, int MINB, bool SPLIT = false, int CTAS = 0, bool SHIFT = false>
__global__ void __launch_bounds__(512, MINB) kk_cross_entropy_held(const T* __restrict__ logits,
    const long long* __restrict__ target, kk::acc_t<T>* __restrict__ stats, kk::acc_t<T>* __restrict__ row_loss,
    T* __restrict__ grad, const unsigned long long* count, int mean, const void* by, int by_kind, long long rows,
    long long cols, long long ignore_index) {
  using namespace kk_sm;
  using A = acc_t<T>;
  constexpr int W = kk::kVec<T>;
  __shared__ A red[2 * 32 * 2];
  if (kk::split_unsupported<SPLIT>()) return;
  kk::pdl_trigger();  // the mean, launched dependent, waits for this whole grid
  check_block();
  kk::check_split<SPLIT>();
  if (SHIFT ? !kk::congruent16(kk::addr(logits) ^ kk::addr(grad))
            : cols % W || !kk::aligned16(kk::addr(logits) | kk::addr(grad)))
    __trap();
  bool waited = false;
  A sc = A(0);
  if constexpr (SPLIT) {
    held_ce_split<T, P, CTAS, SHIFT>(logits, target, stats, row_loss, grad, count, mean, by, by_kind, rows, cols,
                                     ignore_index, red, waited, sc);
  } else {
    if (cols / W > (long long)P * blockDim.x) __trap();
    int parity = 0;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const kk::RowAt a = kk::row_at<W, SHIFT>(logits, row, cols, threadIdx.x);
      held_ce_row<T, P, false, 0>(logits, target, stats, row_loss, grad, count, mean, by, by_kind, cols, ignore_index,
                                  a.first, a.head, row, a.nv, threadIdx.x, blockDim.x, red, parity, nullptr, waited, sc,
                                  a.e);
    }
  }
}

// kk_cross_entropy_count: count[0] += the rows whose target is not ignore_index (exact in any order), before
// kk_cross_entropy_held's gradient divides by it. count: one zeroed 64-bit word, set back to 0 by
// kk_cross_entropy_mean. Launch: block kTotalThreads, grid ceil(rows / (PER * kTotalThreads)).
template <int PER>
__global__ void __launch_bounds__(kk_sm::kTotalThreads) kk_cross_entropy_count(const long long* __restrict__ target,
    long long rows, long long ignore_index, unsigned long long* count) {
  kk::pdl_trigger();  // the held kernel, launched dependent, loads its rows meanwhile
  const double c = kk_sm::block_total<PER>(rows, [&](long long r) { return target[r] != ignore_index ? 1.0 : 0.0; });
  if (threadIdx.x == 0) atomicAdd(count, (unsigned long long)c);
}

// kk_cross_entropy_mean: loss[0] = the mean (mean != 0; 0 / 0 = NaN when every target is ignored, as torch) or sum
// of kk_cross_entropy_held's row losses, in double, and divisor[0] = d (mean) or 1 (sum), with d count[0], or the
// caller's denominator where one is given (by_kind != 0, as kk_cross_entropy_held's). Each block sums its
// PER * kTotalThreads rows (block_total) into partial[block]; the last to arrive (kk::last_arrival on ticket, a
// zeroed counter) adds the partials in block order, so the loss does not depend on the order of arrival, and sets
// count[0] back to 0. Launch: dependent on kk_cross_entropy_held, block kTotalThreads, grid
// ceil(rows / (PER * kTotalThreads)) (at least 1), partial one double per block.
template <typename A, typename O, int PER>
__global__ void __launch_bounds__(kk_sm::kTotalThreads) kk_cross_entropy_mean(const A* __restrict__ row_loss,
    unsigned long long* count, double* partial, unsigned* ticket, long long rows, int mean, const void* by,
    int by_kind, O* __restrict__ loss, A* __restrict__ divisor) {
  kk::pdl_wait();
  const double s = kk_sm::block_total<PER>(rows, [&](long long r) { return (double)row_loss[r]; });
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
  if (kk::last_arrival(ticket, gridDim.x) && threadIdx.x == 0) {
    double total = 0.0;
    for (unsigned b = 0; b < gridDim.x; ++b) total += __ldcg(partial + b);
    const double c = by_kind ? (double)kk_sm::given_divisor<A>(by, by_kind) : (double)__ldcg(count);
    *count = 0ull;
    divisor[0] = mean ? (A)c : A(1);
    loss[0] = kk::from_acc<O>((kk::acc_t<O>)(mean ? total / c : total));
  }
}
