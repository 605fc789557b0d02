# ruff: noqa: E731
"""Experiment: where the norm forwards' rows split over a cluster (8192 x 65536) take their parameter packs from.

A split row's CTA takes the same column slice of every row it loops over. Session 18's kernel loaded its w and b packs
again for each row's output pass, from L2: twice the bytes of the row it reads from DRAM, for 16-bit LayerNorm.

- Registers (session 18): the packs loaded once per CTA, before the row loop. They fit without spills only at one
  block per SM, where it was 5% faster than loading per row but far slower than the two-block fit (bf16 821.5
  against 615.3 us; float32 1310.7 against 1191.8; h200-2026-11-23-s18/split-params.log). Not adopted.
- Shared memory (session 20, shipped): the packs staged once per CTA in dynamic shared memory, thread-owned slots
  (kernels/norms.cu ln_fwd_run). They take no registers, so bf16 keeps its fit, and float32 fits two blocks per
  SM at 4 packs over 8 CTAs. Against per-row loads (h200-2026-11-23-s20/split-params-smem.log): bf16 613.9 ->
  597.1 us; float32 1190.4 (8 packs, 4 CTAs) -> 1121.5 (4 packs, 8 CTAs), 84.9 -> 90.1% of copy.

This times the shipped op, the shipped kernel (A), variant L2 (LayerNorm's output pass reading w and b per row from
global memory again, the staging left in) and variant S (RMSNorm staging its w, below) at several fits (register
packs, minimum blocks per SM), on the resident clusters; outputs are checked bitwise against the op's:

    python3 bench/exp_split_params.py --out split_params.json [--only rms]
"""

from __future__ import annotations

import argparse

import torch
from sweep_common import interleaved, norm_forward, source_variant, write_results

from kernelkit.bench import copy_bandwidth
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, kernel

ROWS, COLS = 8192, 65536
PER_ROW_LOADS = [
    (
        r"kk::vec_to_acc\(kk::lds<W>\(param_slot\(0, k\)\), g\);",
        r"kk::vec_to_acc(load_vec<W, kLnFwdLd>(w + p * W), g);",
    ),
    (
        r"kk::vec_to_acc\(kk::lds<W>\(param_slot\(1, k\)\), c\);",
        r"kk::vec_to_acc(load_vec<W, kLnFwdLd>(b + p * W), c);",
    ),
]
# RMSNorm's split forwards still read their w packs from L2 per row. Variant S stages them as LayerNorm's are
# (packs * 16 bytes per thread). Measured (split-params-final.log): rms_norm bf16 553.5 -> 540.2 us, float32 1075.7
# -> 1049.8; add_rms_norm bf16 1110.5 -> 1053.7, float32 2124.9 -> 2102.9. To be adopted once its shipped form has
# run on a GPU.
RMS_STAGED = [
    (
        r"(  const A acols = A\(cols\);\n)(  for \(long long rb = \(long long\)blockIdx\.x \* blockDim\.y;)",
        r"""\1  extern __shared__ uint4 kk_norms_dyn[];
  T* const wslots = reinterpret_cast<T*>(kk_norms_dyn) + threadIdx.x * W;
  if constexpr (SPLIT) {
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      kk::sts<W>(wslots + k * int(blockDim.x) * W, p < cv ? load_vec<W, kRmsFwdLd>(w + p * W) : kk::zero_vec<T, W>());
    }
  }
\2""",
    ),
    (
        r"        kk::vec_to_acc\(load_vec<W, kRmsFwdLd>\(w \+ p \* W\), g\);\n",
        r"""        if constexpr (SPLIT) kk::vec_to_acc(kk::lds<W>(wslots + k * int(blockDim.x) * W), g);
        else kk::vec_to_acc(load_vec<W, kRmsFwdLd>(w + p * W), g);
""",
    ),
]
# (kernel, dtype) -> [(source, register packs, minimum blocks)]
FITS = {
    ("kk_layer_norm_fwd", torch.bfloat16): [("A", 4, 2), ("L2", 4, 2), ("A", 2, 2), ("A", 4, 1)],
    ("kk_layer_norm_fwd", torch.float32): [("A", 4, 2), ("L2", 4, 2), ("L2", 8, 2), ("A", 8, 1)],
    ("kk_rms_norm_fwd", torch.bfloat16): [("A", 4, 2), ("S", 4, 2)],
    ("kk_rms_norm_fwd", torch.float32): [("A", 8, 2), ("S", 8, 2), ("S", 4, 2)],
    ("kk_add_rms_norm_fwd", torch.bfloat16): [("A", 2, 3), ("S", 2, 3)],
    ("kk_add_rms_norm_fwd", torch.float32): [("A", 4, 3), ("S", 4, 3)],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--only", help="kernels whose name contains this (e.g. rms)")
    a = ap.parse_args()
    variants = {"L2": source_variant("norms", PER_ROW_LOADS), "S": source_variant("norms", RMS_STAGED, count=1)}
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
            k = kernel("norms", e) if src == "A" else variants[src].kernel(e)
            ctas = cdiv(COLS, 512 * np_ * VEC[dtype])
            # the w and b slots (LayerNorm, both sources); RMSNorm's w slots in S
            smem = (2 if name == "kk_layer_norm_fwd" else src == "S") * np_ * 16 * 512
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
