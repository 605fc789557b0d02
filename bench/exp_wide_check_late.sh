#!/usr/bin/env bash
# The wide norm forwards (kk_layer_norm_fwd_wide, kk_rms_norm_fwd_wide) hold one row per block, and a block lives about
# 4 us: latency before a block's first load costs the call about 60 times over (62 waves at 32768 rows). Their launch
# checks had cost layer_norm float32 32768 x 4096 257.2 -> 253.0 us when moved from every block to block 0 (session 18,
# kernels/norms.cu check_wide_launch); every block still tests blockIdx.x == 0, and returns early on rows or cols <= 0,
# before its first loads, which are not issued above those branches. The gap cells to torch.compile on these kernels:
# layer_norm float32 x 4096 (0.9959) and rms_norm bf16 x 8192 (0.9999) (h200-2026-11-28-s51/ties-norms.log).
# B "late": no early return (no rows: no trip of the row loop; cols <= 0 now traps in the check, and the host never
# launches it so), block 0 checking after its first row's loads are issued (the bf16 RMSNorm kernel then has an 8-byte
# stack frame). B "end": no early return, block 0 checking once its rows are done (the launch still fails, and its rows
# were in bounds). B "none": no check at all (the ceiling; not shippable). B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh wide-check-late.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
cases=(layer_norm:float32:32768x4096 layer_norm:float32:32768x8192 rms_norm:float32:32768x4096
  rms_norm:bfloat16:32768x8192 rms_norm:bfloat16:32768x4096)
# B "late": the run functions take the launch's cols as well, and block 0 checks after the loads of its first row
# (row 0); check_wide_launch, defined below them, is declared above them.
late=(--sub '\n(namespace kk_norms \{)' '\ntemplate <int W, int NP> __device__ __forceinline__ void check_wide_launch(long long cols, unsigned long long ptrs);\n\n\1'
  --sub 'template <int NP>\n(__device__ __forceinline__ void ln_fwd_wide_run\([^{]*int cols, float eps)\) \{'
  'template <int NP>\n\1, long long cols_launched) {'
  --sub '(wide_row_packs<kLnWideLd>\(x \+ row \* cols, tx, R, cv, h\);)'
  '\1\n    if (row == 0) ::check_wide_launch<W, NP>(cols_launched, kk::addr(x) | kk::addr(w) | kk::addr(b) | kk::addr(y));'
  --sub 'template <typename T, int NP>\n(__device__ __forceinline__ void rms_fwd_wide_run\([^{]*int cols, float eps)\) \{'
  'template <typename T, int NP>\n\1, long long cols_launched) {'
  --sub '(wide_row_packs<kRmsFwdLd>\(x \+ row \* cols, tx, R, cv, h\);)'
  '\1\n    if (row == 0) ::check_wide_launch<W, NP>(cols_launched, kk::addr(x) | kk::addr(w) | kk::addr(y));'
  --sub 'if \(blockIdx.x == 0 && \(cols % W != 0' 'if ((cols <= 0 || cols % W != 0'
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  check_wide_launch<4, NP>\(cols, [^;]*;\n  (kk_norms::ln_fwd_wide_run<NP>\([^;]*)\);'
  '  \1, cols);'
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  check_wide_launch<kk::kVec<T>, NP>\(cols, [^;]*;\n  (kk_norms::rms_fwd_wide_run<T, NP>\([^;]*)\);'
  '  \1, cols);')
# B "end": no early return, block 0 checks once its rows are done (the launch still fails; its rows were in bounds).
end=(--sub 'if \(blockIdx.x == 0 && \(cols % W != 0' 'if (blockIdx.x == 0 && (cols <= 0 || cols % W != 0'
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  (check_wide_launch<4, NP>\(cols, [^;]*;)\n  (kk_norms::ln_fwd_wide_run<NP>\([^;]*;)'
  '  \2\n  \1'
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  (check_wide_launch<kk::kVec<T>, NP>\(cols, [^;]*;)\n  (kk_norms::rms_fwd_wide_run<T, NP>\([^;]*;)'
  '  \2\n  \1')
# B "none": neither the early return nor the check.
none=(--sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  check_wide_launch<4, NP>\(cols, [^;]*;\n' ''
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  check_wide_launch<kk::kVec<T>, NP>\(cols, [^;]*;\n' '')
ab norms "ab-$gpu-wide-check-late.log" "${late[@]}" "${cases[@]}"
ab norms "ab-$gpu-wide-check-end.log" "${end[@]}" "${cases[@]}"
ab norms "ab-$gpu-wide-check-none.log" "${none[@]}" "${cases[@]}"
# The held rows' kernels (kk_rms_norm_fwd: rms_norm float32 x 8192 0.9986 to torch.compile) check their fit in every
# block before their loads (check_fits). B "fits-block0": that check in block 0 alone (the norm backwards take it too).
ab norms "ab-$gpu-fits-block0.log" \
  --sub 'if \(!TAIL && cols > \(long long\)NP \* W \* kk::row_threads<SPLIT>\(\)\) __trap\(\);' \
  'if (!TAIL && blockIdx.x == 0 && cols > (long long)NP * W * kk::row_threads<SPLIT>()) __trap();' \
  rms_norm:float32:32768x8192 add_rms_norm:float32:32768x8192 layer_norm:bfloat16:32768x4096 \
  rms_norm_backward:bfloat16:32768x8192
