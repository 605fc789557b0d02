# Sourced by the A/B scripts (bench/exp_*.sh) on the GPU machine, after bench/gpu_run.sh installed the wheel into
# /tmp/kk-site: their environment, the working directory bench/, gpu (h100 or h200) and ab.
set -uo pipefail
export PYTHONPATH=/tmp/kk-site KERNELKIT_CACHE_DIR=/tmp/kernelkit-cache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kernelkit-out}
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
gpu=$(python3 -c 'import torch; print("h100" if "H100" in torch.cuda.get_device_name() else "h200")')  # for log names
# FAMILY LOG, then ab_source.py's arguments: GPU time alone over AB_ROUNDS rounds (4 unless set), the log to $OUT/LOG,
# its results printed
ab() {
  local family=$1 log=$2
  shift 2
  python3 ab_source.py --family "$family" --queued --rounds "${AB_ROUNDS:-4}" "$@" 2>&1 | tee "$OUT/$log" \
    | grep -v '^  *$' | tail -12
}
# LOG KERNEL DTYPE LO HI PACKS MINB CASE...: A/B of the norms, B taking KERNEL's lean _wide kernel at that fit (ops/norms.py
# _WIDE_FIT) for LO < cols <= HI in DTYPE (its other widths as B's list leaves them: off the _wide kernel)
ab_wide_fit() {
  local log=$1 k=$2 t=$3 lo=$4 hi=$5 p=$6 m=$7
  shift 7
  ab norms "$log" --b-host "norms._WIDE_FIT=norms._WIDE_FIT | {('$k', torch.$t): [($lo, $hi, $p, $m)]}" "$@"
}
# STEM KERNEL DTYPE LO HI FITS CASE...: ab_wide_fit at each fit of FITS ("PACKS MINB" pairs, comma-separated, e.g.
# "4 3, 8 2"), each logged to STEM-wPACKSMINB.log
ab_wide_fits() {
  local stem=$1 k=$2 t=$3 lo=$4 hi=$5 fits f p m
  IFS=, read -ra fits <<<"$6"
  shift 6
  for f in "${fits[@]}"; do
    read -r p m <<<"$f"
    ab_wide_fit "$stem-w$p$m.log" "$k" "$t" "$lo" "$hi" "$p" "$m" "$@"
  done
}
