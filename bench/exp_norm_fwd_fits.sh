#!/usr/bin/env bash
# The two norm forwards still behind torch.compile after the inference ops (h200-2026-11-28-s51/ties-norms.log):
# rms_norm float32 32768 x 8192 0.9986 (kk_rms_norm_fwd<float, false, 4, 3>: 512 threads, 40 registers, 3 blocks per
# SM) and layer_norm float32 32768 x 4096 0.9959 (kk_layer_norm_fwd_wide<float, 2, 4>: 512 threads, 32 registers).
# B: lean _wide kernels at fits not measured before that compile without spills (kernels/check_compile.py, sm_90):
# RMSNorm (4, 4) 512 threads at 32 registers (every thread slot of the SM; session 48 measured (4, 3) and (4, 2)),
# (8, 2) 256 threads at 59; LayerNorm (2, 2) 512 threads at 40, (4, 2) 256 at 50, (8, 2) 128 at 58. A: the shipped
# fits. B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norm-fwd-fits.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab_wide_fits "ab-$gpu-fit-rms-f32" kk_rms_norm_fwd float32 4096 8192 "4 4, 8 2" rms_norm:float32:32768x8192
ab_wide_fits "ab-$gpu-fit-ln-f32" kk_layer_norm_fwd float32 2048 4096 "2 2, 4 2, 8 2" layer_norm:float32:32768x4096
