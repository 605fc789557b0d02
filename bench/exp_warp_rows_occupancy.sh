#!/usr/bin/env bash
# Warp rows at higher occupancy, GPU time alone (ab_source.py --queued), against the shipped kernels. On the GPU
# machine: OUT=$OUT bash bench/gpu_run.sh warp-occupancy (which installs the wheel first).
# Registers and blocks of 256 threads per SM from kernels/check_compile.py (sm_90), none of the B variants spilling:
# 1. softmax warp rows (<= 128 packs forward, <= 64 backward; ops/softmax.py _WARP_FITS): shipped 16-bit forward 92
#    registers (2 blocks), float32 forward 63 and a 16-byte spill (4), backward 120 (2); B at most 64 packs 32 (8),
#    16-bit forward rows of 65-128 packs 48 (5), float32 52 (4).
# 2. kk_cross_entropy_bwd (__maxnreg__(80): 79 registers, 3 blocks) at __maxnreg__(48): 5 blocks.
# 3. kk_cross_entropy_loss (the reduced loss's forward; MAXR 64: 4 blocks) at 48: 5 blocks (at 40 it spills).
# Its patterns match the sources of fd28e32 (kk_cross_entropy_bwd's registers are now its MAXR).
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cases() {  # OP... -> OP:DTYPE:SIZE for the narrow sizes and one wide one
  for op in "$@"; do
    for size in 16384x64 32768x256 32768x512 32768x1024 32768x4096; do
      for dtype in bfloat16 float32; do printf ' %s:%s:%s' "$op" "$dtype" "$size"; done
    done
  done
}
fits='{("kk_softmax_fwd", 2): ((2, 8, 256, True), (4, 5, 256, True)),
       ("kk_softmax_fwd", 4): ((2, 8, 256, True), (4, 4, 256, True)),
       ("kk_softmax_bwd", 2): ((2, 8, 256, True),), ("kk_softmax_bwd", 4): ((2, 8, 256, True),)}'
# shellcheck disable=SC2046
ab softmax ab-softmax-warp-fits.log --b-host "softmax._WARP_FITS=softmax._WARP_FITS | $fits" $(cases softmax softmax_backward)
# shellcheck disable=SC2046
ab softmax ab-ce-bwd-maxr48.log --sub '__maxnreg__\(80\) kk_cross_entropy_bwd' '__maxnreg__(48) kk_cross_entropy_bwd' \
  $(cases cross_entropy_backward)
# shellcheck disable=SC2046
ab softmax ab-ce-loss-maxr48.log --sub '(int U = kk_sm::kU<T>, int MAXR = sizeof\(T\) == 8 \? 80 : )64(>\n__global__ void __maxnreg__\(MAXR\) kk_cross_entropy_loss)' '\g<1>48\2' \
  $(cases cross_entropy)
