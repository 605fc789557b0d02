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
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import torch

__all__ = ["KernelOp", "Out", "TensorSpec", "like", "op"]

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
    shape: dims by name or size, e.g. ("*", "N") for any leading dims then a last dim N; the same
    name must have the same size everywhere. ndim: exact number of dims.
    """

    dtypes: Optional[Tuple[torch.dtype, ...]] = None
    same_dtype_as: Optional[str] = None
    device: Optional[str] = None
    contiguous: bool = False
    make_contiguous: bool = False
    shape: Optional[Tuple[Union[str, int], ...]] = None
    ndim: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Out:
    """An output: shape and dtype as functions of the inputs (by name), allocated by torch's caching allocator."""

    shape: Callable[..., Sequence[int]]
    dtype: Union[str, torch.dtype]

    def allocate(self, named: Mapping[str, Any], device: torch.device) -> torch.Tensor:
        dtype = named[self.dtype].dtype if isinstance(self.dtype, str) else self.dtype
        return torch.empty(tuple(self.shape(**named)), dtype=dtype, device=device)


@dataclasses.dataclass(frozen=True)
class _Like:
    name: str

    def allocate(self, named: Mapping[str, Any], device: torch.device) -> torch.Tensor:
        src = named[self.name]
        return torch.empty(src.shape, dtype=src.dtype, device=device)


def like(name: str) -> _Like:
    """An output with the shape and dtype of input ``name`` (contiguous)."""
    return _Like(name)


def _fail(opname: str, msg: str) -> None:
    raise ValueError(f"{opname}: {msg}")


def _make_checker(opname: str, arg_names: Sequence[str], specs: Mapping[str, TensorSpec]):
    """Build the input check for one op. Returns check(args) -> (args, device)."""
    unknown = set(specs) - set(arg_names)
    if unknown:
        raise ValueError(f"{opname}: inputs spec names unknown arguments {sorted(unknown)}")
    positions = [(arg_names.index(n), n, s) for n, s in specs.items()]

    def check(args: list) -> Tuple[list, torch.device]:
        device = None
        first = None
        sizes: Dict[str, Tuple[int, str]] = {}
        for i, name, spec in positions:
            t = args[i]
            if not isinstance(t, torch.Tensor):
                _fail(opname, f"argument '{name}' must be a tensor, got {type(t).__name__}")
            if spec.dtypes is not None and t.dtype not in spec.dtypes:
                allowed = ", ".join(str(d).replace("torch.", "") for d in spec.dtypes)
                _fail(opname, f"argument '{name}' has dtype {str(t.dtype)[6:]}, expected one of: {allowed}")
            if spec.same_dtype_as is not None:
                other = args[arg_names.index(spec.same_dtype_as)]
                if t.dtype != other.dtype:
                    _fail(
                        opname,
                        f"argument '{name}' has dtype {str(t.dtype)[6:]} but '{spec.same_dtype_as}' "
                        f"has {str(other.dtype)[6:]}; they must match",
                    )
            if spec.device is not None and t.device.type != spec.device and t.device.type != "meta":
                _fail(opname, f"argument '{name}' must be on {spec.device}, got {t.device}")
            if device is None:
                device, first = t.device, name
            elif t.device != device:
                _fail(
                    opname,
                    f"argument '{name}' is on {t.device} but '{first}' is on {device}; "
                    "all tensors must be on one device",
                )
            if spec.ndim is not None and t.dim() != spec.ndim:
                _fail(opname, f"argument '{name}' must have {spec.ndim} dims, got shape {tuple(t.shape)}")
            if spec.shape is not None:
                _check_shape(opname, name, t, spec.shape, sizes)
            if spec.contiguous and not t.is_contiguous():
                if spec.make_contiguous:
                    args[i] = t.contiguous()
                else:
                    _fail(opname, f"argument '{name}' must be contiguous; call .contiguous() first")
        return args, device

    return check


def _check_shape(opname, name, t, pattern, sizes) -> None:
    shape = tuple(t.shape)
    if pattern and pattern[0] == "*":
        dims = pattern[1:]
        if len(shape) < len(dims):
            _fail(opname, f"argument '{name}' must have at least {len(dims)} dims, got shape {shape}")
        got = shape[len(shape) - len(dims) :]
    else:
        dims = pattern
        if len(shape) != len(dims):
            _fail(opname, f"argument '{name}' must have {len(dims)} dims, got shape {shape}")
        got = shape
    for d, n in zip(dims, got):
        if isinstance(d, int):
            if n != d:
                _fail(opname, f"argument '{name}' has shape {shape}, expected size {d} where it has {n}")
        elif d in sizes and sizes[d][0] != n:
            _fail(opname, f"argument '{name}' has {d}={n} but '{sizes[d][1]}' has {d}={sizes[d][0]}")
        else:
            sizes.setdefault(d, (n, name))


class KernelOp:
    """A registered op. Call it like a function; ``.op`` is the torch OpOverload."""

    def __init__(self, qualname: str, overload: Any, doc: Optional[str]):
        self.qualname = qualname
        self.op = overload
        self.__doc__ = doc
        self.__name__ = qualname.split("::")[1]

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kernelkit op {self.qualname}>"


def op(
    schema: str,
    *,
    inputs: Optional[Mapping[str, TensorSpec]] = None,
    output: Union[None, _Like, Out, Sequence[Union[_Like, Out]]] = None,
    backward: Optional[Callable] = None,
    setup_context: Optional[Callable] = None,
    cpu: Optional[Callable] = None,
    device: str = "cuda",
) -> Callable[[Callable], KernelOp]:
    """Register a launch function as the op ``schema`` ("ns::name(Tensor x, ...) -> Tensor").

    The decorated function receives the checked inputs followed by the output tensors, which
    kernelkit allocates from ``output`` through torch's caching allocator, and launches kernels
    into them. ``inputs`` maps argument names to :class:`TensorSpec`; the checks, the fake
    (meta) implementation for torch.compile, and an autograd formula (``backward`` with
    ``setup_context``, as in torch.library.register_autograd) are generated and registered.
    ``cpu`` is an optional implementation with the same signature for CPU tensors. Mutating
    ops (``Tensor(a!) x``) declare ``output=None`` and write in place.
    """
    qualname, _, rest = schema.partition("(")
    if "::" not in qualname or not rest:
        raise ValueError(f"schema: expected 'namespace::name(args) -> returns', got {schema!r}")
    ns, name = qualname.split("::")
    parsed = torch._C.parse_schema(schema)
    arg_names = [a.name for a in parsed.arguments]
    outputs = () if output is None else (tuple(output) if isinstance(output, (list, tuple)) else (output,))
    multi = isinstance(output, (list, tuple))
    check = _make_checker(qualname, arg_names, inputs or {})

    def register(launch: Callable) -> KernelOp:
        lib = _library(ns)
        lib.define(schema.split("::", 1)[1])

        def make_impl(fn: Callable) -> Callable:
            def impl(*args):
                args, dev = check(list(args))
                if not outputs:
                    fn(*args)
                    return None
                named = dict(zip(arg_names, args))
                outs = [o.allocate(named, dev) for o in outputs]
                fn(*args, *outs)
                return tuple(outs) if multi else outs[0]

            return impl

        lib.impl(name, make_impl(launch), "CUDA" if device == "cuda" else "CPU")
        if cpu is not None:
            lib.impl(name, make_impl(cpu), "CPU")

        def fake(*args):
            args, dev = check(list(args))
            if not outputs:
                return None
            named = dict(zip(arg_names, args))
            outs = [o.allocate(named, dev) for o in outputs]
            return tuple(outs) if multi else outs[0]

        torch.library.register_fake(qualname, fake, lib=lib)
        if backward is not None:
            torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
        overload = getattr(getattr(torch.ops, ns), name).default
        return KernelOp(qualname, overload, launch.__doc__)

    return register
