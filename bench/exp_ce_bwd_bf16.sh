#!/usr/bin/env bash
# The 16-bit cross-entropy backward at 32768 x 4096: 141.5 us of GPU time (89.8% of copy, h200-2026-11-28-s48/
# llm-softmax.json), where softmax's forward moves the same bytes in 128.7 us. Its warp rows (kk_cross_entropy_bwd,
# ce_bwd_row) hold 80 registers, three 256-thread blocks per SM, and load 4 packs per lane at a time, kNc; softmax's
# held rows load whole rows, kKeep (evict_last), at 48 warps per SM. A: the shipped source, B:
#   keep:  the rows loaded kKeep (kCeLd; the forward's streamed rows too, not timed here)
#   r64:   at most 64 registers (MAXR; four blocks per SM, no spills on sm_90)
#   keep-r64: both (adopted in session 49: h200-2026-11-28-s49/. 8 packs per lane in flight, also prepared, did not
#             run, its pattern matching nothing; with kKeep at 64 registers they spill)
#   held-keep: the held loss's 16-bit rows loaded kKeep (kCeHeldLd; the loss and gradient in the forward)
#   flat-spec: kk_cross_entropy_bwd_flat at 2 packs per thread, a 256-thread block per row of 4096 columns, its logits
#              loaded before the target is read (152.1 us at bf16 x 4096 with the target first: each short block had
#              waited for it before its loads); flat-spec-keep: with keep
# B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ce-bwd-bf16 (its patterns are those of
# the source before session 49 adopted keep-r64 and held-keep).
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
bwd="cross_entropy_backward:bfloat16:32768x4096 cross_entropy_backward:bfloat16:32768x8192
cross_entropy_backward:float16:32768x4096 cross_entropy_backward:bfloat16:65536x2048
cross_entropy_backward:bfloat16:16384x16384"
keep=("constexpr int kCeLd = kk::kNc;" "constexpr int kCeLd = kk::kKeep;")
spec=('(  const long long t = target\[row\];\n  if \(t == ignore_index\) \{\n(?:.*\n){4}  \}\n)(  Vec<T, W> u\[P\];\n#pragma unroll\n  for \(int k = 0; k < P; \+\+k\)\n    if \(q0 \+ k \* nt < nv\) u\[k\] = load_vec<W, kCeLd>\(xr \+ \(q0 \+ k \* nt\) \* W\);\n)' '\2\1')
flat=(--b-host "softmax._CE_BWD_FLAT={4: (4, 1024), 2: (2, 256)}" --b-host "softmax._CE_BWD_FLAT_THREADS=256")
r64=("bool KEEP_AT_ONE = false, int MAXR = 80>" "bool KEEP_AT_ONE = false, int MAXR = 64>")
# shellcheck disable=SC2086
{
  ab softmax "ab-$gpu-ce-bwd-keep.log" --sub "${keep[@]}" $bwd
  ab softmax "ab-$gpu-ce-bwd-r64.log" --sub "${r64[@]}" $bwd
  ab softmax "ab-$gpu-ce-bwd-keep-r64.log" --sub "${keep[@]}" --sub "${r64[@]}" $bwd
  ab softmax "ab-$gpu-ce-bwd-flat-spec.log" "${flat[@]}" --sub "${spec[@]}" $bwd
  ab softmax "ab-$gpu-ce-bwd-flat-spec-keep.log" "${flat[@]}" --sub "${spec[@]}" --sub "${keep[@]}" $bwd
  ab softmax "ab-$gpu-ce-held-keep16.log" \
    --sub "SPLIT \|\| sizeof\(T\) == 4 \? kk::kKeep : kk::kNc;" "kk::kKeep;" \
    cross_entropy_fwd_bwd:bfloat16:32768x4096 cross_entropy_fwd_bwd:bfloat16:32768x8192 \
    cross_entropy_fwd_bwd:float16:32768x4096 cross_entropy_fwd_bwd:bfloat16:16384x16384
}
