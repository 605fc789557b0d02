"""softmax and cross_entropy over the last dim. CPU implementations are Rust (kernelkit-ops); the
CUDA kernels (kernels/softmax.cu) are registered once verified on a GPU."""

from __future__ import annotations

import torch

from kernelkit import _native
from kernelkit.library import Out, TensorSpec, like, op
from kernelkit.ops._runtime import FLOATS

_X = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N"))

softmax_backward = op(
    "kernelkit::softmax_backward(Tensor grad, Tensor y) -> Tensor",
    inputs={"grad": TensorSpec(same_dtype_as="y", contiguous=True, make_contiguous=True, shape=("*", "N")), "y": _X},
    output=like("y"),
    device="cpu",
)(lambda grad, y, gx: _native.cpu_softmax_bwd(grad, y, gx, y.shape[-1]) if y.numel() else None)


def _sm_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _sm_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return softmax_backward(grad, y)


_softmax = op(
    "kernelkit::softmax(Tensor x) -> Tensor",
    inputs={"x": _X},
    output=like("x"),
    backward=_sm_backward,
    setup_context=_sm_setup,
    device="cpu",
)(lambda x, y: _native.cpu_softmax_fwd(x, y, x.shape[-1]) if x.numel() else None)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim`` (rows of -inf give NaN, as in torch).

    >>> p = kernelkit.ops.softmax(scores, dim=-1)
    """
    if dim in (-1, x.dim() - 1):
        return _softmax(x)
    return _softmax(x.movedim(dim, -1)).movedim(-1, dim)


def _stat_dtype(**t) -> torch.dtype:
    return torch.float64 if t["logits"].dtype == torch.float64 else torch.float32


def _rows(**t):
    return (t["logits"].shape[0],)


_LOGITS = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, ndim=2)
_TARGET = TensorSpec(dtypes=(torch.int64,), contiguous=True, make_contiguous=True, ndim=1)


def _ce_bwd_cpu(logits, target, lse, row_scale, ignore_index, label_smoothing, grad):
    if logits.numel():
        _native.cpu_cross_entropy_bwd(
            logits, target, lse, row_scale, grad, logits.shape[1], ignore_index, label_smoothing
        )


cross_entropy_backward = op(
    "kernelkit::cross_entropy_backward(Tensor logits, Tensor target, Tensor lse, Tensor row_scale, "
    "int ignore_index, float label_smoothing) -> Tensor",
    inputs={
        "logits": _LOGITS,
        "target": _TARGET,
        "lse": TensorSpec(contiguous=True),
        "row_scale": TensorSpec(contiguous=True, make_contiguous=True),
    },
    output=like("logits"),
    device="cpu",
)(_ce_bwd_cpu)


def _ce_fwd_cpu(logits, target, ignore_index, label_smoothing, loss, lse):
    # The Rust kernel checks every target (and the row count) before writing anything; no torch-side
    # validation here, which on a GPU would cost a device synchronization.
    if logits.shape[0]:
        _native.cpu_cross_entropy_fwd(logits, target, loss, lse, logits.shape[1], ignore_index, label_smoothing)


def _ce_setup(ctx, inputs, output):
    logits, target, ignore_index, label_smoothing = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(logits, target, output[1])
    ctx.ignore_index, ctx.label_smoothing = ignore_index, label_smoothing


def _ce_backward(ctx, grad_loss, grad_lse):
    logits, target, lse = ctx.saved_tensors
    scale = grad_loss.to(lse.dtype).contiguous()
    grad = cross_entropy_backward(logits, target, lse, scale, ctx.ignore_index, ctx.label_smoothing)
    return grad, None, None, None


_cross_entropy = op(
    "kernelkit::cross_entropy(Tensor logits, Tensor target, int ignore_index=-100, float label_smoothing=0.0) "
    "-> (Tensor, Tensor)",
    inputs={"logits": _LOGITS, "target": _TARGET},
    output=(Out(shape=_rows, dtype=_stat_dtype), Out(shape=_rows, dtype=_stat_dtype)),
    backward=_ce_backward,
    setup_context=_ce_setup,
    device="cpu",
)(_ce_fwd_cpu)


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy of logits (N, C) or (..., C) against int64 targets, as torch.nn.functional.cross_entropy
    (ignore_index, reduction "mean" | "sum" | "none", label_smoothing). The per-row loss and log-sum-exp
    come from one pass; the gradient is written from them without materializing the softmax.

    >>> loss = kernelkit.ops.cross_entropy(logits.view(-1, vocab), labels.view(-1))
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"kernelkit::cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"kernelkit::cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    lead = logits.shape[:-1]
    loss, _ = _cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index, label_smoothing)
    if reduction == "none":
        return loss.reshape(lead).to(logits.dtype)
    if reduction == "sum":
        return loss.sum().to(logits.dtype)
    count = (target != ignore_index).sum()
    return (loss.sum() / count).to(logits.dtype)
