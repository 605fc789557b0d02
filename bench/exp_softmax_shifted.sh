#!/usr/bin/env bash
# Softmax's shifted rows (kernels/common.cuh kk::RowShift): rows off the 16-byte path (odd widths) take the 16-byte
# packs between their 16-byte boundaries and their head and tail elements one by one, where they took one element at
# a time (bench/results/h100-2026-11-28-s45/llm-odd.log: softmax bf16 32768 x 4097 0.46x Liger, 8192 x 50257 0.34x
# torch eager).
# 1. A: the wheel, B: the same wheel on the scalar path (row_path SCALAR); B/A above 1: the shifted rows are faster.
# 2. A: the wheel, B: the kernels before the change (bench/ab-head/, copied before the wheel was carried:
#      mkdir -p bench/ab-head && for f in softmax.cu common.cuh; do git show HEAD:kernels/$f > bench/ab-head/$f; done
#    ) at widths on the 16-byte path, whose instantiations' registers moved by up to 4 (check_compile.py).
# 3. kernelkit bench at the odd widths against torch, torch.compile and Liger.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-shifted.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=6
odd="softmax:bfloat16:32768x4097 softmax:float32:32768x4097 softmax:bfloat16:8192x50257 softmax:float32:8192x50257
softmax:bfloat16:32768x1001 softmax_backward:bfloat16:32768x4097 softmax_backward:float32:32768x4097
softmax_backward:bfloat16:8192x50257 softmax_backward:float32:8192x50257"
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-shifted.log" --b-host "softmax.row_path=lambda c, d, t: softmax.SCALAR" $odd
aligned="softmax:bfloat16:32768x4096 softmax:float32:32768x4096 softmax:float32:32768x8192 softmax:bfloat16:8192x65536
softmax:float32:8192x65536 softmax_backward:bfloat16:32768x4096 softmax_backward:float32:32768x4096
softmax_backward:bfloat16:8192x65536"
# shellcheck disable=SC2086
[ -d ab-head ] && ab softmax "ab-$gpu-softmax-shifted-aligned.log" --b-dir ab-head $aligned
cd .. && COLUMNS=200 python3 -m kernelkit bench softmax softmax_backward --sizes 32768x4097,8192x50257,32768x1001 \
  --dtype bfloat16,float32 --json "$OUT/odd-softmax.json" 2>&1 | tee "$OUT/odd-softmax.log" | tail -3
exit 0
