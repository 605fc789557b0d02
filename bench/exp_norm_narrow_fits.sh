#!/usr/bin/env bash
# The norm forwards at widths off the issue's sizes whose GPU time trailed torch.compile's on an H200 in session 53
# (h200-2026-11-28-s53/ln-f32-narrow.log, ln-vec-only.log; each led per call by its host time):
# - float32 LayerNorm at 32768 x 256 (held (4, 1): 16 threads a row, 8 rows a block): 20.9 us against 19.7. B: the lean
#   kk_layer_norm_fwd_wide for 128 < cols <= 256 at (2, 4) (32 threads a row) and (1, 4) (64);
# - 16-bit LayerNorm at 32768 x 1024 (held (4, 2): 32 threads a row, 4 rows a block): 37.4 us against 36.2. B: held
#   fits of more threads a row for 512 < cols <= 2048 (_FWD_FIT), none of which spills (kernels/check_compile.py,
#   sm_90): (2, 2) 64 threads, (1, 2) and (1, 4) 128.
# Then the forwards at 1024 and 2048 columns against torch.compile and Liger (kernelkit bench, where they stand).
# A: the shipped launch. B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh norm-narrow-fits.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab_wide_fits "ab-$gpu-ln-f32-256" kk_layer_norm_fwd float32 128 256 "2 4, 1 4" layer_norm:float32:32768x256
for f in "2 2" "1 2" "1 4"; do
  read -r p m <<<"$f"
  fit="[(512, 2048, $p, $m)]"
  ab norms "ab-$gpu-ln-b16-1024-h$p$m.log" \
    --b-host "norms._FWD_FIT=norms._FWD_FIT | {(k, t): $fit for k in ('kk_layer_norm_fwd',) for t in (torch.bfloat16, torch.float16)}" \
    layer_norm:bfloat16:32768x1024 layer_norm:float16:32768x1024 layer_norm:bfloat16:32768x2048
done
COLUMNS=200 python3 -m kernelkit bench rms_norm add_rms_norm layer_norm --sizes 32768x1024,32768x2048 \
  --dtype bfloat16,float32 --json "$OUT/norms-narrow.json" 2>&1 | tee "$OUT/norms-narrow.log" | tail -3
