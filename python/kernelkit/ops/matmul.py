"""matmul: the 2-D matrix product from a shared-memory tiled, register-blocked kernel."""

from __future__ import annotations

import torch

from kernelkit import _native
from kernelkit.library import Out, TensorSpec, op
from kernelkit.ops._runtime import CTYPE, FLOATS, cdiv, kernel

_MAX_GRID_Y = 65535


def _matmul_cuda(a, b, out):
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        out.zero_()
        return
    tile = 64 if a.dtype == torch.float64 else 128
    grid = (cdiv(n, tile), cdiv(m, tile))
    if grid[1] > _MAX_GRID_Y:
        raise ValueError(f"kernelkit::matmul: argument 'a' has {m} rows; at most {_MAX_GRID_Y * tile} are supported")
    kernel("matmul", f"kk_matmul<{CTYPE[a.dtype]}>").launch(grid, 256, (a, b, out, m, n, k))


def _matmul_cpu(a, b, out):
    if out.numel():
        _native.cpu_matmul(a, b, out)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    # cuBLAS is faster than any hand-tiled kernel for these; the op's own kernel is the forward.
    ga = grad @ b.t() if ctx.needs_input_grad[0] else None
    gb = a.t() @ grad if ctx.needs_input_grad[1] else None
    return ga, gb


matmul = op(
    "kernelkit::matmul(Tensor a, Tensor b) -> Tensor",
    inputs={
        "a": TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("M", "K")),
        "b": TensorSpec(same_dtype_as="a", contiguous=True, make_contiguous=True, shape=("K", "N")),
    },
    output=Out(shape=lambda a, b: (a.shape[0], b.shape[1]), dtype="a"),
    backward=_backward,
    setup_context=_setup,
    cpu=_matmul_cpu,
)(_matmul_cuda)
matmul.__doc__ = """a @ b for 2-D a (M, K) and b (K, N), any sizes; 16-bit types accumulate in float32.

>>> c = kernelkit.ops.matmul(a, b)
"""
