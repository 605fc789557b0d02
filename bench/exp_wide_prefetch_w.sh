#!/usr/bin/env bash
# The norm forwards still level with torch.compile (h200-2026-11-28-s53/llm-norms-fwd.log: rms_norm float32 32768 x
# 4096 0.9999, x 8192 0.9962, bf16 x 8192 0.9985; layer_norm float32 x 4096 1.0000) load w (and b) from L2 after the
# row's sums: an L2 round trip between the sums and the stores of every row. B: the _wide kernels fetch them once the
# row's loads are out (kernels/norms.cu PREW; ops/norms.py _WIDE_PREFETCH): 1 cp.async into the thread's own
# shared-memory slots (as the float32 add_rms_norm backward's extra gradient gained from in session 40), 2 registers,
# 3 as 1 with an L2 evict_last policy; float32 rms_norm x 8192 on the _wide kernel at (4, 3) (A: the held
# kk_rms_norm_fwd at (4, 3); the _wide kernel alone 1.002, h200-2026-11-28-s54); bf16 at (2, 3) where (2, 4) spills.
# A: the shipped launch. B/A below 1: B is faster. Then the float32 x 8192 candidates against torch.compile over 40
# rounds (bench/exp_ties.py). On the GPU machine: OUT=$OUT bash bench/gpu_run.sh wide-prefetch-w.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
rms=kk_rms_norm_fwd
f32_8192="norms._WIDE_FIT=norms._WIDE_FIT | {('$rms', torch.float32): [(2048, 4096, 2, 4), (4096, 8192, 4, 3)]}"
bf16_23="norms._WIDE_FIT=norms._WIDE_FIT | {('$rms', torch.bfloat16): [(2048, 8192, 2, 3)]}"
for mode in 1 3; do
  AB_ROUNDS=12 ab norms "ab-$gpu-prefetch-w-f32-8192-m$mode.log" --b-host "$f32_8192" \
    --b-host "norms._WIDE_PREFETCH={('$rms', torch.float32): $mode}" rms_norm:float32:32768x8192
done
ab norms "ab-$gpu-prefetch-w-m2.log" --b-host "$bf16_23" \
  --b-host "norms._WIDE_PREFETCH={('$rms', t): 2 for t in (torch.float32, torch.bfloat16)}" \
  rms_norm:float32:32768x4096 rms_norm:bfloat16:32768x8192
ab norms "ab-$gpu-prefetch-w-m3.log" --b-host "norms._WIDE_PREFETCH={('$rms', torch.float32): 3}" \
  rms_norm:float32:32768x4096
for mode in 0 1 3; do
  echo "== float32 x 8192 on the _wide kernel, PREW $mode"
  python3 exp_ties.py --only rms_norm --rounds 40 --host "$f32_8192" \
    --host "norms._WIDE_PREFETCH={('$rms', torch.float32): $mode}" 2>&1 | grep -v "^kernelkit with"
done | tee "$OUT/ties-prefetch-w.log"
