#!/usr/bin/env bash
# The L2 eviction priorities of the norm kernels' loads and stores. Session 51 found kKeep's L2 evict_last policy worth
# 3-4% in the norm forwards: without it (L1::evict_last alone) layer_norm float32 32768 x 4096 254.7 -> 262.3 us,
# rms_norm bf16 x 8192 253.1 -> 263.9 (h200-2026-11-28-s51/ab-h200-norm-fwd-keep-l1.log). That is, priorities in L2
# matter even to kernels that read each line once. This asks whether other priorities do better still, for the four
# norm forwards that trail torch.compile by 0.1-0.5% (h200-2026-11-28-s50/ties-norms.log). A: the shipped source. B, one
# at a time, in common.cuh: kKeep's policy at fraction 0.75 (the rest evict_unchanged); kKeep's loads evict_first in
# L2; store_vec's 16-byte stores with an L2 evict_first policy; the same with evict_last. B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh l2-policy.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
cells=(layer_norm:float32:32768x4096 rms_norm:float32:32768x4096 rms_norm:float32:32768x8192
  rms_norm:bfloat16:32768x8192 layer_norm:bfloat16:32768x4096 rms_norm_backward:bfloat16:32768x8192)
policy='createpolicy\.fractional\.L2::evict_last\.b64 %0, 1\.0;'
ab norms "ab-$gpu-l2-keep-frac.log" --common-sub "$policy" \
  'createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %0, 0.75;' "${cells[@]}"
ab norms "ab-$gpu-l2-keep-first.log" --common-sub "$policy" 'createpolicy.fractional.L2::evict_first.b64 %0, 1.0;' \
  "${cells[@]}"
# store_vec's 16-byte C++ copy as one st.global.v4 with an L2 cache hint (PRIORITY: evict_first or evict_last).
store_hint() {
  printf '%s' "{ const uint4 u_ = *reinterpret_cast<const uint4*>(&r); unsigned long long q_;" \
    " asm(\"createpolicy.fractional.L2::$1.b64 %0, 1.0;\" : \"=l\"(q_));" \
    " asm volatile(\"st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;\"" \
    " :: \"l\"(p), \"r\"(u_.x), \"r\"(u_.y), \"r\"(u_.z), \"r\"(u_.w), \"l\"(q_) : \"memory\"); }"
}
store='\*reinterpret_cast<uint4\*>\(p\) = \*reinterpret_cast<const uint4\*>\(&r\);'
ab norms "ab-$gpu-l2-store-first.log" --common-sub "$store" "$(store_hint evict_first)" "${cells[@]}"
ab norms "ab-$gpu-l2-store-last.log" --common-sub "$store" "$(store_hint evict_last)" "${cells[@]}"
