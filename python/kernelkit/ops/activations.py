"""swiglu and rope (rotary position embedding). CUDA kernels: kernels/activations.cu; CPU
implementations: Rust (kernelkit-ops)."""

from __future__ import annotations

import functools
import struct
from typing import Tuple

import torch

from kernelkit import _native
from kernelkit.jit import Kernel
from kernelkit.library import TensorSpec, like, op
from kernelkit.ops._runtime import CTYPE, FLOATS, VEC, cdiv, kernel, low_dram_bandwidth

# Launch shapes, measured with bench/sweep_llm.py on an H200 at 32768 x 4096 and 8192: one pass over the data
# (the kernels grid-stride, so any grid is correct; grids capped at 4 waves were 2-8% slower); swiglu in
# 256-thread blocks of 2 packs per thread and tensor for the 16-bit forward, else 1; rope in 128-thread blocks
# of 2 items per thread at 56 registers (against 64: 0.5-1.6% faster in every case measured, session 10; one item
# 10% slower, h200-2026-11-22-s10/sweep_llm-rope.log). Below _runtime.LOW_DRAM_GBPS_PER_SM rope takes one item per
# thread: on an H100 1.0-1.5% faster than two at 32768 x 4096 and x 8192, both dtypes and directions, ahead of
# torch.compile (h100-2026-11-27-s40/sweep_llm-rope-softmax.log: bf16 forward 365.6 -> 360.6 us, 720.5 -> 710.0).


@functools.cache
def _swiglu_shape(name: str, dtype: torch.dtype) -> Tuple[Kernel, int, int]:
    """(kernel, block, elements per block)."""
    packs = 2 if name == "kk_swiglu_fwd" and dtype.itemsize == 2 else 1  # the kernels' U
    return kernel("activations", f"{name}<{CTYPE[dtype]}, {packs}>"), 256, 256 * VEC[dtype] * packs


@functools.cache
def _rope_shape(dtype: torch.dtype, backward: bool, dev: int) -> Tuple[Kernel, int, int]:
    """(kernel, block, items per block) on device ``dev``."""
    items = 1 if low_dram_bandwidth(dev) else 2
    return kernel("activations", f"kk_rope<{CTYPE[dtype]}, {int(backward)}, {items}>"), 128, 128 * items


def _launch_swiglu(name: str, args: tuple, x: torch.Tensor) -> None:
    n = x.numel()
    if n == 0:
        return
    k, block, per_block = _swiglu_shape(name, x.dtype)
    k.launch(cdiv(n, per_block), block, (*args, n))


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
)(lambda grad, gate, up, gg, gu: _launch_swiglu("kk_swiglu_bwd", (grad, gate, up, gg, gu), gate))


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
)(lambda gate, up, out: _launch_swiglu("kk_swiglu_fwd", (gate, up, out), gate))
swiglu.__doc__ = """silu(gate) * up in one pass (the Llama MLP activation).

>>> h = kernelkit.ops.swiglu(gate_proj(x), up_proj(x))
"""

# q and k: (batch, heads, seq, head_dim) with any strides but a contiguous last dim, e.g. Hugging Face's
# .view(b, s, h, d).transpose(1, 2) projections: the kernel takes their strides, so nothing is copied. The
# outputs get the inputs' layout (torch.empty_like), as q * cos + rotate_half(q) * sin does.
_Q = TensorSpec(dtypes=FLOATS, last_dim_contiguous=True, make_contiguous=True, shape=("B", "Hq", "S", "D"))
_K = TensorSpec(same_dtype_as="q", last_dim_contiguous=True, make_contiguous=True, shape=("B", "Hk", "S", "D"))
_COS = TensorSpec(same_dtype_as="q", contiguous=True, make_contiguous=True)
_ROPE_STRIDES = struct.Struct("<16q")  # kk_act::RopeStrides in kernels/activations.cu


def _rope_geometry(q, k, cos, sin) -> Tuple[int, int, int, int, int, int]:
    """(batch, q heads, k heads, seq, dim, batch stride of the cos/sin tables: 0 when they broadcast).
    The op's spec has already checked that q and k share batch, seq and dim."""
    b, hq, s, d = q.shape
    hk = k.shape[1]
    if d % 2:
        raise ValueError(f"kernelkit::rope: arguments 'q' and 'k' must have an even last dim, got {d}")
    if s == 0 or d == 0:
        return b, hq, hk, s, d, 0
    # Shape comparisons only (a reshape costs about 1 us of the host's time per call).
    cs = cos.shape
    n = len(cs)
    tb = cs[0] if n > 2 else 1
    if sin.shape != cs or cs[-2:] != (s, d) or n > 4 or tb not in (1, b) or (n == 4 and cs[1] != 1):
        raise ValueError(
            f"kernelkit::rope: cos/sin must be (seq, dim), (1 or batch, seq, dim) or (1 or batch, 1, seq, dim) "
            f"matching q {tuple(q.shape)}, got cos {tuple(cos.shape)} and sin {tuple(sin.shape)}"
        )
    return b, hq, hk, s, d, s * d if tb == b and b > 1 else 0


def _rope_cpu(q, k, cos, sin, backward, out_q, out_k):
    b, hq, hk, s, d, stride = _rope_geometry(q, k, cos, sin)
    # The Rust kernel takes contiguous tensors: strided inputs are copied, strided outputs written through one.
    for x, out, h in ((q, out_q, hq), (k, out_k, hk)):
        if x.numel():
            dst = out if out.is_contiguous() else torch.empty(x.shape, dtype=x.dtype, device=x.device)
            _native.cpu_rope(x.contiguous(), cos, sin, dst, (b, h, s, d), stride, backward)
            if dst is not out:
                out.copy_(dst)


def _rope_cuda(q, k, cos, sin, backward, out_q, out_k):
    b, hq, hk, s, d, stride = _rope_geometry(q, k, cos, sin)
    if b * (hq + hk) * s * d == 0:
        return
    oqs, oks = out_q.stride(), out_k.stride()
    if oqs[3] != 1 or oks[3] != 1:
        # empty_like lays out the output of an overlapping input (a 0 stride) densely, which in corner cases
        # may leave its last dim strided: run into contiguous outputs and copy (never for dense inputs).
        tq, tk = (
            torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
        )
        _rope_cuda(q, k, cos, sin, backward, tq, tk)
        out_q.copy_(tq)
        out_k.copy_(tk)
        return
    qs, ks = q.stride(), k.stride()
    dt = q.dtype
    # One item is a pack of VEC column pairs (x[i], x[i + d/2]). The grid assumes the vector path when dim and
    # the table stride allow it (any grid is correct: the kernel grid-strides).
    vec = VEC[dt] if (d // 2) % VEC[dt] == 0 and stride % VEC[dt] == 0 else 1
    items = b * (hq + hk) * s * (d // 2) // vec
    kern, block, per_block = _rope_shape(dt, bool(backward), cos.get_device())
    # Rows heads-inner when the heads (of the tensor with more of them) are closer together in memory than the
    # positions, as in Hugging Face's layout; seq-inner for contiguous tensors.
    xs = qs if hq >= hk else ks
    heads_inner = int(xs[1] < xs[2])
    strides = _ROPE_STRIDES.pack(*qs, *ks, *oqs, *oks)
    # q, k and the outputs may be strided: raw pointers (Kernel.launch takes contiguous tensors only); the
    # contiguous cos gives the launch its device.
    args = (q.data_ptr(), k.data_ptr(), cos, sin, out_q.data_ptr(), out_k.data_ptr())
    kern.launch(cdiv(items, per_block), block, (*args, b, hq, hk, s, d, stride, heads_inner, strides))


def _rope_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[2], inputs[3])
    ctx.backward = inputs[4]


def _rope_backward(ctx, grad_q, grad_k):
    # rope is linear in (q, k): its backward is the transposed rotation (backward=True), and the backward of
    # that is rope itself. A grad autograd has no value for (an output that reached no loss) arrives as zeros.
    cos, sin = ctx.saved_tensors
    gq, gk = _rope(grad_q, grad_k, cos, sin, not ctx.backward)
    return gq, gk, None, None, None


_rope = op(
    "kernelkit::rope(Tensor q, Tensor k, Tensor cos, Tensor sin, bool backward=False) -> (Tensor, Tensor)",
    inputs={"q": _Q, "k": _K, "cos": _COS, "sin": _COS},
    output=(like("q"), like("k")),
    backward=_rope_backward,
    setup_context=_rope_setup,
    cpu=_rope_cpu,
)(_rope_cuda)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding with Hugging Face's apply_rotary_pos_emb semantics: q and k are
    (batch, heads, seq, head_dim) (their head counts may differ, as with grouped-query attention; any strides
    with a contiguous last dim, such as Hugging Face's transposed projections, are read in place); cos and sin
    are (batch, seq, head_dim) (or (seq, head_dim)). One kernel launch rotates both. The outputs have the
    layout of q and k.

    >>> q, k = kernelkit.ops.rope(q, k, cos, sin)
    """
    return _rope(q, k, cos, sin)
