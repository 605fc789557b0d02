#!/usr/bin/env bash
# rms_norm float32 32768 x 8192 trails torch.compile by 0.10% over 40 rounds (h200-2026-11-29-s52/ties-norms.log) on
# the general held kernel kk_rms_norm_fwd<float, false, 4, 3>, whose every block returns early on rows or cols <= 0,
# tests the 16-byte path (cols % V, the pointers' alignment) and its row fit before its first loads: what the wide
# kernels gained 0.4% by moving after their rows (exp_wide_check_late.sh). B, a ceiling (not shippable: a misaligned
# launch would fault, not take the scalar path): no early return, the 16-byte path taken, its conditions and the row
# fit checked once the rows are done (block 0 traps). Were it worth it, the host, which knows the path, would launch
# a 16-byte-only instantiation. B/A below 1: B is faster. On the GPU machine:
# OUT=$OUT bash bench/gpu_run.sh held-vec-ceiling.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-8}
ab norms "ab-$gpu-held-vec-ceiling.log" \
  --sub '  \} else if (\(cols % V == 0 && kk::aligned16\(kk::addr\(x\) \| kk::addr\(res\) \| kk::addr\(w\) \| kk::addr\(y\) \| kk::addr\(hout\)\)\)) \{\n    (check_fits<TAIL, NP, SPLIT>\(cols, V\);\n    kk::check_fixed_geometry<CTAS>\(\);)\n    (kk_norms::rms_fwd_run<NP, V, ADD, TAIL, SPLIT, T, CTAS>\(x, res, w, y, hout, rstd, rows, cols, eps\);)' \
  '  } else if (true) {\n    \3\n    if (blockIdx.x == 0 && !\1) __trap();\n    \2' \
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  (rms_fwd<NP, false, TAIL, SPLIT, T, CTAS, SHIFT>)' '  \1' \
  --sub '  if \(rows <= 0 \|\| cols <= 0\) return;\n  (rms_fwd<NP, true, TAIL, SPLIT, T, CTAS, SHIFT>)' '  \1' \
  rms_norm:float32:32768x8192 add_rms_norm:float32:32768x8192 add_rms_norm:bfloat16:32768x8192 \
  rms_norm:float32:32768x4096
