"""Check a custom op the way custom kernels need checking, in one call.

:func:`check_op` compares the op against a plain PyTorch reference computed in float64 over several
dtypes and edge sizes, then runs it on non-contiguous inputs, through gradcheck, torch.library.opcheck
and torch.compile(fullgraph=True), captured in a CUDA graph and replayed on new inputs (on a GPU), and
twice on the same inputs for bitwise determinism.

>>> def make(size, dtype, device, gen):
...     x = torch.randn(size, dtype=dtype, device=device, generator=gen)
...     y = torch.randn(size, dtype=dtype, device=device, generator=gen)
...     return x, y, 2.5
>>> report = kernelkit.testing.check_op(axpy, lambda x, y, a: a * x + y, make,
...                                     dtypes=(torch.float32, torch.float16))
>>> print(report)            # raises CheckFailure instead, naming each failed check and its case
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch.autograd.gradcheck import GradcheckError

from kernelkit.library import KernelOp

__all__ = [
    "CHECKS",
    "DEFAULT_SIZES",
    "DEFAULT_TOLERANCES",
    "CheckFailure",
    "CheckReport",
    "CheckResult",
    "check_op",
    "host_syncs_raise",
]

# 0 and 1 are the empty and single-element cases; 255 and 257 straddle a 256-thread block; the last
# is large and odd, so it needs many blocks and leaves a ragged tail.
DEFAULT_SIZES: Tuple[int, ...] = (0, 1, 255, 257, 2**20 + 3)

# (atol, rtol) per dtype of a case. The op's output is compared with a float64 reference, so these cover
# the output's own rounding plus a few ulps of reordered arithmetic. For float16 and bfloat16 they also
# allow arithmetic in that dtype on inputs of magnitude ~1 (a rounded intermediate near 4 is off by up to
# 2e-3 in float16 and 1.6e-2 in bfloat16, which cancellation can leave next to a zero result); larger
# data needs a larger atol. Other dtypes (integers, bool) must match exactly.
DEFAULT_TOLERANCES: Dict[torch.dtype, Tuple[float, float]] = {
    torch.float64: (1e-10, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.complex128: (1e-10, 1e-7),
    torch.complex64: (1e-5, 1e-5),
}

Status = Literal["passed", "failed", "skipped"]
Tolerance = Union[None, float, Mapping[torch.dtype, float]]
InputsFn = Callable[[int, torch.dtype, str, torch.Generator], Sequence[Any]]

# The check names a report uses, in the order they run.
CHECKS: Tuple[str, ...] = (
    "reference agreement",
    "edge sizes",
    "non-contiguous",
    "gradcheck",
    "opcheck",
    "torch.compile",
    "CUDA graph",
    "determinism",
)


@dataclasses.dataclass
class CheckResult:
    """One check on one case: ``status`` is "passed", "failed" or "skipped"; ``case`` says which inputs."""

    name: str
    status: Status
    detail: str
    case: Optional[str] = None


@dataclasses.dataclass
class CheckReport:
    """Every check :func:`check_op` ran, in order. ``str(report)`` is a plain-text table."""

    op_name: str
    results: List[CheckResult] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> List[CheckResult]:
        return [r for r in self.results if r.status == "failed"]

    def summary(self) -> str:
        counts = {s: sum(r.status == s for r in self.results) for s in ("passed", "failed", "skipped")}
        return f"check_op({self.op_name}): " + ", ".join(f"{n} {s}" for s, n in counts.items())

    def to_dict(self) -> Dict[str, Any]:
        return {
            "op_name": self.op_name,
            "passed": self.passed,
            "results": [dataclasses.asdict(r) for r in self.results],
        }

    def __str__(self) -> str:
        rows = [("status", "check", "case", "detail")]
        rows += [(r.status, r.name, r.case or "-", r.detail) for r in self.results]
        widths = [max(len(row[k]) for row in rows) for k in range(3)]
        lines = [self.summary()]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3] for row in rows]
        return "\n".join(lines)


class CheckFailure(AssertionError):
    """Raised by :func:`check_op` when a check fails; ``.report`` holds the whole :class:`CheckReport`."""

    def __init__(self, report: CheckReport):
        self.report = report
        failed = report.failures
        lines = [f"check_op({report.op_name}): {len(failed)} of {len(report.results)} check results failed"]
        lines += [f"- {r.name} [{r.case}]: {r.detail}" if r.case else f"- {r.name}: {r.detail}" for r in failed]
        super().__init__("\n".join(lines))


def _overload(op: Any) -> Optional[torch._ops.OpOverload]:
    """The registered torch op behind ``op``, or None for a plain function."""
    if isinstance(op, KernelOp):
        return op.op
    if isinstance(op, torch._ops.OpOverload):
        return op
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op.default
    return getattr(op, "_opoverload", None)  # torch.library.custom_op's CustomOpDef


def _op_name(op: Any, overload: Optional[torch._ops.OpOverload]) -> str:
    if overload is not None:
        return overload.name()
    return getattr(op, "__qualname__", None) or getattr(op, "__name__", None) or repr(op)


def _is_float(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())


def _leaves(args: Sequence[Any]) -> tuple:
    """``args`` with each floating-point tensor replaced by a fresh leaf that requires grad."""
    return tuple(a.detach().clone().requires_grad_() if _is_float(a) else a for a in args)


def _upcast(a: Any) -> Any:
    if isinstance(a, torch.Tensor) and a.is_complex():
        return a.detach().to(torch.complex128)
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().to(torch.float64)
    return a


def _outputs(result: Any) -> List[torch.Tensor]:
    """An op's result as a flat list of tensors (a tensor, or a tuple/list of them)."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    raise TypeError(f"returned {type(result).__name__}; expected a tensor or a tuple of tensors")


def _dtype_name(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def _first_line(e: BaseException) -> str:
    """``Type: message`` cut to its first line (two when the first only introduces the second)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(e).__name__}: {text}"


def _describe_arg(a: Any) -> str:
    if not isinstance(a, torch.Tensor):
        return repr(a)
    text = f"{_dtype_name(a.dtype)}{list(a.shape)}"
    return text if a.is_contiguous() else f"{text} stride {tuple(a.stride())}"


def _poison(refs: Sequence[torch.Tensor], dtype: torch.dtype) -> None:
    """On CUDA, leave blocks of 0xFF bytes (NaN in every float dtype) in the caching allocator, sized like
    the outputs, so that output elements the op never writes most likely read as NaN. Best effort: the
    allocator usually hands a freed block of the right size to the next allocation. CPU memory comes
    from malloc, which cannot be poisoned this way."""
    if not refs or refs[0].device.type != "cuda":
        return
    blocks = [torch.full((r.numel() * dtype.itemsize,), 255, dtype=torch.uint8, device=r.device) for r in refs]
    del blocks


def _noncontiguous(a: Any) -> Any:
    """The same values with a stride of 2 along the last dim longer than 1; the gaps hold NaN (for floats)
    so that a kernel that ignores strides reads them."""
    if not isinstance(a, torch.Tensor) or a.numel() < 2:
        return a
    dim = max(d for d in range(a.dim()) if a.shape[d] > 1)
    shape = list(a.shape)
    shape[dim] *= 2
    wide = torch.full(shape, math.nan, dtype=a.dtype, device=a.device) if _is_float(a) else a.new_zeros(shape)
    index = [slice(None)] * a.dim()
    index[dim] = slice(None, None, 2)
    view = wide[tuple(index)]
    view.copy_(a)
    return view


def _compare(
    outs: Sequence[torch.Tensor],
    refs: Sequence[torch.Tensor],
    atol: float,
    rtol: float,
    labels: Tuple[str, str] = ("op", "reference"),
) -> Tuple[bool, str]:
    """Elementwise |out - ref| <= atol + rtol * |ref| in float64 (exact for non-float outputs). A non-finite
    output where the reference is finite fails, and so does any mismatch of NaN or inf positions."""
    if len(outs) != len(refs):
        return False, f"{labels[0]} returned {len(outs)} outputs, {labels[1]} {len(refs)}"
    details = []
    ok = True
    for k, (out, ref) in enumerate(zip(outs, refs)):
        prefix = f"output {k}: " if len(outs) > 1 else ""
        if out.shape != ref.shape or out.device != ref.device:
            ok = False
            details.append(
                f"{prefix}{labels[0]} {list(out.shape)} on {out.device}, {labels[1]} {list(ref.shape)} on {ref.device}"
            )
            continue
        good, text = _compare_one(out, ref, atol, rtol, labels)
        ok &= good
        details.append(prefix + text)
    return ok, "; ".join(details)


def _compare_one(
    out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, labels: Tuple[str, str]
) -> Tuple[bool, str]:
    wide = torch.complex128 if (out.is_complex() or ref.is_complex()) else torch.float64
    if not _is_float(out):
        atol = rtol = 0.0
    tol = f"(atol {atol:g}, rtol {rtol:g})"
    if out.numel() == 0:
        return True, f"empty output {tol}"
    o = out.detach().to(wide)
    r = ref.detach().to(wide)
    ref_finite = torch.isfinite(r)
    same_nonfinite = (o == r) | (o.isnan() & r.isnan())
    broken = torch.where(ref_finite, ~torch.isfinite(o), ~same_nonfinite)
    mag = r.abs()
    err = torch.where(broken, math.inf, torch.where(ref_finite, (o - r).abs(), 0.0))
    allowed = atol + rtol * torch.where(ref_finite, mag, 0.0)
    bad = err > allowed
    rel = torch.where(mag > 0, err / mag, torch.where(err > 0, math.inf, 0.0))
    n_bad = int(bad.sum())
    # The worst element is the one furthest beyond its allowance (or the largest error when all pass).
    worst = int(torch.where(bad, err - allowed, -1.0).argmax()) if n_bad else int(err.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), out.shape))
    errors = f"max abs err {float(err.max()):.3g}, max rel err {float(rel.max()):.3g}"
    if not n_bad:
        return True, f"{errors} {tol}"
    n_nonfinite = int((broken & ref_finite).sum())
    n_mismatched = int((broken & ~ref_finite).sum())
    notes = [f"{n_nonfinite} non-finite where {labels[1]} output is finite"] if n_nonfinite else []
    notes += [f"{n_mismatched} not matching {labels[1]} output's NaN/inf"] if n_mismatched else []
    nonfinite = f" ({', '.join(notes)})" if notes else ""
    values = f"{labels[0]} {o.reshape(-1)[worst].item():.6g}, {labels[1]} {r.reshape(-1)[worst].item():.6g}"
    at = f"worst at index {index}: {values}"
    return False, f"{n_bad} of {out.numel()} elements differ{nonfinite} {tol}; {errors}; {at}"


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise bit equality, counting NaN == NaN."""
    if a.is_floating_point() and a.dtype.itemsize in (2, 4, 8):
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.dtype.itemsize]
        return (a.view(as_int) == b.view(as_int)) | (a.isnan() & b.isnan())
    if a.is_complex():
        return _bitwise_equal(torch.view_as_real(a), torch.view_as_real(b)).all(-1)
    return a == b


@contextlib.contextmanager
def host_syncs_raise() -> Iterator[None]:
    """Within it, a CUDA operation that waits for the GPU on the host (``.item()``, a copy to pageable memory) raises.

    A call is probed so before it is captured in a CUDA graph: inside a capture such an operation invalidates the
    capture, and torch's allocator can be left routing that stream's allocations to the dead graph's pool."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class _Checker:
    def __init__(self, op, reference, inputs, *, device, dtypes, sizes, atol, rtol, seed, small_size):
        self.op = op
        self.reference = reference
        self.inputs = inputs
        self.device = device
        self.dtypes = tuple(dtypes)
        self.sizes = list(sizes)
        self.atol = atol
        self.rtol = rtol
        self.seed = seed
        self.small_size = small_size
        self.overload = _overload(op)
        self.names = [a.name for a in self.overload._schema.arguments] if self.overload is not None else None
        nonzero = sorted(s for s in self.sizes if s > 0) or [max(self.sizes)]
        self.mid = nonzero[len(nonzero) // 2]
        self.largest = max(self.sizes)
        self.results: List[CheckResult] = []

    def add(self, name: str, status: Status, detail: str, case: Optional[str] = None) -> None:
        self.results.append(CheckResult(name, status, detail, case))

    def tolerance(self, dtype: torch.dtype) -> Tuple[float, float]:
        atol, rtol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        if self.atol is not None:
            atol = self.atol.get(dtype, atol) if isinstance(self.atol, Mapping) else float(self.atol)
        if self.rtol is not None:
            rtol = self.rtol.get(dtype, rtol) if isinstance(self.rtol, Mapping) else float(self.rtol)
        return atol, rtol

    def make(self, size: int, dtype: torch.dtype, seed: Optional[int] = None) -> tuple:
        gen = torch.Generator(device=self.device).manual_seed(self.seed if seed is None else seed)
        return tuple(self.inputs(size, dtype, self.device, gen))

    def case(self, size: int, dtype: torch.dtype, args: Sequence[Any]) -> str:
        names = self.names or [None] * len(args)
        shown = ", ".join(f"{n}={_describe_arg(a)}" if n else _describe_arg(a) for n, a in zip(names, args))
        return f"size={size}, dtype={_dtype_name(dtype)}, device={self.device}; args ({shown})"

    def agree(self, args: Sequence[Any], dtype: torch.dtype) -> Tuple[bool, str]:
        """Run the float64 reference and the op on ``args`` and compare. Exceptions from the op propagate."""
        try:
            refs = _outputs(self.reference(*(_upcast(a) for a in args)))
        except Exception as e:
            return False, f"the reference raised {_first_line(e)}"
        _poison(refs, dtype)
        result = self.op(*args)
        try:
            outs = _outputs(result)
        except TypeError as e:
            return False, f"the op {e}"
        return _compare(outs, refs, *self.tolerance(dtype))

    def check_reference(self) -> None:
        cases = [(self.mid, d) for d in self.dtypes] + [
            (s, d) for d in self.dtypes for s in self.sizes if s != self.mid
        ]
        for size, dtype in cases:
            args = self.make(size, dtype)
            try:
                ok, detail = self.agree(args, dtype)
            except Exception as e:
                ok, detail = False, f"op raised {_first_line(e)}"
            name = "reference agreement" if size == self.mid else "edge sizes"
            self.add(name, "passed" if ok else "failed", detail, self.case(size, dtype, args))

    def check_noncontiguous(self) -> None:
        dtype = self.dtypes[0]
        args = tuple(_noncontiguous(a) for a in self.make(self.mid, dtype))
        case = self.case(self.mid, dtype, args)
        if all(not isinstance(a, torch.Tensor) or a.is_contiguous() for a in args):
            self.add("non-contiguous", "skipped", "no tensor input has two or more elements", case)
            return
        try:
            ok, detail = self.agree(args, dtype)
        except ValueError as e:
            # An explicit rejection is correct behaviour; only a silently wrong result is a bug.
            if "contiguous" in str(e).lower():
                self.add("non-contiguous", "passed", f"rejected with a clear error: {_first_line(e)}", case)
                return
            ok, detail = False, f"op raised {_first_line(e)}"
        except Exception as e:
            ok, detail = False, f"op raised {_first_line(e)}"
        self.add("non-contiguous", "passed" if ok else "failed", detail, case)

    def has_backward(self, leaves: Sequence[Any]) -> Tuple[bool, str]:
        if self.overload is not None:
            keys = ("Autograd", f"Autograd{self.device.split(':')[0].upper()}", "CompositeImplicitAutograd")
            name = self.overload.name()
            found = any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in keys)
            return found, "" if found else "the op registers no autograd formula"
        try:
            outs = _outputs(self.op(*leaves))
        except Exception as e:
            return False, f"the op does not run on inputs that require grad ({_first_line(e)})"
        found = any(t.grad_fn is not None for t in outs)
        return found, "" if found else "the op's output has no grad_fn"

    def check_grad(self, grad: Optional[bool]) -> None:
        if grad is False:
            self.add("gradcheck", "skipped", "grad=False")
            return
        args = self.make(self.small_size, torch.float64)
        leaves = _leaves(args)
        case = self.case(self.small_size, torch.float64, leaves)
        if not any(_is_float(a) for a in leaves):
            self.add("gradcheck", "skipped", "no floating-point tensor inputs", case)
            return
        if grad is None:
            found, why = self.has_backward(leaves)
            if not found:
                self.add("gradcheck", "skipped", f"no backward: {why}", case)
                return
        try:
            torch.autograd.gradcheck(lambda *a: self.op(*a), leaves)
        except GradcheckError as e:
            worst = _jacobian_worst(self.op, leaves, self.names)
            self.add("gradcheck", "failed", _first_line(e).rstrip(",") + worst, case)
            return
        except ValueError as e:
            # A kernel built for lower precision only cannot be gradchecked; that is not a bug in it.
            status = "skipped" if grad is None and "float64" in str(e) else "failed"
            self.add("gradcheck", status, f"gradcheck needs float64 inputs; the op raised {_first_line(e)}", case)
            return
        except Exception as e:
            self.add("gradcheck", "failed", f"raised {_first_line(e)}", case)
            return
        self.add("gradcheck", "passed", "analytical and numerical Jacobians agree in float64", case)

    def check_opcheck(self, grad: Optional[bool]) -> None:
        if self.overload is None:
            self.add("opcheck", "skipped", "the op is a plain function, not a registered torch op")
            return
        dtype = next((d for d in self.dtypes if d in (torch.float32, torch.float64)), self.dtypes[0])
        args = self.make(self.small_size, dtype)
        # With grad inputs opcheck also tests the autograd registration and the backward under AOT dispatch.
        if grad is not False and self.has_backward(args)[0]:
            args = _leaves(args)
        case = self.case(self.small_size, dtype, args)
        try:
            outcome = torch.library.opcheck(self.overload, args, raise_exception=False)
        except Exception as e:
            self.add("opcheck", "failed", f"raised {_first_line(e)}", case)
            return
        bad = {k: v for k, v in outcome.items() if v not in ("SUCCESS", "SKIPPED")}
        if bad:
            detail = "; ".join(
                f"{k} failed: {_first_line(v) if isinstance(v, BaseException) else v}" for k, v in bad.items()
            )
            self.add("opcheck", "failed", detail, case)
        else:
            self.add("opcheck", "passed", ", ".join(outcome) + " passed", case)

    def check_compile(self, backend: str) -> None:
        torch._dynamo.reset()
        compiled = torch.compile(lambda *a: self.op(*a), fullgraph=True, backend=backend)
        dtype = self.dtypes[0]
        # A second size makes dynamo recompile with dynamic shapes, which tests the fake impl on SymInts.
        sizes = [self.mid] + ([self.small_size] if self.small_size not in (self.mid, 0, 1) else [])
        details = []
        first_case = None
        for size in sizes:
            args = self.make(size, dtype)
            case = self.case(size, dtype, args)
            first_case = first_case or case
            try:
                eager = _outputs(self.op(*args))
                got = _outputs(compiled(*args))
            except Exception as e:
                self.add("torch.compile", "failed", f"fullgraph=True raised {_first_line(e)}", case)
                return
            ok, detail = _compare(got, eager, *self.tolerance(dtype), labels=("compiled", "eager"))
            if not ok:
                self.add("torch.compile", "failed", f"compiled output differs from eager: {detail}", case)
                return
            details.append(f"size {size}: {detail}")
        detail = f"fullgraph=True, backend={backend}, matches eager; " + "; ".join(details)
        self.add("torch.compile", "passed", detail, first_case)

    def check_cuda_graph(self, grad: Optional[bool]) -> None:
        if not self.device.startswith("cuda"):
            self.add("CUDA graph", "skipped", "needs a CUDA device")
            return
        dtype = self.dtypes[0]
        static = self.make(self.mid, dtype)
        fresh = self.make(self.mid, dtype, seed=self.seed + 1)
        leaves = _leaves(static)
        backward = grad is not False and self.has_backward(leaves)[0]  # a plain function is asked with leaves
        if backward:
            static = leaves
        case = self.case(self.mid, dtype, static)
        # Arguments other than tensors are part of the graph: the eager run gets the captured ones.
        fresh = tuple(f if isinstance(f, torch.Tensor) else s for s, f in zip(static, fresh))
        if backward:
            fresh = _leaves(fresh)
        cotangents: List[torch.Tensor] = []

        def step(args: Sequence[Any]) -> List[torch.Tensor]:
            outs = _outputs(self.op(*args))
            if not backward:
                return outs
            diff = [o for o in outs if o.requires_grad]
            wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            if not cotangents:
                gen = torch.Generator(device=self.device).manual_seed(self.seed + 2)
                cotangents.extend(
                    torch.ones_like(o) if o.dim() == 0 else torch.randn(o.shape, generator=gen, device=o.device)
                    for o in diff
                )
            grads = torch.autograd.grad(diff, wrt, [c.to(o.dtype) for c, o in zip(cotangents, diff)], allow_unused=True)
            return [o.detach() for o in outs] + [g for g in grads if g is not None]

        stage = "eager"
        try:
            with torch.cuda.device(self.device):  # torch.cuda.graph captures on the current device
                expected = [t.clone() for t in step(fresh)]
                stage = "warm-up on a side stream"
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    step(static)
                    stage = "a call that syncs with the host"
                    with host_syncs_raise():
                        step(static)
                torch.cuda.current_stream().wait_stream(side)
                stage = "capture"
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = step(static)
                stage = "replay"
                with torch.no_grad():
                    for s, f in zip(static, fresh):
                        if isinstance(s, torch.Tensor):
                            s.copy_(f)
                graph.replay()
                torch.cuda.synchronize()
        except Exception as e:
            self.add("CUDA graph", "failed", f"{stage} raised {_first_line(e)}", case)
            return
        ok, detail = _compare(captured, expected, *self.tolerance(dtype), labels=("graph replay", "eager"))
        what = "forward and backward" if backward else "forward"
        if ok:
            self.add("CUDA graph", "passed", f"{what} captured, replayed on new inputs, matches eager; {detail}", case)
        else:
            self.add("CUDA graph", "failed", f"{what} replayed on new inputs differs from eager: {detail}", case)

    def check_determinism(self) -> None:
        dtype = self.dtypes[0]
        for size in sorted({self.mid, self.largest}):
            args = self.make(size, dtype)
            case = self.case(size, dtype, args)
            try:
                first, second = _outputs(self.op(*args)), _outputs(self.op(*args))
            except Exception as e:
                self.add("determinism", "failed", f"op raised {_first_line(e)}", case)
                continue
            diffs = []
            for k, (a, b) in enumerate(zip(first, second)):
                prefix = f"output {k}: " if len(first) > 1 else ""
                if a.shape != b.shape or a.dtype != b.dtype:
                    diffs.append(f"{prefix}{_describe_arg(a)} then {_describe_arg(b)}")
                    continue
                same = _bitwise_equal(a, b)
                n = int((~same).sum())
                if n:
                    gap = (a - b).abs().double() if a.is_complex() else (a.double() - b.double()).abs()
                    gap = torch.where(same, -1.0, gap.nan_to_num(math.inf))  # NaN on one side only: inf
                    worst = int(gap.argmax())
                    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), a.shape))
                    diffs.append(
                        f"{prefix}{n} of {a.numel()} elements differ between two runs; "
                        f"max abs diff {float(gap.reshape(-1)[worst]):.3g} at index {index}"
                    )
            if diffs:
                self.add("determinism", "failed", "; ".join(diffs), case)
            else:
                self.add("determinism", "passed", "two runs are bitwise identical", case)


def _jacobian_worst(op: Callable, leaves: Sequence[Any], names: Optional[Sequence[str]], eps: float = 1e-6) -> str:
    """The largest gap between the analytical and the central-difference Jacobian, for a failure message."""
    slots = [k for k, a in enumerate(leaves) if _is_float(a)]
    labels = [names[k] if names else f"input {k}" for k in slots]
    xs = [leaves[k].detach() for k in slots]

    def f(*diff):
        full = list(leaves)
        for k, x in zip(slots, diff):
            full[k] = x
        return tuple(_outputs(op(*full)))

    try:
        analytical = torch.autograd.functional.jacobian(f, tuple(xs))
        worst, text = -1.0, ""
        for j, x in enumerate(xs):
            for e in range(x.numel()):
                step = torch.zeros_like(x).reshape(-1)
                step[e] = eps
                step = step.reshape(x.shape)
                with torch.no_grad():
                    plus = f(*xs[:j], x + step, *xs[j + 1 :])
                    minus = f(*xs[:j], x - step, *xs[j + 1 :])
                for i, (p, m) in enumerate(zip(plus, minus)):
                    numerical = ((p - m) / (2 * eps)).reshape(-1)
                    column = analytical[i][j].reshape(p.numel(), x.numel())[:, e]
                    gap = (column - numerical).abs()
                    if p.numel() and float(gap.max()) > worst:
                        o = int(gap.argmax())
                        worst = float(gap[o])
                        text = (
                            f"; max abs err {worst:.3g} at d output {i}[{o}] / d {labels[j]}[{e}]: "
                            f"analytical {float(column[o]):.6g}, numerical {float(numerical[o]):.6g}"
                        )
        return text
    except Exception:
        return ""  # the gradcheck message alone still names the mismatch


def check_op(
    op: Callable[..., Any],
    reference: Callable[..., Any],
    inputs: InputsFn,
    *,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    device: Optional[Union[str, torch.device]] = None,
    sizes: Optional[Sequence[int]] = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    grad: Optional[bool] = None,
    opcheck: bool = True,
    compile: bool = True,
    cuda_graph: bool = True,
    determinism: bool = True,
    noncontiguous: bool = True,
    seed: int = 0,
    small_size: int = 7,
    compile_backend: str = "inductor",
    raise_on_failure: bool = True,
) -> CheckReport:
    """Run every check a custom kernel needs on ``op`` and return a :class:`CheckReport`.

    ``op`` is a :class:`kernelkit.KernelOp`, a torch OpOverload, or any function of tensors;
    ``reference`` computes the same math with plain PyTorch. ``inputs(size, dtype, device, generator)``
    returns fresh random arguments (tensors and scalars; draw from ``generator``, and avoid zeros, so
    that a skipped element shows) for one case; what ``size`` means (numel, rows, ...) is up to it.

    Checks, each recorded as passed, failed or skipped with a short detail and its case:

    - reference agreement / edge sizes: for each dtype and each of ``sizes`` (default
      :data:`DEFAULT_SIZES`, up to 2**20 + 3), the op's output against the reference run in float64 on
      upcast copies of the inputs, elementwise within ``atol + rtol * |ref|`` (defaults per dtype in
      :data:`DEFAULT_TOLERANCES`; ``atol``/``rtol`` override, as a number or a dtype mapping). A NaN or inf
      the reference does not have fails. The middle non-zero size is reported as "reference agreement",
      the others as "edge sizes". On CUDA, outputs are likely to land in NaN-poisoned memory, so an
      element the op never writes shows up as NaN.
    - non-contiguous: the middle size, first dtype, with every tensor input strided (NaN in the gaps).
      A ValueError that mentions "contiguous" is an acceptable explicit rejection.
    - gradcheck: torch.autograd.gradcheck in float64 at ``small_size``, when ``grad`` is True, or when
      it is None and the op has a backward (an autograd registration, or a grad_fn for a plain function).
    - opcheck: torch.library.opcheck at ``small_size``, for registered ops only.
    - torch.compile: ``torch.compile(fullgraph=True)`` at the middle size and ``small_size`` (the second
      compiles with dynamic shapes), compared with eager within the tolerance.
    - CUDA graph (on CUDA): forward, and backward when the op has one, captured in a ``torch.cuda.CUDAGraph`` at
      the middle size (after a warm-up on a side stream), then replayed on new values copied into the captured
      inputs; the replay must match an eager run on those values within the tolerance.
    - determinism: two runs on the same inputs, at the middle and the largest size, must be bitwise equal.

    The first dtype is used for the checks that take one. Raises :class:`CheckFailure` listing every
    failed check, unless ``raise_on_failure=False``.

    >>> report = check_op(axpy, lambda x, y, a: a * x + y, make, dtypes=(torch.float32, torch.bfloat16))
    >>> report.passed
    True
    """
    if not dtypes or (sizes is not None and not sizes):
        raise ValueError("check_op: dtypes and sizes must not be empty")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    checker = _Checker(
        op,
        reference,
        inputs,
        device=str(device),
        dtypes=dtypes,
        sizes=DEFAULT_SIZES if sizes is None else sizes,
        atol=atol,
        rtol=rtol,
        seed=seed,
        small_size=small_size,
    )
    checker.check_reference()
    if noncontiguous:
        checker.check_noncontiguous()
    else:
        checker.add("non-contiguous", "skipped", "noncontiguous=False")
    checker.check_grad(grad)
    if opcheck:
        checker.check_opcheck(grad)
    else:
        checker.add("opcheck", "skipped", "opcheck=False")
    if compile:
        checker.check_compile(compile_backend)
    else:
        checker.add("torch.compile", "skipped", "compile=False")
    if cuda_graph:
        checker.check_cuda_graph(grad)
    else:
        checker.add("CUDA graph", "skipped", "cuda_graph=False")
    if determinism:
        checker.check_determinism()
    else:
        checker.add("determinism", "skipped", "determinism=False")
    report = CheckReport(_op_name(op, checker.overload), checker.results)
    if raise_on_failure and not report.passed:
        raise CheckFailure(report)
    return report
