"""Experiment: where the host time of an op's forward + ``torch.autograd.grad`` goes, part by part.

kernelkit's cross_entropy_fwd_bwd at 32768 x 256 took 60-125 us more host time per call than torch eager's on the
H200 hosts (h200-2026-11-27-s36/llm-ce-final*.json). Per call, host clock, cases interleaved in rounds
(exp_host_calls.host_us: median and min over batches):

- whole calls: forward + grad, forward alone (its graph dropped), the forward under no_grad;
- the same through ``torch._C._FunctionBase.apply`` instead of ``Function.apply`` (torch's Python wrapper around it,
  where the installed torch has one);
- our Function's forward and backward bodies called with a stand-in ctx: checks, allocations, launches and the
  ctx bookkeeping, without the autograd engine;
- floors: a Python Function that launches one small torch op each way, and torch's engine on one C++ node.

    python3 bench/exp_autograd_parts.py --out autograd-parts.json

H200 host (h200-2026-11-27-s37/autograd-parts.log, median us per call): bf16 32768 x 256 forward + grad torch 126.9,
kernelkit 159.1; forward torch 18.6, kernelkit 34.0 (no_grad 23.0; the forward body with a stand-in ctx 21.1, the
backward body 20.9). Floors: a Python Function with one small op each way 124.7 (121.0 through _FunctionBase.apply),
torch's engine on one C++ node 71.1, one torch op 9.6. The kernelkit rows "C apply" time the swap's own context
manager too (slower than shipped); the floor rows compare the two applies cleanly.
"""

from __future__ import annotations

import argparse
import importlib
import json

import torch
import torch.nn.functional as F
from exp_ce_autograd_host import Twice  # the Python Function floor: one small op each way
from exp_host_calls import host_us

import kernelkit.ops as K

sm = importlib.import_module("kernelkit.ops.softmax")  # kernelkit.ops.softmax is also the op's name

_C_APPLY = torch._C._FunctionBase.__dict__["apply"]


class StandInCtx:
    """Enough of an autograd ctx for the op's forward and backward bodies."""

    def mark_non_differentiable(self, *ts):
        pass

    def save_for_backward(self, *ts):
        self.saved_tensors = ts


def function_of(kop) -> type:
    """The autograd.Function class behind a KernelOp's eager CUDA path."""
    return kop._fast.__globals__["grad_cuda"].__self__


def with_c_apply(kop):
    """Run ``fn`` with the KernelOp's eager path calling _FunctionBase.apply directly."""
    scope = kop._fast.__globals__
    shipped = scope["grad_cuda"]
    fast = _C_APPLY.__get__(None, function_of(kop))

    class Swap:
        def __enter__(self):
            scope["grad_cuda"] = fast

        def __exit__(self, *exc):
            scope["grad_cuda"] = shipped

    return Swap()


def cases_for(dtype: torch.dtype, cols: int) -> dict:
    x = torch.randn(32768, cols, device="cuda", dtype=dtype, requires_grad=True)
    t = torch.randint(0, cols, (32768,), device="cuda")
    kop = sm._cross_entropy_reduced
    fn = function_of(kop)
    args = (x, t, -100, 0.0, True, None, None)

    def forward_body():
        ctx = StandInCtx()
        fn.forward(ctx, *args)
        return ctx

    ctx0 = forward_body()
    one = torch.ones((), device="cuda", dtype=dtype)

    def backward_body():
        ctx = StandInCtx()
        ctx.saved_tensors, ctx.ignore_index, ctx.label_smoothing = ctx0.saved_tensors, -100, 0.0
        ctx.held_grad = getattr(ctx0, "held_grad", None)
        if ctx.held_grad is not None:  # the held path rewrites nothing at a gradient of 1
            ctx.held_grad = torch.empty_like(x)
        fn.backward(ctx, one, None, None)

    def kk_both_c():
        with with_c_apply(kop):
            torch.autograd.grad(K.cross_entropy(x, t), x)

    def kk_fwd_c():
        with with_c_apply(kop):
            K.cross_entropy(x, t)

    def nograd():
        with torch.no_grad():
            K.cross_entropy(x, t)

    return {
        "torch fwd+grad": lambda: torch.autograd.grad(F.cross_entropy(x, t), x),
        "kk fwd+grad": lambda: torch.autograd.grad(K.cross_entropy(x, t), x),
        "kk fwd+grad, C apply": kk_both_c,
        "torch fwd": lambda: F.cross_entropy(x, t),
        "kk fwd": lambda: K.cross_entropy(x, t),
        "kk fwd, C apply": kk_fwd_c,
        "kk fwd no_grad": nograd,
        "kk forward body": forward_body,
        "kk backward body": backward_body,
    }


def floors() -> dict:
    small = torch.randn(1024, device="cuda", requires_grad=True)
    capply = _C_APPLY.__get__(None, Twice)
    return {
        "Function floor fwd+grad": lambda: torch.autograd.grad(Twice.apply(small).sum(), small),
        "Function floor fwd+grad, C apply": lambda: torch.autograd.grad(capply(small).sum(), small),
        "C++ node floor fwd+grad": lambda: torch.autograd.grad(small.sum(), small),
        "one torch op (x * 2)": lambda: small * 2,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    a = p.parse_args()
    report = {"floors": host_us(floors())}
    for dtype, cols in ((torch.bfloat16, 256), (torch.float32, 256), (torch.bfloat16, 4096)):
        report[f"{str(dtype)[6:]} 32768x{cols}"] = host_us(cases_for(dtype, cols), rounds=20, n=100)
    for group, rows in report.items():
        print(group)
        for name, (med, low) in rows.items():
            print(f"  {name:36s} {med:8.1f} us (min {low:.1f})")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
