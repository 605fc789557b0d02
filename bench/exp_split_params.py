# ruff: noqa: E731
"""Experiment: where LayerNorm rows split over a cluster (8192 x 65536) take their weight and bias packs from.

A split row's CTA takes the same column slice of every row it loops over. Session 18's kernel loaded its w and b packs
again for each row's output pass, from L2: twice the bytes of the row it reads from DRAM, for 16-bit LayerNorm.

- Registers (session 18): the packs loaded once per CTA, before the row loop. They fit without spills only at one
  block per SM, where it was 5% faster than loading per row but far slower than the two-block fit (bf16 821.5
  against 615.3 us; float32 1310.7 against 1191.8; h200-2026-11-23-s18/split-params.log). Not adopted.
- Shared memory (session 20, shipped): the packs staged once per CTA in dynamic shared memory, thread-owned slots
  (kernels/norms.cu ln_fwd_run). They take no registers, so bf16 keeps its fit, and float32 fits two blocks per
  SM at 4 packs over 8 CTAs. Against per-row loads (h200-2026-11-23-s20/split-params-smem.log): bf16 613.9 ->
  597.1 us; float32 1190.4 (8 packs, 4 CTAs) -> 1121.5 (4 packs, 8 CTAs), 84.9 -> 90.1% of copy.

This times the shipped op, the shipped kernel (A) and variant L2 (A with the output pass reading w and b per row
from global memory again, the staging left in) at several fits (register packs, minimum blocks per SM), on the
resident clusters; outputs are checked bitwise against the op's:

    python3 bench/exp_split_params.py --out split_params.json
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
# dtype -> [(source, register packs, minimum blocks)]
FITS = {
    torch.bfloat16: [("A", 4, 2), ("L2", 4, 2), ("A", 2, 2), ("A", 4, 1)],
    torch.float32: [("A", 4, 2), ("L2", 4, 2), ("L2", 8, 2), ("A", 8, 1)],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args()
    per_row = source_variant("norms", PER_ROW_LOADS)
    copy = copy_bandwidth()
    results = []
    for dtype, fits in FITS.items():
        op, args, eps, y, _, nbytes = norm_forward("kk_layer_norm_fwd", dtype, ROWS, COLS)
        ref = op()[0].clone()
        calls = {"op": [op]}
        for src, np_, minb in fits:
            e = f"kk_layer_norm_fwd<{CTYPE[dtype]}, false, {np_}, {minb}, true>"
            k = kernel("norms", e) if src == "A" else per_row.kernel(e)
            ctas = cdiv(COLS, 512 * np_ * VEC[dtype])
            smem = 2 * np_ * 16 * 512  # the w and b slots
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
        for tag, us, pct, _ in interleaved(calls, a.reps, nbytes, copy):
            print(f"layer_norm {str(dtype)[6:]:8s} {ROWS}x{COLS} {tag:40s} {us:8.1f} us {pct:5.1f}%", flush=True)
            results.append({"case": f"layer_norm {str(dtype)[6:]}", "variant": tag, "us": us, "pct_copy": pct})
    write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
