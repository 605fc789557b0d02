#!/usr/bin/env bash
# The 16-bit LayerNorm forward at 4096-8192 columns on an H100, where it trails Liger at 4096 (0.986x) and
# torch.compile at 8192 (0.992x; bench/exp_ties.py --cells h100-s40): its H200 fit (4 packs per thread at 2 blocks
# per SM, 64 registers, half occupancy) against fewer packs at more blocks (Liger: 256 threads, 48 registers), with
# and without kKeep loads (1.006x faster alone, h100-2026-11-27-s41/ab-h100-layer_norm-ld-kKeep.log), GPU time alone
# (ab_source.py --queued). On the GPU machine: OUT=$OUT bash bench/gpu_run.sh h100-ln-fwd.
# Its patterns match the sources of b5bc640 (since then the H100 takes kKeep on these rows: kk_layer_norm_fwd's LD).
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cases="layer_norm:bfloat16:32768x4096 layer_norm:bfloat16:32768x8192 layer_norm:float16:32768x4096"
fit() {  # PACKS MINB: the 16-bit LayerNorm forward's fit from 2048 to 8192 columns
  echo "norms._FWD_FIT=norms._FWD_FIT | {('kk_layer_norm_fwd', t): [(2048, 8192, $1, $2)] for t in norms._B16}"
}
for f in "2 3" "2 4"; do  # (2, 3) spills 4 bytes, (2, 4) 36, (4, 3) 52 (kernels/check_compile.py)
  # shellcheck disable=SC2086
  ab norms "ab-h100-ln-fwd-fit-${f/ /-}.log" --b-host "$(fit $f)" $cases
  # shellcheck disable=SC2086
  ab norms "ab-h100-ln-fwd-fit-${f/ /-}-keep.log" --b-host "$(fit $f)" --sub 'kLnFwdLd = kk::kNc' 'kLnFwdLd = kk::kKeep' $cases
done
