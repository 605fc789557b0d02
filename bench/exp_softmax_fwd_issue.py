"""Experiment: fewer instructions per element in softmax's forward rows (kernels/softmax.cu fwd_row).

ncu at an H100's locked clocks had the bf16 32768 x 4096 forward issue-bound against Liger's (84.6% of the SMs' issue
against 55.5%; bench/results/h100-2026-11-27-s41/ncu-ln-softmax-h100.txt), where the H100 trails Liger by 1.3%. Each
variant is an A/B against the shipped source (bench/ab_source.py --queued, GPU time alone):

- pair_max: the thread's max over 16-bit pairs (HMNMX2, no conversion), as the streamed rows take it (ms_update);
- fma_arg: each 16-bit exponential's argument as one fma, x * log2(e) - r * log2(e), instead of (x - r) * log2(e)
  (float32 rows keep the exact difference: the fma's error grows with |r|);
- both.

pair_max takes the H100's bf16 fit (2 packs at 3 blocks per SM) from 32 to 38 registers (6 blocks; check_compile.py).

    python3 bench/exp_softmax_fwd_issue.py --check            # each pattern matches once (no GPU needed)
    python3 bench/exp_softmax_fwd_issue.py --write /tmp/v     # /tmp/v/<variant>/softmax.cu, for check_compile.py
    OUT=$OUT python3 bench/exp_softmax_fwd_issue.py           # on the GPU machine (bench/gpu_run.sh softmax-issue)
"""

from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "kernels", "softmax.cu")

_MAX_LOOP = (
    r"(  A m = ninf<A>\(\), s = A\(0\);\n)"
    r"(#pragma unroll\n  for \(int k = 0; k < RP; \+\+k\)\n    if \(ti \+ \(long long\)k \* nt < nv\) \{\n"
    r"#pragma unroll\n      for \(int j = 0; j < W; \+\+j\) m = amax\(m, kk::acc_at\(v\[k\], j\)\);\n    \})"
)
_PAIR_MAX = (
    _MAX_LOOP,
    r"\1  if constexpr (sizeof(T) == 2 && W % 2 == 0) {\n    int n = 0;\n"
    r"    for (int k = 0; k < RP; ++k) n += ti + (long long)k * nt < nv;\n"
    r"    m = pair_max<T, W, RP>(v, n, m);\n  } else {\n\2\n  }",
)
_FMA_ARG = [
    (
        r"(// -+ softmax forward, one row\n)",
        r"template <typename T> __device__ __forceinline__ acc_t<T> ex_arg(acc_t<T> x, acc_t<T> r) {\n"
        r"  if constexpr (sizeof(T) == 2) return ex2_approx(fmaf(x, 1.44269504088896340736f, "
        r"-r * 1.44269504088896340736f));\n"
        r"  else return ex<T>(x - r);\n}\n\n\1",
    ),
    (r"s \+= ex<T>\(kk::acc_at\(v\[k\], j\) - r\);", r"s += ex_arg<T>(kk::acc_at(v[k], j), r);"),
    (r"o\[j\] = ex<T>\(kk::acc_at\(v\[k\], j\) - r\) \* inv;", r"o[j] = ex_arg<T>(kk::acc_at(v[k], j), r) * inv;"),
]
VARIANTS = {"pair_max": [_PAIR_MAX], "fma_arg": _FMA_ARG, "both": [_PAIR_MAX, *_FMA_ARG]}
CASES = [
    "softmax:bfloat16:32768x4096",
    "softmax:bfloat16:32768x8192",
    "softmax:float16:32768x4096",
    "softmax:bfloat16:32768x1024",
    "softmax:bfloat16:32768x256",
    "softmax:bfloat16:8192x65536",
    "softmax:float32:32768x4096",
]


def apply(subs, src: str) -> str:
    """src with each (regex, replacement) applied once; a pattern that does not match exactly once raises."""
    for pat, rep in subs:
        src, n = re.subn(pat, rep, src, count=1)
        if n != 1:
            raise ValueError(f"pattern {pat!r} matched {n} times")
    return src


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="apply each variant to kernels/softmax.cu, no GPU")
    ap.add_argument("--write", metavar="DIR", help="write DIR/<variant>/softmax.cu")
    ap.add_argument("--only", nargs="*", default=sorted(VARIANTS))
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    src = open(SOURCE).read()
    for name in a.only:
        for pat, _ in VARIANTS[name]:
            if len(re.findall(pat, src)) != 1:
                sys.exit(f"{name}: pattern {pat!r} does not match once in kernels/softmax.cu")
        if a.write:
            os.makedirs(os.path.join(a.write, name), exist_ok=True)
            with open(os.path.join(a.write, name, "softmax.cu"), "w") as f:
                f.write(apply(VARIANTS[name], src))
    if a.check or a.write:
        print(f"{len(a.only)} variants apply")
        return
    from sweep_common import ab_variants

    subs = {name: [arg for pair in VARIANTS[name] for arg in ("--sub", *pair)] for name in a.only}
    ab_variants("softmax", subs, CASES, a.rounds, "softmax")


if __name__ == "__main__":
    main()
