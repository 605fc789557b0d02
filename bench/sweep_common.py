"""What the launch-shape sweeps (bench/sweep_*.py) share: jobs that report a failure and go on, and the
JSON report. Each sweep runs as a script from the repo root (python3 bench/sweep_x.py), which puts this
directory on the import path."""

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

import kernelkit
from kernelkit import _native
from kernelkit.bench import _time_interleaved, copy_bandwidth
from kernelkit.ops import norms

_variants = {}


def _substituted(text: str, subs: Sequence[Tuple[str, str]], count: int, name: str) -> str:
    """``text`` with each (regex, replacement) applied ``count`` times (which must match; 0: every match)."""
    for pat, rep in subs:
        text, n = re.subn(pat, rep, text, count=count)
        if count and n != count:
            raise ValueError(f"pattern {pat!r} matched {n} times in {name}")
    return text


def source_variant(
    family: str,
    subs: Sequence[Tuple[str, str]] = (),
    count: int = 1,
    common: Optional[str] = None,
    source: Optional[str] = None,
    common_subs: Sequence[Tuple[str, str]] = (),
):
    """kernels/<family>.cu with each (regex, replacement) applied ``count`` times (which must match), or with
    count=0 to every match there is, compiled as its own module (NVRTC, a few seconds); ``common``: a
    common.cuh to use instead, ``source``: a <family>.cu to start from instead; ``common_subs``: substitutions in
    common.cuh, applied as ``subs`` are."""
    key = (family, tuple(subs), count, common, source, tuple(common_subs))
    if key not in _variants:
        src = _substituted(
            source if source is not None else _native.op_source(f"{family}.cu"), subs, count, f"{family}.cu"
        )
        header = common if common is not None else _native.op_source("common.cuh")
        header = _substituted(header, common_subs, count, "common.cuh")
        name = f"sweep_{family}_{len(_variants)}"
        _variants[key] = kernelkit.load_inline(name, src, headers={"common.cuh": header})
    return _variants[key]


def guarded(label: str, job) -> None:
    """Runs job(); a failure (a variant that does not compile, a launch error) is printed, not fatal. The
    caching allocator's free blocks are returned after each job, as the next job's tensors differ."""
    try:
        job()
    except Exception as ex:
        print(f"FAILED {label}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
    torch.cuda.empty_cache()


def interleaved(
    calls: Dict[str, Sequence[Callable]], reps: int, nbytes: int, copy_gbps: float
) -> List[Tuple[str, float, float, float]]:
    """Each implementation timed in interleaved rounds (kernelkit.bench._time_interleaved): (tag, µs per call, % of
    the copy bandwidth for ``nbytes`` moved, host µs), in ``calls``' order. One that raised is printed and left out."""
    errors: dict = {}
    timed = _time_interleaved(calls, reps, True, errors)
    for tag, msg in errors.items():
        print(f"FAILED {tag}: {msg}", flush=True)
    return [(tag, ms * 1e3, nbytes / (ms * 1e3) / 1e3 / copy_gbps * 100, host) for tag, (ms, host) in timed.items()]


def write_results(path: Optional[str], copy_gbps: float, results: list) -> None:
    """The sweep's report (none without a path): the copy bandwidth it measured, the GPU, and every variant's result."""
    if not path:
        return
    with open(path, "w") as f:
        json.dump({"copy_gbps": copy_gbps, "env": torch.cuda.get_device_name(), "results": results}, f, indent=1)


def run_cases(
    cases: Sequence[tuple], time_case: Callable[..., list], reps: int = 100, options: Optional[Dict[str, dict]] = None
) -> None:
    """An experiment's command line (--out, --reps): ``time_case(*case, copy_gbps, reps)`` for each case, its results
    written to --out with the copy bandwidth measured once. ``options``: the experiment's own flags (argparse keyword
    arguments by flag, e.g. {"--old": dict(help=...)}), passed to time_case by their names."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=reps)
    for flag, kwargs in (options or {}).items():
        ap.add_argument(flag, **kwargs)
    a = vars(ap.parse_args())
    out, reps = a.pop("out"), a.pop("reps")
    copy = copy_bandwidth()
    write_results(out, copy, [r for case in cases for r in time_case(*case, copy, reps, **a)])


class NormForward(NamedTuple):
    """A norm forward kernel's case: ``op()`` runs the shipped op; the kernel takes ``(*args, rows, cols, eps)``
    and writes ``y``; ``inputs`` are the reference's arguments; ``nbytes`` the bytes the forward moves."""

    op: Callable
    args: tuple
    eps: float
    y: torch.Tensor
    inputs: tuple
    nbytes: int


def norm_forward(name: str, dtype: torch.dtype, rows: int, cols: int) -> NormForward:
    """Random inputs and output buffers for kk_rms_norm_fwd, kk_add_rms_norm_fwd or kk_layer_norm_fwd."""
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    r = torch.randn_like(x)
    w = torch.randn(cols, dtype=dtype, device="cuda")
    b = torch.randn(cols, dtype=dtype, device="cuda")
    y, h = torch.empty_like(x), torch.empty_like(x)
    st, st2 = (torch.empty(rows, dtype=torch.float32, device="cuda") for _ in range(2))
    if name == "kk_rms_norm_fwd":
        return NormForward(lambda: norms._rms_norm(x, w, 1e-6), (x, w, y, st), 1e-6, y, (x, w), 2 * x.nbytes)
    if name == "kk_add_rms_norm_fwd":
        op = lambda: norms._add_rms_norm(x, r, w, 1e-6)  # noqa: E731
        return NormForward(op, (x, r, w, y, h, st), 1e-6, y, (x, r, w), 4 * x.nbytes)
    op = lambda: norms._layer_norm(x, w, b, 1e-5)  # noqa: E731
    return NormForward(op, (x, w, b, y, st2, st), 1e-5, y, (x, w, b), 2 * x.nbytes)


def ab_variants(family: str, variants: Dict[str, List[str]], cases: Sequence[str], rounds: int, tag: str) -> None:
    """The A/B scripts' runs (bench/exp_*.py, the Python side of bench/ab_env.sh's ab): bench/ab_source.py --queued once
    per variant, B given by the variant's arguments (--sub, --b-host, --b-dir), each log written to
    $OUT/ab-<gpu>-<tag>-<variant>.log and its results printed."""
    gpu = "h100" if "H100" in torch.cuda.get_device_name() else "h200"
    out = os.environ.get("OUT", "/tmp/kernelkit-out")
    here = os.path.dirname(os.path.abspath(__file__))
    for name, args in variants.items():
        cmd = [sys.executable, "ab_source.py", "--family", family, "--queued", "--rounds", str(rounds), *args, *cases]
        res = subprocess.run(cmd, cwd=here, capture_output=True, text=True)
        log = res.stdout + res.stderr
        with open(os.path.join(out, f"ab-{gpu}-{tag}-{name}.log"), "w") as f:
            f.write(log)
        print(f"== {name}\n" + "\n".join(log.splitlines()[-len(cases) - 1 :]), flush=True)
