# ruff: noqa: E731
"""Experiment: LayerNorm rows split over a cluster (8192 x 65536) holding the weight and bias packs in registers.

A split row's CTA takes the same column slice of every row it loops over, but the shipped kernel loads its w and b
packs again for each row's output pass (from L2: twice the bytes of the row it reads from DRAM, for 16-bit
LayerNorm). Variant B loads them once per CTA, before the row loop, into registers (REG_PARAMS below). This times
the shipped op, and A (kernels/norms.cu) and B at the fits (register packs, minimum blocks per SM) where B compiles
without spills or nearly, on the resident clusters; outputs are checked bitwise against the op's:

    python3 bench/exp_split_params.py --out split_params.json

Verdict (H200, h200-2026-11-23-s18/split-params.log): B fits without spills only at one block per SM, where it is
5% faster than A but far slower than the shipped two-block fit (bf16 821.5 against 615.3 us; float32 1310.7 against
1191.8). Not adopted.
"""

from __future__ import annotations

import argparse

import torch
from sweep_common import interleaved, norm_forward, source_variant, write_results

from kernelkit.bench import copy_bandwidth
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, kernel

ROWS, COLS = 8192, 65536
REG_PARAMS = [
    (
        r"(  static_assert\(ONEPASS \|\| !SPLIT, \"split rows take the one-pass sums\"\);\n)",
        r"""\1  Vec<T, W> wk[SPLIT ? NP : 1], bk[SPLIT ? NP : 1];
  if constexpr (SPLIT) {
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const long long p = k * R + tx;
      wk[k] = p < cv ? load_vec<W, kLnFwdLd>(w + p * W) : kk::zero_vec<T, W>();
      bk[k] = p < cv ? load_vec<W, kLnFwdLd>(b + p * W) : kk::zero_vec<T, W>();
    }
  }
""",
    ),
    (
        r"        kk::vec_to_acc\(load_vec<W, kLnFwdLd>\(w \+ p \* W\), g\);\n"
        r"        kk::vec_to_acc\(load_vec<W, kLnFwdLd>\(b \+ p \* W\), c\);\n",
        r"""        if constexpr (SPLIT) {
          kk::vec_to_acc(wk[k], g);
          kk::vec_to_acc(bk[k], c);
        } else {
          kk::vec_to_acc(load_vec<W, kLnFwdLd>(w + p * W), g);
          kk::vec_to_acc(load_vec<W, kLnFwdLd>(b + p * W), c);
        }
""",
    ),
]
# dtype -> [(source, register packs, minimum blocks)]
FITS = {
    torch.bfloat16: [("A", 4, 2), ("B", 4, 1), ("A", 4, 1), ("B", 2, 2), ("A", 2, 2)],
    torch.float32: [("A", 8, 2), ("B", 4, 1), ("A", 4, 1), ("B", 8, 1), ("A", 8, 1)],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args()
    variant = source_variant("norms", REG_PARAMS)
    copy = copy_bandwidth()
    results = []
    for dtype, fits in FITS.items():
        op, args, eps, y, _, nbytes = norm_forward("kk_layer_norm_fwd", dtype, ROWS, COLS)
        ref = op()[0].clone()
        calls = {"op": [op]}
        for src, np_, minb in fits:
            e = f"kk_layer_norm_fwd<{CTYPE[dtype]}, false, {np_}, {minb}, true>"
            k = kernel("norms", e) if src == "A" else variant.kernel(e)
            ctas = cdiv(COLS, 512 * np_ * VEC[dtype])
            grid = k.max_active_clusters((512, 1), (1, ctas, 1))
            full = (*args, ROWS, COLS, eps)
            go = lambda k=k, grid=grid, ctas=ctas, full=full: k.launch(
                (grid, ctas), (512, 1), full, cluster=(1, ctas, 1)
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
