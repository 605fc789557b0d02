#!/usr/bin/env bash
# The 16-bit norm backwards at 4096 and 8192 columns on an H100 (session 39: layer_norm_backward bf16 32768 x 4096 ~87%
# of copy on its register kernel, rms_norm_backward ~89% on its bulk kernel), GPU time alone (ab_source.py --queued)
# against the shipped launches. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh h100-norm-bwd (both rounds), or
# OUT=$OUT bash bench/exp_h100_norm_bwd.sh ROUND. Both ran on the sources before _BWD_BULK_FIT_LOW_GBPS (session 40),
# whose _BWD_BULK_MIN_GBPS took LayerNorm's bulk fit from 30 GB/s of DRAM bandwidth per SM.
# Registers (kernels/check_compile.py, sm_90, 256 threads): LayerNorm's register kernel 128 (2 blocks per SM); with its
# weight-gradient sums in shared memory (SMEM 1) 126, and the float weights too (SMEM 2) 128; at two blocks of 512
# (MINB 2) 64 registers, 4 blocks, SMEM 2 spilling 4 bytes. RMSNorm's at MINB 2: 64 with no spill.
# Round 2, the bulk kernels' fits (threads up to which a fit applies, MINB, blocks launched per SM): RMSNorm ships
# (256, 4, 2), 63 registers; at MINB 1-2 both kernels take 96-110 with no spill.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
round1() {
  for op in layer_norm rms_norm; do
    cases="${op}_backward:bfloat16:32768x4096 ${op}_backward:bfloat16:32768x8192"
    # RMSNorm leaves its bulk kernel for these only below the bulk fit's bandwidth floor
    floor=$([ $op = rms_norm ] && echo '--b-host norms._BWD_BULK_MIN_GBPS=norms._BWD_BULK_MIN_GBPS|{"kk_rms_norm_bwd":99.0}')
    for fit in "1, 1" "2, 1" "2, 2" "1, 2"; do
      # shellcheck disable=SC2086
      ab norms "ab-h100-$op-bwd-held-${fit/, /-}.log" $floor \
        --b-host "norms._BWD_HELD_FIT=norms._BWD_HELD_FIT | {('kk_${op}_bwd', torch.bfloat16, False): ($fit)}" $cases
    done
  done
  ab norms ab-h100-rms_norm-bwd-register.log \
    --b-host 'norms._BWD_BULK_MIN_GBPS=norms._BWD_BULK_MIN_GBPS|{"kk_rms_norm_bwd":99.0}' \
    rms_norm_backward:bfloat16:32768x4096 rms_norm_backward:bfloat16:32768x8192
  for fit in "(256, 2, 2)," "(512, 1, 1),"; do
    ab norms "ab-h100-rms_norm-bwd-bulk-${fit:1:3}.log" --b-host "norms._BWD_BULK_FIT=norms._BWD_BULK_FIT | {'kk_rms_norm_bwd': ($fit)}" \
      rms_norm_backward:bfloat16:32768x4096 rms_norm_backward:bfloat16:32768x8192
  done
}

# shellcheck disable=SC2086
round2() {
  local cases="rms_norm_backward:bfloat16:32768x4096 rms_norm_backward:bfloat16:32768x8192"
  for fit in "256, 4, 1" "256, 2, 1" "256, 2, 2"; do
    ab norms "ab-h100-rms_norm-bwd-bulk-${fit//, /-}.log" \
      --b-host "norms._BWD_BULK_FIT=norms._BWD_BULK_FIT | {'kk_rms_norm_bwd': (($fit),)}" $cases
  done
  cases="layer_norm_backward:bfloat16:32768x4096 layer_norm_backward:bfloat16:32768x8192"
  for fit in "256, 2, 1" "256, 1, 1"; do
    ab norms "ab-h100-layer_norm-bwd-bulk-${fit//, /-}.log" --b-host "norms._BWD_BULK_MIN_GBPS={}" \
      --b-host "norms._BWD_BULK_FIT=norms._BWD_BULK_FIT | {'kk_layer_norm_bwd': (($fit),)}" $cases
  done
}
case ${1:-all} in
  1) round1 ;;
  2) round2 ;;
  *) round1 && round2 ;;
esac
