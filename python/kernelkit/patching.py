"""kernelkit.patch(model), defined here: swap kernelkit's ops into a Hugging Face Llama-style model.

>>> model = transformers.LlamaForCausalLM(config)
>>> report = kernelkit.patch(model)
>>> print(report)        # what was replaced, and what was left alone
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections import Counter
from typing import Any, Dict, List, Optional

import torch

from kernelkit import ops

__all__ = ["PatchReport", "patch", "unpatch"]

_ORIGINAL = "_kernelkit_original_forward"
_OPS_USED = {
    "rms_norm": "kernelkit::rms_norm",
    "swiglu": "kernelkit::swiglu",
    "rope": "kernelkit::rope",
    "cross_entropy": "kernelkit::cross_entropy_reduced",
}


@dataclasses.dataclass
class PatchReport:
    """What :func:`patch` replaced (by kind, with counts) and what it recognized but left alone, and why."""

    replaced: Dict[str, int]
    left_alone: List[str]

    def __str__(self) -> str:
        done = ", ".join(f"{k} x{v}" for k, v in self.replaced.items()) or "nothing"
        lines = [f"kernelkit.patch replaced: {done}"]
        lines += [f"  left alone: {why}" for why in self.left_alone]
        return "\n".join(lines)


def _rms_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    if hidden_states.dtype != self.weight.dtype:  # mixed-precision weights: keep the model's own math
        return getattr(self, _ORIGINAL)(hidden_states)
    return ops.rms_norm(hidden_states, self.weight, self.variance_epsilon)


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


def _make_rope(original):
    def apply_rotary_pos_emb(q, k, cos, sin, *args, unsqueeze_dim: int = 1, **kwargs):
        # ops.rope rotates q and k in one launch, reading the attention's transposed (batch, heads, seq, head_dim)
        # projections in place, and returns them in that layout, as the original does. Other calls (another
        # unsqueeze_dim, mixed dtypes, tables narrower than head_dim: partial rotary) keep the model's own math.
        if (
            args
            or kwargs
            or unsqueeze_dim != 1
            or q.dtype != cos.dtype
            or k.dtype != cos.dtype
            or q.shape[-1] != cos.shape[-1]
        ):
            return original(q, k, cos, sin, *args, unsqueeze_dim=unsqueeze_dim, **kwargs)
        return ops.rope(q, k, cos, sin)

    apply_rotary_pos_emb._kernelkit_original = original
    return apply_rotary_pos_emb


def _causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    num_items_in_batch: Optional[torch.Tensor] = None,
    ignore_index: int = -100,
    shift_labels: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> torch.Tensor:
    # transformers' ForCausalLMLoss, with kernelkit's cross_entropy (which accumulates in float32
    # itself, so the logits are not upcast to a float32 copy first).
    if shift_labels is None:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:].contiguous()
    logits = logits.reshape(-1, vocab_size)
    shift_labels = shift_labels.reshape(-1).to(logits.device)
    # With num_items_in_batch (the Trainer's gradient accumulation): the sum divided by the tokens of the whole
    # accumulated batch, which the op divides by itself, so its gradient is still written in the forward's one pass.
    return ops.cross_entropy(
        logits, shift_labels, ignore_index=ignore_index, out_dtype=torch.float32, divisor=num_items_in_batch
    )


def _is_silu(act: Any) -> bool:
    # torch's module, transformers' own SiLUActivation module, or the bare function.
    return isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation" or act is torch.nn.functional.silu


def _check_devices(model: torch.nn.Module) -> None:
    devices = {p.device.type for p in model.parameters()}
    for kind in devices - {"cpu", "meta"}:
        key = "CUDA" if kind == "cuda" else kind.upper()
        missing = [n for n in _OPS_USED.values() if not torch._C._dispatch_has_kernel_for_dispatch_key(n, key)]
        if missing:
            raise NotImplementedError(
                f"kernelkit.patch: the model is on {kind}, but {', '.join(missing)} have no {kind} kernels in this "
                "kernelkit version yet; patch a CPU model, or leave this model unpatched"
            )


def patch(
    model: torch.nn.Module,
    *,
    rms_norm: bool = True,
    swiglu: bool = True,
    rope: bool = True,
    cross_entropy: bool = True,
) -> PatchReport:
    """Replace RMSNorm, the SwiGLU MLP, rotary embeddings and the causal-LM loss of a Llama-style
    Hugging Face model with kernelkit's ops, in place. Modules it does not recognize are left alone.

    RMSNorm and MLP modules get a new ``forward`` (the old one is kept for :func:`unpatch`); rotary
    embeddings are replaced at their modeling module's ``apply_rotary_pos_emb`` (as Liger-Kernel
    does, this affects every model of that family in the process); the loss through
    ``model.loss_function``.
    """
    _check_devices(model)
    replaced: Counter = Counter()
    left: List[str] = []
    rope_modules = set()
    for name, module in model.named_modules():
        cls = type(module).__name__
        if getattr(module, _ORIGINAL, None) is not None:
            continue
        if rms_norm and cls.endswith("RMSNorm"):
            if isinstance(getattr(module, "weight", None), torch.Tensor) and hasattr(module, "variance_epsilon"):
                setattr(module, _ORIGINAL, module.forward)
                module.forward = types.MethodType(_rms_forward, module)
                replaced["RMSNorm -> kernelkit.ops.rms_norm"] += 1
            else:
                left.append(f"{name} ({cls}): no weight/variance_epsilon")
        elif swiglu and cls.endswith("MLP") and all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj")):
            if _is_silu(getattr(module, "act_fn", None)):
                setattr(module, _ORIGINAL, module.forward)
                module.forward = types.MethodType(_mlp_forward, module)
                replaced["MLP -> kernelkit.ops.swiglu"] += 1
            else:
                left.append(f"{name} ({cls}): activation {type(getattr(module, 'act_fn', None)).__name__} is not SiLU")
        elif rope and cls.endswith("Attention"):
            rope_modules.add(type(module).__module__)
    for modname in sorted(rope_modules):
        mod = sys.modules.get(modname)
        fn = getattr(mod, "apply_rotary_pos_emb", None)
        if fn is None:
            left.append(f"{modname}: no apply_rotary_pos_emb")
        elif not hasattr(fn, "_kernelkit_original"):
            mod.apply_rotary_pos_emb = _make_rope(fn)
            replaced[f"{modname}.apply_rotary_pos_emb -> kernelkit.ops.rope"] += 1
    if cross_entropy:
        if hasattr(model, "lm_head") and hasattr(type(model), "loss_function"):
            model.loss_function = _causal_lm_loss
            replaced["causal-LM loss -> kernelkit.ops.cross_entropy"] += 1
        else:
            left.append(f"{type(model).__name__}: no causal-LM head and loss_function, loss not replaced")
    return PatchReport(dict(replaced), left)


def unpatch(model: torch.nn.Module) -> None:
    """Undo :func:`patch` on this model's modules and loss (module-level rope replacements stay)."""
    for module in model.modules():
        original = module.__dict__.pop(_ORIGINAL, None)
        if original is not None:
            module.__dict__.pop("forward", None)
    model.__dict__.pop("_loss_function", None)
