#!/usr/bin/env bash
# The norm forwards that trail torch.compile in back-to-back calls but not alone: under ncu (caches flushed, clocks
# locked) kk_layer_norm_fwd_wide<float, 2, 4> took 273-277 us against torch.compile's 289 (h200-2026-11-28-s50/
# ncu-norm-fwd.txt), while 40 paired rounds of calls had it 0.5% behind (ties-norms.log). One guess: the x lines a call
# loads kKeep (L1 and L2 evict_last) stay in L2 for the next call, which never reads them again. A: the shipped source.
# B: the wide kernels' rows (x) loaded kNc (their weights still kKeep); then kKeep without its L2 policy (L1::evict_last
# alone; common.cuh's ld_keep, for every kKeep load of norms.cu). B/A below 1: B is faster. On the GPU machine:
# OUT=$OUT bash bench/gpu_run.sh norm-fwd-keep-l2. Its patterns match the source of session 50.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab norms "ab-$gpu-ln-wide-x-nc.log" --sub "wide_row_packs<kLnWideLd>\(x" "wide_row_packs<kk::kNc>(x" \
  layer_norm:float32:32768x4096 layer_norm:float32:32768x8192
ab norms "ab-$gpu-rms-wide-x-nc.log" --sub "wide_row_packs<kRmsFwdLd>\(x" "wide_row_packs<kk::kNc>(x" \
  rms_norm:float32:32768x4096 rms_norm:bfloat16:32768x8192
# B: ld_keep's asm without its L2 policy operand.
l1=(--common-sub 'L1::evict_last\.L2::cache_hint\.v4\.u32 \{%0, %1, %2, %3\}, \[%4\], %5;'
  'L1::evict_last.v4.u32 {%0, %1, %2, %3}, [%4];' --common-sub ': "l"\(p\), "l"\(keep_policy\(\)\)\);' ': "l"(p));')
ab norms "ab-$gpu-norm-fwd-keep-l1.log" "${l1[@]}" \
  layer_norm:float32:32768x4096 rms_norm:float32:32768x4096 rms_norm:float32:32768x8192 rms_norm:bfloat16:32768x8192
