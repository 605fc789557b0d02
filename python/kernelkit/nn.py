"""nn.Modules built on kernelkit's ops.

>>> layer = kernelkit.nn.LinearGELU(1024, 4096).cuda()
>>> y = layer(torch.randn(8, 1024, device="cuda"))
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from kernelkit import ops

__all__ = ["BiasGELU", "LinearGELU"]


class BiasGELU(nn.Module):
    """GELU(x + bias) over the last dim, fused into one kernel (and one backward kernel)."""

    def __init__(self, features: int, approximate: str = "tanh", device=None, dtype: Optional[torch.dtype] = None):
        super().__init__()
        self.approximate = approximate
        self.bias = nn.Parameter(torch.zeros(features, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.bias_gelu(x, self.bias, self.approximate)

    def extra_repr(self) -> str:
        return f"features={self.bias.numel()}, approximate={self.approximate!r}"


class LinearGELU(nn.Module):
    """GELU(x @ W^T + b): the matrix product by cuBLAS, bias + GELU fused by kernelkit."""

    def __init__(self, in_features: int, out_features: int, approximate: str = "tanh", device=None, dtype=None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.act = BiasGELU(out_features, approximate, device=device, dtype=dtype)
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.act.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(nn.functional.linear(x, self.weight))
