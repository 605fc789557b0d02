"""Compile-check kernelkit's CUDA sources with NVRTC (no GPU needed).

Compiles every instantiation for sm_90 and sm_80 with `--ptxas-options=-v` and prints registers,
stack frame and spills per kernel; exits non-zero on a compile error, a spill or a stack frame
(beyond the measured exceptions in ALLOWED_SPILL).
Usage: python kernels/check_compile.py [--arch sm_90 ...] [--cubin-dir DIR]
"""

import argparse
import ctypes
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TYPES = ["float", "double", "__half", "__nv_bfloat16"]


def _cu13():
    import nvidia.cu13 as m  # wheel nvidia-*-cu13

    return list(m.__path__)[0]


# Small spills accepted where the launch is measured faster than the spill-free alternative
# (bench/sweep_rows.py on an H200), or where the host never launches the instantiation. Bytes, on every arch
# unless ALLOWED_SPILL_ARCH says otherwise.
ALLOWED_SPILL = {
    # One 4-byte reload (8-byte stack frame) per 32 elements, an L1 hit, in the main loop, since the x
    # loads go out before the column division (bench/sweep_flat.py: float16 tanh forward measured with it).
    "kk_bias_gelu_fwd<__half, 1>": 8,
    # The same in bfloat16 since packs convert word by word (kk::acc_at): 69.1 against 69.3 us before it at 8192^2
    # (bench/ab_source.py, h200-2026-11-22-s14).
    "kk_bias_gelu_fwd<__nv_bfloat16, 1>": 8,
    # The 16-bit erf forward at 2 packs under 48 registers (one 4-byte slot on sm_90): bf16 8192^2 69.4 us, against 70.2
    # under 56 without the spill and 73.4 at 4 packs under 64 (bench/exp_gelu_fits.py, h200-2026-11-23-s22).
    "kk_bias_gelu_fwd<__half, 0>": 12,
    "kk_bias_gelu_fwd<__nv_bfloat16, 0>": 8,
    # 64 registers (two blocks per SM) for the float32 rows the held and split kernels do not take (up to 1024
    # columns; longer rows before sm_90 or off the 16-byte path). Chosen when it took 4096-8192 columns: 91-93% of
    # copy there, 70% at 116 registers.
    "kk_softmax_fwd<float, 2>": 32,
    # 16-bit add_rms_norm rows split over a cluster, loading the next row ahead at two blocks per SM: 1088.6 us at
    # bf16 8192 x 65536 with this 4-byte spill, 1209.5 without the next row (h200-2026-11-22-s14/sweep_split-bwd-bf16).
    "kk_rms_norm_bwd<__half, false, 2, 2, true, true, 2>": 8,
    "kk_rms_norm_bwd<__nv_bfloat16, false, 2, 2, true, true, 2>": 8,
    # float32 RMSNorm rows split over a cluster with their w packs staged in shared memory (ops/norms.py): 12 bytes,
    # and the 4-byte spill of add_rms_norm's measured fit, were in the variant measured 2.4% (rms_norm 1075.7 ->
    # 1049.8 us) and 1.0% (add_rms_norm 2124.9 -> 2102.9) faster than loading them per row at 8192 x 65536
    # (bench/exp_split_params.py, h200-2026-11-23-s20). add_rms_norm's 8-pack fit takes only rows beyond 65536
    # columns; float64 LayerNorm's split rows are not measured.
    "kk_rms_norm_fwd<float, false, 8, 2, true>": 16,
    "kk_add_rms_norm_fwd<float, false, 4, 3, true>": 8,
    "kk_add_rms_norm_fwd<float, false, 8, 2, true>": 8,
    "kk_layer_norm_fwd<double, false, 4, 2, true>": 8,
    # float32 LayerNorm rows of 4097 to 16384 columns (ops/norms.py): 95% of copy at 8192 columns with this
    # 8-byte spill, 87.5% for 4 packs at 1 block per SM without (bench/results/h200-2026-11-22-s7/sweep_llm5.log).
    "kk_layer_norm_fwd<float, false>": 16,
    # The float32 softmax backward's last split fit on shifted rows (odd widths beyond 131072 columns), one 4-byte
    # slot for the row's extra element. Not measured.
    **{f"kk_softmax_bwd<float, 8, 1, 512, true, true, {c}, true>": 8 for c in (2, 4, 8, 16)},
    # The float32 RMSNorm backward on shifted rows split over a cluster (ops/norms.py _shifted_split_backward): 4 bytes
    # stored, 68 of loads (two packs, which would not spill, fit no row of 50257 columns in 8 CTAs). Not measured.
    **{f"kk_rms_norm_bwd<float, false, 4, 1, {e}, true, 0, true>": 68 for e in ("false", "true")},
}
# Where one arch spills more than ALLOWED_SPILL lets the others: (instantiation, arch) -> bytes.
ALLOWED_SPILL_ARCH = {
    # sm_90 keeps 16/32; sm_80 spills 48/80 since float32's exp is ex2.approx (16/32 with expf). Not measured: no
    # A100 here.
    ("kk_softmax_fwd<float, 2>", "sm_80"): 80,
    ("kk_softmax_fwd<float, 2, 4, 512, false, false, 0, true>", "sm_80"): 8,  # the same on shifted rows; sm_90 none
    # The cross-entropy backward's 48-register instantiations spill 16 bytes before sm_90, where ops/softmax.py
    # _ce_shape does not launch them.
    **{
        (f"kk_cross_entropy_bwd<{t}, {o}, {k}, 48>", "sm_80"): 16
        for t in ("float", "__half", "__nv_bfloat16")
        for o in ("float", "__half", "__nv_bfloat16")
        for k in ("false", "true")
    },
}


# The template arguments of kk_softmax_fwd and kk_softmax_bwd after the type, up to SHIFT, with their defaults.
_SOFTMAX_DEFAULTS = {
    "kk_softmax_fwd": ["1", "4", "512", "false", "false", "0"],
    "kk_softmax_bwd": ["2", "1", "512", "false", "false", "0"],
}


def _shifted(expr: str) -> str:
    """The SHIFT instantiation of a softmax kernel's expression, every argument spelled out."""
    name, args = expr[:-1].split("<")
    args = args.split(", ")
    return f"{name}<{', '.join(args + _SOFTMAX_DEFAULTS[name][len(args) - 1 :])}, true>"


def instantiations():
    ew = [
        "kk_add",
        "kk_mul",
        "kk_muladd",
        "kk_scale_",
        "kk_add_strided",
        "kk_mul_strided",
        "kk_muladd_strided",
        "kk_scale_strided_",
    ]
    gelu = [f"{k}<{t}, {a}>" for k in ("kk_bias_gelu_fwd", "kk_bias_gelu_bwd") for t in TYPES for a in (0, 1)]
    gelu += [f"kk_column_sum<{t}>" for t in TYPES]
    fwd = ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd")
    norms = [f"{k}<{t}, {tail}>" for k in fwd for t in TYPES for tail in ("false", "true")]
    bwd = [
        f"{k}<{t}, {tl}>" for k in ("kk_rms_norm_bwd", "kk_layer_norm_bwd") for t in TYPES for tl in ("false", "true")
    ]
    # Not launched (it spills): the float32 LayerNorm backward keeps its streamed-tail kernel (ops/norms.py).
    norms += [k for k in bwd if k != "kk_layer_norm_bwd<float, false>"]
    # add_rms_norm's backward (EXTRA = true: a second incoming gradient), as ops/norms.py launches it.
    norms += [
        f"kk_rms_norm_bwd<{t}, {tl}, {2 if t in ('double', '__half', '__nv_bfloat16') else 4}, 1, true>"
        for t in TYPES
        for tl in ("false", "true")
    ]
    norms += [f"kk_column_sum<{t}>" for t in TYPES]
    # the other forward fits of ops/norms.py (_FWD_FIT)
    norms += ["kk_layer_norm_fwd<float, false, 4, 1>", "kk_layer_norm_fwd<float, false, 4, 3>"]
    # _FWD_KEEP_LOW_GBPS
    norms += [f"kk_layer_norm_fwd<{t}, false, 4, 2, false, 0, kk::kKeep>" for t in ("__half", "__nv_bfloat16")]
    # ops/norms.py _WIDE_FIT
    norms += ["kk_layer_norm_fwd_wide<float, 2, 4>", "kk_layer_norm_fwd_wide<float, 4, 3>"]
    norms += [f"kk_rms_norm_fwd_wide<{t}, 2, 4>" for t in ("float", "__half", "__nv_bfloat16")]
    norms += ["kk_rms_norm_fwd_wide<float, 4, 3, true>"]  # _WIDE_PREFETCH
    norms += ["kk_rms_norm_fwd<float, false, 2, 4>", "kk_rms_norm_fwd<float, false, 4, 3>"]
    norms += [
        f"kk_add_rms_norm_fwd<{t}, false, {p}, 3>" for t, p in (("float", 4), ("__half", 2), ("__nv_bfloat16", 2))
    ]
    np_fwd = {"float": 8, "double": 4, "__half": 4, "__nv_bfloat16": 4}
    # The RMSNorm forwards' 16-byte-only held rows (VEC_ONLY; ops/norms.py _VEC_ONLY) at their default and _FWD_FIT fits
    held = [f"{k}<{t}, false, {np_fwd[t]}, 2" for k in fwd[:2] for t in TYPES]
    # (float32 RMSNorm at (4, 3): the GPU launch-check tests' kernel; the host launches the _wide one there)
    held += ["kk_rms_norm_fwd<float, false, 4, 3", "kk_add_rms_norm_fwd<float, false, 4, 3"]
    held += [f"kk_add_rms_norm_fwd<{t}, false, 2, 3" for t in ("__half", "__nv_bfloat16")]
    norms += [f"{k}, false, 0, false, true>" for k in held]
    # ... and LayerNorm's, with its loads (LD: the default, and kk::kKeep beyond _FWD_KEEP_LOW_GBPS)
    held_ln = [f"kk_layer_norm_fwd<{t}, false, 4, 2, false, 0, kk_norms::kLnFwdLd" for t in TYPES[1:]]
    held_ln += [f"kk_layer_norm_fwd<float, false, {p}, {m}, false, 0, kk_norms::kLnFwdLd" for p, m in ((4, 1), (8, 2))]
    held_ln += [f"kk_layer_norm_fwd<{t}, false, 4, 2, false, 0, kk::kKeep" for t in TYPES[2:]]
    norms += [f"{k}, false, true>" for k in held_ln]
    # Rows split over a cluster (SPLIT), as ops/norms.py launches them.
    np_bwd = {"float": 4, "double": 2, "__half": 2, "__nv_bfloat16": 2}
    # _SPLIT_FITS: the default (packs, 2), add_rms_norm's own first fit, float32 LayerNorm's two instead of the default
    split_ln_f32 = ["kk_layer_norm_fwd<float, false, 4, 2, true>", "kk_layer_norm_fwd<float, false, 8, 1, true>"]
    norms += [f"{k}<{t}, false, {np_fwd[t]}, 2, true>" for k in fwd for t in TYPES]
    norms = [n for n in norms if n != "kk_layer_norm_fwd<float, false, 8, 2, true>"] + split_ln_f32
    norms += [
        f"kk_add_rms_norm_fwd<{t}, false, {p}, 3, true>" for t, p in (("float", 4), ("__half", 2), ("__nv_bfloat16", 2))
    ]
    # _SPLIT_FIXED: clusters of 2 to 16 CTAs fixed at compile time (2, 4, 8 and 16 checked here) for the forwards at
    # their split fits
    fixed = [
        f"{k}<{t}, false, 4, 2, true"
        for k in ("kk_layer_norm_fwd", "kk_rms_norm_fwd")
        for t in ("__half", "__nv_bfloat16")
    ]
    fixed += [
        f"kk_add_rms_norm_fwd<{t}, false, {p}, {m}, true"
        for t in ("__half", "__nv_bfloat16")
        for p, m in ((2, 3), (4, 2))
    ]
    fixed += ["kk_layer_norm_fwd<float, false, 4, 2, true", "kk_layer_norm_fwd<float, false, 8, 1, true"]
    fixed += ["kk_rms_norm_fwd<float, false, 8, 2, true"]
    fixed += [f"kk_add_rms_norm_fwd<float, false, {p}, {m}, true" for p, m in ((4, 3), (8, 2))]
    norms += [f"{k}, {c}>" for k in fixed for c in (2, 4, 8, 16)]
    # the 16-bit forwards' last fit, (8, 1): rows up to 262144 columns over 8 CTAs
    norms += [f"{k}<{t}, false, 8, 1, true, 8>" for k in fwd for t in ("__half", "__nv_bfloat16")]
    # the same on shifted rows (SHIFT; ops/norms.py _shifted_split_shape), but the two float32 fits that spill there
    spill = ("kk_layer_norm_fwd<float, false, 4, 2, true", "kk_add_rms_norm_fwd<float, false, 8, 2, true")
    for k in [f for f in fixed if f not in spill] + [f"{k}<{t}, false, 8, 1, true" for k in fwd for t in TYPES[2:]]:
        ld = ", kk_norms::kLnFwdLd" if k.startswith("kk_layer_norm_fwd") else ""
        norms += [f"{k}, {c}{ld}, true>" for c in (2, 4, 8, 16)]
    norms += [f"kk_layer_norm_fwd<{t}, true, 2, 2>" for t in ("__half", "__nv_bfloat16")]  # _TAIL_FIT
    # held forwards on rows of any width (SHIFT), as ops/norms.py _forward_shape launches them (float32 at
    # _SHIFTED_F32_FITS, 16-bit add_rms_norm at its _FWD_FIT too)
    for k in fwd:
        ld = ", kk_norms::kLnFwdLd" if k == "kk_layer_norm_fwd" else ""
        norms += [f"{k}<{t}, false, 4, 2, false, 0{ld}, true>" for t in TYPES]
        norms += [f"{k}<float, false, 8, 1, false, 0{ld}, true>"]
    norms += [f"kk_add_rms_norm_fwd<{t}, false, 2, 3, false, 0, true>" for t in ("__half", "__nv_bfloat16")]
    # ... and backwards, as _backward_shape launches them (float32 LayerNorm at _BWD_SHIFTED_PACKS' 2 packs)
    for t in TYPES:
        norms += [f"kk_rms_norm_bwd<{t}, false, {np_bwd[t]}, 1, {e}, false, 0, true>" for e in ("false", "true")]
        norms += [f"kk_layer_norm_bwd<{t}, false, {2 if t == 'float' else np_bwd[t]}, 1, false, 0, true>"]
    # ... and split over a cluster, in registers (_shifted_split_backward; not float64)
    for t in TYPES[:1] + TYPES[2:]:
        norms += [f"kk_rms_norm_bwd<{t}, false, {np_bwd[t]}, 1, {e}, true, 0, true>" for e in ("false", "true")]
        norms += [f"kk_layer_norm_bwd<{t}, false, {np_bwd[t]}, 1, true, 0, true>"]
    # backwards with _BWD_SPLIT_FIT's (SMEM, minimum blocks); double keeps (0, 1)
    ln = {"float": "1, true, 2", "double": "1, true, 0", "__half": "1, true, 0", "__nv_bfloat16": "1, true, 0"}
    rms = {"float": "1, false, true, 1", "double": "1, false, true, 0", "__half": "2, false, true, 2"}
    add_rms = {"float": "2, true, true, 2", "double": "1, true, true, 0", "__half": "2, true, true, 2"}
    for fits in (rms, add_rms):
        fits["__nv_bfloat16"] = fits["__half"]
    for fits, k in ((ln, "kk_layer_norm_bwd"), (rms, "kk_rms_norm_bwd"), (add_rms, "kk_rms_norm_bwd")):
        norms += [f"{k}<{t}, false, {np_bwd[t]}, {fits[t]}>" for t in TYPES]
    # float32 rows one block holds, with _BWD_HELD_FIT's shared-memory sums
    norms += ["kk_layer_norm_bwd<float, false, 4, 1, false, 1>", "kk_rms_norm_bwd<float, false, 4, 1, false, false, 1>"]
    norms += ["kk_rms_norm_bwd<float, false, 4, 2, true, false, 2>"]
    # 16-bit LayerNorm and RMSNorm rows one block holds, brought by bulk copies (_BWD_BULK_FIT and _FIT_LOW_GBPS)
    b16 = ("__half", "__nv_bfloat16")
    norms += [f"kk_layer_norm_bwd_bulk<{t}, {nt}, {m}, 3, false, 1>" for t in b16 for nt, m in ((256, 2), (512, 1))]
    norms += [f"kk_rms_norm_bwd_bulk<{t}, 256, {m}, 3, false, 1>" for t in b16 for m in (4, 2)]  # 2: _FIT_LOW_GBPS
    # ... and the split ones (_BWD_BULK_SPLIT: stages, rows per reduction)
    split_bulk = (("kk_layer_norm_bwd", 5, 2), ("kk_rms_norm_bwd", 6, 1))
    norms += [f"{k}_bulk<{t}, 512, 1, {s}, true, {r}>" for k, s, r in split_bulk for t in b16]
    # ... on clusters fixed at compile time (_BWD_SPLIT_FIXED)
    norms += [f"kk_layer_norm_bwd_bulk<{t}, 512, 1, 5, true, 2, {c}>" for t in b16 for c in (2, 4, 8, 16)]
    # ... and on shifted rows one block holds (SHIFT; ops/norms.py _shifted_bulk_backward)
    norms += [f"kk_layer_norm_bwd_bulk<{t}, 320, 2, 3, false, 1, 0, true>" for t in b16]
    norms += [f"kk_rms_norm_bwd_bulk<{t}, 320, 2, 3, false, 1, true>" for t in b16]
    # rows too wide for a cluster (ops/norms.py _segmented_shape; not float64, which keeps the streamed tail)
    seg_types = ("float", "__half", "__nv_bfloat16")
    norms += [f"kk_norm_bwd_seg_sums<{t}, {ln}>" for t in seg_types for ln in ("true", "false")]
    norms += [f"kk_norm_bwd_seg<{t}, {a}>" for t in seg_types for a in ("true, false", "false, false", "false, true")]
    norms += [f"kk_norm_bwd_seg_rows<float, {n}>" for n in (1, 2)]
    sm = [
        f"{k}<{t}>"
        for k in ("kk_softmax_fwd", "kk_softmax_bwd", "kk_cross_entropy_fwd", "kk_cross_entropy_bwd")
        for t in TYPES
    ]
    sm.append("kk_softmax_fwd<float, 2>")  # the float32 launch (two blocks per SM)
    # a reduced loss, in each output dtype, and the backward reading the loss's gradient in its own dtype
    sm += [f"kk_cross_entropy_loss<{t}, {o}>" for t in TYPES for o in TYPES]
    sm += [f"kk_cross_entropy_bwd<{t}, {t}>" for t in ("__half", "__nv_bfloat16")]
    # cross-entropy with its gradient in one read (ops/softmax.py _HELD_CE_FITS), its count and mean in each output
    # dtype, and the backward that keeps its gradient at a loss gradient of 1, reading that in each dtype
    sm += [f"kk_cross_entropy_held<{t}, {p}, 2>" for t in ("float", "__half", "__nv_bfloat16") for p in (4, 8)]
    # ... split over a cluster (_HELD_CE_SPLIT_FITS), of any CTAs and of 2, 3, 4, 8 and 16 fixed at compile time
    held_split = [f"kk_cross_entropy_held<{t}, 8, 2, true" for t in ("float", "__half", "__nv_bfloat16")]
    sm += [f"{h}{c}>" for h in held_split for c in ("", ", 2", ", 3", ", 4", ", 8", ", 16")]
    # ... on rows of any width (SHIFT), as ops/softmax.py _held_ce_shape spells them
    sm += [
        f"kk_cross_entropy_held<{t}, {p}, 2, false, 0, true>"
        for t in ("float", "__half", "__nv_bfloat16")
        for p in (4, 8)
    ]
    sm += [f"{h}, {c}, true>" for h in held_split for c in (0, 2, 3, 4, 8, 16)]
    sm += ["kk_cross_entropy_count<8>"] + [f"kk_cross_entropy_mean<float, {o}, 8>" for o in TYPES]
    sm += [f"kk_cross_entropy_bwd<{t}, {o}, true>" for t in ("float", "__half", "__nv_bfloat16") for o in TYPES]
    # ... at 48 registers, for rows of at most 1024 columns (_CE_BWD_LEAN_COLS), neither type float64
    lean = [(t, o) for t in ("float", "__half", "__nv_bfloat16") for o in ("float", "__half", "__nv_bfloat16")]
    sm += [f"kk_cross_entropy_bwd<{t}, {o}, {k}, 48>" for t, o in lean for k in ("false", "true")]
    # the backward in one pass of a flat grid (ops/softmax.py _CE_BWD_FLAT), reading the scale in each dtype
    flat = [("float", 4), ("__half", 8), ("__nv_bfloat16", 8)]
    sm += [f"kk_cross_entropy_bwd_flat<{t}, {o}, {p}>" for t, p in flat for o in TYPES]
    # rows held whole in registers (HELD), as ops/softmax.py launches them
    for t in ("__half", "__nv_bfloat16"):
        sm += [f"kk_softmax_fwd<{t}, 2, 4, 512, true>", f"kk_softmax_fwd<{t}, 2, 8, 512, true>"]
        sm += [f"kk_softmax_bwd<{t}, 2, {m}, 512, true>" for m in (3, 2)] + [f"kk_softmax_bwd<{t}, 4, 2, 512, true>"]
    sm += ["kk_softmax_fwd<float, 2, 8, 512, true>", "kk_softmax_bwd<float, 8, 1, 512, true>"]
    # ... below LOW_DRAM_GBPS_PER_SM (_HELD_LOW_GBPS)
    sm += ["kk_softmax_fwd<float, 2, 4, 512, true>"] + [
        f"kk_softmax_fwd<{t}, 3, 2, 512, true>" for t in ("__half", "__nv_bfloat16")
    ]
    # warp rows of at most 64 packs (_WARP_FITS)
    sm += [f"kk_softmax_fwd<{t}, 8, 2, 256, true>" for t in ("float", "__half", "__nv_bfloat16")]
    sm += [f"kk_softmax_bwd<{t}, 2, 8, 256, true>" for t in ("float", "__half", "__nv_bfloat16")]
    # rows split over a cluster (HELD, SPLIT), as ops/softmax.py launches them (_SPLIT)
    sm += ["kk_softmax_fwd<float, 2, 8, 512, true, true>", "kk_softmax_bwd<float, 4, 2, 512, true, true>"]
    sm += [f"kk_softmax_fwd<{t}, 2, 8, 512, true, true>" for t in ("__half", "__nv_bfloat16")]
    sm += [f"kk_softmax_bwd<{t}, 4, 2, 512, true, true>" for t in ("__half", "__nv_bfloat16")]
    sm += ["kk_softmax_bwd<float, 8, 1, 512, true, true>"]  # the float32 backward's last fit
    # ... on clusters fixed at compile time (2, 4, 8 and 16 CTAs checked here)
    split_sm = [s[:-1] for s in sm if s.endswith("512, true, true>")]
    sm += [f"{s}, {c}>" for s in split_sm for c in (2, 4, 8, 16)]
    # ... and each softmax kernel above on rows of any width (SHIFT), as ops/softmax.py _expr spells them
    softmax_kernels = [s for s in sm if s.startswith(("kk_softmax_fwd<", "kk_softmax_bwd<"))]
    sm += [_shifted(s) for s in softmax_kernels if not s.endswith(", 8, 256, true>")]
    # (the backward's warp fit at six blocks per SM: _WARP_FITS_SHIFTED)
    sm += [f"kk_softmax_bwd<{t}, 2, 6, 256, true, false, 0, true>" for t in ("float", "__half", "__nv_bfloat16")]
    act = [f"{k}<{t}>" for k in ("kk_swiglu_fwd", "kk_swiglu_bwd") for t in TYPES]
    act += [f"kk_rope<{t}, {b}{i}>" for t in TYPES for b in (0, 1) for i in ("", ", 1")]  # 1 item: low DRAM bandwidth
    return {
        "elementwise.cu": [f"{k}<{t}>" for k in ew for t in TYPES],
        "gelu.cu": gelu,
        "norms.cu": norms,
        "softmax.cu": sm,
        "activations.cu": act,
    }


def compile_one(lib, inc, src_name, names, arch, cubin_dir):
    src = open(os.path.join(HERE, src_name), "rb").read()
    hdr = open(os.path.join(HERE, "common.cuh"), "rb").read()
    prog = ctypes.c_void_p()
    hdrs = (ctypes.c_char_p * 1)(hdr)
    incs = (ctypes.c_char_p * 1)(b"common.cuh")
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, src_name.encode(), 1, hdrs, incs) == 0
    for n in names:
        assert lib.nvrtcAddNameExpression(prog, n.encode()) == 0, n
    opts = [b"-std=c++17", f"--gpu-architecture={arch}".encode(), f"-I{inc}".encode(), b"--ptxas-options=-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    log = log.value.decode(errors="replace")
    if rc != 0:
        print(f"== {src_name} {arch}: COMPILE FAILED (rc {rc})\n{log}")
        return False
    lowered = {}
    for n in names:
        p = ctypes.c_char_p()
        assert lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(p)) == 0, n
        lowered[p.value.decode()] = n
    if cubin_dir:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, buf)
        os.makedirs(cubin_dir, exist_ok=True)
        open(os.path.join(cubin_dir, f"{src_name}.{arch}.cubin"), "wb").write(buf.raw)
    # ptxas -v: "Compiling entry function '<mangled>'", "N bytes stack frame, N bytes spill stores, ...",
    # "Used N registers, ..."
    ok, cur, info = True, None, {}
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            cur = lowered.get(m.group(1), m.group(1))
            info[cur] = {}
        elif cur and (
            m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        ):
            info[cur]["stack"], info[cur]["spill_st"], info[cur]["spill_ld"] = map(int, m.groups())
        elif cur and (m := re.search(r"Used (\d+) registers", line)):
            info[cur]["regs"] = int(m.group(1))
    print(f"== {src_name} {arch}")
    for n in names:
        i = info.get(n)
        if i is None:
            print(f"  {n:45s} MISSING from ptxas log")
            ok = False
            continue
        worst = max(i.get("stack", 0), i.get("spill_st", 0), i.get("spill_ld", 0))
        bad = worst > ALLOWED_SPILL_ARCH.get((n, arch), ALLOWED_SPILL.get(n, 0))
        ok &= not bad
        regs = i.get("regs", 0)
        # resident 256-thread blocks per SM from registers alone (64K regs, 8-register granularity,
        # 2048 threads); shared memory (<= 8 KB per block here) does not bind
        occ = min(8, 65536 // (max(8, -(-regs // 8) * 8) * 256))
        print(
            f"  {n:45s} regs {regs:>3}  occ@256 {occ}  stack {i.get('stack', 0)}  "
            f"spill {i.get('spill_st', 0)}/{i.get('spill_ld', 0)}{'  <-- BAD' if bad else ''}"
        )
    warn = [line for line in log.splitlines() if "warning" in line.lower()]
    for line in warn:
        print("  " + line)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", nargs="*", default=["sm_90", "sm_80"])
    ap.add_argument("--cubin-dir")
    ap.add_argument("--only", nargs="*", help="source files to check (default: all)")
    ap.add_argument("--names", nargs="*", help="instantiations to report instead of the shipped ones (one --only file)")
    # NVRTC versions differ: 13.0 (torch 2.11's, the GPU machine's) takes a generic lambda in device code for a host
    # function, which 13.2 compiles (h200-2026-11-28-s56/pytest-generic-lambda.log). Another one, from its wheel:
    #   pip download --no-deps "nvidia-cuda-nvrtc==13.0.*" && python3 -m zipfile -e nvidia_cuda_nvrtc-13.0*.whl n130
    #   L=n130/nvidia/cu13/lib; LD_LIBRARY_PATH=$L python3 kernels/check_compile.py --nvrtc $L/libnvrtc.so.13
    ap.add_argument("--nvrtc", help="a libnvrtc.so to compile with (default: the one of torch's CUDA wheels)")
    args = ap.parse_args()
    if args.names and len(args.only or ()) != 1:
        ap.error("--names needs exactly one --only source file")
    root = _cu13()
    lib = ctypes.CDLL(args.nvrtc or os.path.join(root, "lib", "libnvrtc.so.13"))
    ok = True
    for arch in args.arch:
        for src, names in instantiations().items():
            if args.only and src not in args.only:
                continue
            ok &= compile_one(lib, os.path.join(root, "include"), src, args.names or names, arch, args.cubin_dir)
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
