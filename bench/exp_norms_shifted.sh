#!/usr/bin/env bash
# The norms' shifted rows (kernels/common.cuh kk::RowShift, kk::load_shifted for w and b; the backwards' chunks take
# rows of one shift): rows off the 16-byte path take the 16-byte packs between their 16-byte boundaries, their head and
# tail elements one by one (held in one block, or split over a cluster), where they took one element at a time
# (bench/results/h100-2026-11-28-s45/llm-odd.log: rms_norm bf16 32768 x 4097 0.76x torch.compile, float32 0.62x;
# layer_norm bf16 0.53x).
# 1. A: the wheel, B: the same wheel on the scalar path (row_path SCALAR); B/A above 1: the shifted rows are faster.
# 2. kernelkit bench at 32768 x 4097, 32768 x 1001 and 8192 x 50257 (rows beyond one block, split over a cluster)
#    against torch, torch.compile and Liger.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norms-shifted.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
odd="rms_norm:bfloat16:32768x4097 rms_norm:float32:32768x4097 add_rms_norm:bfloat16:32768x4097
add_rms_norm:float32:32768x4097 layer_norm:bfloat16:32768x4097 layer_norm:float32:32768x4097
rms_norm:bfloat16:32768x1001 layer_norm:bfloat16:16384x12289 rms_norm_backward:bfloat16:32768x4097
rms_norm_backward:float32:32768x4097 add_rms_norm_backward:bfloat16:32768x4097 layer_norm_backward:bfloat16:32768x4097
rms_norm:bfloat16:8192x50257 layer_norm:float32:8192x50257 rms_norm_backward:bfloat16:8192x50257
layer_norm_backward:float32:8192x50257"
# shellcheck disable=SC2086
ab norms "ab-$gpu-norms-shifted.log" --b-host "norms.row_path=lambda c, d, t: norms.SCALAR" $odd
cd .. && COLUMNS=200 python3 -m kernelkit bench rms_norm rms_norm_backward add_rms_norm add_rms_norm_backward layer_norm \
  layer_norm_backward --sizes 32768x4097,32768x1001,8192x50257 \
  --dtype bfloat16,float32 --json "$OUT/odd-norms.json" 2>&1 | tee "$OUT/odd-norms.log" | tail -3
exit 0
