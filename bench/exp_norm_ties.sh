#!/usr/bin/env bash
# The norm forwards that trail torch.compile at the copy bandwidth on an H200 (h200-2026-11-28-s48/llm-norms.json):
# rms_norm float32 32768 x 8192 0.998x (kk_rms_norm_fwd at 4 packs, 3 blocks per SM, 512 threads, 40 registers),
# layer_norm float32 32768 x 4096 0.996x (kk_layer_norm_fwd_wide at 2 packs, 4 blocks, 512 threads, 32 registers),
# rms_norm bf16 32768 x 8192 0.9997x (kk_rms_norm_fwd_wide at 2 packs, 4 blocks, 512 threads). A: the shipped fits,
# B: the lean _wide kernels at other fits that compile without spills (kernels/check_compile.py): float32 RMSNorm
# wide (4, 3) 35 registers and (4, 2) 37; float32 LayerNorm wide (4, 3), 256 threads, 39; bf16 RMSNorm wide (4, 3)
# and (4, 2), 256 threads. B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norm-ties.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab_wide_fit "ab-$gpu-tie-rms-f32-w43.log" kk_rms_norm_fwd float32 4096 8192 4 3 rms_norm:float32:32768x8192
ab_wide_fit "ab-$gpu-tie-rms-f32-w42.log" kk_rms_norm_fwd float32 4096 8192 4 2 rms_norm:float32:32768x8192
ab_wide_fit "ab-$gpu-tie-ln-f32-w43.log" kk_layer_norm_fwd float32 2048 4096 4 3 layer_norm:float32:32768x4096
ab_wide_fit "ab-$gpu-tie-rms-bf16-w43.log" kk_rms_norm_fwd bfloat16 4096 8192 4 3 rms_norm:bfloat16:32768x8192
ab_wide_fit "ab-$gpu-tie-rms-bf16-w42.log" kk_rms_norm_fwd bfloat16 4096 8192 4 2 rms_norm:bfloat16:32768x8192
