#!/usr/bin/env bash
# Softmax's held rows keeping each exponential for the output, now that blocks of >= 128 threads take the row's max
# before their sum (session 41's two reductions): the sum's exponentials are then the output's, with no rescale.
# Session 41's exp-once (16 floats per thread, before the two reductions) was 8-13% slower on registers; here the
# exponentials are kept only where RP * W <= KEEP (8 or 16 floats), and the fits at 2048-4096 columns move to one
# 16-byte pack per thread (16-bit, 512 threads at 4096) or two (float32), 32 registers at full occupancy, as Liger's
# 1024-thread rows. GPU time alone. Its A is the source of ba0ae0e (since then kernels/softmax.cu keeps the
# exponentials, kKeepExps); its B sources are that source with bench/results/h100-2026-11-28-s42/softmax-keep-exps-
# {8,16}.patch, made before the wheel is carried:
#   for k in 8 16; do d=bench/ab-once$k; mkdir -p $d; for f in common.cuh softmax.cu; do
#     git show ba0ae0e:kernels/$f > $d/$f; done; patch -s $d/softmax.cu bench/results/h100-2026-11-28-s42/softmax-keep-exps-$k.patch; done
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-once.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
fits=$([ "$gpu" = h100 ] && echo _HELD_LOW_GBPS || echo _HELD)
host="softmax.$fits=softmax.$fits | {('kk_softmax_fwd', 2): ((1, 4, 256), *softmax.$fits['kk_softmax_fwd', 2]),"
host+=" ('kk_softmax_fwd', 4): ((2, 4, 256), *softmax.$fits['kk_softmax_fwd', 4])}"
cases="softmax:bfloat16:32768x4096 softmax:float16:32768x4096 softmax:bfloat16:32768x8192 softmax:float32:32768x4096
softmax:float32:32768x8192 softmax:bfloat16:32768x2048 softmax:float32:32768x2048 softmax:bfloat16:32768x3000"
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-fits-1pack.log" --b-host "$host" $cases
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-once8-1pack.log" --b-dir ab-once8 --b-host "$host" $cases
# shellcheck disable=SC2086
ab softmax "ab-$gpu-softmax-once16.log" --b-dir ab-once16 $cases
