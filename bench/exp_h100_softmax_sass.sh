#!/usr/bin/env bash
# Softmax's bf16 32768 x 4096 forward on an H100, kernelkit against Liger (0.987x in session 41's ties run): the
# instructions each issues (ncu) and their SASS (cuobjdump), to see what kernelkit's held rows still do that
# Liger's don't. Run by bench/gpu_run.sh softmax-sass, after the wheel is installed.
set -uo pipefail
OUT=${OUT:-/tmp/kernelkit-out}
case=softmax:bfloat16:32768x4096
ncu --profile-from-start off --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,\
sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__occupancy_limit_registers \
  python3 bench/profile_rows.py $case --impls kernelkit liger 2>&1 | grep -v "^==PROF==" | tee "$OUT/ncu-softmax-sass.txt" | tail -40
# the shipped H100 instantiation (ops/softmax.py _HELD_LOW_GBPS), compiled as the wheel compiles it
mkdir -p /tmp/kk-cubin
python3 kernels/check_compile.py --arch sm_90 --only softmax.cu --names "kk_softmax_fwd<__nv_bfloat16, 3, 2, 512, true>" \
  --cubin-dir /tmp/kk-cubin 2>&1 | tail -3
cuobjdump -sass /tmp/kk-cubin/softmax.cu.sm_90.cubin > "$OUT/sass-kk-softmax-bf16-4096.txt"
f=$(grep -l "_softmax_single_block_forward_kernel" -r ~/.triton/cache --include='*.json' 2>/dev/null | head -1)
[ -n "$f" ] && cuobjdump -sass "${f%.json}.cubin" > "$OUT/sass-liger-softmax-bf16-4096.txt"
wc -l "$OUT"/sass-*.txt
