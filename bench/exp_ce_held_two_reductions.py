"""Experiment: kk_cross_entropy_held's rows (the eager loss's forward that also writes the gradient) in two block
reductions, the row's max and then its sum of exponentials against it, as softmax's held rows of >= 128 threads
since session 41 (kTwoReductionThreads), instead of one of (max, sum) pairs whose combines take two exponentials each.

The bf16 32768 x 4096 fwd_bwd composite read 89.7% of copy in GPU time alone on the H200 (session 42,
h200-2026-11-28-s42/llm-softmax.json), on 64-thread rows of 8 packs (_HELD_CE_FITS); 128-thread rows of 4 packs had
been slower with the pairs (154.2 against 144.7 us, h200-2026-11-24-s34/ce-fused-fits.log). Variants, each an A/B
against the shipped source (bench/ab_source.py --queued, GPU time alone):

- two: the two reductions where the block has >= kTwoReductionThreads threads (the shipped fits: bf16 from 8192
  columns, float32 from 4096);
- two_p4m2 / two_p4m3 / two_p2m4: the same with the 16-bit rows from 2048 columns at 4 packs and 2 or 3 blocks per
  SM (128 threads at 4096, up to 16384 columns at 512; 55 or 40 registers), or 2 packs at 4 blocks (256 threads at
  4096, up to 8192 columns; 32 registers; kernels/check_compile.py on the variant), the wider rows at the shipped fit.

    python3 bench/exp_ce_held_two_reductions.py --check     # the pattern matches once (no GPU needed)
    OUT=$OUT python3 bench/exp_ce_held_two_reductions.py    # on the GPU machine (bench/gpu_run.sh ce-two)

Since session 43 kernels/softmax.cu ships "two" (and ops/softmax.py the 4-pack 16-bit fit below 30 GB/s of DRAM
bandwidth per SM: h100-2026-11-28-s43/ab-h100-ce-held-two*.log), so the pattern matches only the source before it.
To run the A/B again, build the wheel from 36ebf53's sources (`git show 36ebf53:kernels/softmax.cu`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "kernels", "softmax.cu")

_PAIRS = (
    r"  A m = ninf<A>\(\), s = A\(0\);\n  ms_update<T, W, P>\(u, n, m, s\);\n  Red<A, 2> st;\n  st\.f\[0\] = m;\n"
    r"  st\.f\[1\] = s;\n  if constexpr \(SPLIT\) \(\*cluster\)\(st\.f, ArrayOp<MaxSumOp<T, 2>, A, 2>\{\}\);\n"
    r"  else st = team_allreduce<MaxSumOp<T, 2>, true>\(st, red, parity\);[^\n]*\n"
)
_TWO = r"""  A m = ninf<A>(), s = A(0);
  Red<A, 2> st;
  if (!SPLIT && nt >= kTwoReductionThreads) {
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < n) {
#pragma unroll
        for (int j = 0; j < W; ++j) m = amax(m, kk::acc_at(u[k], j));
      }
    m = team_allreduce<MaxOp<T>, true>(Red<A, 1>{{m}}, red, parity).f[0];
    const A r = safe_ref(m);
#pragma unroll
    for (int k = 0; k < P; ++k)
      if (k < n) {
#pragma unroll
        for (int j = 0; j < W; ++j) s += ex<T>(kk::acc_at(u[k], j) - r);
      }
    st.f[0] = m;
    st.f[1] = team_allreduce<SumOp<T>, true>(Red<A, 1>{{s}}, red, parity).f[0];
  } else {
    ms_update<T, W, P>(u, n, m, s);
    st.f[0] = m;
    st.f[1] = s;
    if constexpr (SPLIT) (*cluster)(st.f, ArrayOp<MaxSumOp<T, 2>, A, 2>{});
    else st = team_allreduce<MaxSumOp<T, 2>, true>(st, red, parity);
  }
"""


def _fit(packs: int, minb: int) -> str:
    """--b-host: the 16-bit rows from 256 packs (2048 columns) to ``packs`` x 512 at ``packs`` per thread and ``minb``
    blocks per SM, the shipped fit beyond."""
    return f"softmax._HELD_CE_FITS=softmax._HELD_CE_FITS | {{2: (({packs}, {minb}, {256 // packs}), (8, 2, 64))}}"


VARIANTS = {
    "two": [],
    "two_p4m2": [_fit(4, 2)],
    "two_p4m3": [_fit(4, 3)],
    "two_p2m4": [_fit(2, 4)],
}
CASES = [
    "cross_entropy_fwd_bwd:bfloat16:32768x4096",
    "cross_entropy_fwd_bwd:bfloat16:32768x2048",
    "cross_entropy_fwd_bwd:bfloat16:32768x8192",
    "cross_entropy_fwd_bwd:float16:32768x4096",
    "cross_entropy_fwd_bwd:float32:32768x4096",
    "cross_entropy_fwd_bwd:float32:32768x8192",
    "cross_entropy_fwd_bwd:bfloat16:16384x32000",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="the pattern matches kernels/softmax.cu once (no GPU)")
    ap.add_argument("--only", nargs="*", default=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    src = open(SOURCE).read()
    if len(re.findall(_PAIRS, src)) != 1:
        sys.exit(
            "the held cross-entropy row's (max, sum) reduction does not match once in kernels/softmax.cu (its two "
            "reductions ship since session 43: run this on 36ebf53's source)"
        )
    if a.check:
        print("the pattern matches")
        return
    from sweep_common import ab_variants

    host = {name: [arg for spec in VARIANTS[name] for arg in ("--b-host", spec)] for name in a.only}
    ab_variants("softmax", {name: ["--sub", _PAIRS, _TWO, *h] for name, h in host.items()}, CASES, a.rounds, "ce-held")


if __name__ == "__main__":
    main()
