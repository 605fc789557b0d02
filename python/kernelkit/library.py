"""Turn a launch function into a real PyTorch op: schema, generated checks, fake, autograd.

>>> mod = kernelkit.load_inline("scale", SCALE_SRC)
>>> @kernelkit.op("mylib::scale(Tensor x, float s) -> Tensor",
...               inputs={"x": kernelkit.TensorSpec(dtypes=(torch.float32,), contiguous=True)},
...               output=kernelkit.like("x"))
... def scale(x, s, out):
...     n = x.numel()
...     mod.kernel("scale<float>").launch((n + 255) // 256, 256, (x, out, s, n))
>>> y = scale(torch.randn(10, device="cuda"), 2.0)      # also torch.ops.mylib.scale(...)
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import torch

__all__ = ["KernelOp", "Out", "TensorSpec", "broadcast", "like", "op"]

_LIBS: Dict[str, torch.library.Library] = {}


def _library(ns: str) -> torch.library.Library:
    if ns not in _LIBS:
        _LIBS[ns] = torch.library.Library(ns, "FRAGMENT")
    return _LIBS[ns]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What a tensor argument must be. Checks are generated from it and raise with the argument's name.

    dtypes: allowed dtypes (None: any). same_dtype_as: another argument whose dtype this one must match.
    device: "cuda", "cpu" or None (either; every tensor argument must still share one device).
    contiguous: require a contiguous tensor (else it is made contiguous when ``make_contiguous``).
    last_dim_contiguous: require only stride 1 in the last dim, any strides elsewhere (a kernel that takes the
    other strides, e.g. a transposed (batch, seq, heads, dim) -> (batch, heads, seq, dim) view); with
    ``make_contiguous``, an input whose last dim is strided is made contiguous. A :func:`like` output of it
    has its strides when it is dense (torch.empty_like).
    shape: dims by name or size, e.g. ("*", "N") for any leading dims then a last dim N; the same
    name must have the same size everywhere. ndim: exact number of dims.
    """

    dtypes: Optional[Tuple[torch.dtype, ...]] = None
    same_dtype_as: Optional[str] = None
    device: Optional[str] = None
    contiguous: bool = False
    last_dim_contiguous: bool = False
    make_contiguous: bool = False
    shape: Optional[Tuple[Union[str, int], ...]] = None
    ndim: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Out:
    """An output allocated by torch's caching allocator, on the first tensor input's device. ``shape`` is a
    function of the op's arguments: it is given those it names (every one if it takes ``**kwargs``). ``dtype``
    is a dtype, the name of an input whose dtype it takes, or a function of the arguments as ``shape`` is.

    >>> Out(shape=lambda x: (x.shape[0], 2), dtype=torch.float32)  # two float32 values per row of x
    """

    shape: Callable[..., Sequence[int]]
    dtype: Union[str, torch.dtype, Callable[..., torch.dtype]]


@dataclasses.dataclass(frozen=True)
class _Like:
    """Allocated inline by the generated code, with torch.empty_like (the cheapest allocation)."""

    name: str


@dataclasses.dataclass(frozen=True)
class _Broadcast:
    names: Tuple[str, ...]

    def allocate(self, named: Mapping[str, Any], device: torch.device) -> torch.Tensor:
        ts = [named[n] for n in self.names]
        shape = torch.broadcast_shapes(*(t.shape for t in ts))
        return torch.empty(shape, dtype=ts[0].dtype, device=device)


def broadcast(*names: str) -> _Broadcast:
    """An output with the broadcast shape of the named inputs and the dtype of the first."""
    return _Broadcast(tuple(names))


def like(name: str) -> _Like:
    """An output with the shape and dtype of input ``name``: contiguous, or, when its spec is
    ``last_dim_contiguous``, laid out as torch.empty_like lays it out (a dense input's strides; else dense
    strides in the input's dim order), as torch's elementwise ops lay out their results."""
    return _Like(name)


def _fail(opname: str, msg: str) -> None:
    raise ValueError(f"{opname}: {msg}")


def _dtype_name(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


class _Errors:
    """Slow-path error messages for the generated checks; each names the argument."""

    def __init__(self, opname: str):
        self.op = opname

    def not_tensor(self, name, v):
        _fail(self.op, f"argument '{name}' must be a tensor, got {type(v).__name__}")

    def dtype(self, name, t, allowed):
        _fail(
            self.op,
            f"argument '{name}' has dtype {_dtype_name(t.dtype)}, "
            f"expected one of: {', '.join(map(_dtype_name, allowed))}",
        )

    def same_dtype(self, name, t, other, o):
        _fail(
            self.op,
            f"argument '{name}' has dtype {_dtype_name(t.dtype)} but '{other}' has {_dtype_name(o.dtype)}; "
            "they must match",
        )

    def device_type(self, name, t, want):
        _fail(self.op, f"argument '{name}' must be on {want}, got {t.device}")

    def same_device(self, name, t, first, f):
        _fail(
            self.op,
            f"argument '{name}' is on {t.device} but '{first}' is on {f.device}; all tensors must be on one device",
        )

    def ndim(self, name, t, n):
        _fail(self.op, f"argument '{name}' must have {n} dims, got shape {tuple(t.shape)}")

    def min_ndim(self, name, t, n):
        _fail(self.op, f"argument '{name}' must have at least {n} dims, got shape {tuple(t.shape)}")

    def size(self, name, t, dim, want):
        _fail(self.op, f"argument '{name}' has shape {tuple(t.shape)}, expected size {want} in dim {dim}")

    def symbol(self, name, t, sym, got, other, want):
        _fail(self.op, f"argument '{name}' has {sym}={got} but '{other}' has {sym}={want}")

    def contiguous(self, name):
        _fail(self.op, f"argument '{name}' must be contiguous; call .contiguous() first")

    def last_dim(self, name, t):
        _fail(
            self.op,
            f"argument '{name}' must have stride 1 in its last dim, got strides {t.stride()}; call .contiguous() first",
        )


def _call_by_name(opname: str, fn: Callable, var: str, arg_names: Sequence[str], env: Dict[str, Any]) -> str:
    """The expression that calls ``fn`` (bound to ``var`` in the generated code) with the op's arguments it names
    (all of them when it takes ``**kwargs``), as keywords: cheaper than building a dict of every argument."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        names = list(arg_names)
    else:
        names = [p.name for p in params]
        unknown = [n for n in names if n not in arg_names]
        if unknown:
            raise ValueError(f"{opname}: an output's shape or dtype function takes {unknown}, which are not arguments")
    env[var] = fn
    return f"{var}({', '.join(f'{n}={n}' for n in names)})"


def _out_lines(
    opname: str, k: int, o: Out, first: Optional[str], arg_names: Sequence[str], env: Dict[str, Any]
) -> list:
    """Lines that allocate output ``k`` from its :class:`Out` on ``first``'s device. Sizes go to ``new_empty`` one by
    one: torch's argument parser takes a tuple slower (1.8 against 1.1 us on CPU tensors, bench/exp_host_calls.py)."""
    if first is None:
        raise ValueError(f"{opname}: an Out output takes its device from a tensor input, and the op has none")
    if isinstance(o.dtype, str):
        if o.dtype not in arg_names:
            raise ValueError(f"{opname}: output dtype names {o.dtype!r}, which is not an argument")
        dtype = f"{o.dtype}.dtype"
    elif isinstance(o.dtype, torch.dtype):
        env[f"dtype{k}"] = o.dtype
        dtype = f"dtype{k}"
    else:
        dtype = _call_by_name(opname, o.dtype, f"dtype{k}", arg_names, env)
    shape = _call_by_name(opname, o.shape, f"shape{k}", arg_names, env)
    new = f"{first}.new_empty"
    return [f"_sz = {shape}", f"out{k} = {new}(*_sz, dtype={dtype}) if _sz else {new}((), dtype={dtype})"]


def _generate(
    opname: str, arg_names: Sequence[str], defaults: Mapping[str, Any], specs: Mapping[str, TensorSpec], outputs, multi
):
    """Generate the op's implementation as straight-line Python: the checks its spec asks for,
    output allocation, and the call. Generated once per op, so the hot path does no spec lookups."""
    unknown = set(specs) - set(arg_names)
    if unknown:
        raise ValueError(f"{opname}: inputs spec names unknown arguments {sorted(unknown)}")
    for o in outputs:
        for n in o.names if isinstance(o, _Broadcast) else [o.name] if isinstance(o, _Like) else []:
            if n not in specs:
                raise ValueError(f"{opname}: output spec names {n!r}, which has no TensorSpec")
    env: Dict[str, Any] = {
        "Tensor": torch.Tensor,
        "E": _Errors(opname),
        "empty_like": torch.empty_like,
        "contig": torch.contiguous_format,
    }
    body = []
    first = None
    symbols: Dict[str, Tuple[str, str]] = {}
    for name in arg_names:
        spec = specs.get(name)
        if spec is None:
            continue
        a = name
        body.append(f"if not isinstance({a}, Tensor): E.not_tensor({a!r}, {a})")
        if spec.dtypes is not None:
            env[f"dt_{a}"] = frozenset(spec.dtypes)
            env[f"dtl_{a}"] = tuple(spec.dtypes)
            body.append(f"if {a}.dtype not in dt_{a}: E.dtype({a!r}, {a}, dtl_{a})")
        if spec.same_dtype_as is not None:
            o = spec.same_dtype_as
            body.append(f"if {a}.dtype != {o}.dtype: E.same_dtype({a!r}, {a}, {o!r}, {o})")
        if spec.device == "cuda":
            body.append(f"if not ({a}.is_cuda or {a}.is_meta): E.device_type({a!r}, {a}, 'cuda')")
        elif spec.device == "cpu":
            body.append(f"if not ({a}.is_cpu or {a}.is_meta): E.device_type({a!r}, {a}, 'cpu')")
        if first is None:
            first = a
            body.append(f"dev = {a}.get_device()")
        else:
            # get_device() is -1 on CPU and the index on CUDA: one int compare, no torch.device objects.
            body.append(f"if {a}.get_device() != dev: E.same_device({a!r}, {a}, {first!r}, {first})")
        if spec.ndim is not None:
            body.append(f"if {a}.dim() != {spec.ndim}: E.ndim({a!r}, {a}, {spec.ndim})")
        if spec.shape is not None:
            pattern = spec.shape
            lead = bool(pattern) and pattern[0] == "*"
            dims = pattern[1:] if lead else pattern
            body.append(f"s_{a} = {a}.shape")
            if lead:
                body.append(f"if len(s_{a}) < {len(dims)}: E.min_ndim({a!r}, {a}, {len(dims)})")
            else:
                body.append(f"if len(s_{a}) != {len(dims)}: E.ndim({a!r}, {a}, {len(dims)})")
            for k, d in enumerate(dims):
                idx = k - len(dims) if lead else k
                if isinstance(d, int):
                    body.append(f"if s_{a}[{idx}] != {d}: E.size({a!r}, {a}, {idx}, {d})")
                elif d in symbols:
                    var, owner = symbols[d]
                    body.append(
                        f"if s_{a}[{idx}] != {var}: E.symbol({a!r}, {a}, {d!r}, s_{a}[{idx}], {owner!r}, {var})"
                    )
                else:
                    var = f"sym_{len(symbols)}"
                    symbols[d] = (var, a)
                    body.append(f"{var} = s_{a}[{idx}]")
        if spec.contiguous:
            fix = f"{a} = {a}.contiguous()" if spec.make_contiguous else f"E.contiguous({a!r})"
            body.append(f"if not {a}.is_contiguous(): {fix}")
        elif spec.last_dim_contiguous:
            fix = f"{a} = {a}.contiguous()" if spec.make_contiguous else f"E.last_dim({a!r}, {a})"
            # A 0-d tensor has no last dim and is taken as it is; the checks above already rule it out when
            # the spec fixes at least one dim.
            has_dims = bool(spec.ndim) or any(d != "*" for d in spec.shape or ())
            guard = "" if has_dims else f"{a}.dim() and "
            body.append(f"if {guard}{a}.stride(-1) != 1: {fix}")

    def empty_like_of(name: str) -> str:
        # The checks above made a contiguous-spec input contiguous, and empty_like of a contiguous
        # tensor is contiguous: the memory_format keyword (0.2-0.9 us of argument parsing) is not needed.
        # A last_dim_contiguous input's output keeps its layout (empty_like's default, preserve_format).
        spec = specs[name]
        keep = spec.contiguous or spec.last_dim_contiguous
        return f"empty_like({name})" if keep else f"empty_like({name}, memory_format=contig)"

    outs = []
    for k, o in enumerate(outputs):
        if isinstance(o, _Like):
            body.append(f"out{k} = {empty_like_of(o.name)}")
        elif isinstance(o, _Broadcast):
            first_in, *rest = o.names
            same = " and ".join(f"{n}.shape == {first_in}.shape" for n in rest) or "True"
            env[f"alloc{k}"] = o.allocate
            named = ", ".join(f"{n!r}: {n}" for n in o.names)
            body.append(f"out{k} = {empty_like_of(first_in)} if {same} else alloc{k}({{{named}}}, {first_in}.device)")
        else:
            body += _out_lines(opname, k, o, first, arg_names, env)
        outs.append(f"out{k}")
    # The dispatcher passes only the arguments the caller gave: schema defaults live in the signature.
    env.update({f"default_{n}": v for n, v in defaults.items()})
    params = ", ".join(f"{n}=default_{n}" if n in defaults else n for n in arg_names)
    call = ", ".join([*arg_names, *outs])
    if not outs:
        ret = "return None"
    elif multi:
        ret = f"return ({', '.join(outs)},)"
    else:
        ret = f"return {outs[0]}"

    tensors = [n for n in arg_names if n in specs]

    def build_fast(cuda: Optional[Callable], cpu: Optional[Callable], grad_cuda=None, grad_cpu=None):
        """The eager fast path: plain tensors -> the backend impl, no dispatcher. When a gradient is needed,
        the op's autograd.Function around that impl (``grad_*``), or the dispatcher where there is none."""
        lines = [f"def fast({params}):"]
        lines.append(f"    if {' or '.join(f'type({t}) not in PLAIN' for t in tensors) or 'False'}: return SLOW")
        t0 = tensors[0] if tensors else None
        call = ", ".join(arg_names)
        lines.append(f"    if grad_enabled() and ({' or '.join(f'{t}.requires_grad' for t in tensors) or 'False'}):")
        if t0 is not None and grad_cuda is not None:
            lines.append(f"        if {t0}.is_cuda: return grad_cuda({call})")
        if t0 is not None and grad_cpu is not None:
            lines.append(f"        if {t0}.is_cpu: return grad_cpu({call})")
        lines.append("        return SLOW")
        if t0 is not None and cuda is not None:
            lines.append(f"    if {t0}.is_cuda: return cuda({call})")
        if t0 is not None and cpu is not None:
            lines.append(f"    if {t0}.is_cpu: return cpu({call})")
        lines.append("    return SLOW")
        scope = dict(
            env,
            cuda=cuda,
            cpu=cpu,
            grad_cuda=grad_cuda,
            grad_cpu=grad_cpu,
            SLOW=_SLOW,
            PLAIN=(torch.Tensor, torch.nn.Parameter),
            grad_enabled=torch.is_grad_enabled,
        )
        exec(compile("\n".join(lines), f"<kernelkit fast path {opname}>", "exec"), scope)
        return scope["fast"]

    def build(with_launch: bool, launch: Optional[Callable], with_ctx: bool = False):
        """``with_ctx``: the generated function and ``launch`` take an autograd ctx first."""
        head = f"ctx, {params}" if with_ctx else params
        lines = [f"def generated({head}):", *("    " + b for b in body)]
        if with_launch:
            lines.append(f"    launch({'ctx, ' if with_ctx else ''}{call})")
        lines.append(f"    {ret}")
        scope = dict(env, launch=launch)
        exec(compile("\n".join(lines), f"<kernelkit op {opname}>", "exec"), scope)
        return scope["generated"]

    return build, build_fast


_SLOW = object()


_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_function_mode_on = torch._C._is_torch_function_mode_enabled
_functorch_stack = torch._C._functorch.peek_interpreter_stack
_profiler_on = torch._C._autograd._profiler_enabled
_is_compiling = torch.compiler.is_compiling


def _dispatcher_needed() -> bool:
    """True when something may intercept the op at the dispatcher: modes, functorch, the profiler."""
    return bool(_dispatch_stack_len() or _function_mode_on() or _functorch_stack() is not None or _profiler_on())


class KernelOp:
    """A registered op. Call it like a function; ``.op`` is the torch OpOverload.

    A call in plain eager mode (plain tensors, no dispatch/function modes, functorch transforms or
    profiler) goes straight to the backend implementation, skipping the dispatcher (and, for an op
    with a backward, the Python autograd kernel and its redispatch); when an input needs grad, through
    the op's own autograd.Function around that implementation. Everything else (torch.compile,
    FakeTensor, vmap, profiling, grad for an op without a backward) goes through ``torch.ops``.
    """

    def __init__(self, qualname: str, overload: Any, doc: Optional[str], fast: Callable):
        self.qualname = qualname
        self.op = overload
        # The OpOverload's C++ callable: calling it directly skips OpOverload.__call__'s frame.
        self._dispatch = getattr(overload, "_op", overload)
        self._fast = fast
        self.__doc__ = doc
        self.__name__ = qualname.split("::")[1]

    def __call__(self, *args, **kwargs):
        if _is_compiling():  # dynamo traces the OpOverload, not its raw C++ callable
            return self.op(*args, **kwargs)
        if kwargs or _dispatcher_needed():
            return self._dispatch(*args, **kwargs)
        out = self._fast(*args)
        return self._dispatch(*args) if out is _SLOW else out

    def __repr__(self) -> str:
        return f"<kernelkit op {self.qualname}>"


def _autograd_apply(
    qualname: str, impl: Callable, setup_context: Optional[Callable], backward: Callable, with_ctx: bool = False
) -> Callable:
    """``impl`` (a backend implementation, every argument given) as an autograd.Function with the op's
    formula: what torch.library.register_autograd builds, without the dispatcher around it (its Python
    autograd kernel, default filling and redispatch cost more host time than a whole op launch). ``with_ctx``:
    ``impl`` takes the Function's ctx first (an op's ``launch_with_ctx``)."""

    def forward(ctx, *args):
        # Outputs marked non-differentiable (the per-row stats) then reach ``backward`` as None. By default torch
        # allocates and zero-fills a tensor for each on every backward: a launch each (AOTAutograd sets the same).
        ctx._materialize_non_diff_grads = False
        out = impl(ctx, *args) if with_ctx else impl(*args)
        if setup_context is not None:
            setup_context(ctx=ctx, inputs=args, output=out)
        return out

    fn = type(
        qualname.replace("::", "_"),  # torch names its graph nodes "<class name>Backward"
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )
    return fn.apply


def op(
    schema: str,
    *,
    inputs: Optional[Mapping[str, TensorSpec]] = None,
    output: Union[None, _Like, Out, Sequence[Union[_Like, Out]]] = None,
    backward: Optional[Callable] = None,
    setup_context: Optional[Callable] = None,
    cpu: Optional[Callable] = None,
    device: str = "cuda",
    launch_with_ctx: Optional[Callable] = None,
) -> Callable[[Callable], KernelOp]:
    """Register a launch function as the op ``schema`` ("ns::name(Tensor x, ...) -> Tensor").

    The decorated function receives the checked inputs followed by the output tensors, which
    kernelkit allocates from ``output`` through torch's caching allocator, and launches kernels
    into them. ``inputs`` maps argument names to :class:`TensorSpec`; the checks, the fake
    (meta) implementation for torch.compile, and an autograd formula (``backward`` with
    ``setup_context``, as in torch.library.register_autograd) are generated and registered.
    ``cpu`` is an optional implementation with the same signature for CPU tensors. Mutating
    ops (``Tensor(a!) x``) declare ``output=None`` and write in place.

    ``launch_with_ctx``: in place of the decorated launch (``device``'s) in an eager call that records a gradient
    (plain tensors, no modes), a launch given the autograd ctx first. It may do part of the backward's work in
    the same pass and leave it on the ctx, where ``backward`` takes it; ``backward`` must also work without it,
    as torch.compile and the dispatcher's autograd run it after the plain launch.

    >>> def launch_recording(ctx, x, out):  # the loss and, from the same read of x, its gradient for a grad of 1
    ...     ctx.grad_x = torch.empty_like(x)
    ...     mod.kernel("loss_and_grad").launch(grid, block, (x, out, ctx.grad_x, x.numel()))
    """
    qualname, _, rest = schema.partition("(")
    if "::" not in qualname or not rest:
        raise ValueError(f"schema: expected 'namespace::name(args) -> returns', got {schema!r}")
    ns, name = qualname.split("::")
    parsed = torch._C.parse_schema(schema)
    arg_names = [a.name for a in parsed.arguments]
    defaults = {a.name: a.default_value for a in parsed.arguments if a.has_default_value()}
    outputs = () if output is None else (tuple(output) if isinstance(output, (list, tuple)) else (output,))
    multi = isinstance(output, (list, tuple))
    build, build_fast = _generate(qualname, arg_names, defaults, inputs or {}, outputs, multi)

    def register(launch: Callable) -> KernelOp:
        lib = _library(ns)
        lib.define(schema.split("::", 1)[1])

        main = build(True, launch)
        lib.impl(name, main, "CUDA" if device == "cuda" else "CPU")
        cpu_impl = build(True, cpu) if cpu is not None else None
        if cpu_impl is not None:
            lib.impl(name, cpu_impl, "CPU")
        cuda_impl, host_impl = (main, cpu_impl) if device == "cuda" else (None, main)
        # The impls the eager autograd Functions run, with whether each takes the ctx: launch_with_ctx's in place
        # of the device's own launch.
        recorded = [(cuda_impl, False), (host_impl, False)]
        if launch_with_ctx is not None:
            recorded[0 if device == "cuda" else 1] = (build(True, launch_with_ctx, with_ctx=True), True)
        grads = [
            _autograd_apply(qualname, f, setup_context, backward, c) if f is not None and backward is not None else None
            for f, c in recorded
        ]
        fast = build_fast(cuda_impl, host_impl, *grads)
        fake = build(False, None)
        torch.library.register_fake(qualname, fake, lib=lib)
        if backward is not None:
            torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
        overload = getattr(getattr(torch.ops, ns), name).default
        return KernelOp(qualname, overload, launch.__doc__, fast)

    return register
