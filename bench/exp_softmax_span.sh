#!/usr/bin/env bash
# The block reductions of kernels/softmax.cu over the warps' partials in a butterfly of 16 lanes (kMaxWarps: blocks
# of at most 512 threads) instead of 32: one step fewer per reduction, fewer for the (max, sum) pairs' costly combines,
# bitwise the same (the dropped steps combined with the identity). ncu of the H100's bf16 32768 x 4096 forward
# (h100-2026-11-28-s43/ncu-softmax-sass.txt): 364 instructions per thread against Liger's 312, 85 of them in its two
# reductions against Liger's 54. Its A was the wheel of 36ebf53 and its B kernels/softmax.cu with the change (now
# shipped), copied before the wheel was carried; to repeat it against an older source, build that wheel and:
#   mkdir -p bench/ab-span16 && cp kernels/softmax.cu kernels/common.cuh bench/ab-span16/
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-span.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cases="softmax:bfloat16:32768x4096 softmax:float16:32768x4096 softmax:float32:32768x4096 softmax:bfloat16:32768x8192
softmax:float32:32768x8192 softmax:bfloat16:32768x2048 softmax:bfloat16:32768x1001 softmax_backward:bfloat16:32768x4096
softmax_backward:float32:32768x4096 cross_entropy:bfloat16:32768x4096 cross_entropy_fwd_bwd:bfloat16:32768x4096
cross_entropy:float32:32768x8192"
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-span16.log" --b-dir ab-span16 $cases
