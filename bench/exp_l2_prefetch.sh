#!/usr/bin/env bash
# Two looks at the norm forwards that trail torch.compile by 0.1-0.5% (h200-2026-11-28-s50/ties-norms.log):
# 1. A/B of kKeep's loads with a 256-byte L2 prefetch size (.L2::256B in common.cuh's ld_keep): fewer, larger DRAM
#    reads. A: the shipped source. B/A below 1: B is faster.
# 2. The PTX of torch.compile's kernels for those cells (exp_ties.py, two rounds, compiles them), to compare their
#    loads' and stores' cache qualifiers with ours: $OUT/triton-norm-ptx.tar.gz.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh l2-prefetch.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab norms "ab-$gpu-l2-prefetch-256.log" \
  --common-sub 'L1::evict_last\.L2::cache_hint\.v4\.u32' 'L1::evict_last.L2::cache_hint.L2::256B.v4.u32' \
  layer_norm:float32:32768x4096 rms_norm:float32:32768x4096 rms_norm:float32:32768x8192 \
  rms_norm:bfloat16:32768x8192 layer_norm:bfloat16:32768x4096 rms_norm_backward:bfloat16:32768x8192
python3 exp_ties.py --rounds 2 --only rms_norm layer_norm 2>&1 | tail -6
find /tmp/torchinductor_* ~/.triton -name 'triton_*.ptx' 2>/dev/null | grep -v poi \
  | tar -czf "$OUT/triton-norm-ptx.tar.gz" -T - && tar -tzf "$OUT/triton-norm-ptx.tar.gz" | head
