#!/usr/bin/env bash
# Softmax warp rows (<= 128 packs forward, <= 64 backward) at full occupancy, against the shipped instantiations
# (ops/softmax.py _WARP_FITS): 32 registers, 8 blocks of 256 threads per SM and no spill (kernels/check_compile.py,
# sm_90; 16-bit rows of 65-128 packs at 48 registers, 5 blocks; float32 at 52, 4), where the shipped ones hold 2
# (16-bit forward, 92 registers; backward, 120) or 4 (float32 forward, 63 and a spill). GPU time alone
# (ab_source.py --queued). On the GPU machine, after bench/gpu_run.sh installed the wheel:
#   OUT=$OUT bash bench/exp_softmax_warp_fits.sh
set -uo pipefail
export PYTHONPATH=/tmp/kk-site KERNELKIT_CACHE_DIR=/tmp/kernelkit-cache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kernelkit-out}
cd "$(dirname "$0")" || exit 1
fits='{("kk_softmax_fwd", 2): ((2, 8, 256, True), (4, 5, 256, True)),
       ("kk_softmax_fwd", 4): ((2, 8, 256, True), (4, 4, 256, True)),
       ("kk_softmax_bwd", 2): ((2, 8, 256, True),), ("kk_softmax_bwd", 4): ((2, 8, 256, True),)}'
cases=""
for op in softmax softmax_backward; do
  for size in 32768x256 32768x512 32768x1024 16384x64; do
    for dtype in bfloat16 float32; do cases="$cases $op:$dtype:$size"; done
  done
done
# shellcheck disable=SC2086
python3 ab_source.py --family softmax --queued --rounds 4 --b-host "softmax._WARP_FITS=softmax._WARP_FITS | $fits" \
  $cases 2>&1 | tee "$OUT/ab-softmax-warp-fits.log" | tail -20
