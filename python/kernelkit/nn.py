"""nn.Modules built on kernelkit's ops.

>>> layer = kernelkit.nn.LinearGELU(1024, 4096).cuda()
>>> y = layer(torch.randn(8, 1024, device="cuda"))
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import nn

from kernelkit import ops

__all__ = ["BiasGELU", "CrossEntropyLoss", "LayerNorm", "LinearGELU", "RMSNorm", "SwiGLUMLP"]


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


class RMSNorm(nn.Module):
    """RMSNorm over the last dim (Llama's): one kernel forward, one backward (plus a column sum).

    >>> norm = kernelkit.nn.RMSNorm(4096, eps=1e-6).cuda()
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, device=None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"


class LayerNorm(nn.Module):
    """LayerNorm over the last dim with weight and (optional) bias.

    >>> norm = kernelkit.nn.LayerNorm(1024).cuda()
    """

    def __init__(
        self, hidden_size: int, eps: float = 1e-5, bias: bool = True, device=None, dtype: Optional[torch.dtype] = None
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}, bias={self.bias is not None}"


class SwiGLUMLP(nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x)), the activation and product fused into one kernel.

    >>> mlp = kernelkit.nn.SwiGLUMLP(4096, 11008).cuda()
    """

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class CrossEntropyLoss(nn.Module):
    """torch.nn.CrossEntropyLoss over (..., C) logits, without materializing the softmax in backward.

    >>> loss = kernelkit.nn.CrossEntropyLoss()(logits.view(-1, vocab), labels.view(-1))
    """

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(
        self, logits: torch.Tensor, target: torch.Tensor, divisor: Union[torch.Tensor, int, float, None] = None
    ) -> torch.Tensor:
        """``divisor``: what a mean divides by in place of the count of targets (see kernelkit.ops.cross_entropy)."""
        return ops.cross_entropy(
            logits, target, self.ignore_index, self.reduction, self.label_smoothing, divisor=divisor
        )

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing={self.label_smoothing}"
