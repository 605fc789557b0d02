#!/usr/bin/env bash
# Session 43's softmax.cu (the block reductions' second stage over 16 lanes, and the held cross-entropy's rows of
# >= 128 threads in two reductions) was measured on H100s only (bench/exp_ce_held_two_reductions.py, at 0ae04a6,
# whose pattern matched only the source before it). On an H200 it changes the held cross-entropy's 16-bit rows from
# 8192 columns and float32 rows from 4096 (the shipped fits reach 128 threads there), and every block reduction.
# Two A/Bs on either GPU, A being the shipped wheel:
#   1. B = 36ebf53's kernels/softmax.cu (the session's start): B/A above 1 means the shipped source is faster;
#   2. B = the other GPU's held cross-entropy fits: on an H200 the H100's (_HELD_CE_FITS_LOW_GBPS: 16-bit rows of 4
#      packs, 128 threads at 4096 columns), which there had been slower with one reduction of (max, sum) pairs
#      (h200-2026-11-24-s34); on an H100 the H200's (8 packs, 64 threads at 4096 columns).
# Before carrying the tree:
#   mkdir -p bench/ab-s42 && git show 36ebf53:kernels/softmax.cu > bench/ab-s42/softmax.cu && cp kernels/common.cuh bench/ab-s42/
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ce-two-h200.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cases="softmax:bfloat16:32768x4096 softmax:float32:32768x4096 softmax:bfloat16:32768x8192 softmax:bfloat16:32768x1001
softmax_backward:bfloat16:32768x4096 cross_entropy_fwd_bwd:bfloat16:32768x4096
cross_entropy_fwd_bwd:bfloat16:32768x8192 cross_entropy_fwd_bwd:float32:32768x4096
cross_entropy_fwd_bwd:float32:32768x8192 cross_entropy_fwd_bwd:float16:32768x8192 cross_entropy:bfloat16:32768x8192"
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-vs-s42.log" --b-dir ab-s42 $cases
if [ "$gpu" = h200 ]; then
  other=(ab-h200-ce-held-low-gbps-fits.log "softmax._HELD_CE_FITS=softmax._HELD_CE_FITS_LOW_GBPS")
else
  other=(ab-h100-ce-held-h200-fits.log "softmax._HELD_CE_FITS_LOW_GBPS=softmax._HELD_CE_FITS")
fi
ab softmax "${other[0]}" --b-host "${other[1]}" \
  cross_entropy_fwd_bwd:bfloat16:32768x2048 cross_entropy_fwd_bwd:bfloat16:32768x4096 \
  cross_entropy_fwd_bwd:float16:32768x4096 cross_entropy_fwd_bwd:bfloat16:32768x8192 \
  cross_entropy_fwd_bwd:bfloat16:16384x16384
exit 0
