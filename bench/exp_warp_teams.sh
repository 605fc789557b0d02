#!/usr/bin/env bash
# Narrow rows at 32768 x 256, where kernelkit's GPU time trailed torch.compile's kernels by 8-23% (ncu:
# h200-2026-11-28-s56/ncu-gaps.txt; one-warp Triton programs of 4 rows each, all of a lane's loads out at once):
# 1. softmax.cu's warp rows in teams (team_lanes: 2-4 rows a warp where a row is at most 16 lanes' packs) against
#    whole warps (B: softmax.cu and common.cuh of commit f4d15b5 in TEAMS_BASE, default ab_base/ at the repo root,
#    untracked: mkdir -p ab_base && for f in softmax.cu common.cuh; do git show f4d15b5:kernels/$f > ab_base/$f; done);
# 2. the 16-bit cross-entropy backward's rows of 256-1024 columns on its 64-register kernel, whose warp rows take teams,
#    against its 48-register kernel (ops/softmax.py _CE_BWD_LEAN_COLS), which keeps whole warps (it spills in teams);
# GPU time alone. The norm forwards' fits at 256 columns (ops/norms.py _NARROW_FIT) were measured by this script as of
# commit 94eab13 (a part since taken out, its logs ab-h200-fwd-fit-256-*.log and ab-h200-wide-256-*.log).
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
# one archive: the device tool brings back a few files a call
tar czf "$OUT/warp-teams-ab.tar.gz" -C "$OUT" $(cd "$OUT" && ls ab-*.log) && rm -f "$OUT"/ab-*.log
