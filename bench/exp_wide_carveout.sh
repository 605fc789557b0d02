#!/usr/bin/env bash
# Session 54 found the _wide RMSNorm forwards 0.3% faster with the context's cache preference set to L1 (rms_norm
# float32 32768 x 4096 and bf16 x 8192, the two cells level with torch.compile) and 7-8% slower with it set to shared
# memory (bench/exp_carveout.py, h200-2026-11-28-s54/carveout-*.log): preferences torch.compile's kernels took too.
# This measures:
# 1. which of the issue's cells move with the context's L1 preference (all our kernels of an op take it);
# 2. the _wide norm forwards with their own split (Kernel.set_carveout; ops/norms.py _WIDE_CARVEOUT, by kernel), A the
#    driver's choice; B/A below 1: B is faster. The kernels without PREW at the most L1 (0); float32 x 8192's PREW
#    kernel (3 blocks of 33 KB an SM) at 45% and 60% of the shared memory; PREW at (2, 4) (4 blocks of 17 KB), where
#    the driver's choice read 2.3-5.7% slower, at 31% (float32 x 4096 and float16 x 8192; bf16 spills with it);
# 3. the most-L1 setting against torch.compile over 40 rounds (bench/exp_ties.py), torch.compile's kernels left at
#    the driver's choice.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh wide-carveout. Before it: tests/test_launch.py -k carveout.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
cells=()
for op in rms_norm layer_norm add_rms_norm softmax cross_entropy rms_norm_backward layer_norm_backward softmax_backward \
  cross_entropy_backward swiglu rope; do
  for t in bfloat16 float32; do cells+=("$op:$t:32768x4096"); done
done
cells+=(rms_norm:bfloat16:32768x8192 rms_norm:float16:32768x8192 layer_norm:float32:32768x8192)
python3 exp_carveout.py "${cells[@]}" --prefer default l1 --rounds 6 2>&1 | tee "$OUT/carveout-cells.log"
w=kk_rms_norm_fwd_wide
l1="norms._WIDE_CARVEOUT={'$w<float, 2, 4>': 0, '$w<__half, 2, 4>': 0, '$w<__nv_bfloat16, 2, 4>': 0,"
l1="$l1 'kk_layer_norm_fwd_wide<float, 2, 4>': 0, 'kk_layer_norm_fwd_wide<float, 4, 3>': 0}"
ab norms "ab-$gpu-wide-carveout-l1.log" --b-host "$l1" rms_norm:float32:32768x4096 rms_norm:bfloat16:32768x8192 \
  rms_norm:float16:32768x8192 rms_norm:bfloat16:32768x4096 layer_norm:float32:32768x4096 layer_norm:float32:32768x1024 \
  layer_norm:float32:32768x8192
for pct in 45 60; do
  ab norms "ab-$gpu-wide-carveout-prew-$pct.log" --b-host "norms._WIDE_CARVEOUT={'$w<float, 4, 3, true>': $pct}" \
    rms_norm:float32:32768x8192
done
ab norms "ab-$gpu-wide-carveout-prew24-31.log" \
  --b-host "norms._WIDE_PREFETCH={('kk_rms_norm_fwd', t): 2048 for t in (torch.float32, torch.float16)}" \
  --b-host "norms._WIDE_CARVEOUT={'$w<float, 2, 4, true>': 31, '$w<__half, 2, 4, true>': 31}" \
  rms_norm:float32:32768x4096 rms_norm:float16:32768x8192
python3 exp_ties.py --only rms_norm layer_norm --rounds 40 --host "$l1" 2>&1 | tee "$OUT/ties-wide-carveout.log"
