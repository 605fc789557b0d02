// kernels/matmul.cu -- tiled, register-blocked GEMM for kernelkit (NVRTC, sm_80+).
//
//   C[M,N] = A[M,K] @ B[K,N]
//
// All matrices row-major and contiguous; C must not alias A or B. Accumulation is
// in float for float/__half/__nv_bfloat16 and in double for double; C is written
// in T (round-to-nearest-even for the 16-bit types). Any M, N, K >= 1.
//
// NVRTC name expressions:
//   kk_matmul<float>  kk_matmul<double>  kk_matmul<__half>  kk_matmul<__nv_bfloat16>
//
// Launch configuration (1-D block, no dynamic shared memory):
//   T                      blockDim  tile BMxBNxBK   gridDim
//   float                  256       128x128x8      (ceil(N/128), ceil(M/128), 1)
//   __half, __nv_bfloat16  256       128x128x16     (ceil(N/128), ceil(M/128), 1)
//   double                 256        64x64x8       (ceil(N/64),  ceil(M/64),  1)
// gridDim.y <= 65535 limits M to 65535*BM rows.
//
// Scheme: each block computes one BMxBN tile of C. Per BK-slice of K, the A
// slice is stored transposed in shared memory (As[k][m]) and the B slice as is
// (Bs[k][n]), both converted to the accumulate type. Each thread owns a TMxTN
// micro-tile made of 4x4 sub-blocks spaced 4*TY rows / 4*TX columns apart, so
// every fragment read is one 16-byte shared load and a warp (laid out 4x8
// threads) touches at most 128 distinct bytes per load: no bank conflicts.
// Shared memory is double buffered: the next slice is fetched from global into
// registers before the current one is consumed, and written to the other
// buffer afterwards, so one __syncthreads per slice suffices.
//
// Global loads are 16 bytes wide (4 float, 2 double, 8 half/bf16) for A when
// K % VEC == 0 and A is 16-byte aligned, and for B when N % VEC == 0 and B is
// 16-byte aligned. The two decisions are made once per launch (uniform across
// the grid); otherwise the same elements are loaded one by one with per-element
// bounds guards. Both paths fill the same raw 16-byte register staging, so one
// main loop serves all cases (four specialised copies made ptxas spill).
// Out-of-range elements load as 0 and are never stored. C is stored 4 elements
// at a time when N % 4 == 0 and C is 16-byte aligned, element-wise otherwise.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// ---------------------------------------------------------------------------
// Per-type configuration and conversions.
//   BM x BN block tile, BK K-slice, TM x TN micro-tile per thread (multiples of 4),
//   (BM/TM)*(BN/TN) must be 256 threads.
// ---------------------------------------------------------------------------
template <typename T> struct kk_mm_traits;

template <> struct kk_mm_traits<float> {
  using Acc = float;
  static constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  static __device__ __forceinline__ float to_acc(float x) { return x; }
  static __device__ __forceinline__ float from_acc(float x) { return x; }
  // 16 loaded bytes -> 4 values.
  static __device__ __forceinline__ void unpack(const uint4& u, float (&v)[4]) {
    v[0] = __uint_as_float(u.x); v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z); v[3] = __uint_as_float(u.w);
  }
  // Scalar fallback: the first n (0..4) elements of p, zero-filled, as raw bits.
  static __device__ __forceinline__ void load_scalar(const float* p, int n, unsigned (&w)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = (j < n) ? __float_as_uint(p[j]) : 0u;
  }
  // 4 results -> one 16-byte store (address is 16-byte aligned by construction).
  static __device__ __forceinline__ void store4(float* p, const float* v) {
    float4 w; w.x = v[0]; w.y = v[1]; w.z = v[2]; w.w = v[3];
    *reinterpret_cast<float4*>(p) = w;
  }
};

template <> struct kk_mm_traits<double> {
  using Acc = double;
  // Smaller tile: a 8x8 double micro-tile would need ~200 registers.
  static constexpr int BM = 64, BN = 64, BK = 8, TM = 4, TN = 4;
  static __device__ __forceinline__ double to_acc(double x) { return x; }
  static __device__ __forceinline__ double from_acc(double x) { return x; }
  static __device__ __forceinline__ void unpack(const uint4& u, double (&v)[2]) {
    v[0] = __hiloint2double((int)u.y, (int)u.x);  // little-endian: low word first
    v[1] = __hiloint2double((int)u.w, (int)u.z);
  }
  static __device__ __forceinline__ void load_scalar(const double* p, int n, unsigned (&w)[4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const double d = (j < n) ? p[j] : 0.0;
      w[2 * j] = (unsigned)__double2loint(d);
      w[2 * j + 1] = (unsigned)__double2hiint(d);
    }
  }
  static __device__ __forceinline__ void store4(double* p, const double* v) {
    double2 w0, w1;
    w0.x = v[0]; w0.y = v[1]; w1.x = v[2]; w1.y = v[3];
    reinterpret_cast<double2*>(p)[0] = w0;
    reinterpret_cast<double2*>(p)[1] = w1;
  }
};

// Element 2i is the low 16 bits of 32-bit word i (little-endian).
template <> struct kk_mm_traits<__half> {
  using Acc = float;
  // BK = 16 so that one 16-byte load (8 halves) per thread covers each slice.
  static constexpr int BM = 128, BN = 128, BK = 16, TM = 8, TN = 8;
  static __device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_acc(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ float lo(unsigned w) {
    return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
  }
  static __device__ __forceinline__ float hi(unsigned w) {
    return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
  }
  static __device__ __forceinline__ void unpack(const uint4& u, float (&v)[8]) {
    v[0] = lo(u.x); v[1] = hi(u.x); v[2] = lo(u.y); v[3] = hi(u.y);
    v[4] = lo(u.z); v[5] = hi(u.z); v[6] = lo(u.w); v[7] = hi(u.w);
  }
  static __device__ __forceinline__ unsigned bits(float x) {
    return (unsigned)__half_as_ushort(__float2half_rn(x));
  }
  static __device__ __forceinline__ void load_scalar(const __half* p, int n, unsigned (&w)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned l = (2 * j < n) ? (unsigned)__half_as_ushort(p[2 * j]) : 0u;
      const unsigned h = (2 * j + 1 < n) ? (unsigned)__half_as_ushort(p[2 * j + 1]) : 0u;
      w[j] = l | (h << 16);
    }
  }
  // 4 results -> one 8-byte store (8-byte aligned by construction).
  static __device__ __forceinline__ void store4(__half* p, const float* v) {
    uint2 w;
    w.x = bits(v[0]) | (bits(v[1]) << 16);
    w.y = bits(v[2]) | (bits(v[3]) << 16);
    *reinterpret_cast<uint2*>(p) = w;
  }
};

template <> struct kk_mm_traits<__nv_bfloat16> {
  using Acc = float;
  static constexpr int BM = 128, BN = 128, BK = 16, TM = 8, TN = 8;
  static __device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_acc(float x) { return __float2bfloat16_rn(x); }
  // bf16 -> f32 is exact: the bf16 bits are the top half of the f32 bits.
  static __device__ __forceinline__ float lo(unsigned w) { return __uint_as_float(w << 16); }
  static __device__ __forceinline__ float hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
  static __device__ __forceinline__ void unpack(const uint4& u, float (&v)[8]) {
    v[0] = lo(u.x); v[1] = hi(u.x); v[2] = lo(u.y); v[3] = hi(u.y);
    v[4] = lo(u.z); v[5] = hi(u.z); v[6] = lo(u.w); v[7] = hi(u.w);
  }
  static __device__ __forceinline__ unsigned bits(float x) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  static __device__ __forceinline__ void load_scalar(const __nv_bfloat16* p, int n, unsigned (&w)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned l = (2 * j < n) ? (unsigned)__bfloat16_as_ushort(p[2 * j]) : 0u;
      const unsigned h = (2 * j + 1 < n) ? (unsigned)__bfloat16_as_ushort(p[2 * j + 1]) : 0u;
      w[j] = l | (h << 16);
    }
  }
  static __device__ __forceinline__ void store4(__nv_bfloat16* p, const float* v) {
    uint2 w;
    w.x = bits(v[0]) | (bits(v[1]) << 16);
    w.y = bits(v[2]) | (bits(v[3]) << 16);
    *reinterpret_cast<uint2*>(p) = w;
  }
};

// ---------------------------------------------------------------------------
// Small helpers (all indices into register arrays are compile-time after unrolling).
// ---------------------------------------------------------------------------
__device__ __forceinline__ float kk_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double kk_fma(double a, double b, double c) { return __fma_rn(a, b, c); }

// 4 consecutive values from 16-byte-aligned shared memory.
__device__ __forceinline__ void kk_lds4(float* r, const float* s) {
  const float4 v = *reinterpret_cast<const float4*>(s);
  r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
}
__device__ __forceinline__ void kk_lds4(double* r, const double* s) {
  const double2 v0 = reinterpret_cast<const double2*>(s)[0];
  const double2 v1 = reinterpret_cast<const double2*>(s)[1];
  r[0] = v0.x; r[1] = v0.y; r[2] = v1.x; r[3] = v1.y;
}

// n (multiple of 16 bytes) consecutive values to 16-byte-aligned shared memory.
template <int n>
__device__ __forceinline__ void kk_sts(float* s, const float* r) {
#pragma unroll
  for (int j = 0; j < n; j += 4) {
    float4 v; v.x = r[j]; v.y = r[j + 1]; v.z = r[j + 2]; v.w = r[j + 3];
    *reinterpret_cast<float4*>(s + j) = v;
  }
}
template <int n>
__device__ __forceinline__ void kk_sts(double* s, const double* r) {
#pragma unroll
  for (int j = 0; j < n; j += 2) {
    double2 v; v.x = r[j]; v.y = r[j + 1];
    *reinterpret_cast<double2*>(s + j) = v;
  }
}

// One thread's share of a tile in flight between global and shared memory:
// VEC = 16 / sizeof(T) contiguous elements of one row, kept as raw bits so that
// the conversion to Acc happens at the shared store, after the FMAs, instead of
// stalling on the load in the middle of the main loop.
template <typename T> struct kk_mm_stage {
  using Acc = typename kk_mm_traits<T>::Acc;
  static constexpr int VEC = 16 / (int)sizeof(T);
  uint4 raw;
  // nvalid: in-range elements at p (0..VEC). vec: 16-byte loads allowed for this
  // operand (uniform; implies p is 16-byte aligned whenever nvalid == VEC).
  __device__ __forceinline__ void load(const T* p, int nvalid, bool vec) {
    if (vec && nvalid == VEC) {
      raw = __ldg(reinterpret_cast<const uint4*>(p));
    } else {
      unsigned w[4];
      kk_mm_traits<T>::load_scalar(p, nvalid, w);
      raw.x = w[0]; raw.y = w[1]; raw.z = w[2]; raw.w = w[3];
    }
  }
  __device__ __forceinline__ void get(Acc (&v)[VEC]) const { kk_mm_traits<T>::unpack(raw, v); }
};

__device__ __forceinline__ int kk_clamp_vec(int remaining, int vec) {
  return remaining <= 0 ? 0 : (remaining < vec ? remaining : vec);
}

// ---------------------------------------------------------------------------
// Main body. va / vb: 16-byte global loads for A / B; vc: 4-wide stores of C.
// ---------------------------------------------------------------------------
template <typename T> struct kk_mm_smem {
  using Tr = kk_mm_traits<T>;
  using Acc = typename Tr::Acc;
  // A is stored transposed; the +16-byte pad makes the transposed stores
  // conflict-free while keeping rows 16-byte aligned for the vector reads.
  static constexpr int APAD = 16 / (int)sizeof(Acc);
  Acc a[2][Tr::BK][Tr::BM + APAD];
  Acc b[2][Tr::BK][Tr::BN];
};

template <typename T>
__device__ __forceinline__ void kk_matmul_body(const T* __restrict__ A, const T* __restrict__ B,
                                               T* __restrict__ C, int M, int N, int K,
                                               bool va, bool vb, bool vc, kk_mm_smem<T>& sm) {
  using Tr = kk_mm_traits<T>;
  using Acc = typename Tr::Acc;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, TM = Tr::TM, TN = Tr::TN;
  constexpr int NT = 256;
  constexpr int VEC = 16 / (int)sizeof(T);   // elements per 16-byte load
  constexpr int TY = BM / TM, TX = BN / TN;  // thread grid over the tile
  constexpr int WX = 8, WY = 4;              // a warp covers 4 (M) x 8 (N) threads
  constexpr int A_VPR = BK / VEC;            // load chunks per A-tile row
  constexpr int B_VPR = BN / VEC;            // load chunks per B-tile row
  constexpr int A_IT = BM * BK / VEC / NT;   // chunks per thread
  constexpr int B_IT = BK * BN / VEC / NT;
  static_assert(TY * TX == NT, "tile / micro-tile must give 256 threads");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tile made of 4x4 sub-blocks");
  static_assert(TX % WX == 0 && TY % WY == 0, "warp layout must tile the thread grid");
  static_assert(BK % VEC == 0 && BN % VEC == 0, "load chunks must not straddle rows");
  static_assert(A_IT >= 1 && A_IT * VEC * NT == BM * BK, "A tile must split evenly");
  static_assert(B_IT >= 1 && B_IT * VEC * NT == BK * BN, "B tile must split evenly");

  const int tid = (int)threadIdx.x;
  const int m0 = (int)blockIdx.y * BM;
  const int n0 = (int)blockIdx.x * BN;

  // --- loader state (per thread, fixed except for the advancing pointers) ---
  // A chunk i covers A[m0+ar][k0+ak .. +VEC) and goes to As[ak..][ar];
  // B chunk i covers B[k0+br][n0+bc .. +VEC) and goes to Bs[br][bc..].
  constexpr int AS = BM + kk_mm_smem<T>::APAD;  // As row stride
  const T* a_ptr[A_IT];  // -> A[row][k0+ak]; row clamped to 0 when out of range
  int a_lim[A_IT];       // K - ak for an in-range row, else 0: valid count = a_lim - k0
  int a_so[A_IT];        // shared offset of element j = a_so + j*AS
  const T* b_ptr[B_IT];  // -> B[k0+br][n0+bc]
  int b_klim[B_IT];      // chunk in range iff k0 < b_klim
  int b_cnt[B_IT];       // in-range columns of the chunk (0..VEC)
  int b_so[B_IT];
#pragma unroll
  for (int i = 0; i < A_IT; ++i) {
    const int v = tid + i * NT;
    const int ar = v / A_VPR, ak = (v % A_VPR) * VEC;
    const int row = m0 + ar;
    a_ptr[i] = A + (long long)(row < M ? row : 0) * K + ak;
    a_lim[i] = row < M ? K - ak : 0;
    a_so[i] = ak * AS + ar;
  }
#pragma unroll
  for (int i = 0; i < B_IT; ++i) {
    const int v = tid + i * NT;
    const int br = v / B_VPR, bc = (v % B_VPR) * VEC;
    b_ptr[i] = B + (long long)br * N + (n0 + bc);
    b_klim[i] = K - br;
    b_cnt[i] = kk_clamp_vec(N - (n0 + bc), VEC);
    b_so[i] = br * BN + bc;
  }
  const long long b_step = (long long)BK * N;

  kk_mm_stage<T> sa[A_IT];
  kk_mm_stage<T> sb[B_IT];

  // Global -> registers for the slice starting at k0 (called with k0 = 0, BK, 2*BK, ...).
  auto load_slice = [&](int k0) {
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      sa[i].load(a_ptr[i], kk_clamp_vec(a_lim[i] - k0, VEC), va);
      a_ptr[i] += BK;
    }
#pragma unroll
    for (int i = 0; i < B_IT; ++i) {
      sb[i].load(b_ptr[i], k0 < b_klim[i] ? b_cnt[i] : 0, vb);
      b_ptr[i] += b_step;
    }
  };
  // Registers -> shared buffer 'buf' (A transposed).
  auto store_slice = [&](int buf) {
    Acc* as = &sm.a[buf][0][0];
    Acc* bs = &sm.b[buf][0][0];
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      Acc v[VEC];
      sa[i].get(v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) as[a_so[i] + j * AS] = v[j];
    }
#pragma unroll
    for (int i = 0; i < B_IT; ++i) {
      Acc v[VEC];
      sb[i].get(v);
      kk_sts<VEC>(bs + b_so[i], v);
    }
  };

  // --- compute coordinates: 4x8 threads per warp ---
  const int lane = tid & 31, warp = tid >> 5;
  const int ty = (warp / (TX / WX)) * WY + lane / WX;  // 0..TY-1
  const int tx = (warp % (TX / WX)) * WX + lane % WX;  // 0..TX-1

  // acc[ci*4+i][cj*4+j] <-> C[m0 + ci*4*TY + ty*4 + i][n0 + cj*4*TX + tx*4 + j]
  Acc acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);

  const int ktiles = (K + BK - 1) / BK;  // >= 1
  load_slice(0);
  store_slice(0);
  __syncthreads();

  for (int t = 0; t < ktiles; ++t) {
    const int cur = t & 1;
    const bool has_next = t + 1 < ktiles;  // uniform across the block
    if (has_next) load_slice((t + 1) * BK);  // in flight during the FMAs below

#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      Acc a[TM], b[TN];
#pragma unroll
      for (int c = 0; c < TM / 4; ++c) kk_lds4(&a[c * 4], &sm.a[cur][kk][c * 4 * TY + ty * 4]);
#pragma unroll
      for (int c = 0; c < TN / 4; ++c) kk_lds4(&b[c * 4], &sm.b[cur][kk][c * 4 * TX + tx * 4]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = kk_fma(a[i], b[j], acc[i][j]);
    }

    // The other buffer was last read in iteration t-1, which ended with a barrier.
    if (has_next) store_slice(cur ^ 1);
    __syncthreads();
  }

  // --- epilogue: guarded stores, 4-wide where allowed ---
#pragma unroll
  for (int ci = 0; ci < TM / 4; ++ci) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + ci * 4 * TY + ty * 4 + i;
      if (row < M) {
        T* crow = C + (long long)row * N;
#pragma unroll
        for (int cj = 0; cj < TN / 4; ++cj) {
          const int col = n0 + cj * 4 * TX + tx * 4;
          const Acc* v = &acc[ci * 4 + i][cj * 4];
          if (vc && col + 4 <= N) {
            Tr::store4(crow + col, v);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (col + j < N) crow[col + j] = Tr::from_acc(v[j]);
          }
        }
      }
    }
  }
}

__device__ __forceinline__ bool kk_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0ull;
}

// ---------------------------------------------------------------------------
// Entry point. blockDim = (256,1,1); gridDim as in the table at the top.
// ---------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(256, 2)
kk_matmul(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(16) kk_mm_smem<T> sm;
  constexpr int VEC = 16 / (int)sizeof(T);
  // Uniform per launch: 16-byte loads need the row length to be a multiple of VEC
  // (so every chunk start stays 16-byte aligned) and a 16-byte aligned base.
  const bool va = (K % VEC == 0) && kk_aligned16(A);
  const bool vb = (N % VEC == 0) && kk_aligned16(B);
  // 4-wide C stores (16 B for float/double, 8 B for 16-bit types): N % 4 == 0 keeps
  // every 4-column group aligned given a 16-byte aligned base.
  const bool vc = (N % 4 == 0) && kk_aligned16(C);
  kk_matmul_body<T>(A, B, C, M, N, K, va, vb, vc, sm);
}
