"""swiglu and rope (rotary position embedding). CUDA kernels: kernels/activations.cu; CPU
implementations: Rust (kernelkit-ops)."""

from __future__ import annotations

import functools
from typing import Tuple

import torch

from kernelkit import _native
from kernelkit.library import TensorSpec, like, op
from kernelkit.ops._runtime import BLOCK, CTYPE, FLOATS, VEC, cdiv, kernel, resident_blocks


@functools.cache
def _grid_shape(expr: str, dev: int, items_per_block: int):
    """(kernel, items per block, grid cap) of a grid-stride kernel: at most four waves of blocks."""
    k = kernel("activations", expr)
    return k, items_per_block, 4 * resident_blocks(k, BLOCK, dev)


def _launch_swiglu(name: str, unroll: int, args: tuple, x: torch.Tensor) -> None:
    n = x.numel()
    if n == 0:
        return
    dt = x.dtype
    per_thread = 1 if dt == torch.float64 else VEC[dt] * unroll
    k, per_block, cap = _grid_shape(f"{name}<{CTYPE[dt]}>", x.get_device(), BLOCK * per_thread)
    k.launch(min(cdiv(n, per_block), cap), BLOCK, (*args, n))


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
    cpu=lambda grad, gate, up, gg, gu: _native.cpu_swiglu_bwd(grad, gate, up, gg, gu),
)(lambda grad, gate, up, gg, gu: _launch_swiglu("kk_swiglu_bwd", 2, (grad, gate, up, gg, gu), gate))


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
    cpu=lambda gate, up, out: _native.cpu_swiglu_fwd(gate, up, out),
)(lambda gate, up, out: _launch_swiglu("kk_swiglu_fwd", 4, (gate, up, out), gate))
swiglu.__doc__ = """silu(gate) * up in one pass (the Llama MLP activation).

>>> h = kernelkit.ops.swiglu(gate_proj(x), up_proj(x))
"""

_COS = TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True)


def _rope_geometry(x, cos, sin) -> Tuple[int, int, int, int, int]:
    """(batch, heads, seq, dim, batch stride of the cos/sin tables: 0 when they broadcast)."""
    b, h, s, d = x.shape
    if d % 2:
        raise ValueError(f"kernelkit::rope: argument 'x' must have an even last dim, got {d}")
    if s == 0 or d == 0:
        return b, h, s, d, 0
    table = cos.reshape(-1, s, d)
    if table.shape[0] not in (1, b) or sin.shape != cos.shape:
        raise ValueError(
            f"kernelkit::rope: cos/sin must be (seq, dim), (1 or batch, seq, dim) or (1 or batch, 1, seq, dim) "
            f"matching x {tuple(x.shape)}, got cos {tuple(cos.shape)} and sin {tuple(sin.shape)}"
        )
    return b, h, s, d, s * d if table.shape[0] == b and b > 1 else 0


def _rope_cpu(x, cos, sin, backward, out):
    b, h, s, d, stride = _rope_geometry(x, cos, sin)
    if x.numel():
        _native.cpu_rope(x, cos, sin, out, (b, h, s, d), stride, backward)


def _rope_cuda(x, cos, sin, backward, out):
    b, h, s, d, stride = _rope_geometry(x, cos, sin)
    if x.numel() == 0:
        return
    dt = x.dtype
    # One item is a pack of VEC column pairs (x[i], x[i + d/2]); two items per thread.
    vec = VEC[dt] if (d // 2) % VEC[dt] == 0 and stride % VEC[dt] == 0 else 1
    items = b * h * s * (d // 2) // vec
    k, per_block, cap = _grid_shape(f"kk_rope<{CTYPE[dt]}, {int(backward)}>", x.get_device(), BLOCK * 2)
    k.launch(min(cdiv(items, per_block), cap), BLOCK, (x, cos, sin, out, b, h, s, d, stride))


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
    cpu=_rope_cpu,
)(_rope_cuda)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding with Hugging Face's apply_rotary_pos_emb semantics: q and k are
    (batch, heads, seq, head_dim); cos and sin are (batch, seq, head_dim) (or (seq, head_dim)).

    >>> q, k = kernelkit.ops.rope(q, k, cos, sin)
    """
    return _rope(q, cos, sin, False), _rope(k, cos, sin, False)
