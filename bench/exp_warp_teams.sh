#!/usr/bin/env bash
# Narrow rows at 32768 x 256, where kernelkit's GPU time trailed torch.compile's kernels by 8-23% (ncu:
# h200-2026-11-28-s56/ncu-gaps.txt; one-warp Triton programs of 4 rows each, all of a lane's loads out at once):
# 1. softmax.cu's warp rows in teams (with_team_lanes: 2-4 rows a warp where a row is at most 16 lanes' packs) against
#    whole warps (B: softmax.cu of commit f4d15b5, in TEAMS_BASE, default ab_base/ at the repo root);
# 2. the 16-bit cross-entropy backward's rows of 256-1024 columns on its 64-register kernel, whose warp rows take teams,
#    against its 48-register kernel (ops/softmax.py _CE_BWD_LEAN_COLS), which keeps whole warps (it spills in teams);
# 3. the norm forwards' fits at 256 columns (ops/norms.py _FWD_FIT (packs, blocks per SM): threads a row and rows a
#    block; _WIDE_FIT: one row a block), GPU time alone.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh warp-teams.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
base=${TEAMS_BASE:-$PWD/../ab_base}
export AB_ROUNDS=${AB_ROUNDS:-8}
ab softmax "ab-$gpu-warp-teams.log" --b-dir "$base" softmax:bfloat16:32768x256 softmax:float16:32768x256 \
  softmax:bfloat16:32768x128 softmax:float32:32768x128 softmax:float32:32768x256 softmax:bfloat16:32768x1024 \
  softmax_backward:bfloat16:32768x256 softmax_backward:bfloat16:32768x128 softmax_backward:float32:32768x128 \
  softmax_backward:float32:32768x256 cross_entropy_backward:float32:32768x256 cross_entropy_backward:float32:32768x512 \
  cross_entropy_backward:bfloat16:32768x256
ab softmax "ab-$gpu-ce-bwd-teams-r64.log" --b-host "softmax._CE_BWD_LEAN_COLS=128" \
  cross_entropy_backward:bfloat16:32768x256 cross_entropy_backward:float16:32768x256 \
  cross_entropy_backward:bfloat16:32768x512 cross_entropy_backward:bfloat16:32768x1024
export AB_ROUNDS=6
f32="rms_norm:float32:32768x256 add_rms_norm:float32:32768x256 layer_norm:float32:32768x256"
b16="rms_norm:bfloat16:32768x256 add_rms_norm:bfloat16:32768x256 layer_norm:bfloat16:32768x256"
# LOG DTYPE PACKS MINB CASE...: B takes that _FWD_FIT for all three forwards at 129-256 columns
fwd_fit() {
  local log=$1 t=$2 p=$3 m=$4
  shift 4
  ab norms "$log" --b-host "norms._FWD_FIT=norms._FWD_FIT | {(k, torch.$t): [(128, 256, $p, $m)] for k in \
('kk_rms_norm_fwd', 'kk_add_rms_norm_fwd', 'kk_layer_norm_fwd')}" "$@"
}
# shellcheck disable=SC2086
{
  for f in "8 2" "4 2" "4 3" "2 4" "2 2"; do
    read -r p m <<<"$f"
    fwd_fit "ab-$gpu-fwd-fit-256-f32-$p$m.log" float32 "$p" "$m" $f32
  done
  for f in "2 2" "2 4" "1 4" "4 3"; do
    read -r p m <<<"$f"
    fwd_fit "ab-$gpu-fwd-fit-256-b16-$p$m.log" bfloat16 "$p" "$m" $b16
  done
  ab_wide_fits "ab-$gpu-wide-256-rms-f32" kk_rms_norm_fwd float32 128 256 "2 4, 1 4" rms_norm:float32:32768x256
  ab_wide_fits "ab-$gpu-wide-256-rms-b16" kk_rms_norm_fwd bfloat16 128 256 "1 4" rms_norm:bfloat16:32768x256
  ab_wide_fits "ab-$gpu-wide-256-ln-f32" kk_layer_norm_fwd float32 128 256 "2 4" layer_norm:float32:32768x256
}
# one archive: the device tool brings back a few files a call
tar czf "$OUT/warp-teams-ab.tar.gz" -C "$OUT" $(cd "$OUT" && ls ab-*.log) && rm -f "$OUT"/ab-*.log
