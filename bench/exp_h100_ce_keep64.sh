#!/usr/bin/env bash
# Session 49's cross-entropy changes, measured on an H200 only (h200-2026-11-28-s49/): kKeep loads throughout (kCeLd),
# the 16-bit backward at 64 registers (MAXR), the 48-register backward up to 1024 columns (_CE_BWD_LEAN_COLS). Each
# undone on an H100 (lower DRAM bandwidth per SM, where other fits differ: _runtime.low_dram_bandwidth). A: the shipped
# source, B:
#   knc:     the rows loaded kNc, as before
#   r80:     the 16-bit backward at 80 registers, as before
#   lean512: the 48-register rows up to 512 columns, as before
# B/A below 1: B (the old choice) is faster there. On an H100: OUT=$OUT bash bench/gpu_run.sh h100-ce-keep64.
# Its patterns match the source of session 49.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
bwd="cross_entropy_backward:bfloat16:32768x2048 cross_entropy_backward:bfloat16:32768x4096
cross_entropy_backward:bfloat16:32768x8192 cross_entropy_backward:bfloat16:8192x65536
cross_entropy_backward:float32:32768x4096 cross_entropy_backward:float32:8192x65536"
held="cross_entropy_fwd_bwd:bfloat16:32768x4096 cross_entropy_fwd_bwd:bfloat16:32768x8192
cross_entropy_fwd_bwd:float32:32768x4096"
# shellcheck disable=SC2086
{
  ab softmax "ab-$gpu-ce-undo-knc.log" --sub "constexpr int kCeLd = kk::kKeep;" "constexpr int kCeLd = kk::kNc;" \
    $bwd $held cross_entropy:bfloat16:32768x4096
  ab softmax "ab-$gpu-ce-undo-r80.log" --sub "int MAXR = sizeof\(T\) == 2 \? 64 : 80>" "int MAXR = 80>" $bwd
  ab softmax "ab-$gpu-ce-undo-lean512.log" --b-host "softmax._CE_BWD_LEAN_COLS=512" \
    cross_entropy_backward:bfloat16:32768x1024 cross_entropy_backward:float32:32768x1024
}
