#!/usr/bin/env bash
# softmax_backward bf16 32768 x 4096 on an H200: kernelkit's held rows take 185.5 us of GPU time against torch.compile's
# 184.4 over 42 balanced rounds (h200-2026-11-28-s55/ties-s31-cells.log, 0.9944 [0.9941, 0.9949]), and no fit of MINB
# 3-4 or one pack of 512 threads closed it (ties-softmax-bwd-minb.log: 185.8-186.1 us). Per call kernelkit leads: the
# compiled backward is host-bound there. This looks at what torch.compile's kernel does: ncu of both kernels (DRAM
# and L2 traffic, instructions, occupancy), and the Triton source and PTX Inductor wrote for it.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh softmax-bwd-gap.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cd .. || exit 1
rm -rf /tmp/torchinductor_root
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread,launch__block_size
m=$m,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
m=$m,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,smsp__inst_executed.sum
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers
ncu --profile-from-start off --kernel-name regex:'kk_softmax_bwd|triton' --metrics "$m" \
  python3 bench/profile_rows.py softmax_backward:bfloat16:32768x4096 --impls kernelkit torch.compile 2>&1 \
  | grep -v "^==PROF==" | tee "$OUT/ncu-softmax-bwd.txt" | tail -60
find /tmp/torchinductor_root -name 'triton_*.py' -o -name 'triton_*.ptx' 2>/dev/null \
  | tar czf "$OUT/inductor-softmax-bwd.tar.gz" -T - 2>/dev/null
tar tzf "$OUT/inductor-softmax-bwd.tar.gz" | tail -5
