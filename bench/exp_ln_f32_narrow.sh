#!/usr/bin/env bash
# float32 LayerNorm rows of 512-2048 columns stay on kk_layer_norm_fwd (held, (4, 1): 64 threads a row, two rows a
# block), which trailed torch.compile and Liger in GPU time at 32768 x 1024 on an H200: 70.2 us against 68.1, 90% of
# copy against 93% (h200-2026-11-28-s53/ln-vec-only.log). B: the lean kk_layer_norm_fwd_wide (one row a block, the
# launch checked by block 0 after its rows) for 256 < cols <= 2048 at (1, 4), (2, 4), (4, 3) packs and minimum
# blocks: 256, 128 and 64 threads a 1024-column row ((4, 4) spills, kernels/check_compile.py). A: the shipped launch. B/A below 1: B is faster.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ln-f32-narrow.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab_wide_fits "ab-$gpu-ln-f32-narrow" kk_layer_norm_fwd float32 256 2048 "1 4, 2 4, 4 3" \
  layer_norm:float32:32768x512 layer_norm:float32:32768x1024 layer_norm:float32:32768x2048
