#!/usr/bin/env bash
# The 16-bit norm backwards' shifted rows by bulk copies (kernels/norms.cu norm_bwd_bulk_shifted_run; ops/norms.py
# _shifted_bulk_backward): each row's 16-byte units arrive whole in shared-memory stages, S rows ahead, where the register
# kernel keeps one row ahead (rms_norm_backward bf16 32768 x 4097 231.6 us against the 16-byte path's bulk kernel's
# 200.7 at 4096, h200-2026-11-28-s46; 8192 x 50257 at 60% of copy, h200-2026-11-28-s47/wide-norms-2.log).
# A: the wheel, B: the same wheel with the register kernels (_SHIFTED_BULK off); B/A above 1: the bulk kernels are faster.
# The first run (ab-h200-shifted-bulk.log) had them wherever rows are beyond 2048 columns, split over a cluster too:
# slower but at 5001 columns (1.48x); they now run only where their blocks are smaller than the register kernel's.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh shifted-bulk.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
cases="rms_norm_backward:bfloat16:32768x5001 layer_norm_backward:bfloat16:32768x5001 rms_norm_backward:float16:32768x5001
rms_norm_backward:bfloat16:32768x3001 layer_norm_backward:bfloat16:32768x3001 rms_norm_backward:bfloat16:32768x4500
layer_norm_backward:bfloat16:32768x4500 rms_norm_backward:bfloat16:32768x4097"
# shellcheck disable=SC2086
ab norms "ab-$gpu-shifted-bulk-2.log" --b-host "norms._SHIFTED_BULK=False" $cases
exit 0
