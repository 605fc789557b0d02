#!/usr/bin/env bash
# Follow-up of bench/exp_norm_bwd_keep16.sh (h200-2026-11-28-s49/ab-h200-norm-bwd-keep16.log: kKeep for every 16-bit
# norm backward load, mixed). There the register kernel's rows one block holds (norm_bwd_run, SPLIT false) ran faster
# (rms_norm_backward bf16 32768 x 8192 421.0 -> 414.9 us, add_rms_norm_backward x 4096 0.988) and rms_norm's rows split
# over a cluster slower (8192 x 65536 1.010); the bulk kernels read only their weights through kBwdLd. A: the shipped
# source, B: kKeep for norm_bwd_run's rows where SPLIT is false (kBwdLd<T, SPLIT>; no spills on sm_90 or sm_80,
# kernels/check_compile.py). B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh
# norm-bwd-keep-rows. Its patterns match the source of session 49.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
ab norms "ab-$gpu-norm-bwd-keep-rows.log" \
  --sub "template <typename T> constexpr int kBwdLd = sizeof\(T\) == 4 \? kk::kKeep : kk::kNc;" \
  "template <typename T, bool SPLIT = true> constexpr int kBwdLd = sizeof(T) == 4 || !SPLIT ? kk::kKeep : kk::kNc;" \
  --sub "kBwdLd<T>>\(gy \+ off" "kBwdLd<T, SPLIT>>(gy + off" \
  --sub "kBwdLd<T>>\(x \+ off" "kBwdLd<T, SPLIT>>(x + off" \
  --sub "load_vec_if<W, kBwdLd<T>>\(gextra" "load_vec_if<W, kBwdLd<T, SPLIT>>(gextra" \
  --sub "load_vec<W, kBwdLd<T>>\(gextra" "load_vec<W, kBwdLd<T, SPLIT>>(gextra" \
  rms_norm_backward:bfloat16:32768x8192 rms_norm_backward:float16:32768x8192 rms_norm_backward:bfloat16:8192x65536 \
  add_rms_norm_backward:bfloat16:32768x4096 add_rms_norm_backward:bfloat16:32768x8192 \
  add_rms_norm_backward:bfloat16:8192x65536 layer_norm_backward:bfloat16:32768x4096 \
  layer_norm_backward:bfloat16:8192x65536 rms_norm_backward:bfloat16:32768x1024 rms_norm_backward:bfloat16:32768x4096
