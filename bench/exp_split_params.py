# ruff: noqa: E731
"""Experiment: where the norm forwards' rows split over a cluster (8192 x 65536) take their parameter packs from.

A split row's CTA takes the same column slice of every row it loops over. Until session 20 the kernels loaded their w
(LayerNorm: and b) packs again for each row's output pass, from L2: for 16-bit LayerNorm twice the bytes of the row
it reads from DRAM.

- Registers (session 18): LayerNorm's packs loaded once per CTA, before the row loop. They fit without spills only at
  one block per SM, where it was 5% faster than loading per row but far slower than the two-block fit (bf16 821.5
  against 615.3 us; float32 1310.7 against 1191.8; h200-2026-11-23-s18/split-params.log). Not adopted.
- Shared memory (session 20, shipped): the packs staged once per CTA in dynamic shared memory, thread-owned slots
  (kernels/norms.cu ParamSlots). They take no registers, so the 16-bit fits stay, and float32 LayerNorm fits two
  blocks per SM at 4 packs over 8 CTAs. Against per-row loads (h200-2026-11-23-s20/split-params-smem.log and
  split-params-final.log): LayerNorm bf16 613.9 -> 597.1 us, float32 1190.4 (8 packs, 4 CTAs) -> 1121.5 (4 packs,
  8 CTAs); rms_norm bf16 553.5 -> 540.2, float32 1075.7 -> 1049.8; add_rms_norm bf16 1110.5 -> 1053.7, float32
  2124.9 -> 2102.9.

This times the shipped op, the shipped kernel (A) and variant L2 (A with the output pass reading its parameters per
row from global memory again, the staging left in) at several fits (register packs, minimum blocks per SM), on the
resident clusters; outputs are checked bitwise against the op's:

    python3 bench/exp_split_params.py --out split_params.json [--only rms]
"""

from __future__ import annotations

import argparse

import torch
from sweep_common import interleaved, norm_forward, source_variant, write_results

from kernelkit.bench import copy_bandwidth
from kernelkit.ops import norms
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, kernel

ROWS, COLS = 8192, 65536
# Variant L2: the output pass reads the parameter packs per row from global memory again (the staging left in).
PER_ROW_LOADS = [
    (
        r"kk::vec_to_acc\(params\.get\(0, k\), g\);\n(\s+)kk::vec_to_acc\(params\.get\(1, k\), c\);",
        r"kk::vec_to_acc(load_vec<W, kLnFwdLd>(w + p * W), g);\n\1kk::vec_to_acc(load_vec<W, kLnFwdLd>(b + p * W), c);",
    ),
    (
        r"if constexpr \(SPLIT\) kk::vec_to_acc\(params\.get\(0, k\), g\);",
        r"if constexpr (false) kk::vec_to_acc(params.get(0, k), g);",
    ),
]
# (kernel, dtype) -> [(source, register packs, minimum blocks)]
FITS = {
    ("kk_layer_norm_fwd", torch.bfloat16): [("A", 4, 2), ("L2", 4, 2), ("A", 2, 2), ("A", 4, 1)],
    ("kk_layer_norm_fwd", torch.float32): [("A", 4, 2), ("L2", 4, 2), ("L2", 8, 2), ("A", 8, 1)],
    ("kk_rms_norm_fwd", torch.bfloat16): [("A", 4, 2), ("L2", 4, 2)],
    ("kk_rms_norm_fwd", torch.float32): [("A", 8, 2), ("L2", 8, 2), ("A", 4, 2)],
    ("kk_add_rms_norm_fwd", torch.bfloat16): [("A", 2, 3), ("L2", 2, 3)],
    ("kk_add_rms_norm_fwd", torch.float32): [("A", 4, 3), ("L2", 4, 3)],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--only", help="kernels whose name contains this (e.g. rms)")
    a = ap.parse_args()
    per_row = source_variant("norms", PER_ROW_LOADS)
    copy = copy_bandwidth()
    results = []
    for (name, dtype), fits in FITS.items():
        if a.only and a.only not in name:
            continue
        op, args, eps, y, _, nbytes = norm_forward(name, dtype, ROWS, COLS)
        ref = op()[0].clone()
        calls = {"op": [op]}
        for src, np_, minb in fits:
            e = f"{name}<{CTYPE[dtype]}, false, {np_}, {minb}, true>"
            k = kernel("norms", e) if src == "A" else per_row.kernel(e)
            ctas = cdiv(COLS, 512 * np_ * VEC[dtype])
            smem = norms.split_param_bytes(name, np_) * 512
            grid = k.max_active_clusters((512, 1), (1, ctas, 1), smem)
            if not grid:
                print(f"  {src} NP {np_} minb {minb}: no cluster fits", flush=True)
                continue
            full = (*args, ROWS, COLS, eps)
            go = lambda k=k, grid=grid, ctas=ctas, full=full, smem=smem: k.launch(
                (grid, ctas), (512, 1), full, smem, cluster=(1, ctas, 1)
            )
            y.zero_()
            go()
            tag = f"{src} NP {np_} minb {minb} ({ctas} CTAs, {grid} clusters)"
            print(f"  {tag}: bitwise equal to the op: {torch.equal(y, ref)}", flush=True)
            calls[tag] = [go]
        case = f"{name[3:-4]} {str(dtype)[6:]}"
        for tag, us, pct, _ in interleaved(calls, a.reps, nbytes, copy):
            print(f"{case:24s} {ROWS}x{COLS} {tag:40s} {us:8.1f} us {pct:5.1f}%", flush=True)
            results.append({"case": case, "variant": tag, "us": us, "pct_copy": pct})
    write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
