#!/usr/bin/env bash
# kKeep marks the lines a norm forward loads evict_last in L2, worth 3-4% against none (ab-h200-norm-fwd-keep-l1.log
# here), but the lines stay marked after the row is read, as torch.compile's two-pass kernels do not leave them all:
# their second pass reloads x evict_first in L1 and L2 (triton-norm-ptx.tar.gz), and its L1 misses (41%, ncu in
# h200-2026-11-28-s50) reach L2. B: once a thread's packs of x have arrived, the thread at each 128-byte line's start
# marks the line again, in the wide kernels (wide_row_packs) and rms_fwd_run's held rows: evict_normal
# (applypriority); evict_first for every line, or for 40% of them, by a 4-byte reload that skips L1 (ld.global.cg with
# an L2 evict_first policy). A: the shipped source. B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh l2-demote.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
vec='template <typename T, int W> struct alignas\(sizeof\(T\) \* W\) Vec \{ T v\[W\]; \};'
# common.cuh's kk::demote_l2(p, v): ASM run on p's line once v (loaded from it) has arrived (operand %1 is v's first word).
demote() {
  printf '%s\n' 'template <typename T, int W> struct alignas(sizeof(T) * W) Vec { T v[W]; };' \
    'template <typename T, int W> __device__ __forceinline__ void demote_l2(const T* p, const Vec<T, W>& v) {' \
    "  if ((reinterpret_cast<unsigned long long>(p) & 127) == 0) { $1 }" '}'
}
normal='asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(p), "r"(*reinterpret_cast<const unsigned*>(&v)));'
first() {  # FRACTION of the lines reloaded evict_first, the rest evict_unchanged
  printf '%s' 'unsigned long long q; unsigned d;' \
    " asm(\"createpolicy.fractional.L2::evict_first.L2::evict_unchanged.b64 %0, $1;\" : \"=l\"(q));" \
    ' asm volatile("ld.global.cg.L2::cache_hint.b32 %0, [%2], %3;" : "=r"(d) : "r"(*reinterpret_cast<const unsigned*>(&v)),' \
    ' "l"(p), "l"(q));'
}
wide='(else h\[k\] = p < cv \? load_vec<W, L>\(xr \+ p \* W\) : kk::zero_vec<T, W>\(\);\n  \})'
wide_b='\1
#pragma unroll
  for (int k = 0; k < NP; ++k)
    if (k * R + tx < cv) kk::demote_l2(xr + (k * R + tx) * W, h[k]);'
held='(else h\[k\] = \(act && p < nvr\) \? load_vec<W, kRmsFwdLd>\(x \+ off \+ p \* W\) : kk::zero_vec<T, W>\(\);\n      \})'
held_b='\1
#pragma unroll
      for (int k = 0; k < NP; ++k)
        if (act && k * R + tx < nvr) kk::demote_l2(x + off + (k * R + tx) * W, h[k]);'
cells=(layer_norm:float32:32768x4096 rms_norm:float32:32768x4096 rms_norm:float32:32768x8192
  rms_norm:bfloat16:32768x8192 rms_norm:bfloat16:32768x4096 layer_norm:float32:32768x8192)
for v in normal first-1.0 first-0.4; do
  case $v in normal) body=$normal ;; *) body=$(first "${v#first-}") ;; esac
  ab norms "ab-$gpu-l2-demote-$v.log" --common-sub "$vec" "$(demote "$body")" --sub "$wide" "$wide_b" \
    --sub "$held" "$held_b" "${cells[@]}"
done
