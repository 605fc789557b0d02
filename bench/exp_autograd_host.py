"""Experiment: the host microseconds of training calls (forward with autograd, then ``torch.autograd.grad``) on small
CUDA tensors, kernelkit's ops against the torch ops they replace.

`kernelkit bench` at 32768 x 256, where the host decides, had kernelkit's backwards behind torch eager
(h200-2026-11-23-s19: softmax_backward bf16 100.3 against 80.9 us, layer_norm_backward 199.6 against 161.6,
cross_entropy_fwd_bwd 193.0 against 163.6). Per op this times, host time only (exp_host_calls.host_us):

- ``fwd+bwd``: the forward on leaves that require grad, then ``torch.autograd.grad`` of its output;
- ``bwd``: ``torch.autograd.grad`` alone, on a graph built once (``retain_graph=True``, as `kernelkit bench`);
- ``bwd op``: kernelkit's backward op called directly, without autograd.

Run it once per installed kernelkit to compare two builds (PYTHONPATH picks the build):

    cd bench && python3 exp_autograd_host.py --label new --out autograd_host.json

``--size 32768x4096 --ops layer_norm rms_norm`` times the benchmark's own sizes (where the 16-bit norm backwards take
the bulk kernels); ``--profile CASE`` prints cProfile's busiest functions of that case.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import pstats
from typing import Callable, Dict

import torch
import torch.nn.functional as F
from exp_host_calls import host_us

import kernelkit.ops as K

norms = importlib.import_module("kernelkit.ops.norms")
softmax = importlib.import_module("kernelkit.ops.softmax")


def training_cases(name: str, fwd: Callable, inputs: tuple, grad_out: torch.Tensor) -> Dict[str, Callable]:
    """``fwd+bwd`` and ``bwd`` cases of ``fwd`` over ``inputs`` (their float tensors become leaves)."""
    leaves = tuple(t.detach().clone().requires_grad_() if t.is_floating_point() else t for t in inputs)
    wrt = tuple(t for t in leaves if t.requires_grad)

    def both():
        return torch.autograd.grad(fwd(*leaves), wrt, grad_out)

    out = fwd(*leaves)
    return {
        f"{name} fwd+bwd": both,
        f"{name} bwd": lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True),
    }


class _Fixed(torch.autograd.Function):
    """A Python node that returns gradients made in advance: the engine's cost of any Python Function."""

    @staticmethod
    def forward(ctx, x, w, b, grads):
        ctx._materialize_non_diff_grads = False
        ctx.grads = grads
        stats = x.new_empty(x.shape[0]), x.new_empty(x.shape[0])
        ctx.mark_non_differentiable(*stats)
        ctx.save_for_backward(x, w, *stats)
        return torch.empty_like(x), *stats

    @staticmethod
    def backward(ctx, gy, gm, gr):
        return (*ctx.grads, None)


def engine_floors(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> Dict[str, Callable]:
    """``torch.autograd.grad`` through nodes that launch nothing: a Python Function shaped like LayerNorm's (3 inputs, 3
    outputs), and torch's own view node."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    fixed = _Fixed.apply(*leaves, (torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)))[0]
    view = leaves[0].view_as(x)
    return {
        "floor python node": lambda: torch.autograd.grad(fixed, leaves, g, retain_graph=True),
        "floor python node x only": lambda: torch.autograd.grad(fixed, leaves[:1], g, retain_graph=True),
        "floor view node": lambda: torch.autograd.grad(view, leaves[:1], g, retain_graph=True),
    }


def ladder(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> Dict[str, Callable]:
    """The norm backwards' host time taken apart, rung by rung: the autograd node's own ``apply`` (the Function's
    backward without the engine), the backward op, and its launches into preallocated outputs."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    ln = K.layer_norm(*leaves, 1e-5)
    rms = K.rms_norm(*leaves[:2], 1e-6)
    _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
    _, rstd_r = norms._rms_norm(x, w, 1e-6)
    gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
    cases = {
        "ladder layer_norm node.apply": lambda: ln.grad_fn.apply(g, None, None),
        "ladder rms_norm node.apply": lambda: rms.grad_fn.apply(g, None),
        "ladder rms_norm bwd op": lambda: norms.rms_norm_backward(g, x, w, rstd_r),
        "ladder layer_norm launch": lambda: norms._launch_backward(
            "kk_layer_norm_bwd", x, (g, x, w, mean, rstd), gx, (gw, gb), mean=mean, rstd=rstd
        ),
        "ladder rms_norm launch": lambda: norms._launch_backward(
            "kk_rms_norm_bwd", x, (g, x, w, rstd_r, 0), gx, (gw,), rstd=rstd_r
        ),
        "ladder empty_like x3": lambda: (torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)),
        **engine_floors(x, w, b, g),
    }
    return cases if x.is_cuda else {k: v for k, v in cases.items() if "launch" not in k}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cpu: check the script (host_us then waits on no GPU)")
    ap.add_argument("--size", default="64x256", help="ROWSxCOLS")
    ap.add_argument("--ops", nargs="*", help="the ops to time (default: all)")
    ap.add_argument("--profile", help="a case to profile, e.g. 'kernelkit layer_norm bwd'")
    ap.add_argument(
        "--batch",
        type=int,
        default=200,
        help="calls per timed batch (few at large sizes: a full launch queue waits on the GPU)",
    )
    args = ap.parse_args()
    if args.device == "cpu":
        torch.cuda.synchronize = lambda: None
    rows, cols = map(int, args.size.split("x"))
    bf16 = torch.bfloat16
    x = torch.randn(rows, cols, device=args.device, dtype=bf16)
    w = torch.randn(cols, device=args.device, dtype=bf16)
    b = torch.randn(cols, device=args.device, dtype=bf16)
    target = torch.randint(0, cols, (rows,), device=args.device)
    g = torch.randn_like(x)
    one = torch.ones((), device=args.device, dtype=bf16)
    ops = {
        "softmax": (K.softmax, lambda t: torch.softmax(t, -1), (x,), g),
        "layer_norm": (
            lambda t, w, b: K.layer_norm(t, w, b, 1e-5),
            lambda t, w, b: F.layer_norm(t, (cols,), w, b, 1e-5),
            (x, w, b),
            g,
        ),
        "rms_norm": (
            lambda t, w: K.rms_norm(t, w, 1e-6),
            lambda t, w: F.rms_norm(t, (cols,), w, 1e-6),
            (x, w),
            g,
        ),
        "cross_entropy": (K.cross_entropy, F.cross_entropy, (x, target), one),
        "swiglu": (K.swiglu, lambda a, c: F.silu(a) * c, (x, x), g),
    }
    cases = {}
    for name, (kk, ref, inputs, grad_out) in ops.items():
        if args.ops and name not in args.ops:
            continue
        cases.update(training_cases(f"kernelkit {name}", kk, inputs, grad_out))
        cases.update(training_cases(f"torch {name}", ref, inputs, grad_out))
    _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
    y = K.softmax(x)
    cases["kernelkit layer_norm bwd op"] = lambda: norms.layer_norm_backward(g, x, w, mean, rstd)
    cases["kernelkit softmax bwd op"] = lambda: softmax.softmax_backward(g, y)
    cases.update(ladder(x, w, b, g))
    if args.profile:
        for _ in range(50):  # compiles and torch's lazy imports happen on first calls, not in the profile
            cases[args.profile]()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            cases[args.profile]()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    res = host_us(cases, n=args.batch)
    for name, (med, low) in res.items():
        print(f"{args.label:6s} {name:36s} median {med:7.2f} us  min {low:7.2f} us", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"label": args.label, "host_us": res}, fh, indent=1)


if __name__ == "__main__":
    main()
