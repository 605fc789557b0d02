#!/usr/bin/env bash
# The two norm forwards behind torch.compile (h200-2026-11-28-s51/ties-norms.log: rms_norm float32 32768 x 8192
# 0.9986, layer_norm float32 x 4096 0.9959) read each x pack once and keep it in registers for the output pass, where
# torch.compile's kernels read x again for it: `ld.global.L1::evict_first` with an L2 evict_first policy, mostly L1
# hits (59% for the LayerNorm, s50 ncu-norm-fwd.txt), the misses marking their lines evict_first in L2
# (triton-norm-ptx.tar.gz). Alone our LayerNorm is the faster kernel (s50 ncu), so the gap is in what one call leaves
# the next. B: the output pass reloads each x pack that way (kk::reload_first, added to common.cuh) in place of the
# registers: LayerNorm's wide kernel; RMSNorm's held rows (rms_fwd_run, 16-byte packs, not add_rms_norm, whose
# registers hold x + residual) and its wide kernel. A: the shipped source. B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norm-fwd-reload.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
vec='template <typename T, int W> struct alignas\(sizeof\(T\) \* W\) Vec \{ T v\[W\]; \};'
reload='template <typename T, int W> struct alignas(sizeof(T) * W) Vec { T v[W]; };
template <typename T, int W> __device__ __forceinline__ Vec<T, W> reload_first(const T* p) {
  static_assert(W * sizeof(T) == 16, "16-byte packs");
  uint4 r;
  unsigned long long q;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(q));
  asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(q));
  Vec<T, W> v;
  *reinterpret_cast<uint4*>(&v) = r;
  return v;
}'
ln=(--sub 'float a\[W\];(\n#pragma unroll\n        for \(int j = 0; j < W; \+\+j\) a\[j\] = fmaf\(\()h\[k\]\.v\[j\]'
  'const Vec<float, W> hx = kk::reload_first<float, W>(x + row * cols + p * W);\n        float a[W];\1hx.v[j]')
held=(--sub '(\n        )kk::vec_to_acc\(h\[k\], a\);(\n        if constexpr \(SHIFT\))'
  '\1if constexpr (!ADD && W * sizeof(T) == 16) kk::vec_to_acc(kk::reload_first<T, W>(x + off + p * W), a);\1else kk::vec_to_acc(h[k], a);\2')
wide=(--sub '(\n        float a\[W\], g\[W\];\n        )kk::vec_to_acc\(h\[k\], a\);'
  '\1kk::vec_to_acc(kk::reload_first<T, W>(x + row * cols + p * W), a);')
ab norms "ab-$gpu-norm-fwd-reload.log" --common-sub "$vec" "$reload" "${ln[@]}" "${held[@]}" "${wide[@]}" \
  layer_norm:float32:32768x4096 rms_norm:float32:32768x8192 rms_norm:float32:32768x4096 \
  rms_norm:bfloat16:32768x8192 layer_norm:float32:32768x8192 rms_norm:bfloat16:32768x4096
