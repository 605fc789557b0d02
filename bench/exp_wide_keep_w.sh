#!/usr/bin/env bash
# The RMSNorm forwards still level with torch.compile (h200-2026-11-28-s53/llm-norms-fwd.log: float32 32768 x 4096
# 0.9999, x 8192 0.9962, bf16 x 8192 0.9985) read w from L2 once per row: half again the row's DRAM bytes as L2
# traffic, and an L2 round trip between a row's sum and its stores. B: the _wide kernel with G rows per block (grid
# rows / G), each block reading w once (kernels/norms.cu rms_fwd_wide_run KEEPW: 2 its threads' own shared memory,
# 1 registers), and float32 x 8192 on the _wide kernel at (4, 3) (A: the held kk_rms_norm_fwd at (4, 3); alone, without
# KEEPW, 1.004 in session 52). A: the shipped launch. B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh wide-keep-w.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
rms=kk_rms_norm_fwd
f32_8192="norms._WIDE_FIT=norms._WIDE_FIT | {('$rms', torch.float32): [(2048, 4096, 2, 4), (4096, 8192, 4, 3)]}"
cases="rms_norm:float32:32768x4096 rms_norm:float32:32768x8192 rms_norm:bfloat16:32768x8192"
for g in 2 4 8; do
  # shellcheck disable=SC2086
  ab norms "ab-$gpu-keep-w-smem-g$g.log" --b-host "$f32_8192" \
    --b-host "norms._WIDE_KEEP_W={('$rms', t): ($g, 2) for t in (torch.float32, torch.float16, torch.bfloat16)}" $cases
done
ab norms "ab-$gpu-keep-w-none-f32-8192.log" --b-host "$f32_8192" rms_norm:float32:32768x8192
ab norms "ab-$gpu-keep-w-reg-g4.log" --b-host "norms._WIDE_KEEP_W={('$rms', torch.float32): (4, 1)}" \
  rms_norm:float32:32768x4096
ab norms "ab-$gpu-keep-w-smem-44-g4.log" \
  --b-host "norms._WIDE_FIT=norms._WIDE_FIT | {('$rms', torch.float32): [(2048, 4096, 2, 4), (4096, 8192, 4, 4)]}" \
  --b-host "norms._WIDE_KEEP_W={('$rms', torch.float32): (4, 2)}" rms_norm:float32:32768x8192
