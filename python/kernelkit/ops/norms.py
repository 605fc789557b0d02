"""rms_norm, add_rms_norm and layer_norm over the last dim, with backward ops.

The registered ops return their saved statistics too (``rstd``, ``mean``) so that backward needs no
recomputation; the functions here return what a model uses. CPU implementations are Rust
(kernelkit-ops). The CUDA kernels (kernels/norms.cu) are registered once they are verified on a GPU:
until then a CUDA tensor raises torch's "no kernel for the CUDA backend" error.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from kernelkit import _native
from kernelkit.library import Out, TensorSpec, like, op
from kernelkit.ops._runtime import FLOATS

_X = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N"))
_W = TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("N",))


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _rows(**t):
    return tuple(t["x"].shape[:-1])


def _stat(**t):
    return _stat_dtype(t["x"])


_STAT = Out(shape=_rows, dtype=_stat)

# ---------------------------------------------------------------- rms_norm

rms_norm_backward = op(
    "kernelkit::rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "x": _X,
        "weight": _W,
        "rstd": TensorSpec(contiguous=True),
    },
    output=(like("x"), like("weight")),
    device="cpu",
)(lambda grad, x, weight, rstd, gx, gw: _native.cpu_rms_norm_bwd(grad, x, weight, rstd, gx, gw))


def _rms_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(inputs[0], inputs[1], output[1])


def _rms_backward(ctx, grad_y, grad_rstd):
    x, w, rstd = ctx.saved_tensors
    gx, gw = rms_norm_backward(grad_y, x, w, rstd)
    return gx, gw, None


_rms_norm = op(
    "kernelkit::rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> (Tensor, Tensor)",
    inputs={"x": _X, "weight": _W},
    output=(like("x"), _STAT),
    backward=_rms_backward,
    setup_context=_rms_setup,
    device="cpu",
)(lambda x, weight, eps, y, rstd: _native.cpu_rms_norm_fwd(x, weight, y, rstd, eps))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim, as Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x²) + eps) * weight,
    computed in float32 (float64 for float64) and rounded once.

    >>> y = kernelkit.ops.rms_norm(x, weight, 1e-6)
    """
    return _rms_norm(x, weight, eps)[0]


# ---------------------------------------------------------------- add_rms_norm

add_rms_norm_backward = op(
    "kernelkit::add_rms_norm_backward(Tensor grad, Tensor grad_residual, Tensor new_residual, Tensor weight, "
    "Tensor rstd) -> (Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N")),
        "grad_residual": TensorSpec(same_dtype_as="grad", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "new_residual": TensorSpec(same_dtype_as="grad", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "weight": TensorSpec(same_dtype_as="grad", contiguous=True, make_contiguous=True, shape=("N",)),
        "rstd": TensorSpec(contiguous=True),
    },
    output=(like("new_residual"), like("weight")),
    device="cpu",
)(lambda g, gr, h, w, rstd, gh, gw: _native.cpu_add_rms_norm_bwd(g, gr, h, w, rstd, gh, gw))


def _add_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(output[1], inputs[2], output[2])


def _add_backward(ctx, grad_y, grad_residual, grad_rstd):
    h, w, rstd = ctx.saved_tensors
    if grad_residual is None:
        grad_residual = torch.zeros_like(h)
    gh, gw = add_rms_norm_backward(grad_y, grad_residual, h, w, rstd)
    return gh, gh, gw, None


_add_rms_norm = op(
    "kernelkit::add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6) -> (Tensor, Tensor, Tensor)",
    inputs={
        "x": _X,
        "residual": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "weight": _W,
    },
    output=(like("x"), like("x"), _STAT),
    backward=_add_backward,
    setup_context=_add_setup,
    device="cpu",
)(lambda x, res, w, eps, y, h, rstd: _native.cpu_add_rms_norm_fwd(x, res, w, y, h, rstd, eps))


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm in one pass: returns (rms_norm(x + residual), x + residual).

    >>> normed, residual = kernelkit.ops.add_rms_norm(hidden, residual, weight, 1e-6)
    """
    y, h, _ = _add_rms_norm(x, residual, weight, eps)
    return y, h


# ---------------------------------------------------------------- layer_norm

layer_norm_backward = op(
    "kernelkit::layer_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor mean, Tensor rstd) "
    "-> (Tensor, Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "x": _X,
        "weight": _W,
        "mean": TensorSpec(contiguous=True),
        "rstd": TensorSpec(contiguous=True),
    },
    output=(like("x"), like("weight"), like("weight")),
    device="cpu",
)(lambda g, x, w, m, r, gx, gw, gb: _native.cpu_layer_norm_bwd(g, x, w, m, r, gx, gw, gb))


def _ln_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(inputs[0], inputs[1], output[1], output[2])


def _ln_backward(ctx, grad_y, grad_mean, grad_rstd):
    x, w, mean, rstd = ctx.saved_tensors
    gx, gw, gb = layer_norm_backward(grad_y, x, w, mean, rstd)
    return gx, gw, gb, None


_layer_norm = op(
    "kernelkit::layer_norm(Tensor x, Tensor weight, Tensor bias, float eps=1e-5) -> (Tensor, Tensor, Tensor)",
    inputs={"x": _X, "weight": _W, "bias": _W},
    output=(like("x"), _STAT, _STAT),
    backward=_ln_backward,
    setup_context=_ln_setup,
    device="cpu",
)(lambda x, w, b, eps, y, mean, rstd: _native.cpu_layer_norm_fwd(x, w, b, y, mean, rstd, eps))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim with affine weight and bias (a missing bias is zeros).

    >>> y = kernelkit.ops.layer_norm(x, weight, bias, 1e-5)
    """
    if bias is None:
        bias = torch.zeros_like(weight)
    return _layer_norm(x, weight, bias, eps)[0]
