#!/usr/bin/env bash
# The RMSNorm forwards still behind torch.compile once the wide kernels check their launch after their rows
# (h200-2026-11-29-s52/ties-norms.log, 40 rounds): float32 32768 x 8192 0.9990 (the general kk_rms_norm_fwd<float,
# false, 4, 3>, whose every block tests its path before its loads) and bfloat16 x 8192 0.9987 (kk_rms_norm_fwd_wide
# at (2, 4)). B: the lean _wide kernel for float32 x 8192 at (4, 3) (session 18 measured it 502.4 against 500.5 us
# with the checks ahead of the loads), (4, 4) and (8, 2); bfloat16 x 8192 at (4, 4) and (4, 3). A: the shipped fits.
# B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh wide-fits-s52.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab_wide_fits "ab-$gpu-fit-rms-f32" kk_rms_norm_fwd float32 4096 8192 "4 3, 4 4, 8 2" rms_norm:float32:32768x8192
ab_wide_fits "ab-$gpu-fit-rms-bf16" kk_rms_norm_fwd bfloat16 4096 8192 "4 4, 4 3" rms_norm:bfloat16:32768x8192
