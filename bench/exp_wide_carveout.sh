#!/usr/bin/env bash
# Session 54 found the _wide RMSNorm forwards 0.3% faster with the context's cache preference set to L1 (rms_norm
# float32 32768 x 4096 and bf16 x 8192, the two cells level with torch.compile; bench/exp_carveout.py,
# h200-2026-11-28-s54/carveout-l1.log), a preference torch.compile's kernels took too. This measures:
# 1. which of the issue's cells move with the context's L1 preference (all our kernels of an op take it);
# 2. the _wide norm forwards alone with their own preference for the most L1 (Kernel.set_carveout(0): ops/norms.py
#    _WIDE_CARVEOUT), A the driver's choice; B/A below 1: B is faster;
# 3. the same against torch.compile over 40 rounds (bench/exp_ties.py), torch.compile's kernels left at the default.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh wide-carveout.
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
l1="norms._WIDE_CARVEOUT={(k, t): 0 for k in ('kk_rms_norm_fwd', 'kk_layer_norm_fwd') for t in (torch.float32, torch.float16, torch.bfloat16)}"
ab norms "ab-$gpu-wide-carveout-l1.log" --b-host "$l1" rms_norm:float32:32768x4096 rms_norm:bfloat16:32768x8192 \
  rms_norm:float16:32768x8192 rms_norm:bfloat16:32768x4096 layer_norm:float32:32768x4096 layer_norm:float32:32768x1024 \
  layer_norm:float32:32768x8192
python3 exp_ties.py --only rms_norm layer_norm --rounds 40 --host "$l1" 2>&1 | tee "$OUT/ties-wide-carveout.log"
