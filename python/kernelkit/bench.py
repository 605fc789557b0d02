"""The benchmark harness behind `kernelkit bench`, usable on your own ops.

Each case is timed for each implementation (kernelkit, torch eager, torch.compile of the
reference, Liger-Kernel for the LLM ops when it is installed) at each size and dtype: median GPU
time from CUDA events over rotating input sets (so repeated runs do not measure the L2 cache), host
time per call, achieved GB/s and its share of the copy bandwidth measured on the same GPU, peak
memory, and the speed relative to torch eager, torch.compile and Liger. Without a GPU it times the
CPU implementations against torch on CPU.

Each call is timed twice on a GPU. ``time_us`` is what a caller waits for: the calls issued one after
another, so a call whose host work outlasts its kernels (small sizes, ``torch.autograd.grad``) is timed at
the host's pace, and the speedups compare these times. ``gpu_us`` is the GPU's work alone: the calls are
queued behind a kernel that holds the stream until the host has issued them all (nvbench's blocking
kernel), so they run back to back; ``gpu_pct_copy_bw`` is its share of the copy bandwidth. An
implementation that waits on the GPU inside a call (a host sync) has no ``gpu_us``.

A case's ``prepare(impl, inputs)`` hook, when set, turns one input set into the zero-argument call
that is timed, outside the timed region: :func:`backward` uses it to build each implementation's
forward graph once and time only ``torch.autograd.grad``.

>>> from kernelkit.bench import Case, run
>>> case = Case("scale2", make=lambda size, dtype, dev: (torch.randn(size, dtype=dtype, device=dev),),
...             impls={"kernelkit": my_op, "torch": lambda x: x * 2}, bytes=lambda x: 2 * x.nbytes)
>>> results = run([case], sizes=[(1 << 24,)], dtypes=[torch.float32])
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

__all__ = ["GROUPS", "LLM_SIZES", "Case", "Result", "backward", "copy_bandwidth", "environment", "op_cases", "run"]

Size = Tuple[int, ...]
ROUNDS = 5  # interleaved timing rounds per job (_time_interleaved)


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
    # prepare(impl, inputs) -> the zero-argument call to time, built outside the timed region (default: impl(*inputs))
    prepare: Optional[Callable[[Callable, tuple], Callable[[], Any]]] = None


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
    speedup_vs_torch: Optional[float] = None  # torch eager's time / this time: above 1 is faster
    error: Optional[str] = None
    speedup_vs_compile: Optional[float] = None  # torch.compile's time / this time
    speedup_vs_liger: Optional[float] = None  # Liger-Kernel's time / this time
    gpu_us: Optional[float] = None  # the GPU's time with the calls queued back to back (see the module's doc)
    gpu_pct_copy_bw: Optional[float] = None  # the copy bandwidth's share at gpu_us


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
    try:
        from importlib.metadata import version

        env["liger_kernel"] = version("liger_kernel")
    except Exception:  # not installed: the llm cases run without a Liger column
        pass
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


def _gpu_median_ms(
    fns: Sequence[Callable], reps: int = 50, warmup: int = 5, warmup_ms: float = 50.0, queued: bool = False
) -> float:
    """Median time of one call in ms, from CUDA events around each of ``reps`` calls (rotating through ``fns``);
    with ``queued``, the calls are queued behind a :class:`_StreamHold` (the GPU's work alone).

    The warm-up runs at least ``warmup`` calls and ``warmup_ms`` of GPU work: a compile between two measurements
    (torch.compile, NVRTC) leaves the GPU idle for seconds, and a few calls were not enough for its clocks to
    come back (the first implementation timed per job measured up to 20% slow, bench/NOTES.md session 14).
    """
    _warm(fns, warmup, warmup_ms, gpu=True)
    ms = _timed_calls(fns, 0, reps, gpu=True, hold=_StreamHold() if queued else None)[0]
    if not ms:
        raise RuntimeError("the calls waited on the GPU while it was held: they cannot be timed queued")
    return statistics.median(ms)


class _StreamHold:
    """Holds the current CUDA stream (``kk_hold_stream``, kernels/bench.cu) while the host queues work behind it."""

    # Far above the host time of one round's calls (~10 ms on the slowest hosts seen). The calls must be warm: CUDA
    # loads kernels lazily, and a load may wait for the work queued on the GPU: a first call behind a hold waits.
    TIMEOUT_MS = 250.0

    def __init__(self) -> None:
        from kernelkit.ops import _runtime

        self.kernel = _runtime.kernel("bench", "kk_hold_stream")
        self.flag = torch.zeros(2, dtype=torch.int32, pin_memory=True)  # [release, timed out]

    def hold(self) -> None:
        self.flag.zero_()  # the previous hold has ended: every round synchronizes
        self.kernel.launch(grid=1, block=1, args=(self.flag.data_ptr(), int(self.TIMEOUT_MS * 1e6)))

    def release(self) -> None:
        self.flag[0] = 1

    def timed_out(self) -> bool:
        """Whether the hold ended by its timeout (read after a synchronize)."""
        return bool(self.flag[1])


def _timed_calls(
    fns: Sequence[Callable], first: int, n: int, gpu: bool, hold: Optional[_StreamHold] = None
) -> Tuple[List[float], List[float]]:
    """``n`` calls rotating through ``fns`` from index ``first``: (each call's time in ms, from CUDA events on GPU
    and the wall clock on CPU; each call's host time in µs). With ``hold`` the calls are queued behind it and
    released together; an empty list of times means the hold timed out (the calls waited on the GPU)."""
    events, host = [], []
    if hold is not None:
        hold.hold()
    for i in range(first, first + n):
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        fns[i % len(fns)]()
        host.append((time.perf_counter() - t0) * 1e6)
        if gpu:
            end.record()
            events.append((start, end))
    if not gpu:
        return [t * 1e-3 for t in host], host
    if hold is not None:
        hold.release()
    torch.cuda.synchronize()
    if hold is not None and hold.timed_out():
        return [], host
    return [s.elapsed_time(e) for s, e in events], host


def _peak_mb(call: Callable[[], Any]) -> float:
    """Peak CUDA memory one call allocates beyond what is already live, in MB."""
    call()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 1e6


def _time_interleaved(
    calls: Dict[str, Sequence[Callable]],
    reps: int,
    gpu: bool,
    errors: Dict[str, str],
    rounds: int = ROUNDS,
    per_round: Optional[Dict[str, List[float]]] = None,
    queued: Optional[Dict[str, Optional[float]]] = None,
    per_round_queued: Optional[Dict[str, List[float]]] = None,
) -> Dict[str, Tuple[float, float]]:
    """Median time (ms; CUDA events on GPU, wall clock on CPU) and median host time (µs) of one call per
    implementation, over ``rounds`` rounds that take the implementations in turn, in the orders of
    :func:`_balanced_orders`: no implementation always runs first, or always right after the same other one.

    Host-bound calls (small sizes, backwards timed around ``torch.autograd.grad``) follow the host's
    load and clocks, which drift over seconds: timed one implementation after the other, the same cell
    measured 137 and 339 us in two runs (layer_norm_backward bf16 32768 x 256, bench/results/*-s13).
    Interleaved, a drift reaches every implementation alike (bench/NOTES.md, session 15). The garbage
    collector is off while timing, as in ``timeit``. Every implementation's inputs and graphs are alive
    together. An implementation that raises is dropped, its error kept in ``errors``. ``per_round``, when given,
    receives each implementation's median time (ms) of every round, for paired comparisons round by round.
    ``queued``, when given on a GPU, receives each implementation's median time (ms) with each round's calls
    timed a second time, queued behind a :class:`_StreamHold` (None where a hold timed out); ``per_round_queued``,
    given with it, the median of those of every round (NaN once an implementation's hold timed out).
    """
    calls_per_round = max(1, math.ceil(reps / rounds))
    times: Dict[str, List[float]] = {n: [] for n in calls}
    host: Dict[str, List[float]] = {n: [] for n in calls}
    hold = None
    if queued is not None and gpu:
        try:
            hold = _StreamHold()
        except Exception as e:  # kernelkit's own kernel unavailable (no NVRTC): time per call only
            warnings.warn(f"kernelkit.bench: no GPU time alone ({type(e).__name__}: {e})", stacklevel=2)
    held: Dict[str, Optional[List[float]]] = {n: [] for n in calls}
    gc_was_on = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            names = list(calls)  # an implementation that raised is gone
            if not names:
                break
            orders = _balanced_orders(len(names))
            for name in [names[i] for i in orders[r % len(orders)]]:
                fns = calls[name]
                try:
                    # The first round's warm-up waits out GPU clocks a compile left idle (see _gpu_median_ms).
                    _warm(fns, 5 if r == 0 else 2, (50.0 if r == 0 else 2.0) if gpu else 0.0, gpu)
                    ms, us = _timed_calls(fns, r * calls_per_round, calls_per_round, gpu)
                    times[name] += ms
                    host[name] += us
                    if per_round is not None:
                        per_round.setdefault(name, []).append(statistics.median(ms))
                    alone = math.nan
                    if hold is not None and held[name] is not None:
                        ms, _ = _timed_calls(fns, r * calls_per_round, calls_per_round, gpu, hold)
                        held[name] = held[name] + ms if ms else None
                        alone = statistics.median(ms) if ms else math.nan
                    if hold is not None and per_round_queued is not None:
                        per_round_queued.setdefault(name, []).append(alone)
                except Exception as e:
                    calls.pop(name)
                    errors[name] = f"{type(e).__name__}: {e}"[:300]
    finally:
        if gc_was_on:
            gc.enable()
    if hold is not None:
        queued.update({n: statistics.median(held[n]) if held[n] else None for n in calls})
    return {n: (statistics.median(times[n]), statistics.median(host[n])) for n in calls}


def _balanced_orders(n: int) -> List[List[int]]:
    """Orders of ``n`` implementations for successive rounds (a Williams design, as crossover trials use): over the
    orders returned (n of them, 2n for odd n) each implementation takes every place in a round equally often and
    follows every other one equally often. One cycle of them, fixed or rotated, put kernelkit right after torch.compile
    in every round of bench/exp_ties.py, and its A/A control (kernelkit against itself in the next place) read 0.9988
    [0.9979, 0.9997] at rms_norm float32 32768 x 4096; in these orders the A/A controls read 0.9999-1.0003
    (h200-2026-11-28-s55/ties-norms-rotated.log, ties-norms.log).

    >>> _balanced_orders(4)
    [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
    """
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo if len(first) % 2 else hi)
        lo, hi = (lo + 1, hi) if len(first) % 2 == 0 else (lo, hi - 1)
    orders = [[(i + j) % n for i in first] for j in range(n)]
    return orders + [o[::-1] for o in orders] if n % 2 and n > 1 else orders


def _warm(fns: Sequence[Callable], calls: int, min_ms: float, gpu: bool) -> None:
    """At least ``calls`` calls and ``min_ms`` of work. It ends with up to 7 calls still queued on the GPU: timed
    calls that start on an idle GPU measure its launch latency too (rounds of 10 calls that each started idle
    measured bias_gelu bfloat16 4096x4096 at 34.3 us against 25.5 primed; bench/NOTES.md session 15)."""
    i, start = 0, time.perf_counter()
    while i < calls or (time.perf_counter() - start) * 1e3 < min_ms:
        fns[i % len(fns)]()
        i += 1
        if gpu and i % 8 == 0:
            torch.cuda.synchronize()  # so that the host clock follows the GPU's work


def _input_sets(case: Case, size: Size, dtype: torch.dtype, device: str, l2_bytes: int) -> List[tuple]:
    first = case.make(size, dtype, device)
    per_set = sum(a.nbytes for a in first if isinstance(a, torch.Tensor))
    # Rotate through enough copies that each call reads from DRAM, not from L2.
    n = 1 if device == "cpu" or per_set == 0 else max(1, min(32, math.ceil(4 * l2_bytes / per_set)))
    return [first] + [case.make(size, dtype, device) for _ in range(n - 1)]


def _job_calls(case: Case, size: Size, dtype: torch.dtype, device: str, l2: int, compile: bool):
    """One job's implementations (torch.compile of the case's reference added on GPU) and their calls over rotating
    input sets, each called once (which compiles): (impls, input sets, calls, peak MB, errors by implementation)."""
    gpu = device == "cuda"
    if case.setup is not None:
        case.setup()
    impls: Dict[str, Callable] = {}
    for name, fn in case.impls.items():
        impls[name] = fn
        if compile and gpu and name == case.compile_reference:
            # A fresh start per job: one function compiled for every size, dtype and grad mode
            # would pass dynamo's recompile limit and silently fall back to eager.
            torch._dynamo.reset()
            impls["torch.compile"] = torch.compile(fn, dynamic=False)
    sets = _input_sets(case, size, dtype, device, l2)
    calls: Dict[str, List[Callable]] = {}
    peaks: Dict[str, Optional[float]] = {}
    errors: Dict[str, str] = {}
    for name, fn in impls.items():
        try:
            if case.prepare is not None:
                calls[name] = [case.prepare(fn, a) for a in sets]
            else:
                calls[name] = [lambda a=a, fn=fn: fn(*a) for a in sets]
            peaks[name] = _peak_mb(calls[name][0]) if gpu else None  # the first call also compiles
        except Exception as e:  # one failing implementation must not stop the run
            calls.pop(name, None)
            errors[name] = f"{type(e).__name__}: {e}"[:300]
    return impls, sets, calls, peaks, errors


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
            impls, sets, calls, peaks, errors = _job_calls(case, size, dtype, device, l2, compile)
            queued: Dict[str, Optional[float]] = {}
            timings = _time_interleaved(calls, reps, gpu, errors, queued=queued)
            nbytes = case.bytes(*sets[0]) if case.bytes else None
            flops = case.flops(*sets[0]) if case.flops else None
            row: List[Result] = []
            for name in impls:
                head = (case.name, name, "x".join(map(str, size)), str(dtype).replace("torch.", ""), device)
                if name in errors:
                    row.append(Result(*head, math.nan, math.nan, None, None, None, None, error=errors[name]))
                    continue
                ms, host = timings[name]
                gbps = nbytes / (ms * 1e-3) / 1e9 if nbytes else None
                pct = 100 * gbps / copy_gbps if gbps and copy_gbps else None
                tflops = flops / (ms * 1e-3) / 1e12 if flops else None
                gpu_ms = queued.get(name)
                alone = {}  # the GPU's time alone, where it was measured
                if gpu_ms is not None:
                    alone = dict(gpu_us=gpu_ms * 1e3, gpu_pct_copy_bw=pct * ms / gpu_ms if pct else None)
                row.append(Result(*head, ms * 1e3, host, gbps, pct, tflops, peaks[name], **alone))
            calls = {}  # free the inputs and graphs before the next job's
            _speedups(row)
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


def _speedups(row: List[Result]) -> None:
    """Fill in each result's speed relative to torch eager, torch.compile and Liger of the same job."""
    ok = {r.impl: r.time_us for r in row if r.error is None}
    for r in row:
        if r.error is None:
            r.speedup_vs_torch = ok["torch"] / r.time_us if "torch" in ok else None
            r.speedup_vs_compile = ok["torch.compile"] / r.time_us if "torch.compile" in ok else None
            r.speedup_vs_liger = ok["liger"] / r.time_us if "liger" in ok else None


# ---------------------------------------------------------------- kernelkit's own ops


def _gelu_grad_reference(grad, x, bias):
    # The explicit tanh-GELU backward (what a fused kernel computes), for eager and torch.compile.
    v = x.float() + bias.float()
    k = 0.7978845608028654
    t = torch.tanh(k * (v + 0.044715 * v * v * v))
    d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v)
    gx = (grad.float() * d).to(x.dtype)
    return gx, gx.float().sum(0).to(bias.dtype)


def _core_cases() -> List[Case]:
    """The elementwise, GELU and matmul cases (issue 3). Sizes are (rows, cols); matmul uses (M, N, K)."""
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
    return cases


# ---------------------------------------------------------------- LLM training ops (issue 5)

# (rows, cols) = (tokens, hidden); cross_entropy: (tokens, vocab). 256 columns is where host overhead decides.
LLM_SIZES: List[Size] = [(32768, 256), (32768, 4096), (32768, 8192), (8192, 65536)]

GROUPS: Dict[str, Tuple[str, ...]] = {
    "core": ("add", "mul", "muladd", "bias_gelu", "bias_gelu_backward", "matmul"),
    "llm": (
        "rms_norm",
        "rms_norm_backward",
        "add_rms_norm",
        "add_rms_norm_backward",
        "layer_norm",
        "layer_norm_backward",
        "softmax",
        "softmax_backward",
        "cross_entropy",
        "cross_entropy_backward",
        "cross_entropy_fwd_bwd",
        "cross_entropy_items_fwd_bwd",
        "swiglu",
        "swiglu_backward",
        "rope",
        "rope_backward",
    ),
}
GROUPS["all"] = GROUPS["core"] + GROUPS["llm"]


def _differentiable_outputs(out: Any) -> List[torch.Tensor]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]


def backward(argnums: Sequence[int], with_forward: bool = False) -> Callable[[Callable, tuple], Callable[[], Any]]:
    """A ``Case.prepare`` hook that times the backward of an implementation's forward function.

    Per input set and implementation (outside the timed region) the inputs at ``argnums`` become fresh
    leaves (clones, as some implementations write gradients into their inputs), the forward graph is
    built once, and the timed call is ``torch.autograd.grad(outputs, leaves, grad_outputs,
    retain_graph=True)``: no ``.grad`` accumulation, the same for kernelkit, torch, torch.compile and
    Liger. Scalar outputs (losses) get a gradient of 1; the others random ones, the same values for
    every implementation, laid out like its output (as the next layer's backward would hand them
    over). ``with_forward=True`` times forward plus backward instead (for ops like Liger's
    cross-entropy, which computes the gradient in its forward pass).
    """

    def leaves(inputs: tuple) -> tuple:
        return tuple(a.detach().clone().requires_grad_() if i in argnums else a for i, a in enumerate(inputs))

    def prepare(fn: Callable, inputs: tuple) -> Callable[[], Any]:
        args = leaves(inputs)
        # with_forward: learn the outputs from a throwaway copy, so the first timed call sees the inputs unchanged.
        outs = _differentiable_outputs(fn(*(leaves(inputs) if with_forward else args)))
        grads = [
            torch.ones_like(o)
            if o.dim() == 0
            else torch.empty_like(o).copy_(torch.randn(o.shape, dtype=o.dtype, device=o.device))
            for o in outs
        ]
        wrt = [args[i] for i in argnums]
        if with_forward:
            del outs
            return lambda: torch.autograd.grad(_differentiable_outputs(fn(*args)), wrt, grads)
        return lambda: torch.autograd.grad(outs, wrt, grads, retain_graph=True)

    return prepare


def _rms_norm_reference(x, w, eps=1e-6):
    # Hugging Face's LlamaRMSNorm: normalize in float32, round to the input dtype, then scale.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _add_rms_norm_reference(x, residual, w, eps=1e-6):
    h = x + residual
    return _rms_norm_reference(h, w, eps), h


def _cross_entropy_reference(logits, target):
    # Hugging Face's ForCausalLMLoss upcasts the logits to float32 before F.cross_entropy.
    return torch.nn.functional.cross_entropy(logits.float(), target)


def _cross_entropy_items_reference(logits, target, items):
    # Hugging Face's ForCausalLMLoss given num_items_in_batch (the Trainer's gradient accumulation).
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum") / items


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope_reference(q, k, cos, sin):
    # Hugging Face's apply_rotary_pos_emb (unsqueeze_dim=1).
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _liger_functions() -> Dict[str, Callable]:
    """Liger-Kernel's implementations (Triton, so GPU only); empty when it is not installed."""
    if not torch.cuda.is_available():
        return {}
    try:
        from liger_kernel.transformers import functional as LF
    except Exception:  # not installed, or a version whose imports fail here
        return {}
    eps = 1e-6
    wrappers: Dict[str, Tuple[str, Callable[[Callable], Callable]]] = {
        # Llama's settings: weight offset 0, "llama" casting (rstd in float32), dX written into dY (Liger's default).
        "rms_norm": (
            "liger_rms_norm",
            lambda f: lambda x, w: f(x, w, eps, offset=0.0, casting_mode="llama", in_place=True),
        ),
        "add_rms_norm": (
            "liger_fused_add_rms_norm",
            lambda f: lambda x, r, w: f(x, r, w, eps, offset=0.0, casting_mode="llama", in_place=True),
        ),
        "layer_norm": ("liger_layer_norm", lambda f: lambda x, w, b: f(x, w, b, 1e-5)),
        "softmax": ("liger_softmax", lambda f: f),
        "cross_entropy": ("liger_cross_entropy", lambda f: lambda logits, target: f(logits, target)),
        "cross_entropy_items": (
            "liger_cross_entropy",
            lambda f: lambda logits, target, items: f(logits, target, reduction="sum") / items,
        ),
        "swiglu": ("liger_swiglu", lambda f: f),
        "rope": ("liger_rope", lambda f: lambda q, k, cos, sin: f(q, k, cos, sin)),
    }
    # An op this Liger version lacks is left out.
    return {op: wrap(getattr(LF, fname)) for op, (fname, wrap) in wrappers.items() if hasattr(LF, fname)}


def _llm_cases() -> List[Case]:
    """Forward and backward cases for issue 5's ops against torch eager, torch.compile and Liger-Kernel.

    Sizes are (rows, cols) = (tokens, hidden); cross_entropy reads cols as the vocabulary. rope reads
    the (tokens, hidden) activation as q and k of (batch, heads, seq, 128) in Hugging Face's layout
    (a (batch, seq, heads, 128) projection output viewed through transpose(1, 2)), seq = 4096 when
    tokens divide into it (else one sequence), heads = hidden / 128 (head_dim = hidden when 128 does
    not divide it), with cos and sin of (batch, seq, head_dim). That is the layout a Llama attention
    hands apply_rotary_pos_emb: Liger rotates it in place; kernelkit.ops.rope (q and k in one launch,
    as under kernelkit.patch) and torch read the strides and write outputs of the same layout.

    GB/s counts the fewest bytes each op must move (T = one (rows, cols) tensor; weights, biases and
    targets are counted, per-row statistics are not: a backward may recompute them):
      rms_norm        fwd read x, w, write y: 2T           bwd read g, x, w, write gx, gw: 3T
      add_rms_norm    fwd read x, res, w, write y, h: 4T   bwd read gy, gh, h, w, write gx (= gres), gw: 4T
      layer_norm      fwd read x, w, b, write y: 2T        bwd read g, x, w, write gx, gw, gb: 3T
      softmax         fwd read x, write y: 2T              bwd read g, y, write gx: 3T
      cross_entropy   fwd read logits: 1T                  bwd read logits, write grad: 2T
                      fwd+bwd fused: 2T (read logits once, write the gradient)
                      cross_entropy_items_fwd_bwd: the same for Hugging Face's loss under gradient accumulation,
                      the sum over a micro-batch divided by num_items_in_batch (a device tensor: 4 x the rows)
      swiglu          fwd read gate, up, write y: 3T       bwd read g, gate, up, write two grads: 5T
      rope            q and k read and written, cos and sin read, forward and backward alike
    """
    import kernelkit.ops as K

    liger = _liger_functions()
    eps = 1e-6

    def rnd(*shape, dtype, dev):
        return torch.randn(*shape, dtype=dtype, device=dev)

    def weight(n, dtype, dev):
        # Trained norm weights sit near 1; this also keeps Liger's in-place backward (dX written into dY)
        # from growing or shrinking the gradients over the timed repetitions.
        return (1 + 0.1 * torch.randn(n, device=dev)).to(dtype)

    def x_w(size, dtype, dev):
        return rnd(*size, dtype=dtype, dev=dev), weight(size[-1], dtype, dev)

    def x_res_w(size, dtype, dev):
        return rnd(*size, dtype=dtype, dev=dev), rnd(*size, dtype=dtype, dev=dev), weight(size[-1], dtype, dev)

    def x_w_b(size, dtype, dev):
        return x_w(size, dtype, dev) + (0.1 * rnd(size[-1], dtype=dtype, dev=dev),)

    def x_only(size, dtype, dev):
        return (rnd(*size, dtype=dtype, dev=dev),)

    def logits_target(size, dtype, dev):
        rows, vocab = size
        return rnd(rows, vocab, dtype=dtype, dev=dev), torch.randint(0, vocab, (rows,), device=dev)

    def logits_target_items(size, dtype, dev):
        return (*logits_target(size, dtype, dev), torch.tensor(4 * size[0], device=dev))

    def gate_up(size, dtype, dev):
        return rnd(*size, dtype=dtype, dev=dev), rnd(*size, dtype=dtype, dev=dev)

    def rope_in(size, dtype, dev):
        tokens, hidden = size
        d = 128 if hidden % 128 == 0 else hidden
        seq = 4096 if tokens % 4096 == 0 else tokens
        batch, heads = tokens // seq, hidden // d
        q = rnd(batch, seq, heads, d, dtype=dtype, dev=dev).transpose(1, 2)
        k = rnd(batch, seq, heads, d, dtype=dtype, dev=dev).transpose(1, 2)
        inv_freq = 10000.0 ** (-torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d)
        freqs = torch.arange(seq, device=dev, dtype=torch.float32)[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1).expand(batch, seq, d)
        return q, k, emb.cos().to(dtype).contiguous(), emb.sin().to(dtype).contiguous()

    def rope_bytes(q, k, cos, sin):
        return 2 * (q.nbytes + k.nbytes) + cos.nbytes + sin.nbytes

    ops = {
        # name: (make, kernelkit, torch reference, forward bytes, backward bytes, differentiable args)
        "rms_norm": (
            x_w,
            lambda x, w: K.rms_norm(x, w, eps),
            _rms_norm_reference,
            lambda x, w: 2 * x.nbytes + w.nbytes,
            lambda x, w: 3 * x.nbytes + 2 * w.nbytes,
            (0, 1),
        ),
        "add_rms_norm": (
            x_res_w,
            lambda x, r, w: K.add_rms_norm(x, r, w, eps),
            _add_rms_norm_reference,
            lambda x, r, w: 4 * x.nbytes + w.nbytes,
            lambda x, r, w: 4 * x.nbytes + 2 * w.nbytes,
            (0, 1, 2),
        ),
        "layer_norm": (
            x_w_b,
            lambda x, w, b: K.layer_norm(x, w, b, 1e-5),
            lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
            lambda x, w, b: 2 * x.nbytes + 2 * w.nbytes,
            lambda x, w, b: 3 * x.nbytes + 3 * w.nbytes,
            (0, 1, 2),
        ),
        "softmax": (
            x_only,
            lambda x: K.softmax(x, -1),
            lambda x: torch.softmax(x, -1),
            lambda x: 2 * x.nbytes,
            lambda x: 3 * x.nbytes,
            (0,),
        ),
        "cross_entropy": (
            logits_target,
            lambda logits, target: K.cross_entropy(logits, target),
            _cross_entropy_reference,
            lambda logits, target: logits.nbytes + target.nbytes,
            lambda logits, target: 2 * logits.nbytes + target.nbytes,
            (0,),
        ),
        "swiglu": (
            gate_up,
            K.swiglu,
            lambda gate, up: torch.nn.functional.silu(gate) * up,
            lambda gate, up: 3 * gate.nbytes,
            lambda gate, up: 5 * gate.nbytes,
            (0, 1),
        ),
        "rope": (rope_in, K.rope, _rope_reference, rope_bytes, rope_bytes, (0, 1)),
    }
    cases = []
    for name, (make, kk, ref, fwd_bytes, bwd_bytes, argnums) in ops.items():
        impls = {"kernelkit": kk, "torch": ref}
        with_liger = {**impls, "liger": liger[name]} if name in liger else impls
        cases.append(Case(name, make, with_liger, bytes=fwd_bytes))
        # Liger's cross-entropy writes the gradient during the forward pass and its backward only scales it:
        # its backward alone is not comparable, so Liger joins cross_entropy_fwd_bwd instead.
        bwd_impls = impls if name == "cross_entropy" else with_liger
        cases.append(Case(f"{name}_backward", make, bwd_impls, bytes=bwd_bytes, prepare=backward(argnums)))
        if name == "cross_entropy":
            cases.append(
                Case(
                    "cross_entropy_fwd_bwd",
                    make,
                    with_liger,
                    bytes=bwd_bytes,
                    prepare=backward(argnums, with_forward=True),
                )
            )
            items = {
                "kernelkit": lambda logits, target, items: K.cross_entropy(logits, target, divisor=items),
                "torch": _cross_entropy_items_reference,
            }
            if "cross_entropy_items" in liger:
                items["liger"] = liger["cross_entropy_items"]
            cases.append(
                Case(
                    "cross_entropy_items_fwd_bwd",
                    logits_target_items,
                    items,
                    bytes=lambda logits, target, items: 2 * logits.nbytes + target.nbytes,
                    prepare=backward(argnums, with_forward=True),
                )
            )
    return cases


def op_cases(names: Optional[Sequence[str]] = None, group: str = "core") -> List[Case]:
    """Benchmark cases for kernelkit's ops, by name or group name (see ``GROUPS``); with no names, ``group``'s.

    Sizes are (rows, cols); matmul uses (M, N, K). The "llm" group's cases are described in ``_llm_cases``.
    """
    if not names:
        names = [group]
    unknown = [n for n in names if n not in GROUPS and n not in GROUPS["all"]]
    if unknown:
        raise ValueError(f"no such ops or groups: {unknown}; choose from {sorted(GROUPS)} or {list(GROUPS['all'])}")
    wanted = {op for n in names for op in GROUPS.get(n, (n,))}
    cases = []
    if wanted & set(GROUPS["core"]):
        cases += _core_cases()
    if wanted & set(GROUPS["llm"]):
        cases += _llm_cases()
    return [c for c in cases if c.name in wanted]


def render(results: Sequence[Result], env: Dict[str, Any], copy_gbps: Optional[float]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    where = f"{env.get('gpu', env.get('cpu'))} · torch {env['torch']} · kernelkit {env['kernelkit']}"
    if copy_gbps:
        where += f" · copy bandwidth {copy_gbps:.0f} GB/s"
    table = Table(title=where)
    f = lambda v, p=1: "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{p}f}"  # noqa: E731
    x = lambda v: f(v, 2) + ("x" if v else "")  # noqa: E731
    columns: List[Tuple[str, Callable[[Result], str]]] = [
        ("time µs", lambda r: f(r.time_us)),
        ("GPU µs", lambda r: f(r.gpu_us)),
        ("host µs", lambda r: f(r.host_us)),
        ("GB/s", lambda r: f(r.gbps, 0)),
        ("% copy", lambda r: f(r.pct_copy_bw, 0)),
        ("GPU % copy", lambda r: f(r.gpu_pct_copy_bw, 0)),
        ("TFLOP/s", lambda r: f(r.tflops, 1)),
        ("peak MB", lambda r: f(r.peak_mem_mb, 0)),
        ("vs torch", lambda r: x(r.speedup_vs_torch)),
        ("vs compile", lambda r: x(r.speedup_vs_compile)),
        ("vs liger", lambda r: x(r.speedup_vs_liger)),
    ]
    # Columns that no result fills (TFLOP/s without matmul, vs compile/liger without them) are left out.
    columns = [(name, cell) for name, cell in columns if name == "vs torch" or any(cell(r) for r in results)]
    for col in ["op", "size", "dtype", "impl"]:
        table.add_column(col, justify="left")
    for name, _ in columns:
        table.add_column(name, justify="right")
    for r in results:
        if r.error:
            cells = [f"[red]{r.error[:60]}"] + [""] * (len(columns) - 1)
        else:
            cells = [cell(r) for _, cell in columns]
        table.add_row(r.case, r.size, r.dtype, r.impl, *cells)
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
