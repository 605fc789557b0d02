#!/usr/bin/env bash
# float32 softmax rows of 65-256 packs (260-1024 columns), where no warp or held fit of the backward reaches and its
# streaming kernel takes them: at 32768 x 512 softmax_backward 76.9 us of GPU time against torch.compile's 49.9, the
# forward (warp rows of 4 packs, not HELD) 38.2 against 34.7 (h200-2026-11-28-s56/llm-ce-256.log). A/B of other fits,
# GPU time alone (each compiles without spills on sm_90, kernels/check_compile.py --names):
#   backward warp rows of 4 packs (HELD, 4 blocks of 256, 64 registers) up to 128 packs;
#   backward held block rows of 2 packs (47 registers) or 4 (64) from 65 or 129 packs, one row per block;
#   forward warp rows of 4 packs HELD at 4 blocks (48 registers), or held block rows of 4 packs beyond 128 packs.
# (The held fits are tried in order, the wider first, so that 4096 columns keep theirs.)
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-f32-narrow.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
bwd="softmax_backward:float32:32768x512 softmax_backward:float32:32768x1024 softmax_backward:float32:32768x256"
fwd="softmax:float32:32768x512 softmax:float32:32768x1024"
# shellcheck disable=SC2086
{
  ab softmax "ab-$gpu-sm-bwd-f32-warp4.log" \
    --b-host "softmax._WARP_FITS=softmax._WARP_FITS | {('kk_softmax_bwd', 4): ((2, 8, 256, True), (4, 4, 256, True))}" $bwd
  ab softmax "ab-$gpu-sm-bwd-f32-held2.log" \
    --b-host "softmax._HELD=softmax._HELD | {('kk_softmax_bwd', 4): ((8, 1, 32), (2, 2, 32))}" $bwd
  ab softmax "ab-$gpu-sm-bwd-f32-held4.log" \
    --b-host "softmax._HELD=softmax._HELD | {('kk_softmax_bwd', 4): ((8, 1, 32), (4, 2, 32))}" $bwd
  ab softmax "ab-$gpu-sm-fwd-f32-warp4-held.log" \
    --b-host "softmax._WARP_FITS=softmax._WARP_FITS | {('kk_softmax_fwd', 4): ((2, 8, 256, True), (4, 4, 256, True))}" $fwd
  ab softmax "ab-$gpu-sm-fwd-f32-held4.log" \
    --b-host "softmax._HELD=softmax._HELD | {('kk_softmax_fwd', 4): ((8, 2, 32), (4, 2, 32))}" $fwd
}
