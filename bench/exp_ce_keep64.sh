#!/usr/bin/env bash
# Follow-up of bench/exp_ce_bwd_bf16.sh (h200-2026-11-28-s49/ab-h200-ce-bwd-keep-r64.log: the 16-bit backward's rows
# loaded kKeep at 64 registers, bf16 32768 x 4096 141.4 -> 136.7 us, 3.3-5.0% less at every 16-bit case there). Where
# else the two changes reach: kCeLd also loads the forward's streamed rows, and MAXR is every dtype's cap (float64
# spills at 64: it keeps 80). A: the shipped source, B:
#   keep64:     kCeLd kKeep, kk_cross_entropy_bwd's MAXR 64 but float64's
#   keep:       kCeLd kKeep alone (float32, and the forwards)
#   r64:        MAXR 64 alone (float32)
#   held-keep:  kCeHeldLd kKeep for every dtype (16-bit rows one block holds: 3.1% less, ab-h200-ce-held-keep16.log)
# B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ce-keep64.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
keep=("constexpr int kCeLd = kk::kNc;" "constexpr int kCeLd = kk::kKeep;")
r64=("bool KEEP_AT_ONE = false, int MAXR = 80>" "bool KEEP_AT_ONE = false, int MAXR = sizeof(T) == 8 ? 80 : 64>")
bwd16="cross_entropy_backward:bfloat16:32768x1024 cross_entropy_backward:bfloat16:32768x2048
cross_entropy_backward:bfloat16:8192x65536 cross_entropy_backward:float16:8192x65536"
bwd32="cross_entropy_backward:float32:32768x1024 cross_entropy_backward:float32:32768x4096
cross_entropy_backward:float32:32768x8192 cross_entropy_backward:float32:8192x65536"
fwd="cross_entropy:bfloat16:32768x4096 cross_entropy:bfloat16:8192x65536 cross_entropy:float32:32768x4096
cross_entropy:float32:8192x65536"
held="cross_entropy_fwd_bwd:bfloat16:32768x1024 cross_entropy_fwd_bwd:bfloat16:8192x65536
cross_entropy_items_fwd_bwd:bfloat16:32768x4096"
# shellcheck disable=SC2086
{
  ab softmax "ab-$gpu-ce-keep64.log" --sub "${keep[@]}" --sub "${r64[@]}" $bwd16 $bwd32 $fwd
  ab softmax "ab-$gpu-ce-keep-f32.log" --sub "${keep[@]}" $bwd32
  ab softmax "ab-$gpu-ce-r64-f32.log" --sub "${r64[@]}" $bwd32
  ab softmax "ab-$gpu-ce-held-keep.log" --sub "SPLIT \|\| sizeof\(T\) == 4 \? kk::kKeep : kk::kNc;" "kk::kKeep;" $held
}
