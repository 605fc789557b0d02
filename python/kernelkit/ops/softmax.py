"""softmax and cross_entropy over the last dim. CUDA kernels: kernels/softmax.cu; CPU implementations:
Rust (kernelkit-ops)."""

from __future__ import annotations

import functools
import math
from typing import Optional, Tuple, Union

import torch

from kernelkit import _native
from kernelkit.jit import Kernel
from kernelkit.library import Out, TensorSpec, like, op
from kernelkit.ops._runtime import (
    CTYPE,
    FLOATS,
    SCALAR,
    SHIFTED,
    VEC,
    VECTOR,
    RowShape,
    acc_dtype,
    cdiv,
    check_stats,
    compute_capability,
    held_loss_scratch,
    kernel,
    low_dram_bandwidth,
    resident_blocks,
    row_cache_bytes,
    row_path,
    scratch,
    split_shape,
)

_X = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N"))

# ---------------------------------------------------------------- CUDA launch shapes (kernels/softmax.cu)
# A short row is one warp's (8 rows per 256-thread block); a long row is one block's. Rows that fit the
# registers of one block are held there whole (the kernels' HELD instantiations: no streaming code, so
# fewer registers and more blocks per SM), one block per row. Per (kernel, element size): the (register
# packs per thread, minimum blocks per SM, fewest threads per row) to try in order, the first whose 512-thread
# block holds the row with at least that many threads (bench/sweep_llm.py on an H200, 4096 and 8192 columns:
# bf16 forward 68-78 -> 92% of copy, backward 80 -> 102%, float32 forward 86-92 -> 96%, backward 65 -> 103%).
# The 16-bit forward fits 8 packs at two blocks per SM since it converts whole words (kk::acc_at): 271.3 ->
# 264.0 us at 32768 x 8192; at 4096 columns (64 threads per row) 4 packs stay faster, 131.2 against 134.0
# (h200-2026-11-22-s14/sweep_llm-held-bf16.log). The 16-bit backward holds rows beyond 2 packs' reach at 4
# packs, where the split below begins: 372.6 us at 16384 x 16384, 101.7% of copy (sweep_llm-softmax-16384-bf16).
# Its rows of 384-512 threads (6144-8192 columns) run at three blocks per SM (40 registers, no spills): bf16 32768 x
# 8192 373.0 -> 367.6 us, float16 372.3 -> 368.2; at 4096 columns (256 threads) 0.4% slower, at four blocks 0.7%
# (bench/ab_source.py, h200-2026-11-23-s21/ab-softmax-bwd-minb3.json).
_HELD = {
    ("kk_softmax_fwd", 2): ((8, 2, 128), (4, 2, 32)),
    ("kk_softmax_fwd", 4): ((8, 2, 32),),
    ("kk_softmax_bwd", 2): ((2, 3, 384), (2, 2, 32), (4, 2, 32)),
    ("kk_softmax_bwd", 4): ((8, 1, 32),),
}
# Below _runtime.LOW_DRAM_GBPS_PER_SM the forward's rows of 256-512 threads (4096-8192 columns) take fewer packs per
# thread: on an H100 (GPU time alone, bench/ab_source.py --queued, h100-2026-11-27-s40/ab-h100-softmax-fwd-held.log)
# float32 at 4 packs 357.3 -> 356.6 us (4096), 710.9 -> 705.9 (8192); bf16 at 2 packs and three blocks per SM 181.2 ->
# 180.9, 358.0 -> 356.0.
_HELD_LOW_GBPS = _HELD | {
    ("kk_softmax_fwd", 2): ((2, 3, 256), *_HELD["kk_softmax_fwd", 2]),
    ("kk_softmax_fwd", 4): ((4, 2, 256), *_HELD["kk_softmax_fwd", 4]),
}
# Below _runtime.LOW_DRAM_GBPS_PER_SM the 16-bit forward's held rows on the 16-byte path are held to 48 warps per SM
# (by dynamic shared memory they do not use). Since its held rows take one row per block (kernels/softmax.cu
# softmax_fwd_run), they compile to 32 registers where they took 40, and 64 warps per SM ran slower on an H100 (GPU
# time alone, bench/exp_softmax_one_row.sh, h100-2026-11-28-s44/ab-h100-softmax-one-row*.log): bf16 32768 x 4096
# 181.0 us against 180.4 before the change. Held to 48 warps (the loop's occupancy), against before it: bf16 x 4096
# 180.4 -> 179.7, float16 180.7 -> 179.9, x 8192 356.2 -> 354.1, x 6000 within 0.1%; 40 warps 1.08-1.17x slower at
# 6000-8192 columns, 56 within 0.2%. The scalar rows (odd widths) run free: bf16 x 1001 157.2 -> 121.3, float32 98.0
# -> 96.6.
_HELD_WARPS_LOW_GBPS = {("kk_softmax_fwd", 2): 48}


def _warps_cap_smem(k: Kernel, block: int, dev: int, warps: Optional[int]) -> int:
    """The least dynamic shared memory (in 1 KiB steps) that holds ``k``'s blocks of ``block`` threads to at most
    ``warps`` warps per SM, or one block (0 with no cap)."""
    smem = 0
    while warps and k.occupancy(block, smem, dev) * (block // 32) > max(warps, block // 32):
        smem += 1024
    return smem


# Rows beyond one block's registers (on sm_90+, 16-byte path) are split over a cluster of up to 16 CTAs
# (_runtime.SPLIT_MAX_CTAS), each holding its part in registers: (register packs per thread, minimum blocks per SM)
# per (kernel, element size), tried in order, the next where one takes more than 16 CTAs. Against one block per row
# streaming the rest (bench/sweep_llm.py --only softmax_split, H200, 8192 x 65536): float32 forward 1462 -> 1285 us,
# backward 2709 -> 1628 us. The 16-bit kernels fit 8 packs (forward) and 4 (backward) at two blocks per SM without
# spilling since they convert whole words (kk::acc_at): bf16 forward 652 -> 583 us (it had kept one block per row),
# backward 822 -> 781 (h200-2026-11-22-s14). float32 backward rows beyond 131072 columns take 8 packs at one block
# per SM (115 registers, no spills): 2048 x 262144 2731.9 -> 1656.6 us against the streamed rows; on 8 CTAs at twice
# the packs the other kernels measured within 0.7% of 16 CTAs (h200-2026-11-24-s29/ab-16ctas-softmax.json).
_SPLIT_FITS = {
    ("kk_softmax_fwd", 2): ((8, 2),),
    ("kk_softmax_fwd", 4): ((8, 2),),
    ("kk_softmax_bwd", 2): ((4, 2),),
    ("kk_softmax_bwd", 4): ((4, 2), (8, 1)),
}
# Split rows take the kernels compiled for their cluster's CTAs where those have 512 threads (kernels/softmax.cu
# split_rows' CTAS). Against the same kernels without, on an H200 (bench/ab_source.py,
# h200-2026-11-24-s27/ab-fixed-softmax.json): bf16 forward 4096 x 131072 617.0 -> 604.8 us; at 8192 x 65536 float32
# forward 1056.4 -> 1051.3, bf16 backward 763.8 -> 759.7, the bf16 forward and float32 backward within 0.1%.
# Longer rows keep `packs` packs per thread in registers and cache the rest of the row in shared memory, up
# to the device's limit, so the second pass over it does not go back to L2 or DRAM. Forward: small blocks
# (fewer warps per row reduction), float32 compiled for two blocks per SM (MINB) (bench/sweep_rows.py).


# Warp rows (nv <= 32 x the kernel's register packs: one warp per row, 8 rows per 256-thread block, a resident grid):
# per (kernel, element size), the instantiations (register packs, minimum blocks per SM, most threads per block, held)
# tried in order, the first whose packs hold the row. Rows of at most 64 packs take 2 packs a thread held in 32
# registers, 8 blocks per SM, where the kernels' defaults take 63-120 registers and 2-4 blocks (kernels/
# check_compile.py, sm_90): GPU time on an H100 (bench/results/h100-2026-11-27-s40/ab-softmax-warp-fits.log) bf16
# forward 20-25% less at 64-512 columns, backward 8-18%; float32 3-13%. Wider warp rows keep the defaults (16-bit
# forward at 65-128 packs on 48 registers: 2% slower); float64 too (at 32 registers it spills). The fits of 2 packs a
# lane put rows of at most 32 packs 2-4 to a warp (kernels/softmax.cu team_lanes).
_WARP_FITS = {
    ("kk_softmax_fwd", 2): ((2, 8, 256, True), (4, 1, 512, False)),
    ("kk_softmax_fwd", 4): ((2, 8, 256, True), (4, 2, 512, False)),
    ("kk_softmax_fwd", 8): ((4, 1, 512, False),),
    ("kk_softmax_bwd", 2): ((2, 8, 256, True),),
    ("kk_softmax_bwd", 4): ((2, 8, 256, True),),
    ("kk_softmax_bwd", 8): ((2, 1, 512, False),),
}
# Shifted rows (row_path) keep these but the backward's, which spills 8-28 bytes at 32 registers with its extra element
# (kernels/check_compile.py) and takes 40, six blocks per SM.
_WARP_FITS_SHIFTED = _WARP_FITS | {("kk_softmax_bwd", n): ((2, 6, 256, True),) for n in (2, 4)}


def _template_args(name: str, packs: int, minb: int) -> str:
    """kk_softmax_fwd takes <T, MINB, RP, ...>, kk_softmax_bwd <T, RP, MINB, ...>."""
    return f"{minb}, {packs}" if name == "kk_softmax_fwd" else f"{packs}, {minb}"


def _expr(name: str, ct: str, args: str, shifted: bool, split: bool = False) -> str:
    """A softmax kernel's expression: ``args`` its template arguments after the type, up to HELD; ``shifted``: its
    SHIFT instantiation (rows of any width on the 16-byte path); ``split``: SPLIT, whose CTAS split_shape fills in."""
    if shifted:
        return f"{name}<{ct}, {args}, {str(split).lower()}, {'{ctas}' if split else 0}, true>"
    return f"{name}<{ct}, {args}, true>" if split else f"{name}<{ct}, {args}>"


@functools.cache
def _softmax_shape(name: str, dtype: torch.dtype, cols: int, dev: int, path: str) -> RowShape:
    """The launch for rows of ``cols`` on the kernel's ``path`` (row_path)."""
    vec = 1 if path == SCALAR else VEC[dtype]
    pack_bytes = vec * (16 // VEC[dtype])  # 16 bytes on the 16-byte paths, one element otherwise
    nv = cols // vec  # a shifted row's packs: nv or nv - 1
    ct = CTYPE[dtype]
    shifted = path == SHIFTED
    held_fits = _HELD_LOW_GBPS if low_dram_bandwidth(dev) else _HELD
    for packs, minb, threads in held_fits.get((name, dtype.itemsize), ()):
        if packs * threads <= nv <= packs * 512 and nv > packs * 32:
            k = kernel("softmax", _expr(name, ct, f"{_template_args(name, packs, minb)}, 512, true", shifted))
            threads = cdiv(cdiv(nv, packs), 32) * 32
            low = path == VECTOR and low_dram_bandwidth(dev)  # the cap was measured on the 16-byte path
            cap = _HELD_WARPS_LOW_GBPS.get((name, dtype.itemsize)) if low else None
            return RowShape(k, threads, 1, 1 << 62, smem=_warps_cap_smem(k, threads, dev, cap), shifted=shifted)
    fits = _SPLIT_FITS.get((name, dtype.itemsize), ()) if vec > 1 else ()
    for packs, minb in fits if fits and nv > fits[0][0] * 512 else ():
        expr = _expr(name, ct, f"{_template_args(name, packs, minb)}, 512, true", shifted, split=True)
        split = split_shape("softmax", expr, packs, dtype, cols, dev, fixed_geometry=True)
        if split:
            return split._replace(shifted=shifted)
    for packs, minb, most, held in (_WARP_FITS_SHIFTED if shifted else _WARP_FITS).get((name, dtype.itemsize), ()):
        if nv <= packs * 32:
            args = f"{_template_args(name, packs, minb)}, {most}, {str(held).lower()}"
            k = kernel("softmax", _expr(name, ct, args, shifted))
            return RowShape(k, 256, 8, resident_blocks(k, 256, dev), shifted=shifted)
    if name == "kk_softmax_bwd":
        k = kernel("softmax", _expr(name, ct, "2, 1, 512, false", shifted) if shifted else f"{name}<{ct}>")
        block = min(max(cdiv(cdiv(nv, 2), 32) * 32, 128), 512)
        smem = row_cache_bytes(k, dev, nv - 2 * block, 2 * pack_bytes)
        return RowShape(k, block, 1, 2 * resident_blocks(k, block, dev, smem), smem=smem, shifted=shifted)
    minb = 2 if dtype == torch.float32 else 1
    k = kernel("softmax", _expr(name, ct, f"{minb}, 4, 512, false", shifted) if shifted else f"{name}<{ct}, {minb}>")
    block = min(max(cdiv(cols * dtype.itemsize // 128, 32) * 32, 128), 256)  # whole warps (kk_sm::check_block)
    while True:
        smem = row_cache_bytes(k, dev, nv - 4 * block, pack_bytes)
        if block == 512 or nv <= 4 * block + smem // pack_bytes:
            return RowShape(k, block, 1, 1 << 62, smem=smem, shifted=shifted)
        block *= 2


def _launch_softmax(name: str, x: torch.Tensor, args: tuple) -> None:
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    if rows == 0:
        return
    shape = _softmax_shape(name, x.dtype, cols, x.get_device(), row_path(cols, x.dtype, args))
    shape.launch(shape.grid(rows), (*args, rows, cols))


softmax_backward = op(
    "kernelkit::softmax_backward(Tensor grad, Tensor y) -> Tensor",
    inputs={"grad": TensorSpec(same_dtype_as="y", contiguous=True, make_contiguous=True, shape=("*", "N")), "y": _X},
    output=like("y"),
    cpu=lambda grad, y, gx: _native.cpu_softmax_bwd(grad, y, gx, y.shape[-1]) if y.numel() else None,
)(lambda grad, y, gx: _launch_softmax("kk_softmax_bwd", y, (grad, y, gx)))


def _sm_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _sm_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return softmax_backward(grad, y)


_softmax = op(
    "kernelkit::softmax(Tensor x) -> Tensor",
    inputs={"x": _X},
    output=like("x"),
    backward=_sm_backward,
    setup_context=_sm_setup,
    cpu=lambda x, y: _native.cpu_softmax_fwd(x, y, x.shape[-1]) if x.numel() else None,
)(lambda x, y: _launch_softmax("kk_softmax_fwd", x, (x, y)))


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim`` (rows of -inf give NaN, as in torch).

    >>> p = kernelkit.ops.softmax(scores, dim=-1)
    """
    if dim in (-1, x.dim() - 1):
        return _softmax(x)
    return _softmax(x.movedim(dim, -1)).movedim(-1, dim)


def _stat_dtype(logits) -> torch.dtype:
    return acc_dtype(logits.dtype)


def _rows(logits):
    return (logits.shape[0],)


def _stats_shape(logits):
    return (logits.shape[0], 2)


_LOGITS = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("rows", "C"))
_TARGET = TensorSpec(dtypes=(torch.int64,), contiguous=True, make_contiguous=True, shape=("rows",))


def _ce_bwd_cpu(logits, target, stats, row_scale, ignore_index, label_smoothing, divisor, grad):
    _check_ce_stats(logits, stats, row_scale, divisor)
    if logits.numel():
        scale = row_scale.to(stats.dtype)
        if divisor is not None:
            scale = scale / divisor
        _native.cpu_cross_entropy_bwd(
            logits, target, stats, scale, grad, logits.shape[1], ignore_index, label_smoothing
        )


# The grid cap of kk_cross_entropy_bwd's KEEP_AT_ONE launch, in waves of resident blocks: its blocks return at once at a
# loss gradient of 1, so fewer of them save 1.1-1.9 us per step there (bf16 8192 x 65536 565.2 -> 564.0 us), and cost
# 0.6% at most where it rewrites the gradient (float32 32768 x 8192 1046.1 -> 1052.7; bench/exp_ce_keep_waves.py,
# h200-2026-11-27-s36/ce-keep-waves.log).
_KEEP_WAVES = 1
# Rows of at most this many columns take kk_cross_entropy_bwd compiled at 48 registers (MAXR; 5 blocks of 256 threads
# per SM; not float64), which loads kNc; wider rows take the default, kKeep loads at 64 registers for 16-bit rows and 80
# for float32 (bench/ab_source.py --queued, H200). Against that default, 32768 rows: the same GPU time at 128 columns,
# 1.7-16.4% less at 256-512, 2.4-3.0% at 1024 (bf16 40.0 -> 38.8 us; h200-2026-11-28-s49/ab-h200-ce-lean-*.log).
# Against the 80 that all dtypes had before (h100-2026-11-27-s40/ab-ce-bwd-maxr48.log, h200-2026-11-27-s40/
# ab-h200-ce-bwd-lean.log): 64-512 columns 3-14% less on an H100, 4-19% on an H200; bf16 x 4096 3% more on the H200.
# 16-bit rows of at most _CE_BWD_TEAM_COLS columns keep the 64-register kernel, whose warp rows go several to a warp
# (kernels/softmax.cu team_lanes; the 48-register kernel keeps whole warps, since teams spill there): against the
# 48-register kernel, GPU time alone at 32768 rows (bench/exp_warp_teams.sh, h200-2026-11-28-s56/
# ab-h200-ce-bwd-teams-r64.log), bf16 x 256 14.6 -> 11.6 us, float16 14.7 -> 11.6, bf16 x 512 25.6 -> 23.4, x 1024 1.3%
# slower.
_CE_BWD_LEAN_COLS = 1024
_CE_BWD_TEAM_COLS = 512
_LOSS_MAX_BLOCKS = 2047  # kk_sm::kLossMaxBlocks: the reduced loss counts its blocks' arrivals in 11 bits


@functools.cache
def _ce_shape(
    name: str, dtype: torch.dtype, cols: int, dev: int, second: Optional[torch.dtype] = None, keep: bool = False
):
    """(kernel, block, rows per block, grid cap): a warp per row up to 2048 packs, else a block. ``second``: the
    kernel's second template type, where it has one (the backward's scale, the reduced loss's output); ``keep``:
    the backward's KEEP_AT_ONE instantiation."""
    expr = f"{name}<{CTYPE[dtype]}, {CTYPE[second]}>" if second else f"{name}<{CTYPE[dtype]}>"
    lean = (
        name == "kk_cross_entropy_bwd"
        and (_CE_BWD_TEAM_COLS if dtype.itemsize == 2 else 0) < cols <= _CE_BWD_LEAN_COLS
        and max(dtype.itemsize, second.itemsize) < 8
        and compute_capability(dev) >= (9, 0)  # sm_80 spills 16 bytes under 48 (kernels/check_compile.py)
    )
    if keep or lean:
        expr = f"{expr[:-1]}, {str(keep).lower()}{', 48' if lean else ''}>"
    k = kernel("softmax", expr)
    # Packs of the 16-byte or shifted rows (the backward's scalar rows, logits and gradient off each other's 16-byte
    # units, take any launch).
    nv = cols // VEC[dtype]
    warp_rows = nv <= 2048  # kWarpRowPacks
    block, per_block = (256, 8) if warp_rows else (512, 1)
    # Grid caps in waves of resident blocks: the backward 4; the 16-bit forwards 2, 0.1-2.3% faster than one in two
    # interleaved runs (bf16 32768 x 4096 73.3 -> 72.2 and 73.8 -> 72.1 us; bench/exp_ce_grid.py,
    # h200-2026-11-23-s18/ce-grid.log and -s19/ce-grid.log), where float32 measured within 0.6% either way.
    waves = (_KEEP_WAVES if keep else 4) if name == "kk_cross_entropy_bwd" else 2 if dtype.itemsize == 2 else 1
    cap = waves * resident_blocks(k, block, dev)
    return k, block, per_block, min(cap, _LOSS_MAX_BLOCKS) if name == "kk_cross_entropy_loss" else cap


def _ce_grid(logits: torch.Tensor, name: str, second: Optional[torch.dtype] = None, keep: bool = False):
    """(kernel, grid, block) of one cross-entropy launch over ``logits`` (grid 0 for no rows)."""
    rows, cols = logits.shape
    k, block, per_block, cap = _ce_shape(name, logits.dtype, cols, logits.get_device(), second, keep)
    return k, min(cdiv(rows, per_block), cap), block


def _check_ce_stats(logits, stats, row_scale, divisor):
    rows = logits.shape[0]
    opname = "kernelkit::cross_entropy_backward"
    check_stats(opname, logits, rows, per_row=2, stats=stats)
    if row_scale.numel() not in (1, rows) or row_scale.dtype not in FLOATS:
        raise ValueError(
            f"{opname}: argument 'row_scale' must hold 1 or {rows} floating-point values (one per row), "
            f"got shape {tuple(row_scale.shape)} and dtype {str(row_scale.dtype)[6:]}"
        )
    if divisor is not None:
        check_stats(opname, logits, 1, divisor=divisor)


# kk_cross_entropy_bwd_flat (kernels/softmax.cu) takes the 16-byte path by element size: (packs per thread, fewest packs
# per row). Against kk_cross_entropy_bwd's resident grids on an H200 (bench/ab_source.py, h200-2026-11-27-s38/
# ab-ce-bwd-flat-*.log, ab-ce-bwd-spec-*.log): float32 at 4 packs 32768 x 8192 539.1 -> 530.1 us, x 4096 270.8 ->
# 265.7, 8192 x 65536 1059.5 -> 1048.0; bf16 rows of a block (beyond 2048 packs) at 8 packs 16384 x 32000 617.0 ->
# 524.2 and 8192 x 65536 534.3 -> 539.9, but its warp rows slower (32768 x 8192 271.3 -> 286.3 at 4 packs, 290.8
# at 8, 300.5 at 2), so those stay. float32 rows under 1024 packs leave most of a block's threads idle and keep the
# resident kernel: GPU time alone on an H100 (ab_source.py --queued, h100-2026-11-27-s39/ab-ce-bwd-flat-narrow.log),
# 32768 x 256 103.5 -> 35.2 us, x 512 113.9 -> 52.1, x 1024 135.0 -> 96.8, x 2048 201.1 -> 190.0, x 4096 the same.
_CE_BWD_FLAT = {4: (4, 1024), 2: (8, 2049)}
_CE_BWD_FLAT_THREADS = 256


@functools.cache
def _ce_bwd_flat(dtype: torch.dtype, scale_dtype: torch.dtype, cols: int) -> Optional[Tuple[Kernel, int]]:
    """(kk_cross_entropy_bwd_flat, its blocks per row), or None where kk_cross_entropy_bwd takes the rows."""
    fit = _CE_BWD_FLAT.get(dtype.itemsize)
    if fit is None or cols % VEC[dtype] or cols // VEC[dtype] < fit[1]:
        return None
    k = kernel("softmax", f"kk_cross_entropy_bwd_flat<{CTYPE[dtype]}, {CTYPE[scale_dtype]}, {fit[0]}>")
    return k, cdiv(cols // VEC[dtype], fit[0] * _CE_BWD_FLAT_THREADS)


def _ce_bwd_cuda(logits, target, stats, row_scale, ignore_index, label_smoothing, divisor, grad, keep=False):
    """The gradient of cross-entropy for the logits, from the forward's ``stats``: row r is scaled by
    row_scale[r] (or its one value) divided by ``divisor`` (a one-element tensor; None for 1). ``keep``: ``grad``
    already holds the gradient for a row_scale of 1 (kk_cross_entropy_held's), rewritten only where it is not 1.

    >>> grad = cross_entropy_backward(logits, target, stats, grad_loss, -100, 0.0, divisor)
    """
    _check_ce_stats(logits, stats, row_scale, divisor)
    rows, cols = logits.shape
    stride = 0 if row_scale.numel() == 1 else 1
    div = 0 if divisor is None else divisor  # 0: a null pointer, no divisor
    args = (logits, target, stats, row_scale, stride, div, grad, rows, cols, ignore_index, label_smoothing)
    flat = None if keep or not rows else _ce_bwd_flat(logits.dtype, row_scale.dtype, cols)
    if flat is not None and row_path(cols, logits.dtype, (logits, grad)) == VECTOR and rows * flat[1] < 2**31:
        k, per_row = flat
        k.launch(rows * per_row, _CE_BWD_FLAT_THREADS, (*args, per_row))
        return
    k, grid, block = _ce_grid(logits, "kk_cross_entropy_bwd", row_scale.dtype, keep)
    if grid:
        # keep: launched dependent (its blocks wait in kk::pdl_wait), 0.1-0.4% less per step than plainly (1.7 us at
        # bf16 8192 x 65536; bench/ab_source.py, h200-2026-11-27-s37/ab-keep-pdl2.log).
        k.launch(grid, block, args, dependent=keep)


cross_entropy_backward = op(
    "kernelkit::cross_entropy_backward(Tensor logits, Tensor target, Tensor stats, Tensor row_scale, "
    "int ignore_index, float label_smoothing, Tensor? divisor=None) -> Tensor",
    inputs={
        "logits": _LOGITS,
        "target": _TARGET,
        "stats": TensorSpec(contiguous=True),
        "row_scale": TensorSpec(contiguous=True, make_contiguous=True),
    },
    output=like("logits"),
    cpu=_ce_bwd_cpu,
)(_ce_bwd_cuda)


def _ce_fwd_cpu(logits, target, ignore_index, label_smoothing, loss, stats):
    # The Rust kernel checks every target (and the row count) before writing anything; no torch-side
    # validation here, which on a GPU would cost a device synchronization.
    if logits.shape[0]:
        _native.cpu_cross_entropy_fwd(logits, target, loss, stats, logits.shape[1], ignore_index, label_smoothing)


def _ce_fwd_cuda(logits, target, ignore_index, label_smoothing, loss, stats):
    # A target outside [0, C) (other than ignore_index) gives a NaN loss for its row: raising would
    # need a device synchronization. The CPU implementation raises.
    k, grid, block = _ce_grid(logits, "kk_cross_entropy_fwd")
    if grid:
        rows, cols = logits.shape
        k.launch(grid, block, (logits, target, loss, stats, rows, cols, ignore_index, label_smoothing))


def _ce_setup(ctx, inputs, output):
    logits, target, ignore_index, label_smoothing = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(logits, target, output[1])
    ctx.ignore_index, ctx.label_smoothing = ignore_index, label_smoothing


def _ce_backward(ctx, grad_loss, grad_stats):
    logits, target, stats = ctx.saved_tensors
    grad = cross_entropy_backward(logits, target, stats, grad_loss, ctx.ignore_index, ctx.label_smoothing)
    return grad, None, None, None


_cross_entropy = op(
    "kernelkit::cross_entropy(Tensor logits, Tensor target, int ignore_index=-100, float label_smoothing=0.0) "
    "-> (Tensor, Tensor)",
    inputs={"logits": _LOGITS, "target": _TARGET},
    # (loss per row, stats): stats[r] = (m, log(sum(exp(x - m)))), the row's logsumexp in two parts
    # (kernels/softmax.cu), kept apart so that huge tied logits keep the O(1) part.
    output=(Out(shape=_rows, dtype=_stat_dtype), Out(shape=_stats_shape, dtype=_stat_dtype)),
    backward=_ce_backward,
    setup_context=_ce_setup,
    cpu=_ce_fwd_cpu,
)(_ce_fwd_cuda)


def _loss_dtype(logits, out_dtype) -> torch.dtype:
    return out_dtype or logits.dtype


def _scalar():
    return ()


def _check_loss_dtype(dtype: torch.dtype) -> None:
    if dtype not in FLOATS:
        raise ValueError(f"kernelkit::cross_entropy: out_dtype must be a floating-point dtype, got {dtype}")


# The dtypes a mean's given denominator (``by``) is read in by the kernels (kernels/softmax.cu kk_sm::given_divisor).
_DIVISOR_KINDS = {torch.float32: 1, torch.float64: 2, torch.int32: 3, torch.int64: 4}


def _divisor_args(logits, mean, by) -> tuple:
    """The kernels' (``by``, ``by_kind``) for the reduced loss's optional denominator ``by``, checked: (0, 0) (a null
    pointer, no denominator) when there is none."""
    if by is None:
        return 0, 0
    opname = "kernelkit::cross_entropy_reduced"
    if not mean:
        raise ValueError(f"{opname}: argument 'divisor' replaces the mean's count; it needs mean=True")
    kind = _DIVISOR_KINDS.get(by.dtype)
    if by.numel() != 1 or kind is None or by.get_device() != logits.get_device():
        raise ValueError(
            f"{opname}: argument 'divisor' must be one float32, float64, int32 or int64 value on {logits.device}, "
            f"got shape {tuple(by.shape)}, dtype {str(by.dtype)[6:]} on {by.device}"
        )
    return by, kind


def _ce_reduced_cpu(logits, target, ignore_index, label_smoothing, mean, out_dtype, by, loss, stats, divisor):
    _check_loss_dtype(loss.dtype)
    _, kind = _divisor_args(logits, mean, by)
    total, counted = (0.0, 0)
    if logits.shape[0]:  # one Rust call: the row losses' sum in float64 and the rows counted
        total, counted = _native.cpu_cross_entropy_sum(
            logits, target, stats, logits.shape[1], ignore_index, label_smoothing
        )
    # As the kernels: the given denominator rounded to the accumulation dtype, the division in float64.
    divisor.fill_(by.reshape(()) if kind else counted if mean else 1)
    loss.fill_(_ieee_div(total, divisor.item()) if mean else total)


def _ieee_div(a: float, b: float) -> float:
    """``a / b`` as torch divides float64: inf or NaN for a zero ``b`` (an empty or all-ignored mean), where Python
    raises."""
    if b:
        return a / b
    return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _ce_reduced_cuda(logits, target, ignore_index, label_smoothing, mean, out_dtype, by, loss, stats, divisor):
    _check_loss_dtype(loss.dtype)
    by, kind = _divisor_args(logits, mean, by)
    k, grid, block = _ce_grid(logits, "kk_cross_entropy_loss", loss.dtype)
    grid = max(grid, 1)  # no rows: one block still writes the loss (NaN for the mean, as torch) and the divisor
    rows, cols = logits.shape
    # Each block adds its (sum of losses, rows counted) to two words, in fixed point; the block that arrives last
    # writes the loss: one launch, no allocation.
    spill, words = scratch(logits.get_device(), grid)
    k.launch(
        grid,
        block,
        (
            logits,
            target,
            stats,
            spill,
            words,
            int(mean),
            by,
            kind,
            loss,
            divisor,
            rows,
            cols,
            ignore_index,
            label_smoothing,
        ),
    )


# A mean or sum in an eager call whose logits need a gradient: the forward also writes the gradient for a loss
# gradient of 1 from the same read of each row, which it holds whole in one block's registers (kernels/softmax.cu
# kk_cross_entropy_held), and keeps it on the autograd ctx; the backward returns it, rewriting it only when the loss's
# gradient is not 1 (checked on the device). Before it, kk_cross_entropy_count counts the rows the mean divides by;
# after it, kk_cross_entropy_mean sums the row losses; each launched dependent on the one before (a sum needs no
# count: the held kernel is launched plainly then). Per element size:
# (register packs per thread, minimum blocks per SM, fewest threads per row), the first whose block of at most 512
# threads holds the row with at least that many; wider rows on sm_90+ (16-byte path) are split over a cluster of up to
# 16 CTAs (_runtime.split_shape), each holding its part: (packs per thread, minimum blocks per SM) per element size;
# other rows keep the kernels apart. Against them, forward and backward of a mean on an H200
# (bench/exp_ce_fused_fits.py, h200-2026-11-24-s34/ce-fused-fits.log and ce-fused-fits-wide.log): bf16 32768 x 2048
# 109.8 -> 88.5 us, x 4096 202.9 -> 144.7, x 8192 388.3 -> 271.3, x 16384 762.0 -> 527.5, 16384 x 32000 866.0 ->
# 555.2; split, 2048 x 65536 209.7 -> 155.8 (16 packs in one block: 189.9), x 131072 396.6 -> 336.1, x 262144 770.9
# -> 627.7; float32 32768 x 512 60.8 -> 51.8, x 4096 385.9 -> 272.7, x 8192 756.7 -> 529.2, x 16384 1474.7 ->
# 1044.0; split, 4096 x 32768 382.6 -> 293.8, 2048 x 65536 386.9 -> 289.8, x 262144 1498.5 -> 1147.1. bf16 32768 x
# 1024 was slower (62.2 -> 74.0) and keeps them.
_HELD_CE_FITS = {2: ((8, 2, 64), (4, 2, 64)), 4: ((8, 2, 64), (4, 2, 32))}
# Below _runtime.LOW_DRAM_GBPS_PER_SM the 16-bit rows of 2048-16384 columns take 4 packs per thread (128 threads at 4096
# columns, so two block reductions instead of (max, sum) pairs): on an H100 (GPU time of a mean's forward and backward,
# h100-2026-11-28-s43/ab-h100-ce-held-two_p4m2.log; bench/exp_ce_two_h200.sh repeats it) bf16 32768 x 4096 192.4 ->
# 190.5 us, x 8192 369.5 -> 365.4, float16 x 4096 191.9 -> 190.4; 3 blocks per SM 0.992-0.995, 2 packs at 4 blocks
# 1.02-1.05 slower. On an H200 these fits are slower with two reductions too: bf16 x 4096 141.8 -> 150.3 us, x 8192
# 268.0 -> 310.6, float16 x 4096 1.05x (h200-2026-11-28-s44/ab-h200-ce-held-low-gbps-fits.log).
_HELD_CE_FITS_LOW_GBPS = _HELD_CE_FITS | {2: ((4, 2, 64), (8, 2, 64))}
_HELD_CE_SPLIT_FITS = {2: (8, 2), 4: (8, 2)}
_COUNT_PER = 8  # kk_cross_entropy_count's and kk_cross_entropy_mean's rows per thread
_TOTAL_THREADS = 256  # their blocks (kk_sm::kTotalThreads)


@functools.cache
def _held_ce_shape(dtype: torch.dtype, cols: int, dev: int) -> Optional[RowShape]:
    """kk_cross_entropy_held's launch for rows of ``cols`` (one row per block, or per cluster), or None (the kernels
    apart). Widths off the 16-byte path take its SHIFT instantiation (the caller checks that the logits are 16-byte
    aligned, as the gradient it allocates is)."""
    shifted = cols % VEC[dtype] != 0
    nv = cols // VEC[dtype]  # a shifted row's packs: nv or nv - 1
    ct = CTYPE[dtype]
    fits = _HELD_CE_FITS_LOW_GBPS if low_dram_bandwidth(dev) else _HELD_CE_FITS
    for packs, minb, threads in fits.get(dtype.itemsize, ()):
        if packs * threads <= nv <= packs * 512:
            k = kernel(
                "softmax", f"kk_cross_entropy_held<{ct}, {packs}, {minb}{', false, 0, true' if shifted else ''}>"
            )
            return RowShape(k, cdiv(cdiv(nv, packs), 32) * 32, 1, 1 << 62, shifted=shifted)
    split = _HELD_CE_SPLIT_FITS.get(dtype.itemsize)
    if split is None or nv <= split[0] * 512:
        return None
    expr = f"kk_cross_entropy_held<{ct}, {split[0]}, {split[1]}, true{', {ctas}, true' if shifted else ''}>"
    held = split_shape("softmax", expr, split[0], dtype, cols, dev, fixed_geometry=True)
    return held._replace(shifted=shifted) if held else None


@functools.cache
def _held_ce_ends(loss_dtype: torch.dtype):
    """(kk_cross_entropy_count, kk_cross_entropy_mean writing a ``loss_dtype`` loss), looked up once, not per call."""
    count = kernel("softmax", f"kk_cross_entropy_count<{_COUNT_PER}>")
    return count, kernel("softmax", f"kk_cross_entropy_mean<float, {CTYPE[loss_dtype]}, {_COUNT_PER}>")


def _ce_reduced_with_grad(
    ctx, logits, target, ignore_index, label_smoothing, mean, out_dtype, by, loss, stats, divisor
):
    """_ce_reduced_cuda in an eager call that records a gradient: with a held fit, the forward's launches also write
    the gradient for a loss gradient of 1 into ``ctx.held_grad``, which _ce_reduced_backward returns."""
    rows, cols = logits.shape
    dev = logits.get_device()
    held = _held_ce_shape(logits.dtype, cols, dev) if rows and not label_smoothing else None
    if held is None or logits.data_ptr() % 16:
        return _ce_reduced_cuda(
            logits, target, ignore_index, label_smoothing, mean, out_dtype, by, loss, stats, divisor
        )
    _check_loss_dtype(loss.dtype)
    by, kind = _divisor_args(logits, mean, by)
    grad = torch.empty_like(logits)
    blocks = cdiv(rows, _TOTAL_THREADS * _COUNT_PER)
    count, ticket, partial, row_loss = held_loss_scratch(dev, rows, blocks)
    counter, total = _held_ce_ends(loss.dtype)
    counted = mean and not kind  # a given denominator needs no count
    if counted:
        counter.launch(blocks, _TOTAL_THREADS, (target, rows, ignore_index, count))
    args = (logits, target, stats, row_loss, grad, count, int(mean), by, kind, rows, cols, ignore_index)
    held.launch(held.grid(rows), args, dependent=counted)
    args = (row_loss, count, partial, ticket, rows, int(mean), by, kind, loss, divisor)
    total.launch(blocks, _TOTAL_THREADS, args, dependent=True)
    ctx.held_grad = grad


def _ce_reduced_setup(ctx, inputs, output):
    logits, target, ignore_index, label_smoothing = inputs[:4]
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(logits, target, output[1], output[2])
    ctx.ignore_index, ctx.label_smoothing = ignore_index, label_smoothing


def _ce_reduced_backward(ctx, grad_loss, grad_stats, grad_divisor):
    logits, target, stats, divisor = ctx.saved_tensors
    held = getattr(ctx, "held_grad", None)
    if held is None:  # compiled, or a second backward (retain_graph): the first returned the held gradient
        grad = cross_entropy_backward(logits, target, stats, grad_loss, ctx.ignore_index, ctx.label_smoothing, divisor)
        return grad, None, None, None, None, None, None
    ctx.held_grad = None
    _ce_bwd_cuda(logits, target, stats, grad_loss, ctx.ignore_index, 0.0, divisor, held, keep=True)
    return held, None, None, None, None, None, None


_cross_entropy_reduced = op(
    "kernelkit::cross_entropy_reduced(Tensor logits, Tensor target, int ignore_index=-100, "
    "float label_smoothing=0.0, bool mean=True, ScalarType? out_dtype=None, Tensor? divisor=None) "
    "-> (Tensor, Tensor, Tensor)",
    inputs={"logits": _LOGITS, "target": _TARGET},
    # (loss, stats, divisor): the mean (or sum) in out_dtype, computed in the accumulation dtype from the
    # forward's per-block partials by its last block; stats as in kernelkit::cross_entropy; divisor what the
    # mean divided by (the count of rows not ignored, or the ``divisor`` given, a one-element tensor on the
    # logits' device read there with no host sync) or 1 (sum): it divides the gradient in the backward.
    output=(
        Out(shape=_scalar, dtype=_loss_dtype),
        Out(shape=_stats_shape, dtype=_stat_dtype),
        Out(shape=_scalar, dtype=_stat_dtype),
    ),
    backward=_ce_reduced_backward,
    setup_context=_ce_reduced_setup,
    cpu=_ce_reduced_cpu,
    launch_with_ctx=_ce_reduced_with_grad,
)(_ce_reduced_cuda)


def _divisor_tensor(divisor: Union[torch.Tensor, int, float], logits: torch.Tensor) -> torch.Tensor:
    """``divisor`` as a one-element tensor on the logits' device, in a dtype the kernels read (no host sync: a tensor
    on the device is read there, by the kernels that divide by it)."""
    if isinstance(divisor, torch.Tensor):
        if divisor.dtype == torch.bool or divisor.is_complex() or divisor.numel() != 1:
            raise ValueError(
                "kernelkit::cross_entropy: divisor must be a real number or a one-element real tensor, got a "
                f"tensor of shape {tuple(divisor.shape)} and dtype {str(divisor.dtype)[6:]}"
            )
        dtype = divisor.dtype if divisor.dtype in _DIVISOR_KINDS else torch.float64
        return divisor.to(device=logits.device, dtype=dtype)
    if isinstance(divisor, bool) or not isinstance(divisor, (int, float)):
        raise ValueError(f"kernelkit::cross_entropy: divisor must be a real number or tensor, got {divisor!r}")
    return torch.full((), float(divisor), dtype=torch.float64, device=logits.device)


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    *,
    out_dtype: Optional[torch.dtype] = None,
    divisor: Union[torch.Tensor, int, float, None] = None,
) -> torch.Tensor:
    """Cross-entropy of logits (N, C) or (..., C) against int64 targets, as torch.nn.functional.cross_entropy
    (ignore_index, reduction "mean" | "sum" | "none", label_smoothing). The per-row loss and log-sum-exp
    come from one pass; the gradient is written from them without materializing the softmax. The loss
    is computed in float32 (float64 for float64 logits) and returned in the logits' dtype, as torch
    does, or in ``out_dtype`` (e.g. float32 for bfloat16 logits, as Hugging Face's loss reports it).

    With a mean or sum, no label smoothing and logits that need a gradient (eager, on the GPU), the forward also
    writes the logits' gradient from the same read, and the backward hands it over: one pass over the logits for
    both when the loss's gradient is 1 (``loss.backward()``), the gradient alive from the forward to the backward.
    A loss scaled before its backward (``(loss / steps).backward()``) has its gradient written again there.

    ``divisor`` (with reduction "mean"): what the mean divides the sum of the row losses by, in place of the count of
    targets not ignored; a number or a one-element tensor, read on the device (no host sync). Gradient accumulation
    over micro-batches, as Hugging Face's Trainer does it (``num_items_in_batch``, the tokens of the whole accumulated
    batch), then keeps one pass over the logits for loss and gradient, where ``sum / n`` after the loss would not.

    >>> loss = kernelkit.ops.cross_entropy(logits.view(-1, vocab), labels.view(-1))
    >>> loss = kernelkit.ops.cross_entropy(logits, labels, divisor=num_items_in_batch)  # sum / num_items_in_batch
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"kernelkit::cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if divisor is not None and reduction != "mean":
        raise ValueError(
            f"kernelkit::cross_entropy: divisor replaces the mean's count of targets; it needs reduction='mean', "
            f"got {reduction!r}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"kernelkit::cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    # Already (N, C) and (N,): no reshapes, which cost about 1 us of host time each.
    rows = logits if logits.dim() == 2 else logits.reshape(-1, logits.shape[-1])
    flat = target if target.dim() == 1 else target.reshape(-1)
    if reduction == "none":
        loss, _ = _cross_entropy(rows, flat, ignore_index, label_smoothing)
        loss = loss if rows is logits else loss.reshape(logits.shape[:-1])
        return loss.to(out_dtype or logits.dtype)
    # One op: one kernel whose last block sums the others' partial losses, and a backward
    # that reads the loss's gradient as it is (no torch ops around the per-row losses either way).
    by = None if divisor is None else _divisor_tensor(divisor, logits)
    loss, _, _ = _cross_entropy_reduced(rows, flat, ignore_index, label_smoothing, reduction == "mean", out_dtype, by)
    return loss
