#!/usr/bin/env bash
# The wide norm forwards (kk_layer_norm_fwd_wide, kk_rms_norm_fwd_wide) that trail torch.compile at the copy bandwidth
# on an H200 (h200-2026-11-28-s50/ties-norms.log, 40 rounds: layer_norm float32 32768 x 4096 0.9951 [0.9942, 0.9958],
# won 0 of 40; rms_norm float32 x 4096 0.9989, bf16 x 8192 0.9977). Each block reduction (wide_block_sum) ends in a
# second barrier that only guards its shared words against the next reduction; LayerNorm takes two a row: four
# barriers. B: no second barrier, the reductions alternating between two sets of words (LayerNorm's mean and variance;
# RMSNorm's rows by parity), the same bits. B/A below 1: B is faster. On the GPU machine:
# OUT=$OUT bash bench/gpu_run.sh norm-wide-sync. Its patterns match the source of session 50.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-10}
ab norms "ab-$gpu-norm-wide-sync.log" \
  --sub "  v = warp_sum\(lane < nw \? red\[lane\] : 0.f\);\n  __syncthreads\(\);\n  return v;" \
  "  return warp_sum(lane < nw ? red[lane] : 0.f);" \
  --sub "__shared__ float red\[32\];" "__shared__ float red[2][32];" \
  --sub "__shared__ float red\[32\];" "__shared__ float red[2][32];" \
  --sub "const float mu = wide_block_sum\(s, red\)" "const float mu = wide_block_sum(s, red[0])" \
  --sub "rsqrtf\(wide_block_sum\(s, red\)" "rsqrtf(wide_block_sum(s, red[1])" \
  --sub "rsqrtf\(wide_block_sum\(s, red\)" "rsqrtf(wide_block_sum(s, red[(row / gridDim.x) & 1])" \
  layer_norm:float32:32768x4096 rms_norm:float32:32768x4096 rms_norm:bfloat16:32768x8192 \
  rms_norm:bfloat16:32768x4096 layer_norm:float32:32768x2048 rms_norm:float16:32768x8192
# The same for rms_fwd_run (kk_rms_norm_fwd, kk_add_rms_norm_fwd: rms_norm float32 32768 x 8192 0.9986 [0.9978,
# 0.9990]): block_row_sum without its second barrier (SYNC false), the rows' sums alternating between two sets of words.
ab norms "ab-$gpu-norm-rows-sync.log" \
  --sub "template <int N, typename A> __device__ __forceinline__ void block_row_sum\(A \(&v\)\[N\], A\* sm\) \{" \
  "template <int N, typename A, bool SYNC = true> __device__ __forceinline__ void block_row_sum(A (&v)[N], A* sm) {" \
  --sub "    v\[i\] = s;\n  \}\n  __syncthreads\(\);\n\}" "    v[i] = s;\n  }\n  if constexpr (SYNC) __syncthreads();\n}" \
  --sub "template <int N, typename A, bool SPLIT, int PARTS>\n__device__ __forceinline__ void row_sum" \
  "template <int N, typename A, bool SPLIT, int PARTS, bool SYNC = true>\n__device__ __forceinline__ void row_sum" \
  --sub "  else block_row_sum\(v, sm\);" "  else block_row_sum<N, A, SYNC>(v, sm);" \
  --sub "  __shared__ A sm\[32\];\n  kk::ClusterRowReduce<1, A, SPLIT, kk::kFixedParts<CTAS>> cs;" \
  "  __shared__ A sm[2][32];\n  int par = 0;\n  kk::ClusterRowReduce<1, A, SPLIT, kk::kFixedParts<CTAS>> cs;" \
  --sub "    row_sum\(ss, sm, cs\);" "    row_sum<1, A, SPLIT, kk::kFixedParts<CTAS>, false>(ss, sm[par], cs);\n    par ^= 1;" \
  rms_norm:float32:32768x8192 add_rms_norm:float32:32768x8192 add_rms_norm:bfloat16:32768x4096 \
  rms_norm:float32:32768x1024 rms_norm:bfloat16:32768x2048
