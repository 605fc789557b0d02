"""add, mul, muladd and scale_: elementwise ops with broadcasting, on CUDA and CPU."""

from __future__ import annotations

import torch

from kernelkit import _native
from kernelkit.library import TensorSpec, broadcast, op
from kernelkit.ops._runtime import (
    BLOCK,
    CTYPE,
    FLOATS,
    MAX_DIMS,
    VEC,
    cdiv,
    flat_grid,
    kernel,
    strided_arg,
)

_SPEC = TensorSpec(dtypes=FLOATS)
_SAME = TensorSpec(same_dtype_as="a")


def _launch(name: str, inputs, out) -> None:
    n = out.numel()
    if n == 0:
        return
    shape = out.shape
    for t in inputs:
        if t.shape != shape or not t.is_contiguous():
            break
    else:
        # The hot path: kernel and grid inline, every Python call here costs host time.
        key = (name, out.dtype)
        k, per_block = _KERNELS.get(key) or _KERNELS.setdefault(key, _flat_kernel(name, out.dtype))
        k.launch((n + per_block - 1) // per_block, BLOCK, (*inputs, out, n))  # flat_grid, inlined
        return
    if len(shape) > MAX_DIMS:
        _launch(name, [t.expand(shape).contiguous() for t in inputs], out)
        return
    # Strided operands go as raw pointers (Kernel.launch only takes contiguous tensors); the op's
    # generated checks have already put them on out's device, and their strides travel in kk::Strided.
    k = kernel("elementwise", f"kk_{name}_strided<{CTYPE[out.dtype]}>")
    ptrs = tuple(t.data_ptr() for t in inputs)
    k.launch(cdiv(n, BLOCK * 4), BLOCK, (*ptrs, out, n, strided_arg(shape, inputs)))


_KERNELS: dict = {}


def _flat_kernel(name: str, dtype: torch.dtype) -> tuple:
    """(kk_add/kk_mul/kk_muladd kernel, elements per block): one pack per input and thread, 16 bytes except float32
    muladd's 8 (kernels/elementwise.cu kEwVec)."""
    vec = VEC[dtype] // 2 if (name, dtype) == ("muladd", torch.float32) else VEC[dtype]
    return kernel("elementwise", f"kk_{name}<{CTYPE[dtype]}>"), vec * BLOCK


# kk_scale_ takes 8 packs per thread.
_SCALE_PACKS = 8


def _cpu(name: str, inputs, out) -> None:
    if out.numel() == 0:
        return
    dense = [t if t.shape == out.shape and t.is_contiguous() else t.expand(out.shape).contiguous() for t in inputs]
    getattr(_native, f"cpu_{name}")(*dense, out)


def _sum_to(grad: torch.Tensor, shape) -> torch.Tensor:
    return grad if grad.shape == shape else grad.sum_to_size(shape)


def _save_ab(ctx, inputs, output):
    a, b = inputs[0], inputs[1]
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)
    ctx.shapes = (a.shape, b.shape)


def _add_backward(ctx, grad):
    return _sum_to(grad, ctx.shapes[0]), _sum_to(grad, ctx.shapes[1])


def _mul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    ga = _sum_to(grad * b, ctx.shapes[0]) if ctx.needs_input_grad[0] else None
    gb = _sum_to(grad * a, ctx.shapes[1]) if ctx.needs_input_grad[1] else None
    return ga, gb


def _muladd_setup(ctx, inputs, output):
    _save_ab(ctx, inputs, output)
    ctx.c_shape = inputs[2].shape


def _muladd_backward(ctx, grad):
    ga, gb = _mul_backward(ctx, grad)
    return ga, gb, _sum_to(grad, ctx.c_shape)


@op(
    "kernelkit::add(Tensor a, Tensor b) -> Tensor",
    inputs={"a": _SPEC, "b": _SAME},
    output=broadcast("a", "b"),
    backward=_add_backward,
    setup_context=_save_ab,
    cpu=lambda a, b, out: _cpu("add", (a, b), out),
)
def add(a, b, out):
    """a + b, broadcasting as torch does (same dtype, no promotion).

    >>> kernelkit.ops.add(torch.randn(4, 8, device="cuda"), torch.randn(8, device="cuda"))
    """
    _launch("add", (a, b), out)


@op(
    "kernelkit::mul(Tensor a, Tensor b) -> Tensor",
    inputs={"a": _SPEC, "b": _SAME},
    output=broadcast("a", "b"),
    backward=_mul_backward,
    setup_context=_save_ab,
    cpu=lambda a, b, out: _cpu("mul", (a, b), out),
)
def mul(a, b, out):
    """a * b, broadcasting as torch does (same dtype, no promotion).

    >>> kernelkit.ops.mul(x, y)
    """
    _launch("mul", (a, b), out)


@op(
    "kernelkit::muladd(Tensor a, Tensor b, Tensor c) -> Tensor",
    inputs={"a": _SPEC, "b": _SAME, "c": TensorSpec(same_dtype_as="a")},
    output=broadcast("a", "b", "c"),
    backward=_muladd_backward,
    setup_context=_muladd_setup,
    cpu=lambda a, b, c, out: _cpu("muladd", (a, b, c), out),
)
def muladd(a, b, c, out):
    """a * b + c in one pass (16-bit types compute in float32 and round once), with broadcasting.

    >>> kernelkit.ops.muladd(a, b, c)
    """
    _launch("muladd", (a, b, c), out)


def _scale_cuda(x, s):
    n = x.numel()
    if n == 0:
        return
    ctype = CTYPE[x.dtype]
    if x.is_contiguous():
        kernel("elementwise", f"kk_scale_<{ctype}>").launch(flat_grid(n, x.dtype, _SCALE_PACKS), BLOCK, (x, s, n))
    elif x.dim() <= MAX_DIMS and 0 not in x.stride():
        with torch.cuda.device(x.device):  # no tensor argument to take the device from
            args = (x.data_ptr(), s, n, strided_arg(x.shape, (x,)))
            kernel("elementwise", f"kk_scale_strided_<{ctype}>").launch(cdiv(n, BLOCK * 4), BLOCK, args)
    else:
        raise ValueError("kernelkit::scale_: argument 'x' has more than 8 dims or overlapping elements (a 0 stride)")


def _scale_cpu(x, s):
    if x.numel() == 0:
        return
    if x.is_contiguous():
        _native.cpu_scale_(x, float(s))
    else:
        x.copy_(x * s)


_scale = op(
    "kernelkit::scale_(Tensor(a!) x, float s) -> ()",
    inputs={"x": _SPEC},
    cpu=_scale_cpu,
)(_scale_cuda)


def scale_(x: torch.Tensor, s: float) -> torch.Tensor:
    """x *= s in place; returns x.

    Under autograd (x requires grad with grad mode on), this defers to torch's in-place mul_, which
    records the in-place update; otherwise it runs kernelkit's kernel.

    >>> kernelkit.ops.scale_(x, 0.5)
    """
    if x.requires_grad and torch.is_grad_enabled():
        return x.mul_(s)
    _scale(x, s)
    return x
