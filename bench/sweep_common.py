"""What the launch-shape sweeps (bench/sweep_*.py) share: jobs that report a failure and go on, and the
JSON report. Each sweep runs as a script from the repo root (python3 bench/sweep_x.py), which puts this
directory on the import path."""

import json
from typing import Callable, NamedTuple

import torch

from kernelkit.ops import norms


def guarded(label: str, job) -> None:
    """Runs job(); a failure (a variant that does not compile, a launch error) is printed, not fatal. The
    caching allocator's free blocks are returned after each job, as the next job's tensors differ."""
    try:
        job()
    except Exception as ex:
        print(f"FAILED {label}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
    torch.cuda.empty_cache()


def write_results(path: str, copy_gbps: float, results: list) -> None:
    """The sweep's report: the copy bandwidth it measured, the GPU, and every variant's result."""
    with open(path, "w") as f:
        json.dump({"copy_gbps": copy_gbps, "env": torch.cuda.get_device_name(), "results": results}, f, indent=1)


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
