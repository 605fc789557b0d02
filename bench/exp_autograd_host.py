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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cpu: check the script (host_us then waits on no GPU)")
    ap.add_argument("--size", default="64x256", help="ROWSxCOLS")
    ap.add_argument("--ops", nargs="*", help="the ops to time (default: all)")
    ap.add_argument("--profile", help="a case to profile, e.g. 'kernelkit layer_norm bwd'")
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
    res = host_us(cases)
    for name, (med, low) in res.items():
        print(f"{args.label:6s} {name:36s} median {med:7.2f} us  min {low:7.2f} us", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"label": args.label, "host_us": res}, fh, indent=1)


if __name__ == "__main__":
    main()
