"""A/B timing of a source change to one kernel family, through the shipped ops:

    python3 bench/ab_source.py --family norms --sub "kBwdPush = true" "kBwdPush = false" \
        rms_norm_backward:bfloat16:8192x65536 layer_norm_backward:float32:8192x65536

or of a host-side setting (B with MODULE.NAME=EXPR, the module one of kernelkit.ops; with no --sub, both run the
shipped sources):

    python3 bench/ab_source.py --family norms \
        --b-host "norms._SPLIT_FIXED=norms._SPLIT_FIXED | {('kk_rms_norm_fwd', torch.bfloat16)}" \
        rms_norm:bfloat16:8192x65536

or against the sources of another revision (B = <family>.cu and common.cuh from a directory):

    mkdir -p /tmp/b && for f in norms.cu common.cuh; do git show HEAD~1:kernels/$f > /tmp/b/$f; done
    python3 bench/ab_source.py --family norms --b-dir /tmp/b rms_norm_backward:bfloat16:8192x65536

A case is NAME:DTYPE:ROWSxCOLS, NAME being a `kernelkit bench` case, timed for kernelkit only. Variant B is
kernels/<family>.cu (or the --b-dir one) with each (regex, replacement) applied once (--common-sub: in common.cuh,
which every family includes; the variant recompiles only <family>.cu against it), compiled as its own
module; the ops are pointed at it by swapping the module that ops/_runtime.kernel() takes kernels from (and
clearing the cached launch shapes). A and B alternate for --rounds rounds (after one that is not kept), so that
drift of the GPU's clocks hits both; each reports its median. B's outputs are checked against A's (close, and whether
bitwise equal).
"""

import argparse
import importlib
import pkgutil
import statistics

import torch
from profile_rows import calls
from sweep_common import source_variant, write_results

import kernelkit.ops
from kernelkit.bench import _gpu_median_ms, copy_bandwidth
from kernelkit.ops import _runtime

_shipped_module = _runtime._module


def _host_settings(specs):
    """[(module, name, A's value, B's value)] from MODULE.NAME=EXPR (EXPR evaluated with torch and MODULE in scope)."""
    out = []
    for spec in specs:
        target, expr = spec.split("=", 1)
        mod_name, name = target.strip().split(".")
        mod = importlib.import_module(f"kernelkit.ops.{mod_name}")
        out.append((mod, name, getattr(mod, name), eval(expr, {"torch": torch, mod_name: mod})))
    return out


def _use(family, module, host=(), variant="A"):
    """Point the ops at ``module`` for ``family`` (None: the shipped one), set the host settings to ``variant``'s
    values and forget cached launch shapes."""
    for mod, name, a_value, b_value in host:
        setattr(mod, name, b_value if variant == "B" else a_value)
    if module is None:
        _runtime._module = _shipped_module
    else:
        _runtime._module = lambda f: module if f == family else _shipped_module(f)
    _runtime._kernels.clear()
    for info in pkgutil.iter_modules(kernelkit.ops.__path__):
        mod = importlib.import_module(f"kernelkit.ops.{info.name}")
        for obj in vars(mod).values():
            if callable(getattr(obj, "cache_clear", None)) and obj is not _shipped_module:
                obj.cache_clear()


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _same(a, b):
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(
        torch.allclose(x.float(), y.float(), rtol=2e-2, atol=2e-2, equal_nan=True) for x, y in zip(ta, tb)
    )


def _identical(a, b):
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(torch.equal(x, y) for x, y in zip(ta, tb))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="NAME:DTYPE:ROWSxCOLS")
    ap.add_argument("--family", required=True, help="kernels/<family>.cu")
    ap.add_argument("--sub", nargs=2, action="append", default=[], metavar=("REGEX", "REPLACEMENT"))
    ap.add_argument(
        "--common-sub",
        nargs=2,
        action="append",
        default=[],
        metavar=("REGEX", "REPLACEMENT"),
        help="as --sub, in common.cuh",
    )
    ap.add_argument("--b-dir", help="B's <family>.cu and common.cuh (before any --sub)")
    ap.add_argument("--b-host", action="append", default=[], metavar="MODULE.NAME=EXPR", help="B's host setting")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--queued", action="store_true", help="time the GPU's work alone (calls queued behind a hold)")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not a.sub and not a.common_sub and not a.b_dir and not a.b_host:
        ap.error("give --sub, --common-sub, --b-dir or --b-host")
    host = _host_settings(a.b_host)
    base = {}
    if a.b_dir:
        base = {"source": open(f"{a.b_dir}/{a.family}.cu").read(), "common": open(f"{a.b_dir}/common.cuh").read()}
    variant = source_variant(a.family, [tuple(s) for s in a.sub], common_subs=[tuple(s) for s in a.common_sub], **base)
    runs = [(spec, fn) for spec in a.cases for _, fn in calls(spec, ["kernelkit"])]
    times = {(spec, v): [] for spec, _ in runs for v in "AB"}
    ok, bitwise = {}, {}
    # Round 0 is not kept: timed first in a run, a case's A read up to 11% slow, median over rounds and all (bf16
    # cross_entropy 32768 x 4096: 80.9 and 73.8 us first, 72.5 in later places; bench/results/h200-2026-11-23-s18/
    # ab-ce-no-sx*.json, ab-ce-target-late.json).
    for r in range(a.rounds + 1):
        for spec, fn in runs:
            outs = {}
            for v, module in (("A", None), ("B", variant)):
                _use(a.family, module, host, v)
                outs[v] = fn()
                ms = _gpu_median_ms([fn], reps=a.reps, warmup=3, queued=a.queued)
                if r:
                    times[spec, v].append(ms * 1e3)
            ok[spec] = ok.get(spec, True) and _same(outs["A"], outs["B"])
            bitwise[spec] = bitwise.get(spec, True) and _identical(outs["A"], outs["B"])
    _use(a.family, None, host, "A")
    subs = "; ".join(f"{p!r} -> {r!r}" for p, r in a.sub) or "no substitutions"
    subs += "".join(f"; common.cuh {p!r} -> {r!r}" for p, r in a.common_sub)
    print(f"B: {a.b_dir or 'kernels'}/{a.family}.cu with {subs}" + "".join(f"; {h}" for h in a.b_host))
    results = []
    for spec, _ in runs:
        med = {v: statistics.median(times[spec, v]) for v in "AB"}
        note = "  (bitwise equal)" if bitwise[spec] else "" if ok[spec] else "  B DIFFERS"
        print(f"  {spec:40s} A {med['A']:9.1f} us  B {med['B']:9.1f} us  B/A {med['B'] / med['A']:6.3f}{note}")
        results.append(
            {
                "case": spec,
                "a_us": med["A"],
                "b_us": med["B"],
                "same": ok[spec],
                "bitwise": bitwise[spec],
                "sub": a.sub,
                "common_sub": a.common_sub,
                "b_dir": a.b_dir,
                "b_host": a.b_host,
            }
        )
    if a.out:
        write_results(a.out, copy_bandwidth(), results)


if __name__ == "__main__":
    main()
