"""LLM training ops (issue 5): rms_norm, add_rms_norm, layer_norm, softmax, cross_entropy, swiglu and rope,
with their registered backward ops, on every device.

Every test takes a ``device``: "cpu" (the Rust kernels of crates/kernelkit-ops) and "cuda" (kernels/norms.cu,
softmax.cu and activations.cu; marked ``gpu``, so tests/conftest.py skips it without a GPU). Inputs are drawn
in float64 on the CPU, rounded to the test's dtype and then moved, so both devices see the same values. The
references are plain torch math in float64 on those same rounded inputs.

Most tests are driven by CASES: one OpCase per op, with a maker of random inputs for (rows, cols), the
kernelkit call and its float64 torch reference. forward_backward() runs either of them and backpropagates
the same random output gradients, so every comparison covers the outputs and the gradient of every input
that requires grad.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from typing import Callable, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import kernelkit
import kernelkit.ops as K
from kernelkit.ops import norms
from kernelkit.ops._runtime import LOW_DRAM_GBPS_PER_SM, SCALAR, SHIFTED, VECTOR, cdiv, row_path
from kernelkit.testing import check_op

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# (atol, rtol) per dtype; close() scales atol by the magnitude of the reference tensor.
TOL = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
WIDTHS = [1, 3, 7, 33, 255, 257, 4097]  # odd widths, both sides of a 256-thread block, a block-per-row width
WIDE = 262144  # far wider than any register or shared-memory tile: the kernels stream the row
BIG = 2**20 + 3  # large and odd: many blocks and a ragged tail
RMS_EPS, LN_EPS, SMOOTHING, IGNORE = 1e-6, 1e-5, 0.1, -100


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- inputs, references, comparisons


def rand(*shape, dtype=torch.float32, device="cpu", scale=1.0):
    """Normal samples drawn in float64 on the CPU (the same values for every device), rounded to dtype."""
    return (torch.randn(shape, dtype=torch.float64) * scale).to(dtype).to(device)


def targets(rows, cols, device):
    """Random class indices with every fifth row from the third on ignored (rows 0 and 1 never are)."""
    t = torch.randint(0, cols, (rows,))
    t[2::5] = IGNORE
    return t.to(device)


def ref_rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w


def ref_add_rms_norm(x, r, w):
    h = x + r
    return ref_rms_norm(h, w), h


def ref_layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b, LN_EPS)


def ref_cross_entropy(logits, target, reduction="mean", smoothing=SMOOTHING, ignore_index=IGNORE):
    """F.cross_entropy over the last dim of logits of any shape (..., C), like kernelkit's."""
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        target.reshape(-1),
        ignore_index=ignore_index,
        reduction=reduction,
        label_smoothing=smoothing,
    )
    return loss.reshape(target.shape) if reduction == "none" else loss


def ce_case(reduction="mean", smoothing=0.0, ignore_index=IGNORE, ref=None):
    """OpCase for K.cross_entropy on inputs the test builds, against F.cross_entropy with the same arguments
    (or ``ref``)."""

    def kk(logits, t):
        return (K.cross_entropy(logits, t, ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing),)

    def same_args(logits, t):
        return (ref_cross_entropy(logits, t, reduction, smoothing, ignore_index),)

    return OpCase(make=None, kk=kk, ref=ref or same_args, diff=(0,), floor=0.0)


def ref_rope(q, k, cos, sin):
    """Hugging Face's apply_rotary_pos_emb (unsqueeze_dim=1); cos/sin (seq, d), (b, seq, d) or (b, 1, seq, d)."""

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    if cos.dim() == 2:
        cos, sin = cos[None], sin[None]
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def close(out, ref, dtype, floor=1.0, equal_nan=False, what="", rowwise=False):
    """out == ref within TOL[dtype]: |out - ref| <= atol * scale + rtol * |ref| elementwise.

    scale is the mean magnitude of ref's finite entries, but at least ``floor``: 1 for ops whose outputs and
    gradients are sums of terms of order one (inputs are N(0, 1)), so that a result that cancels to nearly zero
    is held to the size of its terms; 0 for probabilities (softmax, cross-entropy gradients), which are held to
    their own scale however wide the row. ``rowwise``: a scale per index of the first dim (for rows of very
    different magnitudes). A few of the dtype's subnormal spacings are always allowed: values that underflow
    into subnormals (float16 softmax over 262144 columns) lose that much, and so does a gradient computed from
    them (softmax's backward multiplies the saved output by g - dot, up to ~5 here). NaN and inf positions must
    match (NaN only with equal_nan)."""
    if rowwise and out.dim():
        assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
        for i in range(out.shape[0]):
            close(out[i], ref[i], dtype, floor, equal_nan, f"{what} [{i}]")
        return
    atol, rtol = TOL[dtype]
    o, r = out.detach().double(), ref.detach().double()
    finite = r[torch.isfinite(r)]
    scale = max(finite.abs().mean().item() if finite.numel() else 0.0, floor)
    atol = atol * scale + 4 * torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
    if o.shape == r.shape and o.device == r.device:
        # The same test as assert_close's, in a few vector ops (assert_close is slow on wide rows); assert_close
        # below only runs to describe a failure.
        ok = (o == r) | ((o - r).abs() <= atol + rtol * r.abs())
        if equal_nan:
            ok |= o.isnan() & r.isnan()
        if ok.all():
            return
    msg = (lambda m: f"{what}: {m}") if what else None
    torch.testing.assert_close(o, r, atol=atol, rtol=rtol, equal_nan=equal_nan, msg=msg)
    raise AssertionError(f"{what}: {int((~ok).sum())} elements differ")  # pragma: no cover


def misaligned(t):
    """A contiguous copy of t whose data pointer is one element past a 16-byte boundary."""
    return torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape).copy_(t)


def noncontiguous(t, layout):
    """A non-contiguous tensor holding t's values. "transposed": the last two dims swapped in memory (tensors
    of fewer than two dims of size > 1 fall back to "sliced"); "sliced": every other element of a buffer twice
    as wide along the last dim, whose gaps hold NaN (floats) so that a kernel reading them shows it."""
    t = t.detach()
    if layout == "transposed" and t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
        return t.mT.contiguous().mT
    if t.dim() == 0:
        return t.clone()
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    if t.is_floating_point():
        wide.fill_(math.nan)
    return wide[..., ::2].copy_(t)


def forward_backward(fn, args, diff, cotangents=None, prepare=None):
    """Run fn(*args), then backpropagate ``cotangents`` from its outputs (random ones drawn here when None).

    ``prepare`` lays out each tensor argument and cotangent as the test wants it (default: a fresh copy);
    args[i] for i in ``diff`` require grad. Returns (outputs, gradients of args[i] for i in diff, cotangents);
    a gradient is None where the input got none."""
    prepare = prepare or (lambda t: t.detach().clone())
    leaves = [prepare(a).requires_grad_(i in diff) if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
    outs = tuple(fn(*leaves))
    if cotangents is None:
        cotangents = tuple(rand(*o.shape, dtype=o.dtype, device=o.device) for o in outs)
    cots = [prepare(c.to(o.dtype)) for o, c in zip(outs, cotangents)]
    pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
    return tuple(o.detach() for o in outs), [leaves[i].grad for i in diff], cotangents


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One op under test. make(rows, cols, dtype, device) -> its arguments; kk(*args) and ref(*args) -> a
    tuple of outputs (ref is called on float64 copies); diff: indices of the arguments that get gradients;
    floor: close()'s floor for this op's outputs and gradients."""

    make: Callable[..., tuple]
    kk: Callable[..., tuple]
    ref: Callable[..., tuple]
    diff: Tuple[int, ...]
    floor: float = 1.0


def check_reference(case, args, dtype, equal_nan=False, rowwise=False):
    """case.kk on args against case.ref on float64 copies: every output and every input gradient, with the
    same output gradients backpropagated through both."""
    outs, grads, cots = forward_backward(case.kk, args, case.diff)
    wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    routs, rgrads, _ = forward_backward(case.ref, wide, case.diff, [c.double() for c in cots])
    assert len(outs) == len(routs)
    for k, (o, r) in enumerate(zip(outs, routs)):
        assert o.dtype == dtype, f"output {k} is {o.dtype}"
        close(o, r, dtype, case.floor, equal_nan, f"output {k}", rowwise)
    for i, g, r in zip(case.diff, grads, rgrads):
        if r is None:  # the reference does not depend on this input: no gradient, or zeros
            assert g is None or not g.any(), f"grad of argument {i} should be zero"
            continue
        assert g is not None, f"argument {i} got no gradient"
        assert g.dtype == dtype and g.shape == args[i].shape
        close(g, r, dtype, case.floor, equal_nan, f"grad of argument {i}", rowwise)


def _norm_args(rows, cols, dtype, device, n_rows, n_vecs):
    f = dict(dtype=dtype, device=device)
    return tuple(rand(rows, cols, **f) for _ in range(n_rows)) + tuple(rand(cols, **f) for _ in range(n_vecs))


def _rope_args(rows, cols, dtype, device):
    """q (2, 2, seq, d), k (2, 1, seq, d) and per-batch tables (2, seq, d): seq = rows, d = cols made even."""
    f = dict(dtype=dtype, device=device)
    d = cols + cols % 2
    return rand(2, 2, rows, d, **f), rand(2, 1, rows, d, **f), rand(2, rows, d, **f), rand(2, rows, d, **f)


CASES = {
    "rms_norm": OpCase(
        make=lambda rows, cols, dt, dev: _norm_args(rows, cols, dt, dev, 1, 1),
        kk=lambda x, w: (K.rms_norm(x, w, RMS_EPS),),
        ref=lambda x, w: (ref_rms_norm(x, w),),
        diff=(0, 1),
    ),
    "add_rms_norm": OpCase(
        make=lambda rows, cols, dt, dev: _norm_args(rows, cols, dt, dev, 2, 1),
        kk=lambda x, r, w: K.add_rms_norm(x, r, w, RMS_EPS),
        ref=ref_add_rms_norm,
        diff=(0, 1, 2),
    ),
    "layer_norm": OpCase(
        make=lambda rows, cols, dt, dev: _norm_args(rows, cols, dt, dev, 1, 2),
        kk=lambda x, w, b: (K.layer_norm(x, w, b, LN_EPS),),
        ref=lambda x, w, b: (ref_layer_norm(x, w, b),),
        diff=(0, 1, 2),
    ),
    "softmax": OpCase(
        make=lambda rows, cols, dt, dev: (rand(rows, cols, dtype=dt, device=dev, scale=2),),
        kk=lambda x: (K.softmax(x),),
        ref=lambda x: (torch.softmax(x, -1),),
        diff=(0,),
        floor=0.0,
    ),
    "cross_entropy": OpCase(
        make=lambda rows, cols, dt, dev: (rand(rows, cols, dtype=dt, device=dev, scale=2), targets(rows, cols, dev)),
        kk=lambda logits, t: (K.cross_entropy(logits, t, label_smoothing=SMOOTHING),),
        ref=lambda logits, t: (ref_cross_entropy(logits, t),),
        diff=(0,),
        floor=0.0,
    ),
    "swiglu": OpCase(
        make=lambda rows, cols, dt, dev: _norm_args(rows, cols, dt, dev, 2, 0),
        kk=lambda g, u: (K.swiglu(g, u),),
        ref=lambda g, u: (F.silu(g) * u,),
        diff=(0, 1),
    ),
    "rope": OpCase(
        make=_rope_args,
        kk=K.rope,
        ref=ref_rope,
        diff=(0, 1),
    ),
}
OPS = list(CASES)
ROW_OPS = [op for op in OPS if op != "rope"]  # ops over (..., cols) tensors; rope takes (b, h, seq, d)


# ---------------------------------------------------------------- each op against its float64 reference


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_matches_reference(device, op, dtype, cols):
    """Forward and the gradient of every input (norm weights and biases included) at every width (rope: the
    width made even is head_dim)."""
    case = CASES[op]
    check_reference(case, case.make(5, cols, dtype, device), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("used", ["normed", "residual"])
def test_add_rms_norm_one_output_used(device, dtype, used):
    """Gradients of x, residual and weight when only one of the two outputs reaches the loss."""
    k = 0 if used == "normed" else 1
    case = OpCase(
        make=CASES["add_rms_norm"].make,
        kk=lambda x, r, w: (K.add_rms_norm(x, r, w, RMS_EPS)[k],),
        ref=lambda x, r, w: (ref_add_rms_norm(x, r, w)[k],),
        diff=(0, 1, 2),
    )
    check_reference(case, case.make(6, 257, dtype, device), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_without_bias(device, dtype):
    case = OpCase(
        make=lambda rows, cols, dt, dev: _norm_args(rows, cols, dt, dev, 1, 1),
        kk=lambda x, w: (K.layer_norm(x, w, None, LN_EPS),),
        ref=lambda x, w: (F.layer_norm(x, x.shape[-1:], w, None, LN_EPS),),
        diff=(0, 1),
    )
    check_reference(case, case.make(4, 257, dtype, device), dtype)


NORM_OPS = ["rms_norm", "add_rms_norm", "layer_norm"]


@pytest.mark.parametrize("cols", [*WIDTHS, WIDE])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_inference_matches_training(device, op, dtype, cols):
    """A call autograd does not record (grad mode off, or no input that requires grad) takes the op's
    ``*_inference`` twin, which writes no per-row statistics: its outputs equal the recording op's, bit for bit, on
    every kernel path (the widths reach the scalar, shifted, held, split and streamed rows)."""
    case = CASES[op]
    args = case.make(3, cols, dtype, device)
    recorded = case.kk(*(a.clone().requires_grad_() for a in args))
    with _CountOps() as seen:
        with torch.no_grad():
            off = case.kk(*(a.clone().requires_grad_() for a in args))
        plain = case.kk(*args)
    assert seen.names == {f"{op}_inference"}
    assert all(o.grad_fn is not None for o in recorded)
    for r, a, b in zip(recorded, off, plain):
        assert torch.equal(r.detach(), a) and torch.equal(r.detach(), b)


@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_inference_compiles_to_its_own_op(device, op):
    """torch.compile(fullgraph=True) picks the op by the same rule, in the graph dynamo captures: the inference op
    without grad, the recording op with it (guarded, so the second call recompiles); both equal to eager."""
    from torch._dynamo.testing import EagerAndRecordGraphs

    torch._dynamo.reset()
    case = CASES[op]
    args = case.make(4, 64, torch.float32, device)
    backend = EagerAndRecordGraphs()
    fn = torch.compile(case.kk, backend=backend, fullgraph=True)
    eager = case.kk(*args)
    with torch.no_grad():
        off = fn(*args)
    grads = tuple(a.clone().requires_grad_() for a in args)
    on = fn(*grads)
    sum(o.sum() for o in on).backward()
    assert len(backend.graphs) == 2
    assert f"kernelkit.{op}_inference.default" in backend.graphs[0].code
    assert f"kernelkit.{op}.default" in backend.graphs[1].code and "_inference" not in backend.graphs[1].code
    assert all(g.grad is not None for g in grads)
    assert all(torch.equal(a, b) and torch.equal(a, c.detach()) for a, b, c in zip(eager, off, on))


@pytest.mark.parametrize("dim", [0, 1, -2])
def test_softmax_along_other_dims(device, dim):
    case = OpCase(
        make=None,
        kk=lambda x: (K.softmax(x, dim=dim),),
        ref=lambda x: (torch.softmax(x, dim),),
        diff=(0,),
        floor=0.0,
    )
    check_reference(case, (rand(4, 5, 6, device=device, scale=3),), torch.float32)


@pytest.mark.parametrize("smoothing", [0.0, SMOOTHING, 1.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_reductions(device, dtype, reduction, smoothing):
    """(batch, seq, vocab) logits as a causal LM has them, every reduction, with and without label smoothing."""
    case = ce_case(reduction, smoothing)
    logits = rand(3, 11, 257, dtype=dtype, device=device, scale=3)
    check_reference(case, (logits, targets(33, 257, device).view(3, 11)), dtype)


@pytest.mark.parametrize("kind", ["int", "float", "int64", "int32", "float32", "float64", "float16", "cpu int64"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_divisor(device, dtype, kind):
    """A mean over a given count (Hugging Face's num_items_in_batch under gradient accumulation): sum / divisor, the
    gradient divided by it too; as a number or a one-element tensor of any real dtype, on the device or the CPU."""
    n = 50
    divisor = {"int": n, "float": float(n)}.get(kind)
    if divisor is None:
        name = kind.split()[-1]
        divisor = torch.tensor([n], dtype=getattr(torch, name), device="cpu" if "cpu" in kind else device)

    def ref(logits, t):
        return (ref_cross_entropy(logits, t, "sum", 0.0, IGNORE) / n,)

    case = OpCase(make=None, kk=lambda x, t: (K.cross_entropy(x, t, divisor=divisor),), ref=ref, diff=(0,), floor=0.0)
    logits = rand(3, 11, 257, dtype=dtype, device=device, scale=3)
    check_reference(case, (logits, targets(33, 257, device).view(3, 11)), dtype)
    loss, _, div = torch.ops.kernelkit.cross_entropy_reduced(
        logits.view(-1, 257), targets(33, 257, device), IGNORE, 0.0, True, None, torch.tensor(n, device=device)
    )
    assert div.item() == n and div.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_cross_entropy_divisor_errors(device):
    """A divisor with a reduction it does not fit, of several values, of no real dtype, or of another device at the
    op: errors that name it."""
    logits, t = rand(4, 10, device=device), targets(4, 10, device)
    with pytest.raises(ValueError, match="divisor replaces the mean's count of targets; it needs reduction='mean'"):
        K.cross_entropy(logits, t, reduction="sum", divisor=4)
    for bad in (torch.ones(2), torch.tensor(True), torch.tensor(1 + 1j), "4", True):
        with pytest.raises(ValueError, match="divisor must be a real number"):
            K.cross_entropy(logits, t, divisor=bad)
    reduced = torch.ops.kernelkit.cross_entropy_reduced
    with pytest.raises(ValueError, match="'divisor' replaces the mean's count; it needs mean=True"):
        reduced(logits, t, IGNORE, 0.0, False, None, torch.tensor(4.0, device=device))
    with pytest.raises(ValueError, match="'divisor' must be one float32, float64, int32 or int64 value on"):
        reduced(logits, t, IGNORE, 0.0, True, None, torch.tensor(4, dtype=torch.int16, device=device))
    if device == "cuda":
        with pytest.raises(ValueError, match="'divisor' must be one .* on cuda:0, got .* on cpu"):
            reduced(logits, t, IGNORE, 0.0, True, None, torch.tensor(4.0))


def test_cross_entropy_zero_divisor_divides_as_float64(device):
    """A divisor of 0 (or -0.0) divides as float64 does: inf of the sum's sign, NaN for a zero or NaN sum."""
    logits, t = rand(4, 10, device=device), targets(4, 10, device)
    total = K.cross_entropy(logits, t, reduction="sum").double()
    for zero in (0, -0.0, torch.tensor(0, device=device)):
        got = K.cross_entropy(logits, t, divisor=zero)
        assert torch.equal(got.double(), total / torch.tensor(float(zero), dtype=torch.float64, device=device))
        assert got.isinf()
    ignored = torch.full_like(t, IGNORE)
    assert K.cross_entropy(logits, ignored, divisor=0).isnan()
    logits[1, 2] = float("nan")
    assert K.cross_entropy(logits, t, divisor=0).isnan()


def test_cross_entropy_custom_ignore_index(device):
    case = ce_case("none", ignore_index=-1)
    check_reference(case, (rand(4, 9, device=device), torch.tensor([3, -1, 0, 8], device=device)), torch.float32)


@pytest.mark.parametrize("table", ["seq", "batch1", "batch", "batch_1_seq"])
@pytest.mark.parametrize("head_dim", [2, 6, 16, 128])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope(device, dtype, head_dim, table):
    """q and k gradients too; head_dim 6 has an odd half (no vector path); every cos/sin table layout."""
    f = dict(dtype=dtype, device=device)
    q, k = rand(2, 4, 9, head_dim, **f), rand(2, 2, 9, head_dim, **f)
    shapes = {"seq": (9, head_dim), "batch1": (1, 9, head_dim), "batch": (2, 9, head_dim)}
    shape = shapes.get(table, (2, 1, 9, head_dim))
    args = (q, k, rand(*shape, **f), rand(*shape, **f))
    check_reference(CASES["rope"], args, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_wide_rows(device, op, dtype):
    """Two rows of 262144 columns (rope: head_dim 262144): the streamed-row paths, forward and backward."""
    case = CASES[op]
    check_reference(case, case.make(2, WIDE, dtype, device), dtype)


def _with_leading_dims(args, rows, lead):
    """args made for (rows, cols) with every tensor whose first dim is the rows dim reshaped to lead + rest."""
    return tuple(a.reshape((*lead, *a.shape[1:])) if a.dim() and a.shape[0] == rows else a for a in args)


@pytest.mark.parametrize("lead", [(), (2, 3)], ids=["1d", "3d"])
@pytest.mark.parametrize("op", ROW_OPS)
def test_leading_dims(device, op, lead):
    """A single 1-D row and (2, 3, cols) batches; cross_entropy gets a 0-d and a (2, 3) target."""
    case = CASES[op]
    rows = math.prod(lead)
    args = _with_leading_dims(case.make(rows, 33, torch.float32, device), rows, lead)
    check_reference(case, args, torch.float32)


# ---------------------------------------------------------------- sizes and layouts


@pytest.mark.parametrize("op", OPS)
def test_empty_rows(device, op):
    """Zero rows (rope: seq 0): empty outputs and input gradients, zero weight/bias gradients; cross_entropy's
    mean over no rows is NaN, as torch's."""
    case = CASES[op]
    args = case.make(0, 64, torch.float32, device)
    check_reference(case, args, torch.float32, equal_nan=True)


def test_rope_empty_batch(device):
    f = dict(device=device)
    args = (rand(0, 2, 9, 16, **f), rand(0, 1, 9, 16, **f), rand(9, 16, **f), rand(9, 16, **f))
    check_reference(CASES["rope"], args, torch.float32)


def rope_layout(t, layout):
    """A copy of t in the layout attention code hands rope, for (batch, heads, seq, head_dim) tensors (others are
    cloned): "contiguous"; "hf", Hugging Face's q_proj(x).view(b, s, h, d).transpose(1, 2) (dense, not
    contiguous, last dim contiguous); "strided", every other head of a (b, s, 2h, d) buffer whose gaps hold NaN
    (a slice of a fused projection: not dense, last dim contiguous), so that a kernel touching them shows it."""
    t = t.detach()
    if t.dim() != 4 or layout == "contiguous":
        return t.clone()
    b, h, s, d = t.shape
    if layout == "hf":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    wide = torch.full((b, s, 2 * h, d), math.nan, dtype=t.dtype, device=t.device)
    wide[:, :, ::2] = t.transpose(1, 2)
    return wide[:, :, ::2].transpose(1, 2)


def dense_layout(t):
    """t's strides over its dims of size > 1 (a size-1 dim's stride is arbitrary)."""
    return tuple(st for st, n in zip(t.stride(), t.shape) if n > 1)


ROPE_LAYOUTS = ["hf", "strided"]
ROPE_HEADS = [(4, 4), (4, 2), (4, 1), (1, 4)]  # (q heads, k heads): MHA, GQA, MQA, more k heads than q heads


@pytest.mark.parametrize("heads", ROPE_HEADS, ids=lambda h: f"{h[0]}q{h[1]}k")
@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("head_dim", [6, 128])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_layouts(device, dtype, head_dim, layout, heads):
    """q, k and the output gradients in attention's layouts: outputs and gradients bitwise those of contiguous
    inputs (every element is computed by the same expression whatever the layout: the kernel reads the strides,
    nothing is reduced), and laid out as torch lays out q * cos + rotate_half(q) * sin (for a dense input: its
    own strides). head_dim 6 takes the scalar path, 128 the 16-byte one."""
    hq, hk = heads
    f = dict(dtype=dtype, device=device)
    args = (rand(2, hq, 5, head_dim, **f), rand(2, hk, 5, head_dim, **f), rand(2, 5, head_dim, **f))
    args += (rand(2, 5, head_dim, **f),)
    outs, grads, cots = forward_backward(K.rope, args, (0, 1))
    l_outs, l_grads, _ = forward_backward(K.rope, args, (0, 1), cots, prepare=lambda t: rope_layout(t, layout))
    for what, a, b in [("output", o, lo) for o, lo in zip(outs, l_outs)] + [
        ("grad", g, lg) for g, lg in zip(grads, l_grads)
    ]:
        assert torch.equal(a, b), f"{layout} {what} differs from the contiguous one"
    for x, out in zip(args[:2], l_outs):
        x = rope_layout(x, layout)
        ref = ref_rope(x, x, args[2], args[3])[0]
        assert dense_layout(out) == dense_layout(ref), f"output strides {out.stride()}, torch's {ref.stride()}"
        if layout == "hf":
            assert out.stride() == x.stride()


@pytest.mark.parametrize("layout", ["contiguous", *ROPE_LAYOUTS])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_gqa(device, dtype, layout):
    """Grouped-query attention's 16 q heads and 8 k heads in one call, against the float64 reference, forward
    and both gradients, with cos/sin per batch."""
    f = dict(dtype=dtype, device=device)
    args = (rand(2, 16, 7, 64, **f), rand(2, 8, 7, 64, **f), rand(2, 7, 64, **f), rand(2, 7, 64, **f))
    check_reference(CASES["rope"], tuple(rope_layout(a, layout) for a in args), dtype)


@pytest.mark.parametrize("used", [0, 1], ids=["q", "k"])
@pytest.mark.parametrize("layout", ["contiguous", "hf"])
def test_rope_one_output_used(device, used, layout):
    """Only one of the two outputs reaches the loss: the other's gradient is zero, the used one's correct."""
    case = OpCase(
        make=None,
        kk=lambda q, k, c, s: (K.rope(q, k, c, s)[used],),
        ref=lambda q, k, c, s: (ref_rope(q, k, c, s)[used],),
        diff=(0, 1),
    )
    f = dict(device=device)
    args = (rand(2, 4, 9, 16, **f), rand(2, 2, 9, 16, **f), rand(9, 16, **f), rand(9, 16, **f))
    check_reference(case, tuple(rope_layout(a, layout) for a in args), torch.float32)


@pytest.mark.parametrize("layout", ["contiguous", *ROPE_LAYOUTS])
def test_rope_gradcheck_and_gradgradcheck(device, layout):
    """First and second derivatives in float64, with q and k in each layout: the backward is rope(backward=True),
    and its own backward is rope again."""
    f = dict(dtype=torch.float64, device=device)
    q, k = rope_layout(rand(2, 3, 4, 8, **f), layout), rope_layout(rand(2, 1, 4, 8, **f), layout)
    cos, sin = rand(2, 4, 8, **f), rand(2, 4, 8, **f)
    leaves = (q.requires_grad_(), k.requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b: K.rope(a, b, cos, sin), leaves)
    assert torch.autograd.gradgradcheck(lambda a, b: K.rope(a, b, cos, sin), leaves)


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("backward", [False, True])
def test_opcheck_rope_layouts(device, layout, backward):
    """opcheck of kernelkit::rope on strided q and k (different head counts): the fake implementation's output
    strides are the real ones'."""
    f = dict(device=device)
    q, k = rope_layout(rand(2, 4, 5, 8, **f), layout), rope_layout(rand(2, 2, 5, 8, **f), layout)
    if not backward:
        q, k = q.requires_grad_(), k.requires_grad_()
    torch.library.opcheck(torch.ops.kernelkit.rope.default, (q, k, rand(5, 8, **f), rand(5, 8, **f), backward))


def test_rope_compile_hf_layout(device):
    """torch.compile(fullgraph=True) on Hugging Face's layout: the same values and output strides as eager."""
    f = dict(device=device)
    args = tuple(rope_layout(a, "hf") for a in (rand(2, 4, 6, 16, **f), rand(2, 2, 6, 16, **f)))
    args += (rand(2, 6, 16, **f), rand(2, 6, 16, **f))
    torch._dynamo.reset()
    eager, compiled = K.rope(*args), torch.compile(K.rope, fullgraph=True)(*args)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b) and a.stride() == b.stride()


@pytest.mark.gpu
def test_rope_reads_hf_layout_in_place():
    """Hugging Face's transposed q and k are not copied: the call allocates its two outputs and nothing else."""
    f = dict(dtype=torch.bfloat16, device="cuda")
    q = rope_layout(rand(2, 16, 64, 128, **f), "hf")
    k = rope_layout(rand(2, 8, 64, 128, **f), "hf")
    cos, sin = rand(2, 64, 128, **f), rand(2, 64, 128, **f)
    K.rope(q, k, cos, sin)  # compiled and cached
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    oq, ok = K.rope(q, k, cos, sin)
    grown = torch.cuda.max_memory_allocated() - before
    assert grown == oq.nbytes + ok.nbytes, f"{grown} bytes allocated, outputs {oq.nbytes + ok.nbytes}"
    assert oq.stride() == q.stride() and ok.stride() == k.stride()


@pytest.mark.parametrize("layout", ["rows", "row"])
@pytest.mark.parametrize("op", OPS)
def test_large_sizes(device, op, layout):
    """2**20 + 3 rows (of width 1; cross_entropy 2), or a single row of 2**20 + 3: large odd sizes, many blocks,
    a ragged tail. rope's q is (2, 2, seq, head_dim), so it gets seq 2**17 + 3 of head_dim 2, or one position
    of head_dim 2**18 + 2: q just over 2**20 elements either way."""
    if op == "rope":
        rows, cols = (2**17 + 3, 2) if layout == "rows" else (1, 2**18 + 2)
    else:
        rows, cols = (BIG, 2 if op == "cross_entropy" else 1) if layout == "rows" else (1, BIG)
    case = CASES[op]
    check_reference(case, case.make(rows, cols, torch.float32, device), torch.float32)


@pytest.mark.parametrize("cols", [64, 4096])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_misaligned_inputs(device, op, dtype, cols):
    """Every input and output gradient contiguous but one element off a 16-byte boundary, at widths that are
    multiples of 8 (the 16-byte vector path's condition on the width holds, the pointer one does not).

    CPU: bitwise equal to the aligned run (the Rust kernels' summation order depends on the shape only).
    CUDA: the scalar path may reduce in another order than the vector path, so within tolerance."""
    case = CASES[op]
    args = case.make(3, cols, dtype, device)
    for a in args:
        assert misaligned(a).is_contiguous() and misaligned(a).data_ptr() % 16
    outs, grads, cots = forward_backward(case.kk, args, case.diff)
    m_outs, m_grads, _ = forward_backward(case.kk, args, case.diff, cots, prepare=misaligned)
    for what, a, b in [("output", o, mo) for o, mo in zip(outs, m_outs)] + [
        ("grad", g, mg) for g, mg in zip(grads, m_grads)
    ]:
        if device == "cpu":
            assert torch.equal(a, b), f"misaligned {what} differs from the aligned one"
        else:
            close(b, a, dtype, floor=case.floor, what=f"misaligned {what}")


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
@pytest.mark.parametrize("op", OPS)
def test_noncontiguous_inputs(device, op, layout):
    """Transposed and strided (sliced) inputs, weights and output gradients: the ops make them contiguous,
    so results are bitwise those of contiguous inputs."""
    case = CASES[op]
    args = case.make(6, 40, torch.float32, device)
    for a in args:
        if a.is_floating_point():
            assert not noncontiguous(a, layout).is_contiguous()
    outs, grads, cots = forward_backward(case.kk, args, case.diff)
    n_outs, n_grads, _ = forward_backward(case.kk, args, case.diff, cots, prepare=lambda t: noncontiguous(t, layout))
    for a, b in zip(outs + tuple(grads), n_outs + tuple(n_grads)):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- special values


def _special_softmax_rows(cols, dtype):
    """Masked (-inf) entries, all -inf but one, all -inf (NaN, as torch), huge magnitudes (1e30 in float32 and
    bfloat16, 1e300 in float64, 6e4 near float16's max), one huge entry, a +inf entry and a NaN entry (NaN rows)."""
    inf = math.inf
    big = {torch.float16: 6e4, torch.float64: 1e300}.get(dtype, 1e30)
    x = torch.randn(9, cols, dtype=torch.float64) * 3
    x[0, ::3] = -inf
    x[0, 1] = 0.5  # not every entry masked, whatever the width
    x[1] = -inf
    x[1, cols // 2] = 2.0
    x[2] = -inf
    x[3] = torch.randn(cols, dtype=torch.float64).clamp(-1, 1) * big
    x[4] = 0.0
    x[4, cols - 1] = big
    x[5] = -big
    x[6] = 0.0
    x[6, 1] = inf
    x[7, 2] = math.nan
    x[8, :: max(1, cols // 4)] = -inf
    x[8, 0] = -big
    return x.to(dtype)


@pytest.mark.parametrize("cols", [5, 64, 4097])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_special_values(device, dtype, cols):
    """Against torch's float64 softmax on the same values, forward and backward: the same NaN pattern (no NaN
    where torch has none), exact zeros at masked entries, no overflow at huge magnitudes."""
    x = _special_softmax_rows(cols, dtype).to(device)
    check_reference(CASES["softmax"], (x,), dtype, equal_nan=True, rowwise=True)
    y = K.softmax(x)
    assert torch.equal(y[0, 3::3], torch.zeros_like(y[0, 3::3]))  # masked entries: exactly 0
    assert y[1, cols // 2] == 1 and y[1].sum() == 1  # all -inf but one: exactly one-hot


def _special_ce_rows(cols, dtype):
    """(logits, targets): masked logits, all -inf but the target (loss 0), a target on a masked logit (inf), an
    all -inf row ignored (0) and not ignored (NaN, as torch), huge magnitudes (a unique maximum: see
    test_cross_entropy_tied_huge_logits for ties), a NaN logit. float16's huge logits are 1e4: a loss of up to
    twice that still fits the float16 output (max 65504)."""
    inf = math.inf
    big = {torch.float16: 1e4, torch.float64: 1e300}.get(dtype, 1e30)
    x = torch.randn(8, cols, dtype=torch.float64) * 3
    t = torch.randint(0, cols, (8,))
    x[0, 1::2] = -inf
    t[0] = 0
    x[1] = -inf
    x[1, cols - 1] = 1.5
    t[1] = cols - 1
    x[2] = -inf
    x[2, 0] = 1.0
    t[2] = cols - 1 if cols > 1 else 0
    x[3] = -inf
    t[3] = IGNORE
    x[4] = -inf
    t[4] = 0
    x[5:7] = torch.rand(2, cols, dtype=torch.float64) * -big
    x[5:7, cols // 2] = big
    t[6] = cols // 2
    x[7, 0] = math.nan
    return x.to(dtype), t


@pytest.mark.parametrize("smoothing", [0.0, SMOOTHING])
@pytest.mark.parametrize("cols", [5, 64, 4097])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_special_values(device, dtype, cols, smoothing):
    """Per-row losses (reduction "none") and logit gradients against torch's float64 cross_entropy on the same
    values: the same NaN and inf pattern, no NaN where torch has none (and, unlike torch, none in the gradient
    of an ignored row of all -inf logits)."""

    def ref(logits, t):
        # torch's gradient for an ignored row whose logits are all -inf is NaN (its log_softmax backward
        # multiplies the row's zero gradient by exp(NaN)); kernelkit gives ignored rows a zero gradient always,
        # so that fully masked padding positions cannot poison training. The reference gets zeros there.
        return (ref_cross_entropy(logits.masked_fill((t == IGNORE)[:, None], 0.0), t, "none", smoothing),)

    case = ce_case("none", smoothing, ref=ref)
    logits, t = _special_ce_rows(cols, dtype)
    check_reference(case, (logits.to(device), t.to(device)), dtype, equal_nan=True, rowwise=True)


@pytest.mark.parametrize("smoothing", [0.0, SMOOTHING])
def test_cross_entropy_positive_inf_logit(device, smoothing):
    """A +inf logit off the target: torch's loss and gradient row are NaN (as softmax's are for such a row)."""
    case = ce_case("none", smoothing)
    logits = torch.tensor([[math.inf, 0.0, 1.0], [0.5, 0.0, 1.0]], device=device)
    check_reference(case, (logits, torch.tensor([1, 0], device=device)), torch.float32, equal_nan=True)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_tied_huge_logits(device, dtype):
    """Logits of 1e30 tied at the row maximum: the loss and gradient keep their O(1) parts, as torch's
    (log 3 and [-2/3, 1/3, 1/3, 0, 0]). With lse = 1e30 + log 3 formed as one number, both are lost."""
    case = ce_case("none")
    logits = torch.tensor([[1e30, 1e30, 1e30, -1e30, 0.0]], dtype=dtype, device=device)
    check_reference(case, (logits, torch.tensor([0], device=device)), dtype)


@pytest.mark.parametrize("smoothing", [0.0, SMOOTHING])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_all_targets_ignored(device, reduction, smoothing):
    """As torch: mean is NaN (0 / 0), sum 0, none all zeros, and the logit gradient is all zeros."""
    case = ce_case(reduction, smoothing)
    args = (rand(4, 10, device=device), torch.full((4,), IGNORE, device=device))
    check_reference(case, args, torch.float32, equal_nan=True)
    outs, grads, _ = forward_backward(case.kk, args, case.diff)
    assert torch.isnan(outs[0]).all() if reduction == "mean" else not outs[0].any()
    assert torch.equal(grads[0], torch.zeros_like(grads[0]))


def test_cross_entropy_backward_checks_its_stats(device):
    """The backward reads two statistics per row (max, log-sum); a short tensor is an error, not a read
    out of bounds."""
    from kernelkit.ops.softmax import cross_entropy_backward

    logits, target = rand(4, 10, device=device), torch.zeros(4, dtype=torch.long, device=device)
    stats = torch.ops.kernelkit.cross_entropy(logits, target)[1]
    assert stats.shape == (4, 2)
    with pytest.raises(ValueError, match=r"'stats' must hold 8 float32 values \(2 per row\)"):
        cross_entropy_backward(logits, target, stats[:, 0].contiguous(), torch.ones(4, device=device), -100, 0.0)


@pytest.mark.parametrize("bad", [10, -1, -101, 2**40])
def test_cross_entropy_out_of_range_targets(device, bad):
    logits, target = rand(3, 10, device=device), torch.tensor([1, bad, 2], device=device)
    if device == "cpu":
        # The Rust kernel checks every target before writing anything.
        with pytest.raises(ValueError, match=rf"argument `target` holds {bad} at row 1, outside \[0, 10\)"):
            K.cross_entropy(logits, target)
        return
    # CUDA: validating targets on the host would cost a device synchronization per call, and a kernel cannot
    # raise; kernels/softmax.cu documents a NaN loss for a row whose target is outside [0, cols) and is not
    # ignore_index. Until python/kernelkit/ops/softmax.py's CUDA registration documents one behaviour, accept
    # either an explicit error naming the target or NaN in exactly that row (the other rows still correct).
    try:
        loss = K.cross_entropy(logits, target, reduction="none")
    except (ValueError, RuntimeError) as e:
        assert "target" in str(e)
    else:
        assert torch.isnan(loss[1])
        ok = torch.tensor([0, 2], device=device)
        close(loss[ok], ref_cross_entropy(logits[ok].double(), target[ok], "none", 0.0), torch.float32, floor=0.0)


def test_argument_errors(device):
    """Clear errors, on every device, for what the kernels cannot take."""
    x, w = rand(3, 10, device=device), rand(10, device=device)
    with pytest.raises(ValueError, match="reduction must be"):
        K.cross_entropy(x, torch.tensor([1, 2, 3], device=device), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        K.cross_entropy(x, torch.tensor([1, 2, 3], device=device), label_smoothing=1.5)
    with pytest.raises(ValueError, match="out_dtype must be a floating-point dtype"):
        K.cross_entropy(x, torch.tensor([1, 2, 3], device=device), out_dtype=torch.int64)
    with pytest.raises(ValueError, match="target"):  # fewer targets than rows: never read past the end
        K.cross_entropy(x, torch.tensor([1, 2], device=device))
    with pytest.raises(ValueError, match="weight"):
        K.rms_norm(x, rand(9, device=device))
    with pytest.raises(ValueError, match="weight"):
        K.layer_norm(x, w.double(), w.double())
    with pytest.raises(ValueError, match="up"):
        K.swiglu(x, rand(3, 9, device=device))
    with pytest.raises(ValueError, match="even"):
        q = rand(1, 1, 4, 5, device=device)
        K.rope(q, q, rand(4, 5, device=device), rand(4, 5, device=device))
    q, cos = rand(2, 4, 6, 8, device=device), rand(6, 8, device=device)
    with pytest.raises(ValueError, match="argument 'k' has S=5 but 'q' has S=6"):  # q and k: one batch, seq, dim
        K.rope(q, rand(2, 2, 5, 8, device=device), cos, cos)
    with pytest.raises(ValueError, match="argument 'k' has dtype float64"):
        K.rope(q, rand(2, 2, 6, 8, dtype=torch.float64, device=device), cos, cos)
    with pytest.raises(ValueError, match="cos/sin must be"):
        K.rope(q, q, rand(3, 6, 8, device=device), rand(3, 6, 8, device=device))


# ---------------------------------------------------------------- determinism, autograd, registration, compile


@pytest.mark.parametrize("shape", [(513, 1024), (3, WIDE)], ids=["513x1024", "3x262144"])
@pytest.mark.parametrize("op", OPS)
def test_deterministic(device, op, shape):
    """Two runs on the same inputs: bitwise identical outputs and gradients (weight/bias gradients, reduced
    over rows, in particular)."""
    case = CASES[op]
    args = case.make(*shape, torch.float32, device)
    outs1, grads1, cots = forward_backward(case.kk, args, case.diff)
    outs2, grads2, _ = forward_backward(case.kk, args, case.diff, cots)
    for a, b in zip(outs1 + tuple(grads1), outs2 + tuple(grads2)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("op", OPS)
def test_gradcheck(device, op):
    case = CASES[op]
    args = case.make(3, 7, torch.float64, device)
    leaves = tuple(a.detach().clone().requires_grad_(i in case.diff) for i, a in enumerate(args))
    assert torch.autograd.gradcheck(lambda *a: case.kk(*a), leaves)


@pytest.mark.parametrize("smoothing", [0.0, SMOOTHING])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_cross_entropy(device, reduction, smoothing):
    logits = rand(4, 6, dtype=torch.float64, device=device).requires_grad_()
    t = targets(4, 6, device)
    fn = lambda x: K.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (logits,))


LLM_OPS = [
    "rms_norm",
    "rms_norm_backward",
    "add_rms_norm",
    "add_rms_norm_backward",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm_inference",
    "add_rms_norm_inference",
    "layer_norm_inference",
    "softmax",
    "softmax_backward",
    "cross_entropy",
    "cross_entropy_backward",
    "cross_entropy_reduced",
    "swiglu",
    "swiglu_backward",
    "rope",
]


def test_every_llm_op_has_a_kernel_for_the_device(device):
    key = "CUDA" if device == "cuda" else "CPU"
    missing = [n for n in LLM_OPS if not torch._C._dispatch_has_kernel_for_dispatch_key(f"kernelkit::{n}", key)]
    assert not missing, f"no {key} kernel for {missing}"


def _opcheck_args(name, device):
    """Arguments for torch.ops.kernelkit.<name>: forward ops get inputs that require grad (so that opcheck also
    checks the autograd registration); backward ops get the statistics their forward op saved."""
    f = dict(device=device)
    x, g, g2, w, b = rand(4, 16, **f), rand(4, 16, **f), rand(4, 16, **f), rand(16, **f), rand(16, **f)
    t = targets(4, 16, device)
    q, k, cos, sin = rand(2, 4, 5, 8, **f), rand(2, 2, 5, 8, **f), rand(2, 5, 8, **f), rand(2, 5, 8, **f)
    kk = torch.ops.kernelkit

    def grad(*ts):
        return tuple(a.clone().requires_grad_() for a in ts)

    if name == "rms_norm":
        return (*grad(x, w), RMS_EPS)
    if name == "rms_norm_backward":
        return (g, x, w, kk.rms_norm(x, w, RMS_EPS)[1])
    if name == "add_rms_norm":
        return (*grad(x, g2, w), RMS_EPS)
    if name == "add_rms_norm_backward":
        _, h, rstd = kk.add_rms_norm(x, g2, w, RMS_EPS)
        return (g, g2, h, w, rstd)
    if name == "layer_norm":
        return (*grad(x, w, b), LN_EPS)
    if name == "layer_norm_backward":
        _, mean, rstd = kk.layer_norm(x, w, b, LN_EPS)
        return (g, x, w, mean, rstd)
    if name == "rms_norm_inference":
        return (x, w, RMS_EPS)
    if name == "add_rms_norm_inference":
        return (x, g2, w, RMS_EPS)
    if name == "layer_norm_inference":
        return (x, w, b, LN_EPS)
    if name == "softmax":
        return grad(x)
    if name == "softmax_backward":
        return (g, kk.softmax(x))
    if name == "cross_entropy":
        return (*grad(x), t, IGNORE, SMOOTHING)
    if name == "cross_entropy_backward":
        stats = kk.cross_entropy(x, t, IGNORE, SMOOTHING)[1]
        return (x, t, stats, rand(4, **f), IGNORE, SMOOTHING)
    if name == "cross_entropy_backward(divisor)":  # a reduced loss's gradient, in its own dtype
        stats = kk.cross_entropy(x, t, IGNORE, SMOOTHING)[1]
        return (x, t, stats, rand(dtype=torch.bfloat16, **f), IGNORE, SMOOTHING, torch.full((), 3.0, **f))
    if name == "cross_entropy_reduced":
        return (*grad(x), t, IGNORE, SMOOTHING, True, None)
    if name == "cross_entropy_reduced(sum, bfloat16)":
        return (*grad(x), t, IGNORE, SMOOTHING, False, torch.bfloat16)
    if name == "cross_entropy_reduced(divisor)":  # a mean over a given count, read on the device
        return (*grad(x), t, IGNORE, SMOOTHING, True, torch.float32, torch.tensor(7, device=device))
    if name == "swiglu":
        return grad(x, g)
    if name == "swiglu_backward":
        return (g, x, g2)
    if name == "rope":
        return (*grad(q, k), cos, sin, False)
    if name == "rope(backward=True)":
        return (q, k, cos, sin, True)
    raise KeyError(name)


@pytest.mark.parametrize(
    "name",
    LLM_OPS
    + [
        "rope(backward=True)",
        "cross_entropy_backward(divisor)",
        "cross_entropy_reduced(sum, bfloat16)",
        "cross_entropy_reduced(divisor)",
    ],
)
def test_opcheck(device, name):
    """torch.library.opcheck of every registered forward and backward op: schema, fake impl, autograd
    registration and AOT dispatch (dynamic shapes)."""
    overload = getattr(torch.ops.kernelkit, name.split("(")[0]).default
    torch.library.opcheck(overload, _opcheck_args(name, device))


@pytest.mark.parametrize("op", OPS)
def test_compile(device, op):
    """torch.compile(fullgraph=True) of each op, forward and backward, equal to eager. The second shape makes
    dynamo recompile with dynamic shapes (the fake impls on SymInts)."""
    case = CASES[op]
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: case.kk(*a), fullgraph=True)
    for rows in (4, 7):
        args = case.make(rows, 16, torch.float32, device)
        outs, grads, cots = forward_backward(case.kk, args, case.diff)
        c_outs, c_grads, _ = forward_backward(compiled, args, case.diff, cots)
        for a, b in zip(outs + tuple(grads), c_outs + tuple(c_grads)):
            close(b, a, torch.float32, floor=case.floor, what=f"compiled, {rows} rows")


@pytest.mark.parametrize("divisor", ["tensor", "number"])
def test_compile_cross_entropy_divisor(device, divisor):
    """torch.compile(fullgraph=True) of a mean over a given count (a tensor input, or a number in the graph), forward
    and backward, equal to eager."""
    n = torch.tensor(9, device=device) if divisor == "tensor" else 9

    def loss(x, t):
        return (K.cross_entropy(x, t, divisor=n),)

    torch._dynamo.reset()
    args = (rand(6, 16, device=device), targets(6, 16, device))
    outs, grads, cots = forward_backward(loss, args, (0,))
    c_outs, c_grads, _ = forward_backward(torch.compile(loss, fullgraph=True), args, (0,), cots)
    for a, b in zip(outs + tuple(grads), c_outs + tuple(c_grads)):
        close(b, a, torch.float32)


def test_compile_llm_block(device):
    """Every op in one compiled graph (a toy transformer block and its loss), forward and backward."""
    f = dict(device=device)
    args = (rand(24, 16, **f), rand(24, 16, **f), rand(16, **f), rand(16, **f), rand(2, 4, 16, **f))
    t = targets(24, 16, device)

    def block(x, res, w, b, table):
        h, res = K.add_rms_norm(x, res, w)
        a = K.swiglu(h, K.layer_norm(res, w, b))
        q, k = K.rope(a.view(2, 3, 4, 16), a.view(2, 3, 4, 16).flip(1), table.cos(), table.sin())
        p = K.softmax((q * k).reshape(24, 16))
        return (K.cross_entropy(K.rms_norm(p, w), t, label_smoothing=SMOOTHING),)

    torch._dynamo.reset()
    outs, grads, cots = forward_backward(block, args, (0, 1, 2, 3))  # rope passes no gradient to cos/sin
    c_outs, c_grads, _ = forward_backward(torch.compile(block, fullgraph=True), args, (0, 1, 2, 3), cots)
    for a, b in zip(outs + tuple(grads), c_outs + tuple(c_grads)):
        close(b, a, torch.float32)


# ---------------------------------------------------------------- kernelkit.testing.check_op


def test_check_op_swiglu(device):
    """swiglu is elementwise, exactly what check_op is built for: 1-D gate and up of its default sizes (0, 1,
    255, 257, 2**20 + 3), every dtype, non-contiguous, gradcheck, opcheck, compile, determinism."""

    def make(size, dtype, dev, gen):
        return tuple(torch.randn(size, dtype=torch.float64, device=dev, generator=gen).to(dtype) for _ in range(2))

    report = check_op(K.swiglu, lambda g, u: F.silu(g) * u, make, dtypes=DTYPES, device=device)
    assert report.passed


def test_check_op_softmax(device):
    """The registered softmax op over (size, 33) rows: size counts rows here."""

    def make(size, dtype, dev, gen):
        return ((torch.randn(size, 33, dtype=torch.float64, device=dev, generator=gen) * 3).to(dtype),)

    report = check_op(
        torch.ops.kernelkit.softmax.default,
        lambda x: torch.softmax(x, -1),
        make,
        dtypes=DTYPES,
        device=device,
        sizes=(0, 1, 255, 257, 4097),
    )
    assert report.passed


# ---------------------------------------------------------------- a training step


class _CountOps(TorchDispatchMode):
    """Records the torch.ops.kernelkit ops that reach the dispatcher."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "kernelkit":
            self.names.add(func._opname)
        return func(*args, **(kwargs or {}))


def test_patched_llama_trains_one_step(device, monkeypatch, tiny_llama):
    """A training step of a tiny Hugging Face Llama patched by
    kernelkit.patch (RMSNorm, SwiGLU MLP, rope, loss), against the unpatched model: loss, every parameter's
    gradient and the parameters after one SGD step."""
    base = tiny_llama().to(device)
    patched = copy.deepcopy(base)
    ids = torch.randint(0, 128, (2, 16)).to(device)
    labels = ids.clone()
    labels[:, :3] = IGNORE
    # kernelkit.patch swaps apply_rotary_pos_emb at module level (for every Llama in the process): run the
    # reference with the original, and put back whatever was there before this test afterwards.
    modeling = sys.modules[type(base.model.layers[0].self_attn).__module__]
    rope_before = modeling.apply_rotary_pos_emb
    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", getattr(rope_before, "_kernelkit_original", rope_before))

    def step(model, count=None):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if count is None:
            loss = model(input_ids=ids, labels=labels).loss
        else:
            with count:
                loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        return loss.detach(), grads

    base_loss, base_grads = step(base)
    report = kernelkit.patch(patched)
    assert len(report.replaced) == 4, str(report)
    count = _CountOps()
    loss, grads = step(patched, count)
    assert {"rms_norm", "swiglu", "rope", "cross_entropy_reduced"} <= count.names
    torch.testing.assert_close(loss, base_loss, atol=2e-5, rtol=2e-5)
    for name, g in grads.items():
        torch.testing.assert_close(g, base_grads[name], atol=5e-5, rtol=5e-4, msg=lambda m, n=name: f"{n}: {m}")
    for (name, p), pb in zip(patched.named_parameters(), base.parameters()):
        torch.testing.assert_close(p, pb, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n} after a step: {m}")


# ---------------------------------------------------------------- a second GPU


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("op", OPS)
def test_second_gpu(op):
    """Each op on cuda:1 while cuda:0 is the current device: outputs and gradients live on cuda:1 and match the
    cuda:0 run (within tolerance: the two GPUs may differ in SM count, and so in reduction chunking)."""
    case = CASES[op]
    args = case.make(9, 257, torch.float32, "cpu")
    on = {d: tuple(a.to(d) for a in args) for d in ("cuda:0", "cuda:1")}
    with torch.cuda.device(0):
        outs1, grads1, cots = forward_backward(case.kk, on["cuda:1"], case.diff)
        outs0, grads0, _ = forward_backward(case.kk, on["cuda:0"], case.diff, [c.to("cuda:0") for c in cots])
    torch.cuda.synchronize(1)
    for a1, a0 in zip(outs1 + tuple(grads1), outs0 + tuple(grads0)):
        assert a1.device == torch.device("cuda:1")
        close(a1.to("cuda:0"), a0, torch.float32, floor=case.floor)


class _StubKernel:
    """A compiled kernel's stand-in for the launch-shape tests (no GPU needed): named by the expression asked for, with
    a fixed occupancy and number of active clusters (``clusters``: a number, or a function of a cluster's CTAs)."""

    def __init__(self, expr: str, occupancy: int = 2, clusters=0):
        self.name, self._occupancy, self._clusters = expr, occupancy, clusters

    def occupancy(self, *args):
        return self._occupancy

    def max_active_clusters(self, block, cluster, *args):
        return self._clusters(math.prod(cluster)) if callable(self._clusters) else self._clusters


def _h200_clusters(ctas: int) -> int:
    """Clusters of ``ctas`` CTAs at one block per SM that an H200 holds at once: 15 of 7 (measured,
    h200-2026-11-28-s47/shifted-chunks-shapes.log), else as many as its 132 SMs hold."""
    return {7: 15}.get(ctas, 132 // ctas)


def _stub_kernels(monkeypatch, name: str, gbps_per_sm: float = 36.5, capability=(9, 0), **stub):
    """kernelkit.ops.<name> (the module: ops exports functions of the same names) with its kernels as _StubKernel
    (``stub``: their occupancy and clusters) on a GPU of ``gbps_per_sm`` DRAM bandwidth per SM and compute
    ``capability`` (an H200's unless given)."""
    import importlib

    from kernelkit.ops import _runtime

    module = importlib.import_module(f"kernelkit.ops.{name}")
    monkeypatch.setattr(module, "kernel", lambda family, expr: _StubKernel(expr, **stub))
    monkeypatch.setattr(_runtime, "dram_gbps_per_sm", lambda dev: gbps_per_sm)
    monkeypatch.setattr(module, "compute_capability", lambda dev: capability, raising=False)
    return module


@pytest.mark.parametrize("gbps_per_sm, items", [(25.4, 1), (36.5, 2)], ids=["H100", "H200"])
def test_rope_items_per_thread_by_dram_bandwidth(monkeypatch, gbps_per_sm, items):
    """rope takes one item per thread below LOW_DRAM_GBPS_PER_SM of DRAM bandwidth per SM (an H100), two from it (an
    H200), in 128-thread blocks."""
    activations = _stub_kernels(monkeypatch, "activations", gbps_per_sm)
    for backward in (0, 1):
        k, block, per_block = activations._rope_shape.__wrapped__(torch.float32, bool(backward), 0)
        assert (k.name, block, per_block) == (f"kk_rope<float, {backward}, {items}>", 128, 128 * items)


@pytest.mark.parametrize("gbps_per_sm", [25.4, 36.5], ids=["H100", "H200"])
def test_layer_norm_forward_loads_by_dram_bandwidth(monkeypatch, gbps_per_sm):
    """The 16-bit LayerNorm forward's held rows beyond 2048 columns load with kk::kKeep below LOW_DRAM_GBPS_PER_SM of
    DRAM bandwidth per SM (an H100: _FWD_KEEP_LOW_GBPS), with the kernel's default from it (an H200); narrower rows,
    float32 and RMSNorm keep the default. All take their 16-byte-only instantiation (VEC_ONLY)."""
    norms = _stub_kernels(monkeypatch, "norms", gbps_per_sm)
    h100 = gbps_per_sm < LOW_DRAM_GBPS_PER_SM
    default = ", false, 0, kk_norms::kLnFwdLd, false, true>"
    keep = ", false, 0, kk::kKeep, false, true>" if h100 else default
    want = {
        ("kk_layer_norm_fwd", torch.bfloat16, 4096): "kk_layer_norm_fwd<__nv_bfloat16, false, 4, 2" + keep,
        ("kk_layer_norm_fwd", torch.float16, 8192): "kk_layer_norm_fwd<__half, false, 4, 2" + keep,
        ("kk_layer_norm_fwd", torch.bfloat16, 2048): "kk_layer_norm_fwd<__nv_bfloat16, false, 4, 2" + default,
        ("kk_layer_norm_fwd", torch.float32, 256): "kk_layer_norm_fwd<float, false, 2, 4" + default,  # _NARROW_FIT
        ("kk_layer_norm_fwd", torch.float32, 128): "kk_layer_norm_fwd<float, false, 4, 1" + default,
        (
            "kk_rms_norm_fwd",
            torch.bfloat16,
            16384,
        ): "kk_rms_norm_fwd<__nv_bfloat16, false, 4, 2, false, 0, false, true>",
    }
    for (name, dtype, cols), expr in want.items():
        shape = norms._forward_shape.__wrapped__(name, dtype, cols, 0, VECTOR)
        assert shape.kernel.name == expr, (name, dtype, cols, shape.kernel.name)


def test_held_norm_forwards_take_their_16_byte_only_kernel(monkeypatch):
    """RMSNorm, add_rms_norm and LayerNorm rows one block holds take the kernel's VEC_ONLY instantiation on the 16-byte
    path alone (it checks the path after its rows, kernels/norms.cu), LayerNorm's with its loads (by DRAM bandwidth:
    test_layer_norm_forward_loads_by_dram_bandwidth); shifted and scalar rows and rows the wide kernel takes keep
    theirs (float32 RMSNorm rows beyond 4096 columns the wide kernel that fetches w early, PREW, where the SM holds
    its fit's blocks: test_wide_rms_forward_prefetches_w_where_its_blocks_fit)."""
    norms = _stub_kernels(monkeypatch, "norms", 36.5, occupancy=3)
    vec_only = ", false, 0, false, true>"
    want = {
        ("kk_rms_norm_fwd", torch.float32, 8192, SHIFTED): "kk_rms_norm_fwd<float, false, 4, 2, false, 0, true>",
        ("kk_rms_norm_fwd", torch.float32, 1024, VECTOR): "kk_rms_norm_fwd<float, false, 8, 2" + vec_only,
        ("kk_add_rms_norm_fwd", torch.bfloat16, 8192, VECTOR): "kk_add_rms_norm_fwd<__nv_bfloat16, false, 2, 3"
        + vec_only,
        ("kk_add_rms_norm_fwd", torch.float64, 512, VECTOR): "kk_add_rms_norm_fwd<double, false, 4, 2" + vec_only,
        ("kk_rms_norm_fwd", torch.float32, 1024, SCALAR): "kk_rms_norm_fwd<float, false, 8, 2>",
        ("kk_rms_norm_fwd", torch.float32, 256, SCALAR): "kk_rms_norm_fwd<float, false, 2, 4>",  # _NARROW_FIT
        ("kk_rms_norm_fwd", torch.bfloat16, 256, VECTOR): "kk_rms_norm_fwd<__nv_bfloat16, false, 4, 2" + vec_only,
        ("kk_add_rms_norm_fwd", torch.bfloat16, 256, VECTOR): "kk_add_rms_norm_fwd<__nv_bfloat16, false, 2, 4"
        + vec_only,
        ("kk_rms_norm_fwd", torch.float32, 1024, SHIFTED): "kk_rms_norm_fwd<float, false, 4, 2, false, 0, true>",
        ("kk_rms_norm_fwd", torch.bfloat16, 8192, VECTOR): "kk_rms_norm_fwd_wide<__nv_bfloat16, 2, 4>",
        ("kk_rms_norm_fwd", torch.float32, 4096, VECTOR): "kk_rms_norm_fwd_wide<float, 2, 4>",
        ("kk_rms_norm_fwd", torch.float32, 8192, VECTOR): "kk_rms_norm_fwd_wide<float, 4, 3, true>",
        ("kk_layer_norm_fwd", torch.float32, 256, VECTOR): "kk_layer_norm_fwd<float, false, 2, 4, false, 0, "
        "kk_norms::kLnFwdLd, false, true>",
        ("kk_layer_norm_fwd", torch.float32, 16384, VECTOR): "kk_layer_norm_fwd<float, false, 8, 2, false, 0, "
        "kk_norms::kLnFwdLd, false, true>",
        ("kk_layer_norm_fwd", torch.bfloat16, 1024, VECTOR): "kk_layer_norm_fwd<__nv_bfloat16, false, 4, 2, false, 0, "
        "kk_norms::kLnFwdLd, false, true>",
        ("kk_layer_norm_fwd", torch.float16, 2048, SCALAR): "kk_layer_norm_fwd<__half, false, 4, 2>",
        ("kk_layer_norm_fwd", torch.float32, 1024, VECTOR): "kk_layer_norm_fwd_wide<float, 2, 4>",
        ("kk_layer_norm_fwd", torch.float32, 1024, SCALAR): "kk_layer_norm_fwd<float, false, 4, 1>",
    }
    for (name, dtype, cols, path), expr in want.items():
        shape = norms._forward_shape.__wrapped__(name, dtype, cols, 0, path)
        assert shape.kernel.name == expr, (name, dtype, cols, path, shape.kernel.name)


@pytest.mark.parametrize(
    "occupancy, expr", [(3, "kk_rms_norm_fwd_wide<float, 4, 3, true>"), (2, "kk_rms_norm_fwd_wide<float, 4, 3>")]
)
def test_wide_rms_forward_prefetches_w_where_its_blocks_fit(monkeypatch, occupancy, expr):
    """float32 RMSNorm rows of 4097-8192 columns take the _wide kernel at (4, 3) with PREW (its 32 KB of shared memory a
    block) where an SM holds 3 of its blocks (an H100 or H200), else the same kernel without it (GPUs of 100 KB of
    shared memory per SM hold 2)."""
    norms = _stub_kernels(monkeypatch, "norms", occupancy=occupancy)
    assert norms._forward_shape.__wrapped__("kk_rms_norm_fwd", torch.float32, 8192, 0, VECTOR).kernel.name == expr


@pytest.mark.parametrize("gbps_per_sm", [25.4, 36.5], ids=["H100", "H200"])
def test_bulk_backward_fits_by_dram_bandwidth(monkeypatch, gbps_per_sm):
    """The 16-bit norm backwards take _BWD_BULK_FIT_LOW_GBPS below LOW_DRAM_GBPS_PER_SM of DRAM bandwidth per SM (an
    H100: one block of 256 threads per SM, up to 4096 columns), _BWD_BULK_FIT from it (an H200: LayerNorm's up to 8192
    columns); other rows keep the register kernels."""
    from kernelkit.ops import _runtime

    norms = _stub_kernels(monkeypatch, "norms", gbps_per_sm, clusters=66)
    monkeypatch.setattr(norms, "has_clusters", lambda dev: True)
    monkeypatch.setattr(norms, "sm_count", lambda dev: 132)
    monkeypatch.setattr(_runtime, "sm_count", lambda dev: 132)
    h100 = gbps_per_sm < LOW_DRAM_GBPS_PER_SM
    want = {
        ("kk_layer_norm_bwd", 4096): ("256, 2, 3", 132 if h100 else 2 * 66),
        ("kk_rms_norm_bwd", 4096): ("256, 2, 3", 132) if h100 else ("256, 4, 3", 2 * 66),
        ("kk_layer_norm_bwd", 8192): None if h100 else ("512, 1, 3", 132),
        ("kk_rms_norm_bwd", 8192): None,
    }
    norms._backward_shape.cache_clear()
    try:
        for (name, cols), fit in want.items():
            shape, _ = norms._backward_shape(name, torch.bfloat16, cols, 0, VECTOR, False)
            if fit is None:
                assert "_bulk<" not in shape.kernel.name, (name, cols, shape.kernel.name)
            else:
                assert shape.kernel.name == f"{name}_bulk<__nv_bfloat16, {fit[0]}, false, 1>", (name, cols)
                assert shape.cap == fit[1], (name, cols, shape.cap)
    finally:
        norms._backward_shape.cache_clear()


@pytest.mark.parametrize("clusters, pair", [(0, 1), (131, 2)], ids=["no-cluster-fits", "pairs"])
def test_bulk_backward_pairs_its_blocks_where_clusters_fit(monkeypatch, clusters, pair):
    """The held 16-bit bulk backward runs as clusters of two blocks that add up their partials, on a grid that is a
    multiple of two; where the device reports that no such cluster fits, as single blocks (no GPU needed: the kernel
    is a stand-in that reports occupancy 2 and ``clusters``)."""
    from kernelkit.ops import _runtime

    norms = _stub_kernels(monkeypatch, "norms", clusters=clusters)  # an H200's bandwidth: LayerNorm takes its bulk fit
    monkeypatch.setattr(norms, "has_clusters", lambda dev: True)
    monkeypatch.setattr(norms, "sm_count", lambda dev: 132)
    monkeypatch.setattr(_runtime, "sm_count", lambda dev: 132)
    norms._backward_shape.cache_clear()
    try:
        shape, _ = norms._backward_shape("kk_layer_norm_bwd", torch.bfloat16, 4096, 0, VECTOR, False)
    finally:
        norms._backward_shape.cache_clear()
    assert shape.pair == pair and shape.cap == (264 if pair == 1 else 2 * 131)


@pytest.mark.parametrize("capability", [(9, 0), (8, 0)], ids=["sm_90", "sm_80"])
def test_cross_entropy_backward_rows_up_to_1024_columns_take_48_registers(monkeypatch, capability):
    """kk_cross_entropy_bwd runs its 48-register instantiation (MAXR) on rows of at most _CE_BWD_LEAN_COLS columns
    (16-bit rows: beyond _CE_BWD_TEAM_COLS too, whose narrower rows go in teams on the default kernel), KEEP_AT_ONE or
    not, unless the logits or the scale are float64 or the GPU is older than sm_90 (where it spills); wider rows take
    the default (64 registers for 16-bit rows, 80 otherwise; no GPU needed: the kernel lookup and the occupancy are
    stand-ins)."""
    softmax = _stub_kernels(monkeypatch, "softmax", capability=capability)
    monkeypatch.setattr(softmax, "resident_blocks", lambda k, block, dev, smem=0: 5)
    bf16, f32, f64 = torch.bfloat16, torch.float32, torch.float64
    want = {
        (bf16, 520, f32, False): "kk_cross_entropy_bwd<__nv_bfloat16, float, false, 48>",
        (bf16, 512, f32, False): "kk_cross_entropy_bwd<__nv_bfloat16, float>",
        (bf16, 256, bf16, True): "kk_cross_entropy_bwd<__nv_bfloat16, __nv_bfloat16, true>",
        (f32, 64, f32, False): "kk_cross_entropy_bwd<float, float, false, 48>",
        (f32, 256, bf16, True): "kk_cross_entropy_bwd<float, __nv_bfloat16, true, 48>",
        (bf16, 1024, f32, False): "kk_cross_entropy_bwd<__nv_bfloat16, float, false, 48>",
        (bf16, 1032, f32, False): "kk_cross_entropy_bwd<__nv_bfloat16, float>",
        (bf16, 4096, f32, True): "kk_cross_entropy_bwd<__nv_bfloat16, float, true>",
        (bf16, 256, f64, False): "kk_cross_entropy_bwd<__nv_bfloat16, double>",
        (f64, 256, f64, False): "kk_cross_entropy_bwd<double, double>",
    }
    for (dtype, cols, second, keep), name in want.items():
        if capability < (9, 0):  # the default MAXR, and KEEP_AT_ONE's default (false) left out
            name = name.replace(", 48>", ">").replace(", false>", ">")
        k, *_ = softmax._ce_shape.__wrapped__("kk_cross_entropy_bwd", dtype, cols, 0, second, keep)
        assert k.name == name, (dtype, cols, second, keep)
    k, *_ = softmax._ce_shape.__wrapped__("kk_cross_entropy_loss", bf16, 256, 0, f32)
    assert k.name == "kk_cross_entropy_loss<__nv_bfloat16, float>"


def _assert_launches(shape_of, want):
    """shape_of(dtype, cols) launches each (dtype, cols) of ``want`` with its (kernel name, block)."""
    for (dtype, cols), (name, block) in want.items():
        s = shape_of(dtype, cols)
        assert (s.kernel.name, s.block) == (name, block), (dtype, cols, s)


@pytest.mark.parametrize("gbps_per_sm", [25.4, 36.5], ids=["H100", "H200"])
def test_softmax_held_rows_by_dram_bandwidth(monkeypatch, gbps_per_sm):
    """Softmax forward rows of 256-512 threads (4096-8192 columns) take fewer register packs per thread below
    LOW_DRAM_GBPS_PER_SM (an H100: _HELD_LOW_GBPS), the same fits as from it (an H200: _HELD) elsewhere (no GPU needed:
    the kernel lookup is a stand-in)."""
    softmax = _stub_kernels(monkeypatch, "softmax", gbps_per_sm)
    h100 = gbps_per_sm < LOW_DRAM_GBPS_PER_SM
    bf16, f32 = "kk_softmax_fwd<__nv_bfloat16, ", "kk_softmax_fwd<float, "
    want = {
        (torch.bfloat16, 2048): (bf16 + "2, 4, 512, true>", 64),
        (torch.bfloat16, 4096): (bf16 + "3, 2, 512, true>", 256) if h100 else (bf16 + "2, 4, 512, true>", 128),
        (torch.bfloat16, 8192): (bf16 + "3, 2, 512, true>", 512) if h100 else (bf16 + "2, 8, 512, true>", 128),
        (torch.bfloat16, 16384): (bf16 + "2, 8, 512, true>", 256),
        (torch.float32, 2048): (f32 + "2, 8, 512, true>", 64),
        (torch.float32, 4096): (f32 + "2, 4, 512, true>", 256) if h100 else (f32 + "2, 8, 512, true>", 128),
        (torch.float32, 8192): (f32 + "2, 4, 512, true>", 512) if h100 else (f32 + "2, 8, 512, true>", 256),
    }
    _assert_launches(
        lambda dtype, cols: softmax._softmax_shape.__wrapped__("kk_softmax_fwd", dtype, cols, 0, VECTOR), want
    )


@pytest.mark.parametrize("gbps_per_sm", [25.4, 36.5], ids=["H100", "H200"])
def test_held_cross_entropy_rows_by_dram_bandwidth(monkeypatch, gbps_per_sm):
    """The held cross-entropy's 16-bit rows of 2048-16384 columns take 4 packs per thread below LOW_DRAM_GBPS_PER_SM
    (an H100: _HELD_CE_FITS_LOW_GBPS, 128 threads at 4096 columns, so two block reductions), the 8-pack fit from 4096
    columns from it (an H200); float32 rows the same on both (no GPU needed: the kernel lookup is a stand-in)."""
    softmax = _stub_kernels(monkeypatch, "softmax", gbps_per_sm)
    h100 = gbps_per_sm < LOW_DRAM_GBPS_PER_SM
    bf16, f32 = "kk_cross_entropy_held<__nv_bfloat16, ", "kk_cross_entropy_held<float, "
    want = {
        (torch.bfloat16, 2048): (bf16 + "4, 2>", 64),
        (torch.bfloat16, 4096): (bf16 + "4, 2>", 128) if h100 else (bf16 + "8, 2>", 64),
        (torch.bfloat16, 16384): (bf16 + "4, 2>", 512) if h100 else (bf16 + "8, 2>", 256),
        (torch.bfloat16, 16392): (bf16 + "8, 2>", 288),
        (torch.bfloat16, 32768): (bf16 + "8, 2>", 512),
        (torch.float32, 4096): (f32 + "8, 2>", 128),
    }
    _assert_launches(lambda dtype, cols: softmax._held_ce_shape.__wrapped__(dtype, cols, 0), want)
    assert softmax._held_ce_shape.__wrapped__(torch.bfloat16, 1024, 0) is None  # the kernels apart


def test_softmax_warp_rows_take_the_first_fit_that_holds_them(monkeypatch):
    """Softmax rows of at most 32 x packs (one warp each, 8 rows per 256-thread block) take the first instantiation in
    _WARP_FITS whose register packs hold them; wider rows take a block each (no GPU needed: the kernel lookup and the
    occupancy are stand-ins)."""
    from kernelkit.ops import _runtime

    softmax = _stub_kernels(monkeypatch, "softmax")
    monkeypatch.setattr(softmax, "resident_blocks", lambda k, block, dev, smem=0: 7)
    monkeypatch.setattr(softmax, "row_cache_bytes", lambda *args: 0)
    monkeypatch.setattr(_runtime, "has_clusters", lambda dev: False)

    def shape(name, cols, dtype=torch.bfloat16):
        return softmax._softmax_shape.__wrapped__(name, dtype, cols, 0, VECTOR)

    # The shipped fits (bf16: 8 columns a pack, float32 4): rows of at most 64 packs on 32 registers, wider forward
    # rows on the kernel's default instantiation, wider backward rows a block each.
    assert shape("kk_softmax_fwd", 512).kernel.name == "kk_softmax_fwd<__nv_bfloat16, 8, 2, 256, true>"
    assert shape("kk_softmax_fwd", 1024).kernel.name == "kk_softmax_fwd<__nv_bfloat16, 1, 4, 512, false>"
    assert shape("kk_softmax_bwd", 512).kernel.name == "kk_softmax_bwd<__nv_bfloat16, 2, 8, 256, true>"
    assert shape("kk_softmax_bwd", 520).per_block == 1
    assert shape("kk_softmax_fwd", 256, torch.float32).kernel.name == "kk_softmax_fwd<float, 8, 2, 256, true>"
    assert shape("kk_softmax_fwd", 260, torch.float32).kernel.name == "kk_softmax_fwd<float, 2, 4, 512, false>"
    assert shape("kk_softmax_fwd", 64, torch.float64).kernel.name == "kk_softmax_fwd<double, 1, 4, 512, false>"
    # Shifted rows take the SHIFT instantiations, on every launch (warp rows, held and streamed block rows; no
    # clusters here) and only there.
    for name in ("kk_softmax_fwd", "kk_softmax_bwd"):
        for cols in (7, 257, 4097, 20001):
            shifted = softmax._softmax_shape.__wrapped__(name, torch.bfloat16, cols, 0, SHIFTED)
            assert shifted.shifted and shifted.kernel.name.endswith(", true>"), (name, cols, shifted.kernel.name)
            assert not shape(name, cols - 1).shifted, (name, cols)
    fits = {("kk_softmax_fwd", 2): ((2, 8, 256, True), (4, 5, 256, True))}
    monkeypatch.setattr(softmax, "_WARP_FITS", fits)
    for cols, want in ((256, "kk_softmax_fwd<__nv_bfloat16, 8, 2, 256, true>"), (1024, "<__nv_bfloat16, 5, 4, 256")):
        s = shape("kk_softmax_fwd", cols)
        assert want in s.kernel.name and (s.block, s.per_block, s.cap) == (256, 8, 7), (cols, s)
    assert shape("kk_softmax_fwd", 1032).per_block == 1  # 129 packs: a block per row
    assert shape("kk_softmax_bwd", 256).per_block == 1  # no warp fit listed for it now


def test_shifted_rows_take_the_threads_of_their_whole_packs():
    """A shifted row holds at most cols // VEC whole packs, its extra elements going one to a thread (kk::RowShift):
    4097 bf16 columns take the threads of 4096, not twice as many with half their packs empty, and a row is held in
    one block up to 512 threads' packs plus its extra elements (kernels/norms.cu check_fits_shifted); rows narrower than
    two packs get 2 * VEC threads, one for each extra element."""
    bf16 = torch.bfloat16
    assert norms._row_block(4, bf16, 4097, True, True) == norms._row_block(4, bf16, 4096, True) == (128, 1, False)
    assert norms._row_block(4, bf16, 4097, True) == (256, 1, False)  # counted as aligned: half the packs empty
    assert norms._row_block(2, bf16, 8199, True, True) == (512, 1, False)
    assert norms._row_block(2, bf16, 8200, True, True)[2]  # 1025 packs: beyond one block
    assert norms._row_block(4, torch.float32, 7, True, True) == (8, 16, False)  # one pack, 3 extra elements


@pytest.mark.parametrize(
    "rows, period, per_block, cap",
    [
        (8192, 8, 1, 15),
        (8192, 4, 1, 15),
        (8192, 8, 1, 14),
        (16384, 8, 1, 66),
        (32768, 8, 4, 264),
        (32768, 4, 1, 132),
        (100000, 8, 2, 15),
        (1000, 2, 1, 7),
        (37, 8, 4, 132),
        (3, 8, 1, 264),
    ],
)
def test_norm_backward_chunks_of_shifted_rows_keep_every_cluster_at_work(rows, period, per_block, cap):
    """A backward on shifted rows cuts each of ``period`` shift classes into chunks (norms._shifted_chunks) that
    ``cap`` clusters loop over as the kernel does (chunk c: class c % period, its (c // period)-th rows_per_chunk
    rows; block b takes chunks b, b + grid, ...). Every row is in one chunk, and the busiest block takes at most 3%
    more row groups than an even share (plus one), also where cap is not a multiple of period: 15 clusters and 8 classes
    had been cut to 8 chunks, half the clusters idle."""
    rows_per_chunk, chunks = norms._shifted_chunks(rows, period, per_block, cap)
    per_class = cdiv(rows, period)
    assert chunks == period * cdiv(per_class, rows_per_chunk)  # the kernel's count
    grid = min(chunks, cap)
    load, covered = [0] * grid, 0
    for c in range(chunks):
        in_class = cdiv(rows - c % period, period) if rows > c % period else 0
        n = max(0, min(rows_per_chunk, in_class - c // period * rows_per_chunk))
        covered += n
        load[c % grid] += cdiv(n, per_block)
    assert covered == rows
    even = cdiv(rows, per_block * cap)
    assert max(load) <= even * 1.03 + 1, (max(load), even)


def test_norm_shifted_rows_beyond_one_block_split_over_a_cluster(monkeypatch):
    """Shifted norm rows too long for one block are split over a cluster sized by their whole packs: the forwards at
    the 16-byte path's split fits and fixed geometry (float32 LayerNorm at its own, _SHIFTED_SPLIT_FITS), the backwards
    at their default packs. Never on one CTA: float32 LayerNorm's backward rows of 4100-8195 columns (beyond its held 2
    packs, within one CTA of 4) take the scalar path, as float64's rows beyond one block do. On a stub H200 at one block
    per SM, backward rows that need 7 CTAs take 8 (16 clusters cover 128 SMs, 15 of 7 105: split_shape's ``fill``);
    the forwards' take 7."""
    from kernelkit.ops import _runtime

    norms = _stub_kernels(monkeypatch, "norms", occupancy=1, clusters=_h200_clusters)
    monkeypatch.setattr(_runtime, "kernel", lambda family, expr: _StubKernel(expr, 1, _h200_clusters))
    for module in (norms, _runtime):
        monkeypatch.setattr(module, "has_clusters", lambda dev: True)
        monkeypatch.setattr(module, "sm_count", lambda dev: 132)
    norms._forward_shape.cache_clear()
    norms._backward_shape.cache_clear()
    try:
        fwd = {
            (torch.bfloat16, "kk_rms_norm_fwd"): "kk_rms_norm_fwd<__nv_bfloat16, false, 4, 2, true, 4, true>",
            (
                torch.float32,
                "kk_layer_norm_fwd",
            ): "kk_layer_norm_fwd<float, false, 8, 1, true, 4, kk_norms::kLnFwdLd, true>",
            (torch.float32, "kk_add_rms_norm_fwd"): "kk_add_rms_norm_fwd<float, false, 4, 3, true, 7, true>",
        }
        for (dtype, name), expr in fwd.items():
            shape = norms._forward_shape(name, dtype, 50257, 0, SHIFTED)
            assert (shape.kernel.name, shape.shifted, shape.block) == (expr, True, (512, 1)), name
        assert not norms._forward_shape("kk_rms_norm_fwd", torch.float64, 50257, 0, SHIFTED).shifted
        bwd = {  # (name, dtype, cols) -> CTAs (0: the scalar path)
            ("kk_rms_norm_bwd", torch.bfloat16, 50257): 8,
            ("kk_layer_norm_bwd", torch.float32, 50257): 8,
            ("kk_layer_norm_bwd", torch.float32, 8199): 2,
            ("kk_layer_norm_bwd", torch.float32, 8195): 0,
            ("kk_layer_norm_bwd", torch.float32, 4101): 0,
            ("kk_rms_norm_bwd", torch.float64, 50257): 0,
        }
        for (name, dtype, cols), ctas in bwd.items():
            shape, _ = norms._backward_shape(name, dtype, cols, 0, SHIFTED, False)
            assert (shape.shifted, shape.ctas) == (ctas > 0, max(ctas, 1)), (name, dtype, cols, shape.kernel.name)
        expr = "kk_rms_norm_bwd<__nv_bfloat16, false, 2, 1, false, true, 0, true>"
        assert _runtime.split_shape("norms", expr, 2, torch.bfloat16, 50256, 0).ctas == 7
        # 16-bit LayerNorm and RMSNorm rows (not add_rms_norm's) one block holds take the bulk kernels where their
        # blocks (a row's 16-byte units, two a thread, any multiple of 32 threads up to 320) are smaller than the
        # register kernel's (a power of two): 5001 columns, 626 units, 320 threads against 512
        bf16 = "__nv_bfloat16"
        kernels = {  # (name, cols, extra) -> (kernel, block, dynamic shared memory)
            ("kk_rms_norm_bwd", 5001, False): (f"kk_rms_norm_bwd_bulk<{bf16}, 320, 2, 3, false, 1, true>", 320, 60096),
            ("kk_layer_norm_bwd", 5001, False): (
                f"kk_layer_norm_bwd_bulk<{bf16}, 320, 2, 3, false, 1, 0, true>",
                320,
                60096,
            ),
            ("kk_rms_norm_bwd", 4097, False): (f"kk_rms_norm_bwd<{bf16}, false, 2, 1, false, false, 0, true>", 256, 0),
            ("kk_rms_norm_bwd", 5001, True): (f"kk_rms_norm_bwd<{bf16}, false, 2, 1, true, false, 0, true>", 512, 0),
            ("kk_rms_norm_bwd", 8199, False): (f"kk_rms_norm_bwd<{bf16}, false, 2, 1, false, false, 0, true>", 512, 0),
            ("kk_rms_norm_bwd", 50257, False): (f"kk_rms_norm_bwd<{bf16}, false, 2, 1, false, true, 0, true>", 512, 0),
        }
        for (name, cols, extra), (expr, threads, smem) in kernels.items():
            shape, _ = norms._backward_shape(name, torch.bfloat16, cols, 0, SHIFTED, extra)
            assert (shape.kernel.name, shape.block[0], shape.smem, shape.shifted) == (expr, threads, smem, True)
    finally:
        norms._forward_shape.cache_clear()
        norms._backward_shape.cache_clear()


def test_row_path_picks_each_kernel_path():
    """row_path (ops/_runtime.py), the host's copy of the row kernels' own test: the 16-byte path for whole packs of
    aligned rows, shifted rows where every pointer sits at the same place in its 16-byte unit (and the width is below
    kk::kShiftMaxCols), else one element at a time. Arguments that are not tensors are skipped."""
    buf = torch.empty(64, dtype=torch.bfloat16)  # CPU allocations are 64-byte aligned
    a, b = buf[:16], buf[16:32]
    assert buf.data_ptr() % 64 == 0
    assert row_path(8, torch.bfloat16, (a, b)) == VECTOR
    assert row_path(7, torch.bfloat16, (a, b, 3, None)) == SHIFTED
    assert row_path(8, torch.bfloat16, (buf[1:], buf[9:])) == SHIFTED  # both 2 bytes into their units
    assert row_path(8, torch.bfloat16, (buf[1:], a)) == SCALAR
    assert row_path(2**31 + 1, torch.bfloat16, (a, b)) == SCALAR
