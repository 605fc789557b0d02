#!/usr/bin/env bash
# The 16-bit cross-entropy backward's warp rows (256-2048 packs: bf16 2048-16384 columns) by kk_cross_entropy_bwd_flat,
# one pass of a flat grid, against the resident kernel (kk_cross_entropy_bwd, 4 waves). Session 38 measured the flat
# kernel slower at 32768 x 8192 (P 2-8, 256 threads) and host-bound at x 4096; GPU time alone at x 4096 (resident:
# 141.5 us, 89.8% of copy in h200-2026-11-28-s48/llm-softmax.json) had not been read.
# B/A below 1: the flat kernel is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ce-bwd-flat-bf16.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
cases="cross_entropy_backward:bfloat16:32768x4096 cross_entropy_backward:bfloat16:32768x8192
cross_entropy_backward:float16:32768x4096 cross_entropy_backward:bfloat16:65536x2048"
for fit in "2 256" "4 128" "1 256" "2 128"; do
  # shellcheck disable=SC2086
  set -- $fit  # packs per thread, threads per block
  # shellcheck disable=SC2086
  ab softmax "ab-$gpu-ce-bwd-flat-p$1-b$2.log" --b-host "softmax._CE_BWD_FLAT={4: (4, 1024), 2: ($1, 256)}" \
    --b-host "softmax._CE_BWD_FLAT_THREADS=$2" $cases
done
