#!/usr/bin/env bash
# Where kernelkit's GPU time trails torch.compile's kernels on an H200, though it leads per call (h200-2026-11-28-s50
# and -s55 `gpu_us`): softmax_backward bf16 32768 x 4096 (185.5 against 184.4 us over 42 balanced rounds,
# ties-s31-cells.log; MINB 3-4 and one pack of 512 threads no faster, ties-softmax-bwd-minb.log), and the 32768 x 256
# cells, 2-23% (rms_norm float32 22.4 against 19.3 us, cross_entropy_backward bf16 16.0 against 12.3), where the
# compiled calls are host-bound. This looks at what torch.compile's kernels do: ncu of both sides' kernels (DRAM and
# L2 traffic, instructions, occupancy, grid and block), and the Triton source and PTX Inductor wrote for them.
# Cases: NCU_CASES (NAME:DTYPE:ROWSxCOLS ..., default below). On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ncu-gaps.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
cd .. || exit 1
cases=${NCU_CASES:-softmax_backward:bfloat16:32768x4096 rms_norm:float32:32768x256 layer_norm:bfloat16:32768x256
  cross_entropy_backward:bfloat16:32768x256 softmax:bfloat16:32768x256}
rm -rf /tmp/torchinductor_root
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread,launch__block_size
m=$m,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
m=$m,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,smsp__inst_executed.sum
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers
# shellcheck disable=SC2086
ncu --profile-from-start off --kernel-name regex:'kk_|triton' --metrics "$m" \
  python3 bench/profile_rows.py $cases --impls kernelkit torch.compile 2>&1 \
  | grep -v "^==PROF==" | tee "$OUT/ncu-gaps.txt" | tail -80
find /tmp/torchinductor_root -name 'triton_*.py' -o -name 'triton_*.ptx' 2>/dev/null \
  | tar czf "$OUT/inductor-gaps.tar.gz" -T - 2>/dev/null
tar tzf "$OUT/inductor-gaps.tar.gz" | tail -8
