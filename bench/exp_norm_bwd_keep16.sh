#!/usr/bin/env bash
# The 16-bit norm backwards load their rows kNc (kernels/norms.cu kBwdLd): session 17 measured kKeep 1-4% slower for
# them, on kernels since rewritten, as cross-entropy's kKeep was (session 49 measured it 1.3-4.8% faster there, at
# the same cap). A: the shipped source, B: kBwdLd kKeep for every dtype (no spills on sm_90: kernels/check_compile.py).
# B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norm-bwd-keep16.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
ab norms "ab-$gpu-norm-bwd-keep16.log" \
  --sub "constexpr int kBwdLd = sizeof\(T\) == 4 \? kk::kKeep : kk::kNc;" "constexpr int kBwdLd = kk::kKeep;" \
  rms_norm_backward:bfloat16:32768x4096 rms_norm_backward:bfloat16:32768x8192 rms_norm_backward:bfloat16:8192x65536 \
  layer_norm_backward:bfloat16:32768x4096 layer_norm_backward:bfloat16:32768x8192 \
  add_rms_norm_backward:bfloat16:32768x4096 add_rms_norm_backward:bfloat16:8192x65536 \
  rms_norm_backward:float16:32768x4096
