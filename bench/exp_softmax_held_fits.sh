#!/usr/bin/env bash
# Softmax forward held fits after its held rows went one per block (session 44, bench/exp_softmax_one_row.sh), which
# took 8-12 registers off them (kernels/check_compile.py, sm_90): float32 at 4 packs fits three blocks of 512 threads
# per SM in 40 registers, kept exponentials included (52 at two), so the H100's float32 rows of 256-512 threads
# (4096-8192 columns) could run 48 warps per SM where they run 32. A is the shipped wheel; B/A above 1: A faster.
#   H100: B = the float32 fit at 4 packs and three blocks per SM (_HELD_LOW_GBPS); then the 16-bit backward's rows of
#         256-383 threads (4096-6128 columns, 2 packs) at three or four blocks per SM (40 or 32 registers) where they
#         run at two (48; softmax_backward bf16 32768 x 4096 0.997x torch.compile in h100-2026-11-28-s44/llm-softmax).
#   H200: B = the H100's fits (_HELD_LOW_GBPS), then those with the float32 fit at three blocks; and the wheel
#         against session 43's kernels/softmax.cu, which needs (before the tree is carried)
#           mkdir -p bench/ab-s43 && git show 0ae04a6:kernels/softmax.cu > bench/ab-s43/softmax.cu && cp kernels/common.cuh bench/ab-s43/
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-held-fits.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
f32_3="{('kk_softmax_fwd', 4): ((4, 3, 256), *softmax._HELD['kk_softmax_fwd', 4])}"
export AB_ROUNDS=8
f32="softmax:float32:32768x4096 softmax:float32:32768x6000 softmax:float32:32768x8192"
if [ "$gpu" = h100 ]; then
  # shellcheck disable=SC2086
  ab softmax ab-h100-softmax-f32-3blocks.log --b-host "softmax._HELD_LOW_GBPS=softmax._HELD_LOW_GBPS | $f32_3" $f32
  for b in 3 4; do
    bwd="{('kk_softmax_bwd', 2): ((2, $b, 256), *softmax._HELD['kk_softmax_bwd', 2])}"
    ab softmax "ab-h100-softmax-bwd-${b}blocks.log" --b-host "softmax._HELD_LOW_GBPS=softmax._HELD_LOW_GBPS | $bwd" \
      softmax_backward:bfloat16:32768x4096 softmax_backward:float16:32768x4096 softmax_backward:bfloat16:32768x6000
  done
else
  all="softmax:bfloat16:32768x4096 softmax:float16:32768x4096 softmax:bfloat16:32768x8192 softmax:bfloat16:32768x6000
softmax:bfloat16:32768x1001 $f32"
  # shellcheck disable=SC2086
  [ -d ab-s43 ] && ab softmax ab-h200-softmax-one-row.log --b-dir ab-s43 $all
  # shellcheck disable=SC2086
  ab softmax ab-h200-softmax-h100-fits.log --b-host "softmax._HELD=softmax._HELD_LOW_GBPS" $all
  # shellcheck disable=SC2086
  ab softmax ab-h200-softmax-h100-fits-f32-3blocks.log --b-host "softmax._HELD=softmax._HELD_LOW_GBPS | $f32_3" $f32
fi
exit 0
