#!/usr/bin/env bash
# kk_softmax_fwd's held block rows one per block, with no grid-stride loop, and the rows of >= kTwoReductionThreads
# in their own function (held_two_row) so that the packs are dead once their exponentials are kept: the 16-bit rows
# of 2 packs (the H100's fit at 4096-8192 columns) compile to 32 registers instead of 40 (Liger's 32,
# h100-2026-11-28-s43/ncu-softmax-sass.txt); float32's H100 fit 63 -> 52. On an H100 the 16-byte path then ran slower
# at 64 warps per SM than at the loop's 48, so ops/softmax.py holds it to 48 (_HELD_WARPS_LOW_GBPS).
# 1. A: the wheel with both, B: session 43's kernels/softmax.cu (B/A above 1: the change is faster), copied before
#    the wheel was carried:
#      mkdir -p bench/ab-s43 && git show 0ae04a6:kernels/softmax.cu > bench/ab-s43/softmax.cu && cp kernels/common.cuh bench/ab-s43/
# 2. B: the cap at 40 and at 56 warps per SM.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-one-row.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cases="softmax:bfloat16:32768x4096 softmax:float16:32768x4096 softmax:bfloat16:32768x6000 softmax:bfloat16:32768x8192
softmax:float32:32768x4096 softmax:bfloat16:32768x1001 softmax:float32:32768x1001 softmax:bfloat16:32768x4097"
export AB_ROUNDS=8
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-one-row-48warps.log" --b-dir ab-s43 $cases
for w in 40 56; do
  ab softmax "ab-$gpu-softmax-one-row-warps$w.log" --b-host "softmax._HELD_WARPS_LOW_GBPS={('kk_softmax_fwd', 2): $w}" \
    softmax:bfloat16:32768x4096 softmax:bfloat16:32768x8192 softmax:bfloat16:32768x6000
done
