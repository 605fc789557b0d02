"""Shared plumbing for the shipped ops: their CUDA modules, kernel lookup and launch sizing."""

from __future__ import annotations

import functools
import struct
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

import torch

from kernelkit import _native
from kernelkit.jit import Kernel, Module

CTYPE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "__half",
    torch.bfloat16: "__nv_bfloat16",
}
FLOATS = tuple(CTYPE)
BLOCK = 256
MAX_DIMS = 8
_STRIDED = struct.Struct("<8q24qi4x")  # kk::Strided in kernels/common.cuh


@functools.cache
def _module(family: str) -> Module:
    """The compiled module of one kernels/<family>.cu file (sources are embedded in the wheel)."""
    headers = [("common.cuh", _native.op_source("common.cuh"))]
    return Module(f"kernelkit.{family}", _native.op_source(f"{family}.cu"), f"{family}.cu", headers, [], [], [], True)


_kernels: Dict[Tuple[str, str], Kernel] = {}


def kernel(family: str, expr: str) -> Kernel:
    """A shipped kernel by name expression, e.g. kernel("elementwise", "kk_add<float>"); cached."""
    key = (family, expr)
    k = _kernels.get(key)
    if k is None:
        k = _kernels[key] = _module(family).kernel(expr)
    return k


@functools.cache
def sm_count(device: int) -> int:
    return _native.device_info(device)["multiprocessor_count"]


@functools.cache
def dram_gbps_per_sm(device: int) -> float:
    """Peak DRAM bandwidth per SM in GB/s (double data rate x bus width; 0 where the driver reports no clock):
    an H200 36.5 (3201 MHz x 6016 bits over 132 SMs), an H100 SXM about 25 by its specification."""
    info = _native.device_info(device)
    return 2 * info["memory_clock_khz"] * info["memory_bus_bits"] / 8 / 1e6 / info["multiprocessor_count"]


# Below this DRAM bandwidth per SM (an H100 SXM about 25 GB/s, an H200 36.5; a driver that reports no memory clock
# reads 0) a few kernels take launch fits of their own, measured faster on an H100 (ops/norms.py
# _BWD_BULK_FIT_LOW_GBPS and _FWD_KEEP_LOW_GBPS, ops/softmax.py _HELD_LOW_GBPS, ops/activations.py _rope_shape).
LOW_DRAM_GBPS_PER_SM = 30.0


def low_dram_bandwidth(device: int) -> bool:
    """Whether ``device`` takes the launch fits kept for less DRAM bandwidth per SM (LOW_DRAM_GBPS_PER_SM)."""
    return dram_gbps_per_sm(device) < LOW_DRAM_GBPS_PER_SM


@functools.cache
def compute_capability(device: int) -> Tuple[int, int]:
    """``device``'s (major, minor) compute capability: (9, 0) for an H100 or H200."""
    major, minor = _native.device_info(device)["compute_capability"]
    return major, minor


def has_clusters(device: int) -> bool:
    """Whether ``device`` runs thread-block clusters (sm_90+)."""
    return compute_capability(device) >= (9, 0)


@functools.cache
def smem_optin(device: int) -> int:
    """Bytes of shared memory one block may use on ``device`` once it opts in."""
    return _native.device_info(device)["max_shared_memory_per_block_optin"]


@functools.cache
def resident_blocks(k: Kernel, block: int, device: int, shared_mem: int = 0) -> int:
    """Blocks of ``k`` that fit on the whole GPU at once: one full wave (occupancy x SMs)."""
    return max(1, k.occupancy(block, shared_mem, device)) * sm_count(device)


class RowShape(NamedTuple):
    """A row kernel's launch: ``per_block`` rows per block (or per cluster), at most ``cap`` blocks (clusters)
    in x, ``ctas`` CTAs per row (a cluster when > 1) and ``smem`` bytes of dynamic shared memory per block.
    ``pair``: clusters of that many blocks in x (a grid that is a multiple of it), whose blocks add up their
    partial results (kernels/norms.cu norm_bwd_bulk_run). ``shifted``: the kernel takes shifted rows (its SHIFT
    instantiation), where a norm backward's chunks hold rows of one shift."""

    kernel: Kernel
    block: Union[int, Tuple[int, int]]
    per_block: int
    cap: int
    ctas: int = 1
    smem: int = 0
    pair: int = 1
    shifted: bool = False

    def grid(self, rows: int) -> int:
        """Blocks (clusters) for ``rows`` rows: one per ``per_block`` rows, at most ``cap`` looping over them."""
        return min(cdiv(rows, self.per_block), self.cap)

    def launch(self, grid: int, args: tuple, dependent: bool = False) -> None:
        """``dependent``: a programmatic dependent launch (kernels/common.cuh kk::pdl_wait)."""
        if self.ctas > 1:
            cluster = (1, self.ctas, 1)
            self.kernel.launch((grid, self.ctas), self.block, args, self.smem, cluster=cluster, dependent=dependent)
        elif self.pair > 1:
            cluster = (self.pair, 1, 1)
            self.kernel.launch(grid, self.block, args, self.smem, cluster=cluster, dependent=dependent)
        else:
            self.kernel.launch(grid, self.block, args, self.smem, dependent=dependent)


# The most CTAs of a split row on a fixed geometry: Hopper's non-portable cluster size (the launch opts the kernel
# in). Against the portable 8 (rows beyond them had streamed their tail from one block, or taken 8 CTAs of twice the
# packs at one block per SM), on an H200 (bench/ab_source.py, h200-2026-11-24-s29/ab-16ctas-*.json): float32 at
# 2048 x 262144 layer_norm 2191.2 -> 1481.8 us, rms_norm 1112.4 -> 1043.4, add_rms_norm 2639.8 -> 2291.5,
# softmax_backward 2731.9 -> 1656.6; bf16 layer_norm 789.5 -> 615.6, rms_norm 587.0 -> 568.0; bf16
# layer_norm_backward 4096 x 131072 (its column segments before) 1465.3 -> 899.2; float32 layer_norm 4096 x 131072
# 1168.1 -> 1152.8; softmax within 0.7%. 16-bit add_rms_norm measured slower (1101.6 -> 1205.2 us) and keeps 8.
SPLIT_MAX_CTAS = 16
PORTABLE_CTAS = 8  # the most CTAs of any other split kernel (kernels/common.cuh kMaxClusterCtas)


def split_shape(
    family: str,
    expr: str,
    packs: int,
    dtype: torch.dtype,
    cols: int,
    dev: int,
    smem_per_thread: int = 0,
    fixed_geometry: bool = False,
    max_ctas: Optional[int] = None,
    fill: bool = False,
) -> Optional[RowShape]:
    """The launch of rows split over a thread-block cluster, each CTA holding its part of the row in
    registers (``packs`` 16-byte packs per thread): a grid of the resident clusters looping over rows (10%
    faster than a cluster per row, bench/sweep_split.py). None where that takes more CTAs than the kernel's
    clusters may have, the GPU has no clusters (before sm_90) or no cluster fits on it. ``expr``: the kernel, in
    kernels/<family>.cu; ``smem_per_thread``: its dynamic shared memory per thread of a CTA; ``fixed_geometry``:
    the kernel takes the cluster's CTAs as its CTAS template argument where its blocks are of 512 threads (a
    compile-time geometry): at ``{ctas}`` in ``expr`` where it has that (0 where the geometry is not fixed), else after
    its last argument. Such kernels take clusters up to ``max_ctas`` (default SPLIT_MAX_CTAS; rows beyond 8
    CTAs always have 512-thread CTAs); the others up to the portable 8, which their reduction's slots are sized for.
    ``fill``: one CTA more than the row needs where more of them are held at once (more SMs at work)."""
    if not has_clusters(dev):
        return None
    e = packs * VEC[dtype]
    least = cdiv(cols, 512 * e)
    most = (max_ctas or SPLIT_MAX_CTAS) if fixed_geometry else PORTABLE_CTAS
    if least > most:
        return None

    def shape(ctas: int) -> Optional[RowShape]:
        r = pow2ceil(cdiv(cols, ctas * e))
        fixed = fixed_geometry and r == 512
        if "{ctas}" in expr:
            ex = expr.replace("{ctas}", str(ctas if fixed else 0))
        else:
            ex = f"{expr[:-1]}, {ctas}>" if fixed else expr
        k = kernel(family, ex)
        smem = smem_per_thread * r
        clusters = k.max_active_clusters((r, 1), (1, ctas, 1), smem, dev)
        return RowShape(k, (r, 1), 1, clusters, ctas, smem) if clusters else None

    best = shape(least)
    if fill and best and least < most:
        # fewer CTAs at work than the GPU holds at once
        idle = best.cap * least < resident_blocks(best.kernel, best.block[0], dev, best.smem)
        wider = shape(least + 1) if idle else None
        if wider and wider.cap * wider.ctas > best.cap * least:
            best = wider
    return best


def row_cache_bytes(k: Kernel, dev: int, packs: int, unit: int) -> int:
    """Dynamic shared memory for the ``packs`` packs (``unit`` bytes each) of a row beyond a block's registers,
    up to what one block of ``k`` may have beside its static shared memory."""
    if packs <= 0:
        return 0
    room = smem_optin(dev) - k.attributes(dev)["shared_size_bytes"]
    return min(room, packs * unit) // unit * unit


_Buffers = TypeVar("_Buffers")


_retired: List[Any] = []  # buffer sets replaced by larger ones, which graphs may still use


def _grown(need: int, least: int, had: int) -> int:
    """Elements for a new buffer set that must hold ``need``: at least ``least``, and at least twice the ``had`` of
    the set it replaces (0 for none), so that few sets are ever retired (see _new_stream_buffers)."""
    return max(need, least, 2 * had)


def _new_stream_buffers(
    cache: Dict[Tuple[int, int], Any], key: Tuple[int, int], make: Callable[[], _Buffers]
) -> _Buffers:
    """``make()``'s new initialized buffers for the (device, stream) ``key``, cached there.

    Inside a CUDA graph capture they are made for the one call and not cached: their initialization is a node of
    that graph, done only when it replays, and another graph captured on the stream would find them uninitialized.

    Otherwise they are made on a helper thread, on the same stream: this thread's allocations may be routed to a
    private pool (torch.compile's reduce-overhead warm-up, ``torch.cuda.use_mem_pool``) that must not keep
    buffers alive past the call, and the routing is per thread. One thread per new buffer set, not per call.

    A set they replace is kept alive (``_retired``), not freed: a graph captured on the stream may hold it
    (torch.compile's cudagraph trees warm up and record on one stream), and would replay into memory handed to other
    tensors. Callers size a new set with _grown, so few are ever retired."""
    device, _ = key
    with torch.cuda.device(device):
        if torch.cuda.is_current_stream_capturing():
            return make()
        stream = torch.cuda.current_stream()
    made: List[Any] = []

    def run() -> None:
        try:
            with torch.cuda.device(device), torch.cuda.stream(stream):
                made.append(make())
        except BaseException as e:  # raised again on the caller's thread
            made.append(e)

    helper = threading.Thread(target=run, name="kernelkit-buffers")
    helper.start()
    helper.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    if key in cache:
        _retired.append(cache[key])
    cache[key] = made[0]
    return made[0]


_tickets: Dict[Tuple[int, int], torch.Tensor] = {}


def tickets(device: int, n: int) -> torch.Tensor:
    """At least ``n`` zeroed 32-bit counters on ``device`` for a kernel whose last block to finish a piece of
    work does its final step and sets that counter back to 0 (kernels/gelu.cu). One set per (device, current
    stream): launches in one stream's order reuse it, launches on other streams get their own."""
    key = (device, torch._C._cuda_getCurrentRawStream(device))
    t = _tickets.get(key)
    if t is None or t.numel() < n:
        where = torch.device("cuda", device)
        size = _grown(n, 1024, t.numel() if t is not None else 0)
        t = _new_stream_buffers(_tickets, key, lambda: torch.zeros(size, dtype=torch.int32, device=where))
    return t


_scratch: Dict[Tuple[int, int], Tuple[torch.Tensor, torch.Tensor]] = {}


def scratch(device: int, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(at least ``n`` spill slots of 64 bits, all ones; two zeroed 64-bit words) on ``device``, for the reduced
    cross-entropy loss, whose last block leaves both as it found them (kernels/softmax.cu kk_cross_entropy_loss). Kept
    per (device, current stream), as :func:`tickets`: launches in one stream's order reuse them, with no allocation
    per call and one lookup for both."""
    key = (device, torch._C._cuda_getCurrentRawStream(device))
    s = _scratch.get(key)
    if s is None or s[0].numel() < n:
        where = torch.device("cuda", device)
        size = _grown(n, 4096, s[0].numel() if s is not None else 0)

        def make() -> Tuple[torch.Tensor, torch.Tensor]:
            spill = torch.full((size,), -1, dtype=torch.int64, device=where)
            return spill, torch.zeros(2, dtype=torch.int64, device=where)

        s = _new_stream_buffers(_scratch, key, make)
    return s


class HeldLossScratch(NamedTuple):
    """Buffers of the cross-entropy whose gradient is written in its forward (kernels/softmax.cu
    kk_cross_entropy_held and its count and mean): one zeroed 64-bit count and one zeroed 32-bit ticket, which the
    mean's last block sets back to zero, and room for the blocks' partial sums and the rows' float32 losses."""

    count: torch.Tensor
    ticket: torch.Tensor
    partial: torch.Tensor
    row_loss: torch.Tensor


_held_scratch: Dict[Tuple[int, int], HeldLossScratch] = {}


def held_loss_scratch(device: int, rows: int, blocks: int) -> HeldLossScratch:
    """:class:`HeldLossScratch` for ``rows`` rows and ``blocks`` partial sums on ``device``, kept per (device, current
    stream) as :func:`scratch` is: no allocation per call."""
    key = (device, torch._C._cuda_getCurrentRawStream(device))
    s = _held_scratch.get(key)
    if s is None or s.row_loss.numel() < rows or s.partial.numel() < blocks:
        rows = _grown(rows, 65536, s.row_loss.numel() if s is not None else 0)
        blocks = _grown(blocks, 64, s.partial.numel() if s is not None else 0)

        def make() -> HeldLossScratch:
            raw = torch.zeros(2 + blocks + cdiv(rows, 2), dtype=torch.int64, device=torch.device("cuda", device))
            parts = (raw[:1], raw[1:2].view(torch.int32)[:1], raw[2 : 2 + blocks].view(torch.float64))
            return HeldLossScratch(*parts, raw[2 + blocks :].view(torch.float32))

        s = _new_stream_buffers(_held_scratch, key, make)
    return s


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype of the kernels (kk::Acc<T>): float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_stats(opname: str, x: torch.Tensor, rows: int, per_row: int = 1, **stats: torch.Tensor) -> None:
    """Per-row statistics a backward op reads (rstd, mean, ...): ``per_row`` accumulation-dtype values per
    row of ``x``. The kernels index them by row, so a short one would be read out of bounds."""
    want = acc_dtype(x.dtype)
    for name, t in stats.items():
        if t.numel() != rows * per_row or t.dtype != want:
            each = "one per row" if per_row == 1 else f"{per_row} per row"
            raise ValueError(
                f"{opname}: argument '{name}' must hold {rows * per_row} {str(want)[6:]} values ({each}), "
                f"got shape {tuple(t.shape)} and dtype {str(t.dtype)[6:]}"
            )


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def pow2ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# Elements in one 16-byte vector: the kernels' vector path (kk::kVec<T>).
VEC = {dt: 16 // torch.empty((), dtype=dt).element_size() for dt in CTYPE}


def flat_grid(n: int, dtype: torch.dtype, packs: int, block: int = BLOCK) -> int:
    """Blocks for one pass of a grid-stride kernel whose threads take ``packs`` 16-byte vectors each.
    On the H200 one pass beats persistent grids for the plain streaming kernels (bench/sweep_flat.py)."""
    return max(1, cdiv(n, VEC[dtype] * block * packs))


def strided_arg(shape: Sequence[int], tensors: Sequence[torch.Tensor]) -> bytes:
    """Pack kk::Strided: the output shape and each input's element strides after broadcasting to it."""
    nd = len(shape)
    sizes = list(shape) + [0] * (MAX_DIMS - nd)
    strides = []
    for k in range(3):
        if k < len(tensors):
            st = list(tensors[k].expand(shape).stride())
            strides += st + [0] * (MAX_DIMS - nd)
        else:
            strides += [0] * MAX_DIMS
    return _STRIDED.pack(*sizes, *strides, nd)


# Row kernels' paths (row_path): 16-byte packs of aligned rows; 16-byte packs of rows of any width, their head and tail
# elements one by one (kernels/common.cuh kk::RowShift); one element at a time.
VECTOR, SHIFTED, SCALAR = "vector", "shifted", "scalar"


def row_path(cols: int, dtype: torch.dtype, tensors: Sequence) -> str:
    """The path a row kernel takes over ``tensors``: VECTOR where the width is a multiple of VEC and every pointer
    is 16-byte aligned; SHIFTED where the pointers sit at the same place in their 16-byte units (so a row's head is
    the same in each), for kernels that have it; else SCALAR. The host must not assume a path the kernel will not
    take: a row held whole on the vector path does not fit the scalar path's registers (those kernels trap then).
    One pass over the pointers in a plain loop: 0.5 us less per call than any() over a generator."""
    bits = diff = 0
    first = None
    for t in tensors:
        if isinstance(t, torch.Tensor):
            p = t.data_ptr()
            if first is None:
                first = p
            bits |= p
            diff |= p ^ first
    if bits % 16 == 0 and cols % VEC[dtype] == 0:
        return VECTOR
    return SHIFTED if diff % 16 == 0 and cols < 2**31 else SCALAR  # kk::kShiftMaxCols: 32-bit offsets
