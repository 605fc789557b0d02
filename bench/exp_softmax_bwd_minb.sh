#!/usr/bin/env bash
# The 16-bit softmax backward's held rows at 4096-6143 columns (ops/softmax.py _HELD: 2 packs a thread, 256-thread rows
# at 32768 x 4096, MINB 2: 48 registers, 5 blocks per SM) trail torch.compile's kernel by 0.56% in GPU time over 42
# balanced rounds (h200-2026-11-28-s55/ties-s31-cells.log: 185.5 against 184.4 us), though they lead it per call by its
# host time. Session 21 measured MINB 3 and 4 there 0.4% and 0.7% slower; the kernel has since dropped registers
# (kernels/check_compile.py, sm_90): MINB 3 now 40 registers (6 blocks), MINB 4 32 (8 blocks), 1 pack of 512 threads at
# MINB 4 32, none spilling. Each against torch.compile over 42 rounds (bench/exp_ties.py --host), the shipped fit first.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-bwd-minb.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
for fit in "" "(2, 4, 256)" "(2, 3, 256)" "(1, 4, 512)"; do
  host="softmax._HELD=softmax._HELD | {('kk_softmax_bwd', 2): ((2, 3, 384), $fit, (2, 2, 32), (4, 2, 32))}"
  python3 exp_ties.py --only softmax_backward --rounds 42 ${fit:+--host "$host"} 2>&1 | tail -2 \
    | tee -a "$OUT/ties-softmax-bwd-minb.log"
done
