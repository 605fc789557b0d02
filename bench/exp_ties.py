"""Experiment: are the last cells within 0.1-0.6% of torch.compile (or Liger) ties, or measurable gaps?

`kernelkit bench` reports each implementation's median over 5 interleaved rounds. This times the same jobs (the same
cases, input sets and torch.compile settings, through kernelkit.bench's own job builder) over many more rounds, and
compares kernelkit with the other implementation round by round: the ratio of their medians in each round (above 1:
kernelkit faster), its median over rounds with a bootstrap 95% interval, and how many rounds kernelkit won. An A/A
control, kernelkit against a second copy of its own calls timed as another implementation, shows how far apart two
identical implementations read on the same machine. The rounds take the three in kernelkit.bench's balanced orders
(six of them), so that none always runs right after another. Times are per call, unless --alone: GPU time alone, each
round's calls queued behind a hold (where an implementation is host-bound, its host decides the time per call).

    python3 bench/exp_ties.py --rounds 42 --out ties.json
    python3 bench/exp_ties.py --cells h100-s40 --rounds 20 --out ties-h100.json
    python3 bench/exp_ties.py --only softmax_backward --alone
    python3 bench/exp_ties.py --only layer_norm --host "norms._WIDE_FIT=norms._WIDE_FIT | {...}"
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics

import torch
from ab_source import _host_settings

from kernelkit.bench import _job_calls, _time_interleaved, copy_bandwidth, environment, op_cases

# (case, dtype, rows x cols, the implementation it ties with) by set (--cells): the H200's from the session-31 runs,
# the H100's from session 40's (bench/NOTES.md).
CELLS = {
    "h200-s31": [
        ("rms_norm", torch.float32, (32768, 4096), "torch.compile"),
        ("rms_norm", torch.float32, (32768, 8192), "torch.compile"),
        ("rms_norm", torch.bfloat16, (32768, 8192), "torch.compile"),
        ("layer_norm", torch.float32, (32768, 4096), "torch.compile"),
        ("softmax_backward", torch.bfloat16, (32768, 4096), "torch.compile"),
        ("rope", torch.float32, (32768, 4096), "torch.compile"),
        ("add_rms_norm_backward", torch.float32, (32768, 8192), "liger"),
    ],
    "h100-s40": [
        ("layer_norm", torch.bfloat16, (32768, 4096), "liger"),
        ("layer_norm", torch.bfloat16, (32768, 8192), "torch.compile"),
        ("softmax", torch.bfloat16, (32768, 4096), "liger"),
        ("softmax", torch.float32, (32768, 4096), "torch.compile"),
        ("softmax_backward", torch.bfloat16, (32768, 4096), "torch.compile"),
    ],
}
SELF = "kernelkit again"  # the A/A control


def interval(ratios: list, draws: int = 10000, seed: int = 0) -> tuple:
    """Bootstrap 95% interval of the median of ``ratios``."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def compare(samples: dict, other: str) -> dict:
    """kernelkit against ``other``, round by round: other's median / kernelkit's (above 1: kernelkit faster); rounds
    without a time for either (NaN: a queued round whose hold timed out) left out."""
    ratios = [o / k for k, o in zip(samples["kernelkit"], samples[other]) if not (math.isnan(k) or math.isnan(o))]
    lo, hi = interval(ratios)
    return {
        "median": statistics.median(ratios),
        "ci95": [lo, hi],
        "kernelkit_won": sum(r > 1 for r in ratios),
        "rounds": len(ratios),
    }


def time_cell(
    name: str, dtype: torch.dtype, size: tuple, other: str, rounds: int, calls: int, copy: float, alone: bool = False
) -> dict:
    (case,) = op_cases([name], group="llm")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    _, sets, timed, _, errors = _job_calls(case, size, dtype, "cuda", l2, compile=other == "torch.compile")
    if errors:
        raise RuntimeError(f"{name}: {errors}")
    timed = {k: v for k, v in timed.items() if k in ("kernelkit", other)}
    timed[SELF] = list(timed["kernelkit"])
    per_call: dict = {}
    gpu_alone: dict = {}
    queued: dict = {}
    medians = _time_interleaved(
        timed,
        rounds * calls,
        True,
        errors,
        rounds=rounds,
        per_round=per_call,
        queued=queued if alone else None,
        per_round_queued=gpu_alone if alone else None,
    )
    samples = gpu_alone if alone else per_call
    if alone:
        medians = {k: (math.nan if queued[k] is None else queued[k], None) for k in medians}
    nbytes = case.bytes(*sets[0])
    res = {
        "case": name,
        "dtype": str(dtype)[6:],
        "size": "x".join(map(str, size)),
        "other": other,
        "us": {k: ms * 1e3 for k, (ms, _) in medians.items()},
        "pct_copy": {k: nbytes / (ms * 1e-3) / 1e9 / copy * 100 for k, (ms, _) in medians.items()},
        "vs_other": compare(samples, other),
        "vs_self": compare(samples, SELF),
    }
    del sets, timed
    torch.cuda.empty_cache()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=42, help="a multiple of 6 balances the three orders")
    ap.add_argument("--calls", type=int, default=10, help="calls per implementation per round")
    ap.add_argument("--cells", choices=sorted(CELLS), default="h200-s31", help="the set of cells")
    ap.add_argument("--only", nargs="*", help="case names to time (default: every cell of the set)")
    ap.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="MODULE.NAME=EXPR",
        help="a host setting of kernelkit.ops.MODULE for every kernelkit call, as ab_source.py's --b-host",
    )
    ap.add_argument(
        "--alone",
        action="store_true",
        help="compare GPU time alone (each round's calls queued behind a hold, as kernelkit bench's GPU time) rather "
        "than time per call, which a host-bound implementation's host decides",
    )
    ap.add_argument("--out")
    a = ap.parse_args()
    for mod, name, _, value in _host_settings(a.host):  # before any call: no launch shape is cached yet
        setattr(mod, name, value)
    copy = copy_bandwidth()
    what = "GPU time alone" if a.alone else "time per call"
    print(f"copy {copy:.0f} GB/s, {a.rounds} rounds of {a.calls} calls, {what}; ratio: other / kernelkit", end="")
    print(", >1 kernelkit faster")
    for h in a.host:
        print(f"kernelkit with {h}")
    results = []
    for name, dtype, size, other in CELLS[a.cells]:
        if a.only and name not in a.only:
            continue
        r = time_cell(name, dtype, size, other, a.rounds, a.calls, copy, a.alone)
        results.append(r)
        v, s = r["vs_other"], r["vs_self"]
        print(
            f"{name:22s} {r['dtype']:8s} {r['size']:10s} kernelkit {r['us']['kernelkit']:7.1f} us "
            f"{other} {r['us'][other]:7.1f}  ratio {v['median']:.4f} [{v['ci95'][0]:.4f}, {v['ci95'][1]:.4f}] "
            f"won {v['kernelkit_won']}/{v['rounds']}  A/A {s['median']:.4f} [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]",
            flush=True,
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                {"environment": environment(), "copy_gbps": copy, "host": a.host, "alone": a.alone, "results": results},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
