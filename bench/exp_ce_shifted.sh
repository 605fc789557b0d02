#!/usr/bin/env bash
# Cross-entropy's shifted rows (kernels/common.cuh kk::RowShift): the forward takes them wherever the logits are off
# the 16-byte path (one tensor is congruent with itself), the backward where logits and gradient are congruent, and the
# held loss (gradient written in the forward, one read of the logits) at widths off the 16-byte path, which before
# kept the kernels apart (bench/results/h100-2026-11-28-s45/llm-odd.log: fwd_bwd bf16 8192 x 50257 0.90x
# torch.compile).
# 1. A: the wheel, B: the kernels before the change (bench/ab-head/, copied before the wheel was carried:
#      mkdir -p bench/ab-head && for f in softmax.cu common.cuh; do git show HEAD~1:kernels/$f > bench/ab-head/$f; done
#    ) with the held loss kept to the 16-byte path, at odd widths; B/A above 1: the change is faster.
# 2. The same B at widths on the 16-byte path, whose instantiations' registers moved (check_compile.py).
# 3. kernelkit bench at the odd widths against torch, torch.compile and Liger.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ce-shifted.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
odd="cross_entropy_fwd_bwd:bfloat16:32768x4097 cross_entropy_fwd_bwd:float32:32768x4097
cross_entropy_fwd_bwd:bfloat16:8192x50257 cross_entropy_fwd_bwd:float32:8192x50257 cross_entropy:bfloat16:8192x50257
cross_entropy_backward:bfloat16:8192x50257"
apart="(lambda f: lambda d, c, dev: None if c % softmax.VEC[d] else f(d, c, dev))(softmax._held_ce_shape)"
# shellcheck disable=SC2086
ab softmax "ab-$gpu-ce-shifted.log" --b-dir ab-head --b-host "softmax._held_ce_shape=$apart" $odd
aligned="cross_entropy_fwd_bwd:bfloat16:32768x4096 cross_entropy_fwd_bwd:float32:32768x4096
cross_entropy_fwd_bwd:bfloat16:8192x65536 cross_entropy:bfloat16:32768x4096 cross_entropy_backward:bfloat16:32768x4096
cross_entropy_backward:float32:32768x4096"
# shellcheck disable=SC2086
ab softmax "ab-$gpu-ce-shifted-aligned.log" --b-dir ab-head $aligned
cd .. && COLUMNS=200 python3 -m kernelkit bench cross_entropy cross_entropy_backward cross_entropy_fwd_bwd \
  --sizes 32768x4097,8192x50257 --dtype bfloat16,float32 --json "$OUT/odd-ce.json" 2>&1 | tee "$OUT/odd-ce.log" | tail -3
exit 0
