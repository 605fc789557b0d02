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
b=/tmp/kk-store-v4
mkdir -p $b && cp ../kernels/*.cu $b/
python3 - "$b" <<'PY' || exit 1
import sys
src = open("../kernels/common.cuh").read()
old = """  } else {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&r);"""
assert src.count(old) == 1, "store_vec's 16-byte copy not found"
new = old.replace("*reinterpret_cast<uint4*>(p) = *", "__stwb(reinterpret_cast<uint4*>(p), *").replace("(&r);", "(&r));")
open(sys.argv[1] + "/common.cuh", "w").write(src.replace(old, new))
PY
# layer_norm float32 x 8192 (kk_layer_norm_fwd_wide, whose stores were whole) is the control.
ab norms "ab-$gpu-store-v4-norms.log" --b-dir $b \
  rms_norm:float32:32768x8192 add_rms_norm:float32:32768x8192 add_rms_norm:float32:32768x4096 \
  layer_norm:float32:32768x1024 rms_norm:float32:32768x1024 rms_norm_backward:float32:32768x2048 \
  layer_norm:float32:32768x8192
ab softmax "ab-$gpu-store-v4-softmax.log" --b-dir $b \
  softmax:float32:32768x8192 softmax_backward:float32:32768x8192 cross_entropy_backward:float32:32768x8192 \
  softmax:float32:8192x65536
ab activations "ab-$gpu-store-v4-rope.log" --b-dir $b rope:float32:32768x4096
