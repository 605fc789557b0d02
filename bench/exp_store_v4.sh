#!/usr/bin/env bash
# kk::store_vec's 16-byte stores as one st.global.wb.v4 (__stwb) instead of the C++ copy of the pack, which NVRTC
# compiles to four 4-byte stores in 26 of norms.cu's 303 kernels, 27 of softmax.cu's 251 and 4 of activations.cu's 24,
# all float32 (kk_rms_norm_fwd<float, false, 4, 3> stores two of its four packs that way; ncu counted 7.5% more L2
# write sectors for it than for torch.compile's kernel, h200-2026-11-28-s50/ncu-norm-fwd.txt). A: the shipped source,
# B: store_vec's v4 store. B/A below 1: the v4 store is faster. Session 50 ran it the other way round (a wheel with the
# v4 store as A, h200-2026-11-28-s50/ab-h200-store-v4-*.log). On the GPU machine: OUT=$OUT bash bench/gpu_run.sh store-v4.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
# B: common.cuh's 16-byte C++ copy in store_vec as __stwb.
v4=(--common-sub '\*reinterpret_cast<uint4\*>\(p\) = \*reinterpret_cast<const uint4\*>\(&r\);'
  '__stwb(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&r));')
# layer_norm float32 x 8192 (kk_layer_norm_fwd_wide, whose stores were whole) is the control.
ab norms "ab-$gpu-store-v4-norms.log" "${v4[@]}" \
  rms_norm:float32:32768x8192 add_rms_norm:float32:32768x8192 add_rms_norm:float32:32768x4096 \
  layer_norm:float32:32768x1024 rms_norm:float32:32768x1024 rms_norm_backward:float32:32768x2048 \
  layer_norm:float32:32768x8192
ab softmax "ab-$gpu-store-v4-softmax.log" "${v4[@]}" \
  softmax:float32:32768x8192 softmax_backward:float32:32768x8192 cross_entropy_backward:float32:32768x8192 \
  softmax:float32:8192x65536
ab activations "ab-$gpu-store-v4-rope.log" "${v4[@]}" rope:float32:32768x4096
