"""Shared plumbing for the shipped ops: their CUDA modules, kernel lookup and launch sizing."""

from __future__ import annotations

import functools
import struct
from typing import Dict, Sequence, Tuple

import torch

from kernelkit import _native
from kernelkit.jit import Kernel, Module

CTYPE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "__half",
    torch.bfloat16: "__nv_bfloat16",
}
FLOATS = tuple(CTYPE)
BLOCK = 256
MAX_DIMS = 8
_STRIDED = struct.Struct("<8q24qi4x")  # kk::Strided in kernels/common.cuh


@functools.cache
def _module(family: str) -> Module:
    """The compiled module of one kernels/<family>.cu file (sources are embedded in the wheel)."""
    headers = [("common.cuh", _native.op_source("common.cuh"))]
    return Module(f"kernelkit.{family}", _native.op_source(f"{family}.cu"), f"{family}.cu", headers, [], [], [], True)


_kernels: Dict[Tuple[str, str], Kernel] = {}


def kernel(family: str, expr: str) -> Kernel:
    """A shipped kernel by name expression, e.g. kernel("elementwise", "kk_add<float>"); cached."""
    key = (family, expr)
    k = _kernels.get(key)
    if k is None:
        k = _kernels[key] = _module(family).kernel(expr)
    return k


@functools.cache
def sm_count(device: int) -> int:
    return _native.device_info(device)["multiprocessor_count"]


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# Elements per block of the grid-stride kernels: 16-byte vectors, 4 per thread, BLOCK threads.
ELEMS_PER_BLOCK = {dt: (16 // torch.empty((), dtype=dt).element_size()) * BLOCK * 4 for dt in CTYPE}


def flat_grid(n: int, dtype: torch.dtype) -> int:
    """Blocks for the grid-stride kernels: one pass per block. Measured on the H200
    (bench/grid_sweep.py), this full grid beats capped, persistent grids of 1-16 blocks per SM by
    2-10% at 64M elements and ties torch.compile."""
    return max(1, cdiv(n, ELEMS_PER_BLOCK[dtype]))


def strided_arg(shape: Sequence[int], tensors: Sequence[torch.Tensor]) -> bytes:
    """Pack kk::Strided: the output shape and each input's element strides after broadcasting to it."""
    nd = len(shape)
    sizes = list(shape) + [0] * (MAX_DIMS - nd)
    strides = []
    for k in range(3):
        if k < len(tensors):
            st = list(tensors[k].expand(shape).stride())
            strides += st + [0] * (MAX_DIMS - nd)
        else:
            strides += [0] * MAX_DIMS
    return _STRIDED.pack(*sizes, *strides, nd)
