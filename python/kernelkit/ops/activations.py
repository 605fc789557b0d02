"""swiglu and rope (rotary position embedding). CPU implementations are Rust (kernelkit-ops); the
CUDA kernels (kernels/activations.cu) are registered once verified on a GPU."""

from __future__ import annotations

from typing import Tuple

import torch

from kernelkit import _native
from kernelkit.library import TensorSpec, like, op
from kernelkit.ops._runtime import FLOATS

_GATE = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N"))
_SAME = TensorSpec(same_dtype_as="gate", contiguous=True, make_contiguous=True, shape=("*", "N"))

swiglu_backward = op(
    "kernelkit::swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(same_dtype_as="gate", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "gate": _GATE,
        "up": _SAME,
    },
    output=(like("gate"), like("up")),
    device="cpu",
)(lambda grad, gate, up, gg, gu: _native.cpu_swiglu_bwd(grad, gate, up, gg, gu))


def _sw_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _sw_backward(ctx, grad):
    gate, up = ctx.saved_tensors
    return swiglu_backward(grad, gate, up)


swiglu = op(
    "kernelkit::swiglu(Tensor gate, Tensor up) -> Tensor",
    inputs={"gate": _GATE, "up": _SAME},
    output=like("gate"),
    backward=_sw_backward,
    setup_context=_sw_setup,
    device="cpu",
)(lambda gate, up, out: _native.cpu_swiglu_fwd(gate, up, out))
swiglu.__doc__ = """silu(gate) * up in one pass (the Llama MLP activation).

>>> h = kernelkit.ops.swiglu(gate_proj(x), up_proj(x))
"""

_COS = TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True)


def _rope_cpu(x, cos, sin, backward, out):
    b, h, s, d = x.shape
    if d % 2:
        raise ValueError(f"kernelkit::rope: argument 'x' must have an even last dim, got {d}")
    table = cos.reshape(-1, s, d)
    if table.shape[0] not in (1, b) or sin.shape != cos.shape:
        raise ValueError(
            f"kernelkit::rope: cos/sin must be (seq, dim), (1 or batch, seq, dim) or (1 or batch, 1, seq, dim) "
            f"matching x {tuple(x.shape)}, got cos {tuple(cos.shape)} and sin {tuple(sin.shape)}"
        )
    stride = s * d if table.shape[0] == b and b > 1 else 0
    if x.numel():
        _native.cpu_rope(x, cos, sin, out, (b, h, s, d), stride, backward)


def _rope_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1], inputs[2])


def _rope_backward(ctx, grad):
    cos, sin = ctx.saved_tensors
    return _rope(grad, cos, sin, True), None, None, None


_rope = op(
    "kernelkit::rope(Tensor x, Tensor cos, Tensor sin, bool backward=False) -> Tensor",
    inputs={"x": TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, ndim=4), "cos": _COS, "sin": _COS},
    output=like("x"),
    backward=_rope_backward,
    setup_context=_rope_setup,
    device="cpu",
)(_rope_cpu)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding with Hugging Face's apply_rotary_pos_emb semantics: q and k are
    (batch, heads, seq, head_dim); cos and sin are (batch, seq, head_dim) (or (seq, head_dim)).

    >>> q, k = kernelkit.ops.rope(q, k, cos, sin)
    """
    return _rope(q, cos, sin, False), _rope(k, cos, sin, False)
