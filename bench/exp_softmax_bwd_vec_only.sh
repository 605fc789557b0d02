#!/usr/bin/env bash
# The softmax backward's held rows on their VEC_ONLY instantiation (kernels/softmax.cu kk_softmax_bwd; ops/softmax.py
# _VEC_ONLY): one row per block with no path, block or fit test ahead of its loads, the launch checked by block 0 after
# its row, as the norms' VEC_ONLY forwards (1.2-1.8% on their 16-bit cells, h200-2026-11-29-s52, h200-2026-11-28-s53).
# Registers (sm_90): 16-bit at 2 packs 48 -> 40, float32 at 8 packs 120 -> 89. The bf16 backward at 32768 x 4096 trails
# torch.compile's kernel by 0.56% in GPU time (h200-2026-11-28-s55/ties-s31-cells.log).
# 1. A/B against the shipped kernels, GPU time alone, at the held widths of each dtype (bitwise equal expected);
# 2. the shipped kernels and the VEC_ONLY setting against torch.compile, GPU time alone over 42 balanced rounds
#    (bench/exp_ties.py --alone --host).
# Before it: tests/test_llm_cuda_vs_cpu.py -k vec_only. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-bwd-vec-only.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
on="softmax._VEC_ONLY=('kk_softmax_bwd',)"
ab softmax "ab-$gpu-softmax-bwd-vec-only.log" --b-host "$on" softmax_backward:bfloat16:32768x4096 \
  softmax_backward:float16:32768x4096 softmax_backward:bfloat16:32768x8192 softmax_backward:bfloat16:32768x1024 \
  softmax_backward:bfloat16:32768x2048 softmax_backward:float32:32768x4096 softmax_backward:float32:32768x8192 \
  softmax_backward:float32:32768x1024 softmax_backward:bfloat16:16384x16384
for host in "" "$on"; do  # the shipped kernels, then VEC_ONLY; GPU time alone (the compiled backward is host-bound)
  python3 exp_ties.py --only softmax_backward --rounds 42 --alone ${host:+--host "$host"} 2>&1 \
    | tee -a "$OUT/ties-softmax-bwd-vec-only.log" | tail -2
done
