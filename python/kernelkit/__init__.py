"""kernelkit: custom CUDA kernels as real PyTorch ops, compiled at run time by NVRTC from a Rust core.

>>> import kernelkit, torch
>>> mod = kernelkit.load_inline("demo", '__global__ void twice(float* x, long long n) {'
...     ' long long i = blockIdx.x * 256ll + threadIdx.x; if (i < n) x[i] *= 2; }')
>>> x = torch.ones(1000, device="cuda")
>>> mod.kernel("twice").launch(grid=4, block=256, args=(x, x.numel()))
"""

from kernelkit._native import (
    CompileError,
    CudaError,
    KernelkitError,
    KernelNotFoundError,
    LaunchError,
    LibraryNotFoundError,
)
from kernelkit._native import __version__ as __version__
from kernelkit.jit import (
    Compiled,
    Kernel,
    Module,
    cache_dir,
    clear_cache,
    compile,
    load,
    load_inline,
    set_launch_blocking,
)

__all__ = [
    "CompileError",
    "Compiled",
    "CudaError",
    "Kernel",
    "KernelNotFoundError",
    "KernelOp",
    "KernelkitError",
    "LaunchError",
    "LibraryNotFoundError",
    "Module",
    "Out",
    "TensorSpec",
    "broadcast",
    "cache_dir",
    "clear_cache",
    "compile",
    "like",
    "load",
    "load_inline",
    "op",
    "patch",
    "set_launch_blocking",
]

_LAZY = {"op", "TensorSpec", "Out", "like", "broadcast", "KernelOp", "ops", "nn", "testing", "patch"}


def __getattr__(name: str):
    # torch is imported only when the op layer is first used: compiling needs no torch.
    if name in _LAZY:
        import importlib

        if name in ("ops", "nn", "testing"):
            return importlib.import_module(f"kernelkit.{name}")
        if name == "patch":
            return importlib.import_module("kernelkit.patching").patch
        from kernelkit import library

        return getattr(library, name)
    raise AttributeError(f"module 'kernelkit' has no attribute {name!r}")
