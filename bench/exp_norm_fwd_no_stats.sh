#!/usr/bin/env bash
# What the per-row statistics cost the norm forwards that trail torch.compile (h200-2026-11-28-s50/ties-norms.log):
# ours write rstd (and LayerNorm's mean) for the backward, a 4-byte store per row from each row's block, while
# torch.compile's inference kernels write y alone. B: the stores left out (rms_fwd_run's held rows and both wide
# kernels); the ops' stat outputs are then never written, which the A/B's y outputs do not show. An upper bound on what
# an inference path that skips them could gain. A: the shipped source. B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norm-fwd-no-stats.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab norms "ab-$gpu-norm-fwd-no-stats.log" \
  --sub '(wide_block_sum\(s, red\) / acols \+ eps\);\n    if \(tx == 0\) \{)\n      if \(mean != nullptr\) mean\[row\] = mu;\n      if \(rstd != nullptr\) rstd\[row\] = rs;' '\1' \
  --sub '    if \(tx == 0 && rstd != nullptr\) rstd\[row\] = rs;\n' '' \
  --sub '    if \(act && tx == 0 && rstd != nullptr\) rstd\[row\] = rs;\n' '' \
  layer_norm:float32:32768x4096 rms_norm:float32:32768x4096 rms_norm:float32:32768x8192 \
  rms_norm:bfloat16:32768x8192 rms_norm:bfloat16:32768x4096 layer_norm:float32:32768x8192
