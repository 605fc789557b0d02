"""Compile CUDA C++ at run time with NVRTC, and load it as modules of launchable kernels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence, Union

from kernelkit import _native
from kernelkit._native import Compiled, Kernel, Module

__all__ = [
    "Compiled",
    "Kernel",
    "Module",
    "cache_dir",
    "clear_cache",
    "compile",
    "load",
    "load_inline",
    "set_launch_blocking",
]

PathLike = Union[str, "os.PathLike[str]"]


def _headers(headers: Optional[Mapping[str, str]]) -> list:
    return sorted((headers or {}).items())


def compile(
    source: str,
    arch: str = "sm_90",
    name_expressions: Sequence[str] = (),
    options: Sequence[str] = (),
    include_dirs: Sequence[PathLike] = (),
    *,
    headers: Optional[Mapping[str, str]] = None,
    output: str = "cubin",
    file_name: str = "kernel.cu",
    use_cache: bool = True,
) -> Compiled:
    """Compile CUDA C++ with NVRTC. Needs no GPU.

    Returns a :class:`Compiled` with ``.image`` (CUBIN bytes, or PTX with ``output="ptx"``) and
    ``.lowered_names`` mapping each name expression to its mangled name. Compiles are cached on
    disk (see :func:`cache_dir`). ``cuda_fp16.h`` and ``cuda_bf16.h`` are found automatically.

    >>> c = kernelkit.compile('template <typename T> __global__ void f(T* x) { x[0] = 1; }',
    ...                       arch="sm_80", name_expressions=["f<float>"])
    >>> c.lowered_names["f<float>"]
    '_Z1fIfEvPT_'
    """
    return _native.compile(
        source,
        arch,
        list(name_expressions),
        list(options),
        [Path(d) for d in include_dirs],
        _headers(headers),
        file_name,
        output,
        use_cache,
    )


def _build_eagerly(module: Module, arch: Optional[str]) -> None:
    """Compile now, so that a bad source fails at load time rather than at the first launch."""
    if arch is not None:
        module.build(arch)
        return
    try:
        info = _native.driver_info()
        has_gpu = info["device_count"] > 0 and info["init_error"] is None
    except _native.LibraryNotFoundError:
        has_gpu = False
    if has_gpu:
        import torch

        module.build(None, torch.cuda.current_device() if torch.cuda.is_available() else 0)
    else:
        # No GPU to pick an arch from: still check that the source compiles.
        module.build("sm_80")


def load_inline(
    name: str,
    cuda_source: str,
    *,
    name_expressions: Iterable[str] = (),
    options: Sequence[str] = (),
    include_dirs: Sequence[PathLike] = (),
    headers: Optional[Mapping[str, str]] = None,
    arch: Optional[str] = None,
    use_cache: bool = True,
) -> Module:
    """Compile a CUDA source string into a :class:`Module`.

    The source is compiled now (for the current GPU's exact arch, or ``arch``), so compile
    errors raise :class:`kernelkit.CompileError` here, with NVRTC's log and line numbers.
    Template kernels are instantiated on demand: ``module.kernel("scale<float>")``.

    >>> mod = kernelkit.load_inline("scale", '''
    ... template <typename T>
    ... __global__ void scale(const T* x, T* y, float s, long long n) {
    ...     long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    ...     if (i < n) y[i] = (T)((float)x[i] * s);
    ... }''')
    >>> k = mod.kernel("scale<float>")
    >>> k.launch(grid=(x.numel() + 255) // 256, block=256, args=(x, y, 2.0, x.numel()))
    """
    module = Module(
        name,
        cuda_source,
        f"{name}.cu",
        _headers(headers),
        list(name_expressions),
        list(options),
        [Path(d) for d in include_dirs],
        use_cache,
    )
    _build_eagerly(module, arch)
    return module


def load(
    name: str,
    sources: Sequence[PathLike],
    *,
    name_expressions: Iterable[str] = (),
    options: Sequence[str] = (),
    include_dirs: Sequence[PathLike] = (),
    arch: Optional[str] = None,
    use_cache: bool = True,
) -> Module:
    """Compile CUDA source files into one :class:`Module`.

    Several files are compiled as one translation unit, in order; each file's folder is added
    to the include path, and errors name the file and line.

    >>> mod = kernelkit.load("my_ops", sources=["kernels/my_ops.cu"])
    """
    paths = [Path(s) for s in sources]
    if not paths:
        raise ValueError("sources: expected at least one .cu file")
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"sources: {p} does not exist")
    if len(paths) == 1:
        source, file_name = paths[0].read_text(), str(paths[0])
    else:
        # #line directives keep NVRTC's messages pointing at the right file.
        source = "".join(f'#line 1 "{p}"\n{p.read_text()}\n' for p in paths)
        file_name = f"{name}.cu"
    dirs = [*include_dirs, *dict.fromkeys(p.resolve().parent for p in paths)]
    module = Module(
        name,
        source,
        file_name,
        [],
        list(name_expressions),
        list(options),
        [Path(d) for d in dirs],
        use_cache,
    )
    _build_eagerly(module, arch)
    return module


def cache_dir() -> Path:
    """The disk cache folder: ``KERNELKIT_CACHE_DIR``, else ``~/.cache/kernelkit``."""
    return Path(_native.cache_dir())


def clear_cache() -> int:
    """Delete every cached compile. Returns the number of files removed."""
    return _native.clear_cache()


def set_launch_blocking(on: bool) -> None:
    """Synchronize and check after every launch (like ``KERNELKIT_LAUNCH_BLOCKING=1``), so an
    asynchronous fault is reported against the kernel that caused it."""
    _native.set_launch_blocking(bool(on))
