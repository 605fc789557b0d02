"""The benchmark harness behind `kernelkit bench`, usable on your own ops.

Each case is timed for each implementation (kernelkit, torch eager, torch.compile of the
reference) at each size and dtype: median GPU time from CUDA events over rotating input sets
(so repeated runs do not measure the L2 cache), host time per call, achieved GB/s and its share
of the copy bandwidth measured on the same GPU, and peak memory. Without a GPU it times the CPU
implementations against torch on CPU.

>>> from kernelkit.bench import Case, run
>>> case = Case("scale2", make=lambda size, dtype, dev: (torch.randn(size, dtype=dtype, device=dev),),
...             impls={"kernelkit": my_op, "torch": lambda x: x * 2}, bytes=lambda x: 2 * x.nbytes)
>>> results = run([case], sizes=[(1 << 24,)], dtypes=[torch.float32])
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

__all__ = ["Case", "Result", "copy_bandwidth", "environment", "op_cases", "run"]

Size = Tuple[int, ...]


@dataclasses.dataclass
class Case:
    """One thing to benchmark: how to make inputs, how many bytes (or FLOPs) one call moves, the implementations."""

    name: str
    make: Callable[[Size, torch.dtype, str], tuple]
    impls: Dict[str, Callable]
    bytes: Optional[Callable[..., int]] = None
    flops: Optional[Callable[..., int]] = None
    compile_reference: Optional[str] = "torch"  # which impl to also run under torch.compile
    setup: Optional[Callable[[], Any]] = None


@dataclasses.dataclass
class Result:
    case: str
    impl: str
    size: str
    dtype: str
    device: str
    time_us: float
    host_us: float
    gbps: Optional[float]
    pct_copy_bw: Optional[float]
    tflops: Optional[float]
    peak_mem_mb: Optional[float]
    speedup_vs_torch: Optional[float] = None
    error: Optional[str] = None


def environment() -> Dict[str, Any]:
    """GPU, driver, CUDA, torch and kernelkit versions, recorded with every result."""
    import platform

    import kernelkit

    env: Dict[str, Any] = {
        "kernelkit": kernelkit.__version__,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = p.name
        env["sm"] = f"sm_{p.major}{p.minor}"
        env["sms"] = p.multi_processor_count
        try:
            d = kernelkit._native.driver_info()
            env["driver_cuda"] = f"{d['version'] // 1000}.{d['version'] % 1000 // 10}"
            env["driver_lib"] = d["path"]
            env["nvrtc"] = kernelkit._native.nvrtc_info()["version"]
        except kernelkit.KernelkitError as e:
            env["driver_error"] = str(e)
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["threads"] = torch.get_num_threads()
    return env


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read plus bytes written)."""
    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    y = torch.empty_like(x)
    t = _gpu_median_ms([lambda: y.copy_(x)], reps=30)
    return 2 * nbytes / (t * 1e-3) / 1e9


def _gpu_median_ms(fns: Sequence[Callable], reps: int = 50, warmup: int = 5) -> float:
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def _host_median_us(fn: Callable, reps: int, sync: Callable) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    sync()
    return statistics.median(times) * 1e6


def _cpu_median_ms(fn: Callable, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _input_sets(case: Case, size: Size, dtype: torch.dtype, device: str, l2_bytes: int) -> List[tuple]:
    first = case.make(size, dtype, device)
    per_set = sum(a.nbytes for a in first if isinstance(a, torch.Tensor))
    # Rotate through enough copies that each call reads from DRAM, not from L2.
    n = 1 if device == "cpu" or per_set == 0 else max(1, min(32, math.ceil(4 * l2_bytes / per_set)))
    return [first] + [case.make(size, dtype, device) for _ in range(n - 1)]


def run(
    cases: Sequence[Case],
    sizes: Sequence[Size],
    dtypes: Sequence[torch.dtype],
    *,
    device: Optional[str] = None,
    compile: bool = True,
    reps: int = 50,
    progress: bool = True,
    copy_gbps: Optional[float] = None,
) -> List[Result]:
    """Benchmark every case x size x dtype x implementation. Returns flat results."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device == "cuda"
    if gpu and copy_gbps is None:
        copy_gbps = copy_bandwidth()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if gpu else 0
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    jobs = [(c, s, d) for c in cases for s in sizes for d in dtypes]
    results: List[Result] = []
    bar = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task("benchmarking", total=len(jobs))
    try:
        for case, size, dtype in jobs:
            if case.setup is not None:
                case.setup()
            impls = dict(case.impls)
            if compile and gpu and case.compile_reference in impls:
                impls["torch.compile"] = torch.compile(impls[case.compile_reference], dynamic=False)
            sets = _input_sets(case, size, dtype, device, l2)
            row: List[Result] = []
            for name, fn in impls.items():
                label = "x".join(map(str, size))
                try:
                    calls = [lambda a=a, fn=fn: fn(*a) for a in sets]
                    if gpu:
                        calls[0]()
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        calls[0]()
                        torch.cuda.synchronize()
                        peak = (torch.cuda.max_memory_allocated() - base) / 1e6
                        ms = _gpu_median_ms(calls, reps=reps)
                    else:
                        peak = None
                        # The 2-core VMs show single-call spikes of several ms: take the median of enough calls.
                        ms = _cpu_median_ms(calls[0], reps=max(10, reps // 2))
                    host = _host_median_us(calls[0], reps=20, sync=sync)
                    nbytes = case.bytes(*sets[0]) if case.bytes else None
                    flops = case.flops(*sets[0]) if case.flops else None
                    gbps = nbytes / (ms * 1e-3) / 1e9 if nbytes else None
                    row.append(
                        Result(
                            case.name,
                            name,
                            label,
                            str(dtype).replace("torch.", ""),
                            device,
                            ms * 1e3,
                            host,
                            gbps,
                            100 * gbps / copy_gbps if gbps and copy_gbps else None,
                            flops / (ms * 1e-3) / 1e12 if flops else None,
                            peak,
                        )
                    )
                except Exception as e:  # one failing implementation must not stop the run
                    row.append(
                        Result(
                            case.name,
                            name,
                            label,
                            str(dtype).replace("torch.", ""),
                            device,
                            math.nan,
                            math.nan,
                            None,
                            None,
                            None,
                            None,
                            error=f"{type(e).__name__}: {e}"[:300],
                        )
                    )
            ref = next((r for r in row if r.impl == "torch" and r.error is None), None)
            for r in row:
                if ref is not None and r.error is None:
                    r.speedup_vs_torch = ref.time_us / r.time_us
            results.extend(row)
            del sets
            if gpu:
                torch.cuda.empty_cache()
            if bar is not None:
                bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
    return results


# ---------------------------------------------------------------- kernelkit's own ops


def _gelu_grad_reference(grad, x, bias):
    # The explicit tanh-GELU backward (what a fused kernel computes), for eager and torch.compile.
    v = x.float() + bias.float()
    k = 0.7978845608028654
    t = torch.tanh(k * (v + 0.044715 * v * v * v))
    d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v)
    gx = (grad.float() * d).to(x.dtype)
    return gx, gx.float().sum(0).to(bias.dtype)


def op_cases(names: Optional[Sequence[str]] = None) -> List[Case]:
    """Benchmark cases for kernelkit's ops. Sizes are (rows, cols); matmul uses (M, N, K)."""
    import torch.nn.functional as F

    import kernelkit.ops as K

    def rnd(*shape, dtype, dev):
        return torch.randn(*shape, dtype=dtype, device=dev)

    def two(size, dtype, dev):
        return rnd(*size, dtype=dtype, dev=dev), rnd(*size, dtype=dtype, dev=dev)

    def three(size, dtype, dev):
        return two(size, dtype, dev) + (rnd(*size, dtype=dtype, dev=dev),)

    def gelu_in(size, dtype, dev):
        return rnd(*size, dtype=dtype, dev=dev), rnd(size[-1], dtype=dtype, dev=dev)

    def gelu_bwd_in(size, dtype, dev):
        return (rnd(*size, dtype=dtype, dev=dev),) + gelu_in(size, dtype, dev)

    def mm_in(size, dtype, dev):
        m, n, k = size if len(size) == 3 else (size[0], size[1], size[1])
        return rnd(m, k, dtype=dtype, dev=dev), rnd(k, n, dtype=dtype, dev=dev)

    def no_tf32():
        torch.backends.cuda.matmul.allow_tf32 = False

    cases = [
        Case("add", two, {"kernelkit": K.add, "torch": torch.add}, bytes=lambda a, b: 3 * a.nbytes),
        Case("mul", two, {"kernelkit": K.mul, "torch": torch.mul}, bytes=lambda a, b: 3 * a.nbytes),
        Case(
            "muladd",
            three,
            {"kernelkit": K.muladd, "torch": lambda a, b, c: a * b + c},
            bytes=lambda a, b, c: 4 * a.nbytes,
        ),
        Case(
            "bias_gelu",
            gelu_in,
            {"kernelkit": K.bias_gelu, "torch": lambda x, b: F.gelu(x + b, approximate="tanh")},
            bytes=lambda x, b: 2 * x.nbytes + b.nbytes,
        ),
        Case(
            "bias_gelu_backward",
            gelu_bwd_in,
            {"kernelkit": lambda g, x, b: K.bias_gelu_backward(g, x, b, "tanh"), "torch": _gelu_grad_reference},
            bytes=lambda g, x, b: 3 * x.nbytes + 2 * b.nbytes,
        ),
        Case(
            "matmul",
            mm_in,
            {"kernelkit": K.matmul, "torch": torch.matmul},
            flops=lambda a, b: 2 * a.shape[0] * a.shape[1] * b.shape[1],
            compile_reference=None,
            setup=no_tf32,
        ),
    ]
    return [c for c in cases if names is None or c.name in names]


def render(results: Sequence[Result], env: Dict[str, Any], copy_gbps: Optional[float]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    where = f"{env.get('gpu', env.get('cpu'))} · torch {env['torch']} · kernelkit {env['kernelkit']}"
    if copy_gbps:
        where += f" · copy bandwidth {copy_gbps:.0f} GB/s"
    table = Table(title=where)
    for col in [
        "op",
        "size",
        "dtype",
        "impl",
        "time µs",
        "host µs",
        "GB/s",
        "% copy",
        "TFLOP/s",
        "peak MB",
        "vs torch",
    ]:
        table.add_column(col, justify="left" if col in ("op", "size", "dtype", "impl") else "right")
    f = lambda v, p=1: "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{p}f}"  # noqa: E731
    for r in results:
        if r.error:
            table.add_row(r.case, r.size, r.dtype, r.impl, f"[red]{r.error[:60]}", "", "", "", "", "", "")
            continue
        table.add_row(
            r.case,
            r.size,
            r.dtype,
            r.impl,
            f(r.time_us),
            f(r.host_us),
            f(r.gbps, 0),
            f(r.pct_copy_bw, 0),
            f(r.tflops, 1),
            f(r.peak_mem_mb, 0),
            f(r.speedup_vs_torch, 2) + ("x" if r.speedup_vs_torch else ""),
        )
    console.print(table)


def plot(results: Sequence[Result], path: str) -> None:
    """time (µs) against size, one line per implementation, one panel per op and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r.case, r.dtype) for r in results})
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 3 * len(panels)), squeeze=False)
    for ax, (case, dtype) in zip(axes[:, 0], panels):
        rows = [r for r in results if r.case == case and r.dtype == dtype and not r.error]
        for impl in dict.fromkeys(r.impl for r in rows):
            pts = [r for r in rows if r.impl == impl]
            ax.plot([p.size for p in pts], [p.gbps or p.tflops for p in pts], marker="o", label=impl)
        ax.set_title(f"{case} ({dtype})")
        ax.set_ylabel("GB/s" if rows and rows[0].gbps else "TFLOP/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
