"""bias_gelu: GELU(x + bias) with bias over the last dim, forward and fused backward."""

from __future__ import annotations

import functools

import torch

from kernelkit import _native
from kernelkit.library import TensorSpec, like, op
from kernelkit.ops._runtime import BLOCK, CTYPE, FLOATS, VEC, acc_dtype, cdiv, kernel, resident_blocks, tickets

_APPROX = {"tanh": 1, "none": 0}
_X = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N"))
_BIAS = TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("N",))


def _approx(approximate: str) -> int:
    try:
        return _APPROX[approximate]
    except KeyError:
        raise ValueError(f"kernelkit::bias_gelu: approximate must be 'tanh' or 'none', got {approximate!r}") from None


def _forward_cuda(x, bias, approximate, out):
    mode = _approx(approximate)
    n = x.numel()
    if n == 0:
        return
    cols = bias.numel()
    k, per_block, cap = _forward_shape(x.dtype, mode, x.get_device())
    k.launch(min(cdiv(n, per_block), cap), _FWD_BLOCK, (x, bias, out, n // cols, cols))


_FWD_BLOCK = 128
# Elements per 16-byte pack as the kernels take them (kGeluVec in kernels/gelu.cu): double loads scalars.
_GELU_VEC = {dt: 1 if dt == torch.float64 else VEC[dt] for dt in FLOATS}


@functools.cache
def _forward_shape(dtype: torch.dtype, mode: int, dev: int):
    """(kernel, elements per block and pass, grid cap) of the forward's 128-thread blocks (bench/exp_gelu_fits.py):
    each thread takes kGeluFwdPacks packs of kGeluVec elements (kernels/gelu.cu), on one pass of blocks, except the
    16-bit erf form, whose blocks loop over at most 8 waves."""
    k = kernel("gelu", f"kk_bias_gelu_fwd<{CTYPE[dtype]}, {mode}>")
    packs = 4 if dtype.itemsize == 2 and mode == 1 else 2
    cap = 8 * resident_blocks(k, _FWD_BLOCK, dev) if dtype.itemsize == 2 and mode == 0 else 1 << 62
    return k, packs * _GELU_VEC[dtype] * _FWD_BLOCK, cap


def _forward_cpu(x, bias, approximate, out):
    mode = _approx(approximate)
    if x.numel():
        _native.cpu_bias_gelu_fwd(x, bias, out, mode == 1)


def _backward_cuda(grad, x, bias, approximate, grad_x, grad_bias):
    mode = _approx(approximate)
    cols = bias.numel()
    rows = x.numel() // cols if cols else 0
    if rows == 0 or cols == 0:
        grad_bias.zero_()
        return
    dev = x.get_device()
    k, blocks = _backward_kernels(x.dtype, mode, dev)
    # Launch shape from kernels/gelu.cu: column tiles of 16 vectors; enough row chunks for one full wave
    # of blocks (float32: two), at most 64 so the partial sums stay small.
    vec = _GELU_VEC[x.dtype]
    grid_x = cdiv(cols, 16 * vec) if vec > 1 and cols % vec == 0 else cdiv(cols, 32)
    chunks = max(1, min(blocks // grid_x, cdiv(rows, 16), 64))
    rows_per_chunk = cdiv(rows, chunks)
    chunks = cdiv(rows, rows_per_chunk)
    partial = torch.empty((chunks, cols), dtype=acc_dtype(x.dtype), device=x.device)
    # The last row chunk of each column tile to finish sums the tile's partials into grad_bias: no second
    # kernel. One counter per tile; tiles are at least 32 columns on either path of the kernel.
    args = (grad, x, bias, grad_x, partial, grad_bias, tickets(dev, cdiv(cols, 32)), rows, cols, rows_per_chunk)
    k.launch((grid_x, chunks), BLOCK, args)


@functools.cache
def _backward_kernels(dtype: torch.dtype, mode: int, dev: int):
    """(backward kernel, blocks in the waves it fills: two for float32, 2% faster on the H200, else one)."""
    k = kernel("gelu", f"kk_bias_gelu_bwd<{CTYPE[dtype]}, {mode}>")
    waves = 2 if dtype == torch.float32 else 1
    return k, waves * resident_blocks(k, BLOCK, dev)


def _backward_cpu(grad, x, bias, approximate, grad_x, grad_bias):
    mode = _approx(approximate)
    if bias.numel() == 0:
        return
    _native.cpu_bias_gelu_bwd(grad, x, bias, grad_x, grad_bias, mode == 1)


bias_gelu_backward = op(
    "kernelkit::bias_gelu_backward(Tensor grad, Tensor x, Tensor bias, str approximate='tanh') -> (Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "x": _X,
        "bias": _BIAS,
    },
    output=(like("x"), like("bias")),
    cpu=_backward_cpu,
)(_backward_cuda)


def _setup(ctx, inputs, output):
    x, bias, approximate = inputs
    ctx.save_for_backward(x, bias)
    ctx.approximate = approximate


def _backward(ctx, grad):
    x, bias = ctx.saved_tensors
    gx, gb = bias_gelu_backward(grad.reshape(x.shape), x, bias, ctx.approximate)
    return gx, gb, None


@op(
    "kernelkit::bias_gelu(Tensor x, Tensor bias, str approximate='tanh') -> Tensor",
    inputs={"x": _X, "bias": _BIAS},
    output=like("x"),
    backward=_backward,
    setup_context=_setup,
    cpu=_forward_cpu,
)
def bias_gelu(x, bias, approximate, out):
    """GELU(x + bias), bias over the last dim; approximate="tanh" (default) or "none" (erf form).

    Both gradients come from one fused backward kernel (grad_bias is a deterministic column sum).

    >>> y = kernelkit.ops.bias_gelu(x, bias)             # x: (..., N), bias: (N,)
    """
    _forward_cuda(x, bias, approximate, out)
