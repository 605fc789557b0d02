#!/usr/bin/env bash
# Session 52 gave the held RMSNorm forwards a 16-byte-only instantiation (VEC_ONLY, kernels/norms.cu kk_rms_norm_fwd):
# no early return and no path test ahead of the loads, block 0 checking the path and row fit after its rows
# (add_rms_norm bf16 32768 x 8192 509.7 -> 500.9 us). The same ceilings (not shippable: a misaligned launch would fault,
# not take the scalar path) for the kernels that still choose their path in every block before their loads:
# B "ln-fwd": kk_layer_norm_fwd (the held 16-bit rows at 93-94% of copy, h200-2026-11-29-s52/llm-norms-fwd.log);
# B "bwd": norm_bwd (kk_rms_norm_bwd, kk_layer_norm_bwd's register kernels; their blocks loop over chunks of rows, so
# less is expected). B/A below 1: B is faster; a gain would make each a VEC_ONLY instantiation as kk_rms_norm_fwd's.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh vec-only-ceilings.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab norms "ab-$gpu-vec-only-ln-fwd.log" \
  --sub '  if \(rows <= 0 \|\| cols <= 0 \|\| kk::split_unsupported<SPLIT>\(\)\) return;\n  constexpr int V = kk::kVec<T>;\n  // One pass' \
  '  if (kk::split_unsupported<SPLIT>()) return;\n  constexpr int V = kk::kVec<T>;\n  // One pass' \
  --sub '  \} else if (\(cols % V == 0 && kk::aligned16\(kk::addr\(x\) \| kk::addr\(w\) \| kk::addr\(b\) \| kk::addr\(y\)\)\)) \{\n    (check_fits<TAIL, NP, SPLIT>\(cols, V\);\n    kk::check_fixed_geometry<CTAS>\(\);)\n    (kk_norms::ln_fwd_run<NP, V, TAIL, SPLIT, kOnePass, T, CTAS, LD>\([^;]*;)' \
  '  } else if (true) {\n    \3\n    if (blockIdx.x == 0 && !\1) __trap();\n    \2' \
  layer_norm:bfloat16:32768x4096 layer_norm:bfloat16:32768x8192 layer_norm:float16:32768x4096 \
  layer_norm:float32:32768x1024 layer_norm:bfloat16:32768x256
ab norms "ab-$gpu-vec-only-bwd.log" \
  --sub '  \} else if (\(cols % V == 0 &&\n      kk::aligned16\(kk::addr\(gy\) \| kk::addr\(x\) \| kk::addr\(w\) \| kk::addr\(g_extra\) \| kk::addr\(gx\)\)\)) \{\n    (check_fits<TAIL, NP, SPLIT>\(cols, V\);)\n    (kk_norms::norm_bwd_run<NP, V, LN, TAIL, EXTRA, SPLIT, SMEM, MINB, T>\([^;]*;)' \
  '  } else if (true) {\n    \3\n    if (blockIdx.x == 0 && !\1) __trap();\n    \2' \
  rms_norm_backward:bfloat16:32768x8192 add_rms_norm_backward:bfloat16:32768x8192 \
  layer_norm_backward:float32:32768x4096 rms_norm_backward:float32:32768x4096
