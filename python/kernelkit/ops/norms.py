"""rms_norm, add_rms_norm and layer_norm over the last dim, with backward ops.

The registered ops return their saved statistics too (``rstd``, ``mean``) so that backward needs no
recomputation; the functions here return what a model uses. A call autograd will not record (grad mode off, or
no input that requires grad) takes the op's ``*_inference`` twin instead, which writes no statistics. CUDA kernels:
kernels/norms.cu; CPU implementations: Rust (kernelkit-ops).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional, Tuple

import torch

from kernelkit import _native
from kernelkit.jit import Kernel
from kernelkit.library import Out, TensorSpec, like, op
from kernelkit.ops._runtime import (
    BLOCK,
    CTYPE,
    FLOATS,
    PORTABLE_CTAS,
    SCALAR,
    SHIFTED,
    VEC,
    VECTOR,
    RowShape,
    acc_dtype,
    cdiv,
    check_stats,
    has_clusters,
    kernel,
    low_dram_bandwidth,
    pow2ceil,
    resident_blocks,
    row_cache_bytes,
    row_path,
    sm_count,
    split_shape,
)

_X = TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N"))
_W = TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("N",))


def _rows(x):
    return x.shape[:-1]


def _stat(x):
    return acc_dtype(x.dtype)


_STAT = Out(shape=_rows, dtype=_stat)


def _records_grad(*tensors) -> bool:
    """Whether autograd records a call on ``tensors``: only then are the per-row statistics worth writing. A 4-byte
    store per row, they cost the float32 RMSNorm forward 0.1-0.2% at 32768 x 8192 on an H200 (bench/results/
    h200-2026-11-28-s51/ab-h200-norm-fwd-no-stats.log). Non-tensors fall through to the op's own argument errors.
    A plain loop: any() over a generator costs more than the rest of the host path's checks."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


def _scratch_stat(x: torch.Tensor) -> torch.Tensor:
    """Per-row statistics for the Rust CPU kernels of the inference ops to write and drop: they compute them in
    the same pass as y."""
    return torch.empty(_rows(x), dtype=_stat(x), device=x.device)


# ---------------------------------------------------------------- CUDA launch shapes (kernels/norms.cu)
# A block is (R, Y): R threads share a row, Y rows side by side. Each thread keeps E elements of its row
# in registers (E = packs per thread x elements per pack); R covers the row up to 512 threads, beyond
# that the rest of the row is streamed from L2 (the kernels' TAIL = true instantiations). Fewer threads
# per row with more packs each is faster: the row's reduction crosses fewer warps (bench/sweep_rows.py).
# Forward packs per thread (kNpFwd), and the kernel template suffix for rows held whole in registers
# (NP, minimum blocks per SM in __launch_bounds__): 2 blocks cap registers at 64, which every forward
# kernel fits without spills but LayerNorm in float32 (8 bytes).
_FWD_PACKS = {torch.float32: 8, torch.float64: 4, torch.float16: 4, torch.bfloat16: 4}
_F32, _B16 = torch.float32, (torch.float16, torch.bfloat16)
# (kernel, dtype) -> [(lo, hi, packs, minimum blocks)]: rows of lo < cols <= hi columns take that fit, where it
# was measured faster on an H200. Fewer registers (40 at 3 blocks, 32 at 4) put more rows on each SM:
# - float32 LayerNorm up to 4096 columns: 4 packs at 1 block (bench/sweep_llm.py: 8 packs at 2 blocks take 2%
#   longer there);
# - float32 beyond 2048 columns, and the 16-bit add_rms_norm: 2 to 6% faster than 8 (16-bit: 4) packs at 2
#   blocks (bench/sweep_rows.py --only norm_fwd_fits, bench/results/h200-2026-11-22-s9/).
# - rows of 129-256 columns at 2 packs and 4 blocks (float32: a warp a row, 4 rows a block; 16-bit: 16 threads a
#   row), float32 and the 16-bit add_rms_norm: against the defaults, GPU time alone at 32768 x 256
#   (bench/exp_warp_teams.sh, h200-2026-11-28-s56/ab-h200-fwd-fit-256-*.log), float32 rms_norm 22.0 -> 19.9 us,
#   add_rms_norm 38.9 -> 36.1, layer_norm 21.6 -> 20.9, bf16 add_rms_norm 21.0 -> 19.5; the 16-bit rms_norm and
#   layer_norm ran 9-46% slower there and keep theirs.
# (The last entry that takes a width wins.)
_NARROW_FIT = (128, 256, 2, 4)
_FWD_FIT = {
    ("kk_layer_norm_fwd", _F32): [(0, 4096, 4, 1), (4096, 8192, 4, 3), _NARROW_FIT],
    ("kk_rms_norm_fwd", _F32): [(2048, 4096, 2, 4), (4096, 8192, 4, 3), _NARROW_FIT],
    ("kk_add_rms_norm_fwd", _F32): [(2048, 8192, 4, 3), _NARROW_FIT],
    **{("kk_add_rms_norm_fwd", t): [(2048, 8192, 2, 3), _NARROW_FIT] for t in _B16},
}
# (kernel, dtype) -> [(lo, hi, packs, minimum blocks)]: rows of lo < cols <= hi columns on the 16-byte path take
# <kernel>_wide (one row per block, butterflies over whole warps, 32-bit pack indices, the launch checked in block 0),
# which gives the kernel's bits at that fit. On an H200 at 32768 rows:
# - float32 LayerNorm: kk_layer_norm_fwd at these fits was issue-bound (1.9x the instructions); at its own best fits
#   266 us at 4096 and 519 at 8192 columns against 253.6 and 501.0 (bench/exp_looped_rows.py ln_modes; torch.compile
#   253.5 and 517.3); from 257 to 2048 columns at (2, 4), against kk_layer_norm_fwd at (4, 1): 32768 x 512 38.2 ->
#   36.5 us, x 1024 71.6 -> 68.1, x 2048 135.1 -> 129.3 ((4, 3): 0.954-0.967, (1, 4): 1.07-1.27;
#   bench/exp_ln_f32_narrow.sh, h200-2026-11-28-s53);
# - RMSNorm (bench/exp_rms_wide.py, h200-2026-11-23-s18/rms-wide.log): float32 4096 253.0 -> 252.2 us, bf16 8192
#   253.5 -> 252.3, bf16 4096 129.9 -> 128.9 (torch.compile 251.8, 251.2, 145.5); float16 takes bf16's fit (not
#   measured apart); float32 8192 at (4, 3) with its w fetched early (_WIDE_PREFETCH), where without that it read
#   502.4 against kk_rms_norm_fwd's 500.5 (1.002 in h200-2026-11-28-s54/ab-h200-keep-w-none-f32-8192.log).
_WIDE_FIT = {
    ("kk_layer_norm_fwd", _F32): [(256, 4096, 2, 4), (4096, 8192, 4, 3)],
    ("kk_rms_norm_fwd", _F32): [(2048, 4096, 2, 4), (4096, 8192, 4, 3)],
    **{("kk_rms_norm_fwd", t): [(2048, 8192, 2, 4)] for t in _B16},
}
# (kernel, dtype) -> columns beyond which its _wide kernel copies w into shared memory with cp.async once the row's
# loads are out, rather than loading it from L2 after the row's sum (kernels/norms.cu rms_fwd_wide_run PREW). On an
# H200 (GPU time alone; bench/exp_wide_prefetch_w.sh of commit 0d986a3, h200-2026-11-28-s54): float32 32768 x 8192
# against the held kernel 500.1 -> 499.4 us, and against torch.compile over 40 rounds 0.9980 -> 1.0026 [1.0021,
# 1.0033]; at x 4096 (2, 4) 2.5% slower, bf16 x 8192 (2, 4) 5.2% (and it spills there), LayerNorm float32 x 4096 7.3%
# (its w and b): not there.
_WIDE_PREFETCH = {("kk_rms_norm_fwd", _F32): 4096}
# (kernel, dtype) -> columns beyond which held rows load with kk::kKeep (kernels/norms.cu LD) on a GPU with less DRAM
# bandwidth per SM than _runtime.LOW_DRAM_GBPS_PER_SM; an H200 measured them 0.8-10% slower that way (kernels/norms.cu
# kLnFwdLd). On an H100 against the default (GPU time alone, bench/ab_source.py --queued,
# h100-2026-11-27-s41/ab-h100-ln-keep-vs-s40.log): bf16 LayerNorm 185.0 -> 183.5 us at 32768 x 4096, 360.8 -> 358.6 at
# 8192, 712.7 -> 708.0 at 16384, float16 0.6-0.7% faster; but 48.7 -> 51.3 us at 1024 and 93.0 -> 95.3 at 2048.
_FWD_KEEP_LOW_GBPS = {("kk_layer_norm_fwd", t): 2048 for t in _B16}
# Forwards whose rows one block holds take, on the 16-byte path, their VEC_ONLY instantiation: no block tests the path
# or the row fit before its loads, block 0 checks them after its rows (kernels/norms.cu kk_rms_norm_fwd). On an H200,
# add_rms_norm bf16 32768 x 8192 509.7 -> 500.9 us (bench/results/h200-2026-11-29-s52/add-rms-vec-only.log); the
# float32 rows at 8192 columns no faster; layer_norm bf16 x 4096 134.9 -> 132.5 us in the ceiling's A/B, 132.3 us a call
# on the final wheel, 1.39x torch.compile (h200-2026-11-28-s53/ab-h200-vec-only-ln-fwd.log, ln-vec-only.log).
_VEC_ONLY = ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd")
# Shifted rows (row_path SHIFTED; the kernels' SHIFT) in float32: (most columns, packs, minimum blocks per SM), the
# first that holds the row. The fits above spill 16-96 bytes with a shifted row's extra element and w's two-unit loads
# (kernels/check_compile.py); these do not. Not measured against other fits.
_SHIFTED_F32_FITS = ((8192, 4, 2), (16384, 8, 1))
# Rows split over a cluster (SPLIT): (packs, minimum blocks) where other than (_FWD_PACKS, 2) measured faster: half
# the packs over 8 CTAs at 40 registers, for add_rms_norm (two inputs, two outputs). At 8192 x 65536 on an H200
# (bench/sweep_split.py --forward-only, h200-2026-11-22-s13): bf16 1186.1 -> 1110.0 us, float32 2436.2 -> 2198.2.
# The other forwards measured slower with half the packs. Split forwards keep their w (LayerNorm: and b) packs in
# shared memory (packs * 16 bytes per thread each), which for float32 LayerNorm fits two blocks per SM at 4 packs
# but only one at 8: 1190.4 (8 packs over 4 CTAs) -> 1121.5 us (bench/exp_split_params.py, h200-2026-11-23-s20).
# The 16-bit forwards end on 8 packs at one block per SM (no spills), which add_rms_norm takes for rows up to 262144
# columns over 8 CTAs (_SPLIT_PORTABLE) and the others beyond 16 CTAs of 4 packs: at 2048 x 262144, where rows had
# streamed their tail from one block (bench/ab_source.py, h200-2026-11-24-s28/ab-split8-wide.json), bf16 rms_norm
# 912.8 -> 582.7 us, layer_norm 1109.9 -> 780.3, add_rms_norm 1330.8 -> 1104.6, float16 rms_norm 892.4 -> 581.6
# (torch.compile: 800, 934 in h200-2026-11-24-s27/wide.log); 16 CTAs of 4 packs are faster still (SPLIT_MAX_CTAS).
# The fits are tried in order, the next where one takes more CTAs than the kernel's clusters may have (8, or
# _runtime.SPLIT_MAX_CTAS on a fixed geometry); (default packs, 2) where not listed.
_SPLIT_FITS = {
    **{
        (k, t): ([(2, 3)] if k == "kk_add_rms_norm_fwd" else []) + [(_FWD_PACKS[t], 2), (8, 1)]
        for k in ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd")
        for t in _B16
    },
    ("kk_add_rms_norm_fwd", _F32): [(4, 3), (_FWD_PACKS[_F32], 2)],
    ("kk_layer_norm_fwd", _F32): [(4, 2), (8, 1)],
}
# Shifted rows split over a cluster (_shifted_split_shape) where _SPLIT_FITS' fits spill there: float32 LayerNorm's
# (4, 2) by 16-24 bytes, float32 add_rms_norm's (8, 2) by 24-32 (kernels/check_compile.py). Not measured against others.
_SHIFTED_SPLIT_FITS = {("kk_layer_norm_fwd", _F32): [(8, 1)], ("kk_add_rms_norm_fwd", _F32): [(4, 3)]}
# Split forwards kept to portable clusters of up to 8 CTAs (the others take up to _runtime.SPLIT_MAX_CTAS): 16-bit
# add_rms_norm at 2048 x 262144 took 1101.6 us on 8 CTAs of 8 packs, 1205.2 on 16 of 4 (h200-2026-11-24-s29/
# ab-16ctas-norms.json).
_SPLIT_PORTABLE = {("kk_add_rms_norm_fwd", t) for t in _B16}
# Split kernels launched with their cluster's CTAs fixed at compile time where the CTAs have 512 threads
# (kernels/norms.cu CTAS). Against the same kernels without, on an H200 (bench/ab_source.py,
# h200-2026-11-23-s26/ab-ln-fixed.json, h200-2026-11-24-s27/ab-fixed-rms.json): 16-bit LayerNorm 8192 x 65536
# 587.7 -> 549.5 us; RMSNorm 535.7 -> 526.0, 4096 x 131072 545.9 -> 533.3; add_rms_norm 1055.3 -> 1048.3; float32
# LayerNorm 1107.1 -> 1071.5, 4096 x 131072 1198.3 -> 1167.8. float32 RMSNorm and add_rms_norm measured within 0.3%
# at 8192 x 65536 (bitwise equal; h200-2026-11-24-s29/ab-16ctas-norms.json), and clusters beyond 8 CTAs need it.
_SPLIT_FIXED = {(k, t) for k in ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd") for t in (_F32, *_B16)}
# 16-bit LayerNorm rows too long to split over a cluster (beyond 524288 columns on the 16-byte path): one block per row
# with 2 packs per thread at 2 blocks per SM, the tail cached in shared memory for the later passes (kernels/norms.cu
# RowCache). At 65536 columns the cache had beaten the split (838 -> 739 us, h200-2026-11-22-s11) until the row sums
# crossed the cluster without a barrier: the split now takes 673.4 us against the cache's 750.7 (h200-2026-11-22-s13).
_TAIL_FIT = {("kk_layer_norm_fwd", t): (2, 2) for t in _B16}
# Backward packs per tensor (kNpBwd); rows beyond 512 threads' worth stream their tail in-kernel.
_BWD_PACKS = {torch.float32: 4, torch.float64: 2, torch.float16: 2, torch.bfloat16: 2}
# Backward packs per tensor on shifted rows held in one block where not _BWD_PACKS: float32 LayerNorm's sums spill 172
# bytes at 4 packs (kernels/check_compile.py; its 16-byte path keeps them in shared memory), none at 2 (115 registers),
# which hold rows up to 4096 columns (and 3 extra elements) in 512 threads.
_BWD_SHIFTED_PACKS = {("kk_layer_norm_bwd", _F32): 2}
# Backward rows split over a cluster: (SMEM, minimum blocks per SM), keyed by (kernel, dtype, whether it adds
# add_rms_norm's residual gradient); (0, 1) where not listed. SMEM 1 keeps the weight-gradient sums in dynamic
# shared memory, 2 the float weights too (kernels/norms.cu PackSlots); at one block per SM the kernel loads the
# next row ahead, at two it has no registers for it. Against (0, 1) at 8192 x 65536 on an H200, with the row sums
# crossing the cluster without a barrier (bench/sweep_split.py --backward-only, h200-2026-11-22-s13/
# sweep_split-bwd.json): bf16 add_rms_norm 1436.6 -> 1204.7 us, float32 add_rms_norm 2478.6 -> 2198.7,
# layer_norm 1783.4 -> 1596.9, rms_norm 1587.3 -> 1553.4; bf16 rms_norm (871.6) and layer_norm (1036.8 against
# 1033.1) measured best or within 0.5% at (0, 1). Since 16-bit packs convert whole words (kk::acc_at), 16-bit
# RMSNorm rows at (2, 2) load the next row ahead too (kernels/norms.cu kSmemRoomForNextRow): bf16 rms_norm
# 862.3 -> 809.4 us, add_rms_norm 1209.5 -> 1088.6 (h200-2026-11-22-s14/sweep_split-bwd-bf16.log).
_BWD_SPLIT_FIT = {
    **{("kk_rms_norm_bwd", t, x): (2, 2) for t in _B16 for x in (False, True)},
    ("kk_rms_norm_bwd", _F32, False): (1, 1),
    ("kk_rms_norm_bwd", _F32, True): (2, 2),
    ("kk_layer_norm_bwd", _F32, False): (2, 1),
}
# The same for float32 rows one block of 256 or 512 threads holds (2049 to 8192 columns), where it measured faster
# than registers at 32768 x 4096 and 8192 (bench/sweep_split.py --held-backward, h200-2026-11-22-s12): add_rms_norm
# 570.8 -> 543.8 us and 1154.1 -> 1080.9, layer_norm (against its streamed-tail kernel, which it had kept because
# the held one spills) 871.5 -> 825.2 at 8192, rms_norm 814.4 -> 802.1 at 8192. The 16-bit rows measured the same
# or slower in shared memory.
_BWD_HELD_FIT = {
    ("kk_rms_norm_bwd", _F32, False): (1, 1),
    ("kk_rms_norm_bwd", _F32, True): (2, 2),
    ("kk_layer_norm_bwd", _F32, False): (1, 1),
}

# 16-bit LayerNorm and RMSNorm rows one block holds (sm_90+, 16-byte path) take <kernel>_bulk: x and gy arrive by bulk
# copies into three shared-memory stages, rows ahead without registers. kernel -> (threads per block up to which a fit
# applies, its minimum blocks per SM in __launch_bounds__, blocks per SM launched). 32768 rows on an H200 against the
# register-prefetch kernels:
# - LayerNorm, 2049-8192 columns, its launches without the op's Python (bench/exp_ln_bwd_launch.py,
#   h200-2026-11-23-s24/ln-bwd-launch3.log): bf16 4096 233.0 -> 216.8 us, 8192 447.1 -> 404.4; float16 234.9 -> 217.5,
#   462.2 -> 401.2 (two stages: 234-237 and 436-437);
# - RMSNorm, 2049-4096 columns: under 64 registers at two blocks per SM, 218.0 -> 203.8 us (bench/exp_bulk_bwd.py,
#   bulk-bwd-bps.log; 224-229 at 80-128 registers or three blocks). At 8192 columns it measured no faster
#   (416.9 against 416.7 us, bulk-bwd.log), nor does add_rms_norm's backward take it (92% of copy already).
# The blocks run as clusters of _BWD_BULK_PAIR that add up their weight-gradient sums before writing them: at two blocks
# per SM the partials had been 2% of the bytes (h200-2026-11-23-s25/held-pairs.log): LayerNorm bf16 4096 215.3 ->
# 208.3 us, 8192 403.3 -> 395.6, RMSNorm 204.3 -> 201.9 (clusters of 4: 207.3, but 429.7 at 8192).
_BWD_BULK_FIT = {
    "kk_layer_norm_bwd": ((256, 2, 2), (512, 1, 1)),
    "kk_rms_norm_bwd": ((256, 4, 2),),
}
# A GPU with less DRAM bandwidth per SM than _runtime.LOW_DRAM_GBPS_PER_SM takes _BWD_BULK_FIT_LOW_GBPS: on an H100
# (GPU time alone, bench/ab_source.py --queued, bf16 32768 rows, h100-2026-11-27-s40/ab-h100-*-bwd-bulk-*.log) one
# block of 256 threads per SM with up to 128 registers was fastest at 4096 columns: RMSNorm 298.6 -> 278.2 us against
# its H200 fit (63 registers at one block 314.8, 96 at two 299.6), LayerNorm 313.2 -> 298.4 against its register
# kernel (its H200 fit had measured slower than that, 317.3 against 306.8, h100-2026-11-27-s39/ab-h100-norm-bwd-1.log).
# Rows of 8192 columns keep the register kernels there (the bulk fits 0.2-5% slower: RMSNorm's (512, 1, 1) 1.019x,
# LayerNorm's 604.5 against 576.0 us).
_BWD_BULK_FIT_LOW_GBPS = {"kk_layer_norm_bwd": ((256, 2, 1),), "kk_rms_norm_bwd": ((256, 2, 1),)}
_BWD_BULK_STAGES = 3  # S, the kernels' template argument: their shared memory is 2 * S rows
_BWD_BULK_ROWS = 1  # K, the kernels' rows per reduction (2 measured slower here, s25 held-bulk2.log)
_BWD_BULK_PAIR = 2  # blocks per cluster adding up their weight-gradient sums (above)
# 16-bit rows split over a cluster (8193-65536 columns) take the same kernels with SPLIT where listed: each CTA's slice
# of x and gy arrives by bulk copies into S stages of 32 KB, at one 512-thread CTA per SM, K rows per cluster reduction.
# kernel -> (S, K). 8192 x 65536 on an H200, launches without the op's Python, against the register kernels at their
# fits (bench/exp_ln_bwd_launch.py --cases split, h200-2026-11-23-s25/split-bulk3.log): LayerNorm bf16 967.5 -> 835.9
# us, float16 962.1 -> 799.0 (at K = 1 954.8 and 920.8: one reduction per row, which no other CTA on the SM overlaps,
# had bound it), 16384 x 16384 bf16 450.8 -> 424.4; RMSNorm bf16 822.7 -> 801.0 (K = 2 and 4: 810-812).
_BWD_BULK_SPLIT = {"kk_layer_norm_bwd": (5, 2), "kk_rms_norm_bwd": (6, 1)}
# Of those, the kernels launched on a compile-time geometry (as _SPLIT_FIXED; kk_layer_norm_bwd_bulk's CTAS), which
# take clusters of up to 16 CTAs (_runtime.SPLIT_MAX_CTAS: LayerNorm rows up to 131072 columns; bf16 4096 x 131072
# 1465.3 -> 899.2 us against the column segments, h200-2026-11-24-s29/ab-16ctas-norms.json):
# LayerNorm bf16 8192 x 65536 838.0 -> 816.8 us, float16 828.3 -> 810.8; RMSNorm measured 0.7% slower there, 1.6% at
# 8192 x 32768 (h200-2026-11-24-s27/ab-fixed-bulk-bwd.json), and its kernel takes no CTAS.
_BWD_SPLIT_FIXED = {"kk_layer_norm_bwd"}


def split_param_bytes(name: str, packs: int) -> int:
    """Dynamic shared memory per thread of a forward whose rows are split over a cluster (kernels/norms.cu
    ParamSlots): its w (LayerNorm: and b) packs, ``packs`` of 16 bytes each."""
    return (2 if name == "kk_layer_norm_fwd" else 1) * packs * 16


def bwd_slot_bytes(name: str, dtype: torch.dtype, smem: int, packs: Optional[int] = None, extra: bool = False) -> int:
    """Dynamic shared memory per thread of a backward kernel with SMEM = ``smem`` (kernels/norms.cu PackSlots):
    slot arrays (the weights for SMEM 2, the weight sums, LayerNorm's bias sums, the extra gradient of a
    float32 ``extra`` kernel whose rows are not split) of float packs, ``packs`` (default ``_BWD_PACKS``) of each."""
    if not smem:
        return 0
    arrays = (smem >= 2) + (2 if name == "kk_layer_norm_bwd" else 1) + (extra and dtype.itemsize != 2)
    return arrays * (packs or _BWD_PACKS[dtype]) * VEC[dtype] * 4


def _whole_packs(cols: int, dtype: torch.dtype) -> int:
    """The columns a shifted row's whole packs can hold (kk::RowShift): at most cols // VEC packs."""
    return cols - cols % VEC[dtype]


def _row_block(packs: int, dtype: torch.dtype, cols: int, vec: bool, shifted: bool = False) -> Tuple[int, int, bool]:
    """(R, Y, whether rows have a streamed tail). ``shifted``: rows on the shifted path, whose packs are at most
    cols // VEC whole ones and whose extra elements (fewer than two packs' worth) go one to a thread: 4097 bf16 columns
    take the threads of 4096, not twice as many with half their packs empty (rms_norm on an H200: 196.2 us against
    128.6 at 4096), and rows narrower than two packs 2 * VEC threads."""
    e = packs * VEC[dtype] if vec else packs
    held = _whole_packs(cols, dtype) if shifted else cols
    r = min(pow2ceil(cdiv(held, e)), 512)
    if shifted:
        r = max(r, 2 * VEC[dtype])
    return r, max(1, 128 // r), held > 512 * e


@functools.cache
def _forward_shape(name: str, dtype: torch.dtype, cols: int, dev: int, path: str) -> RowShape:
    """The launch of a forward kernel for rows of ``cols`` on ``path`` (row_path): held whole in one block's registers
    (by its lean ``_wide`` kernel where _WIDE_FIT lists it; shifted rows by the kernel's SHIFT instantiation); beyond
    that (the 16-byte path, sm_90+) split over a cluster; beyond a cluster, for 16-bit LayerNorm one block per row with
    its tail cached in shared memory (_TAIL_FIT); else one block per row re-reading its tail from L2. Shifted rows
    too long for one block take the scalar path."""
    vec = path != SCALAR
    for lo, hi, p, m in _WIDE_FIT.get((name, dtype), ()) if path == VECTOR else ():
        if lo < cols <= hi:
            r, wide = _row_block(p, dtype, cols, vec)[0], f"{name}_wide<{CTYPE[dtype]}, {p}, {m}"
            if cols > _WIDE_PREFETCH.get((name, dtype), 1 << 62):
                pre = kernel("norms", f"{wide}, true>")
                # Its shared memory (NP * 8 KB a block) must leave the SM the fit's m blocks (GPUs of 100 KB per SM
                # hold 2 of float32 (4, 3)'s); else the kernel without it.
                if pre.occupancy(r, 0, dev) >= m:
                    return RowShape(pre, (r, 1), 1, 1 << 62)
            return RowShape(kernel("norms", f"{wide}>"), (r, 1), 1, 1 << 62)
    packs, minb = _FWD_PACKS[dtype], 2
    for lo, hi, p, m in _FWD_FIT.get((name, dtype), ()):
        if lo < cols <= hi:
            packs, minb = p, m
    if path == SHIFTED and dtype == _F32:
        held = _whole_packs(cols, dtype)
        packs, minb = next(((p, m) for most, p, m in _SHIFTED_F32_FITS if held <= most), (packs, minb))
    r, y, tail = _row_block(packs, dtype, cols, vec, path == SHIFTED)
    if tail and path == SHIFTED:
        return _shifted_split_shape(name, dtype, cols, dev) or _forward_shape(name, dtype, cols, dev, SCALAR)
    if tail:
        # Rows too long for one block's registers: split over a cluster (without the tail code every
        # forward fits its default packs in 64 registers), else stream the tail.
        packs = _FWD_PACKS[dtype]
        for p, m in _SPLIT_FITS.get((name, dtype), [(packs, 2)]) if vec else ():
            expr = f"{name}<{CTYPE[dtype]}, false, {p}, {m}, true>"
            fixed = (name, dtype) in _SPLIT_FIXED
            most = PORTABLE_CTAS if (name, dtype) in _SPLIT_PORTABLE else None
            split = split_shape("norms", expr, p, dtype, cols, dev, split_param_bytes(name, p), fixed, most)
            if split:
                return split
        if vec and (name, dtype) in _TAIL_FIT:
            packs, minb = _TAIL_FIT[name, dtype]
            r, y, _ = _row_block(packs, dtype, cols, vec)
            k = kernel("norms", f"{name}<{CTYPE[dtype]}, true, {packs}, {minb}>")
            smem = row_cache_bytes(k, dev, cdiv(cols, VEC[dtype]) - packs * r, 16)
            return RowShape(k, (r, y), y, resident_blocks(k, r * y, dev, smem), smem=smem)
        r, y, _ = _row_block(packs, dtype, cols, vec)
        k = kernel("norms", f"{name}<{CTYPE[dtype]}, true>")
        # Rows longer than the register part re-read their tail: one wave keeps it in L2.
        return RowShape(k, (r, y), y, resident_blocks(k, r * y, dev))
    # LayerNorm's loads (LD): kk::kKeep beyond _FWD_KEEP_LOW_GBPS, but not on shifted rows, where 16-bit LayerNorm's
    # kk::kKeep spills 4-36 bytes.
    keep = path != SHIFTED and cols > _FWD_KEEP_LOW_GBPS.get((name, dtype), 1 << 62) and low_dram_bandwidth(dev)
    ld = ", kk::kKeep" if keep else ", kk_norms::kLnFwdLd" if name == "kk_layer_norm_fwd" else ""
    if path == SHIFTED:
        after = f", false, 0{ld}, true>"  # SPLIT, CTAS, (LayerNorm: LD,) SHIFT
    elif path == VECTOR and name in _VEC_ONLY:
        after = f", false, 0{ld}, false, true>"  # SPLIT, CTAS, (LayerNorm: LD,) SHIFT, VEC_ONLY
    else:
        after = ", false, 0, kk::kKeep>" if keep else ">"
    k = kernel("norms", f"{name}<{CTYPE[dtype]}, false, {packs}, {minb}{after}")
    return RowShape(k, (r, y), y, 1 << 62, shifted=path == SHIFTED)  # one row group per block


def _shifted_split_shape(name: str, dtype: torch.dtype, cols: int, dev: int) -> Optional[RowShape]:
    """Shifted rows too long for one block, split over a cluster as the 16-byte path's (its fits and fixed geometry,
    the cluster sized by the row's whole packs), w and b read at each row's shift rather than staged in shared memory;
    None where no cluster holds them (float64 is not split)."""
    if dtype == torch.float64:
        return None
    ld = ", kk_norms::kLnFwdLd" if name == "kk_layer_norm_fwd" else ""
    most = PORTABLE_CTAS if (name, dtype) in _SPLIT_PORTABLE else None
    fits = _SPLIT_FITS.get((name, dtype), [(_FWD_PACKS[dtype], 2)])
    for p, m in _SHIFTED_SPLIT_FITS.get((name, dtype), fits):
        expr = f"{name}<{CTYPE[dtype]}, false, {p}, {m}, true, {{ctas}}{ld}, true>"
        split = split_shape("norms", expr, p, dtype, _whole_packs(cols, dtype), dev, 0, True, most)
        if split:
            return split._replace(shifted=True)
    return None


def _launch_forward(name: str, x: torch.Tensor, args: tuple, eps: float) -> None:
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    if rows == 0:
        return
    shape = _forward_shape(name, x.dtype, cols, x.get_device(), row_path(cols, x.dtype, args))
    shape.launch(shape.grid(rows), (*args, rows, cols, eps))


@functools.cache
def _backward_shape(name: str, dtype: torch.dtype, cols: int, dev: int, path: str, extra: bool):
    """(the launch of a backward kernel on ``path`` (row_path), ``cap`` being chunks in one wave; its column-sum
    kernel). ``extra``: the kernel adds a second incoming gradient (add_rms_norm's residual path; its own
    instantiation, EXTRA)."""
    column_sum = kernel("norms", f"kk_column_sum<{CTYPE[dtype]}>")
    extra_arg = f"{str(extra).lower()}, " if name == "kk_rms_norm_bwd" else ""
    if path == SHIFTED:
        packs = _BWD_SHIFTED_PACKS.get((name, dtype), _BWD_PACKS[dtype])
        r, y, tail = _row_block(packs, dtype, cols, True, shifted=True)
        if tail:  # beyond one block
            split = _shifted_split_backward(name, dtype, cols, dev, extra_arg)
            return (split, column_sum) if split else _backward_shape(name, dtype, cols, dev, SCALAR, extra)
        bulk = _shifted_bulk_backward(name, dtype, cols, dev, extra, r)
        if bulk:
            return bulk, column_sum
        k = kernel("norms", f"{name}<{CTYPE[dtype]}, false, {packs}, 1, {extra_arg}false, 0, true>")
        return RowShape(k, (r, y), y, resident_blocks(k, r * y, dev), shifted=True), column_sum
    packs = _BWD_PACKS[dtype]
    vec = path != SCALAR
    r, y, tail = _row_block(packs, dtype, cols, vec)

    def expr(smem: int, minb: int, split: bool) -> Tuple[str, int]:
        """The kernel and its dynamic shared memory per thread."""
        e = f"{name}<{CTYPE[dtype]}, false, {packs}, {minb}, {extra_arg}{str(split).lower()}, {smem}>"
        return e, bwd_slot_bytes(name, dtype, smem, extra=extra and not split)

    if tail and vec and name in _BWD_BULK_SPLIT and not extra and dtype in _B16:
        stages, k = _BWD_BULK_SPLIT[name]
        e = f"{name}_bulk<{CTYPE[dtype]}, 512, 1, {stages}, true, {k}>"
        fixed = name in _BWD_SPLIT_FIXED
        split = split_shape("norms", e, packs, dtype, cols, dev, 2 * stages * packs * 16, fixed)
        if split:
            return split, column_sum
    if tail and vec:
        e, per_thread = expr(*_BWD_SPLIT_FIT.get((name, dtype, extra), (0, 1)), True)
        split = split_shape("norms", e, packs, dtype, cols, dev, per_thread)
        if split:
            return split, column_sum
    threads = 32 * cdiv(cdiv(cols // VEC[dtype], packs), 32)
    bulk = []
    if not extra and dtype in _B16 and vec and not tail and r >= 256 and has_clusters(dev):
        fits = _BWD_BULK_FIT_LOW_GBPS if low_dram_bandwidth(dev) else _BWD_BULK_FIT
        bulk = [f for f in fits.get(name, ()) if threads <= f[0]]
    if bulk:
        nt, minb, per_sm = bulk[0]
        k = kernel("norms", f"{name}_bulk<{CTYPE[dtype]}, {nt}, {minb}, {_BWD_BULK_STAGES}, false, {_BWD_BULK_ROWS}>")
        smem = 2 * _BWD_BULK_STAGES * cols * dtype.itemsize
        cap = min(resident_blocks(k, threads, dev, smem), per_sm * sm_count(dev))
        pair = _BWD_BULK_PAIR
        clusters = k.max_active_clusters((threads, 1), (pair, 1, 1), smem, dev) if pair > 1 else 0
        if clusters:
            cap = min(cap, pair * clusters) // pair * pair
        else:
            pair = 1  # no cluster of that size fits: each block writes its own partial row
        return RowShape(k, (threads, 1), 1, cap, smem=smem, pair=pair), column_sum
    if not tail and vec and r >= 256 and (name, dtype, extra) in _BWD_HELD_FIT:
        e, per_thread = expr(*_BWD_HELD_FIT[name, dtype, extra], False)
        k = kernel("norms", e)
        return RowShape(k, (r, 1), 1, resident_blocks(k, r, dev, per_thread * r), smem=per_thread * r), column_sum
    # Rows beyond a cluster's reach on the 16-byte path: column segments (float64 keeps the streamed tail; its
    # segment sums spill).
    if tail and vec and dtype != torch.float64:
        return _segmented_shape(name, dtype, cols, dev, extra), column_sum
    # Rows held whole prefetch the next row; float32 LayerNorm spills doing so with its sums in registers, and
    # streams a tail instead where they are not in shared memory (up to 2048 columns, the scalar path).
    tail = tail or (name, dtype) == ("kk_layer_norm_bwd", torch.float32)
    suffix = f", {packs}, 1, true" if extra else ""
    k = kernel("norms", f"{name}<{CTYPE[dtype]}, {str(tail).lower()}{suffix}>")
    return RowShape(k, (r, y), y, resident_blocks(k, r * y, dev)), column_sum


_SHIFTED_BULK = True  # off: the register kernels there (bench/exp_shifted_bulk.sh's B)
_SHIFTED_BULK_THREADS = 320  # NT of the bulk kernels' SHIFT instantiations


def _shifted_bulk_backward(
    name: str, dtype: torch.dtype, cols: int, dev: int, extra: bool, r: int
) -> Optional[RowShape]:
    """16-bit LayerNorm and RMSNorm rows (not add_rms_norm's) on shifted rows one block holds (sm_90+), where the bulk
    kernels' SHIFT (kernels/norms.cu norm_bwd_bulk_shifted_run: each row's 16-byte units by bulk copies, two per thread,
    in blocks of any multiple of 32 threads up to 320: 94-96 registers at two blocks per SM; LayerNorm's spill at 384)
    takes fewer threads than the register kernel's block of ``r`` (a power of two) would. bf16 at 32768 rows
    (h200-2026-11-28-s47/ab-h200-shifted-bulk-2.log): 5001 columns (a block of 512 with 312 threads at work, against
    320) rms_norm_backward 375.2 -> 280.9 us, layer_norm_backward 449.1 -> 308.7; 4500 356.2 -> 253.5 and 428.2 ->
    273.5; 3001 (256 against 192) 1.10x. Where both take about the same threads the bulk kernel measured 1-4% slower
    (4097 and 2049 columns: it holds more registers than the 16-byte path's), and split over a cluster 0.86-1.0x
    (ab-h200-shifted-bulk.log). None elsewhere."""
    if extra or dtype not in _B16 or not has_clusters(dev) or not _SHIFTED_BULK:
        return None
    units = (cols + 2 * VEC[dtype] - 2) // VEC[dtype]  # a row's 16-byte units, at most: ceil((cols + VEC - 1) / VEC)
    threads = 32 * cdiv(cdiv(units, 2), 32)
    if threads > _SHIFTED_BULK_THREADS or threads >= r:
        return None
    ctas = ", 0" if name == "kk_layer_norm_bwd" else ""  # LayerNorm's CTAS: no fixed geometry
    nt = _SHIFTED_BULK_THREADS
    k = kernel("norms", f"{name}_bulk<{CTYPE[dtype]}, {nt}, 2, {_BWD_BULK_STAGES}, false, 1{ctas}, true>")
    smem = 2 * _BWD_BULK_STAGES * units * 16
    return RowShape(k, (threads, 1), 1, resident_blocks(k, threads, dev, smem), smem=smem, shifted=True)


def _shifted_split_backward(name: str, dtype: torch.dtype, cols: int, dev: int, extra_arg: str) -> Optional[RowShape]:
    """Shifted rows too long for one block, split over a cluster (up to the portable 8 CTAs): the register kernel at its
    default packs, one block per SM, its sums in registers (SHIFT takes no shared-memory slots), chunks of rows of one
    shift as the held rows'. None where no cluster holds them (float64 is not split). A CTA more where that keeps more
    SMs at work (split_shape's ``fill``): an H200 holds 15 clusters of 7 or of 8 (105 or 120 SMs), and at 8192 x 50257
    8 took float32 rms_norm_backward 1447.3 -> 1379.2 us, layer_norm_backward 1719.7 -> 1642.9, the bf16 ones 1.0-1.9%
    less (h200-2026-11-28-s47/ab-h200-split-fill.log); the forwards and the 16-byte path's backwards measured 0-2%
    slower with it there."""
    if dtype == torch.float64:
        return None
    packs = _BWD_PACKS[dtype]
    e = f"{name}<{CTYPE[dtype]}, false, {packs}, 1, {extra_arg}true, 0, true>"
    split = split_shape("norms", e, packs, dtype, _whole_packs(cols, dtype), dev, fill=True)
    # Not on one CTA: float32 LayerNorm's rows of 4100-8195 columns (beyond its held 2 packs, within one CTA of 4)
    # trapped there, launched without a cluster (an H200, h200-2026-11-28-s46/pytest-shifted-4.log); they take the
    # scalar path.
    return split._replace(shifted=True) if split and split.ctas > 1 else None


class _Segmented(NamedTuple):
    """The backward of rows too wide for a cluster (kernels/norms.cu kk_norm_bwd_seg*): its three kernels and the column
    segments per row. Like a RowShape for _launch_backward's chunks: one row per block of a segment, at most ``cap``
    chunks (one wave of kk_norm_bwd_seg over all segments), no clusters."""

    sums: Kernel
    rows: Kernel
    main: Kernel
    segs: int
    cap: int
    ln: bool
    per_block: int = 1
    pair: int = 1
    shifted: bool = False

    def launch(self, x: torch.Tensor, head: tuple, gx: torch.Tensor, partial: torch.Tensor, bias_part: int, rpc: int):
        """The three kernels over (segments, chunks of ``rpc`` rows), into ``partial`` (``bias_part``: LayerNorm's)."""
        cols = x.shape[-1]
        rows = x.numel() // cols
        gy, xx, w = head[:3]
        mean, rstd, g_extra = (head[3], head[4], 0) if self.ln else (0, head[3], head[4])
        ns = 2 if self.ln else 1
        # the segments' row sums, then each row's (c1, c2) after them, in one buffer
        part = x.new_empty(rows * (self.segs + 1) * ns, dtype=acc_dtype(x.dtype))
        tot = part.data_ptr() + rows * self.segs * ns * part.element_size()
        grid = (self.segs, partial.shape[1])
        self.sums.launch(grid, _SEG_THREADS, (gy, xx, w, mean, rstd, part, rows, cols, rpc))
        self.rows.launch(cdiv(rows, BLOCK), BLOCK, (part, rstd, tot, rows, self.segs, cols))
        self.main.launch(
            grid, _SEG_THREADS, (gy, xx, w, mean, rstd, tot, g_extra, gx, partial, bias_part, rows, cols, rpc)
        )


_SEG_THREADS, _SEG_PACKS = 256, 2  # kernels/norms.cu kSegThreads, kSegPacks


def _segmented_shape(name: str, dtype: torch.dtype, cols: int, dev: int, extra: bool) -> _Segmented:
    ln = name == "kk_layer_norm_bwd"
    t = CTYPE[dtype]
    main = kernel("norms", f"kk_norm_bwd_seg<{t}, {str(ln).lower()}, {str(extra).lower()}>")
    segs = cdiv(cols // VEC[dtype], _SEG_PACKS * _SEG_THREADS)
    return _Segmented(
        kernel("norms", f"kk_norm_bwd_seg_sums<{t}, {str(ln).lower()}>"),
        kernel("norms", f"kk_norm_bwd_seg_rows<{CTYPE[acc_dtype(dtype)]}, {2 if ln else 1}>"),
        main,
        segs,
        max(1, resident_blocks(main, _SEG_THREADS, dev) // segs),
        ln,
    )


_CHUNK_COST = 4


@functools.lru_cache(maxsize=64)
def _shifted_chunks(rows: int, period: int, per_block: int, cap: int) -> Tuple[int, int]:
    """(rows per chunk, chunks) of a backward on shifted rows (kernels/norms.cu norm_bwd_run SHIFT): each chunk takes
    rows of one of ``period`` shift classes, and the kernel counts period * ceil(ceil(rows / period) / rows per chunk)
    chunks, looped over by at most ``cap`` blocks (clusters) of ``per_block`` row groups. The chunks per class are the
    ones whose waves end soonest, a chunk costing _CHUNK_COST row groups' passes more (its weights, first loads and
    partial row): ``cap`` need not be a multiple of ``period`` (15 clusters of 7 CTAs on an H200), and chunks cut to
    cap // period per class had left clusters idle (rms_norm_backward bf16 8192 x 50257 1678.9 -> 997.0 us at a cost
    of 1, h200-2026-11-28-s47/ab-h200-shifted-chunks.log; at 16384 x 12289 409.0 -> 441.8: 328 chunks in five waves
    where 64 had taken one, which a cost of 4 keeps, ab-h200-shifted-chunks-2.log)."""
    per_class = cdiv(rows, period)
    best = (1 << 62, 0, 0)
    for k in range(1, min(cdiv(per_class, per_block), 8 * cdiv(cap, period)) + 1):
        rpc = cdiv(per_class, k)
        chunks = period * cdiv(per_class, rpc)
        span = cdiv(chunks, cap) * (cdiv(rpc, per_block) + _CHUNK_COST)
        best = min(best, (span, chunks, rpc))
    return best[2], best[1]


def _launch_backward(
    name: str, x: torch.Tensor, head: tuple, gx: torch.Tensor, grads: tuple, extra: bool = False, **stats
) -> None:
    """One chunk of rows per block (per cluster when rows are split) writes its column partials of the
    weight (and bias) gradient; one kk_column_sum adds them in chunk order (deterministic), launched dependent
    (programmatic dependent launch: scheduled before the backward kernel ends). ``extra``: head carries
    g_extra."""
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    check_stats(f"kernelkit::{name[3:-4]}_backward", x, rows, **stats)
    if rows == 0:
        for g in grads:
            g.zero_()
        return
    path = row_path(cols, x.dtype, (*head, gx))
    shape, column_sum = _backward_shape(name, x.dtype, cols, x.get_device(), path, extra)
    if shape.shifted:
        period = VEC[x.dtype] // math.gcd(cols, VEC[x.dtype])
        rows_per_chunk, chunks = _shifted_chunks(rows, period, shape.per_block, shape.cap)
        grid = min(chunks, shape.cap)
    else:
        chunks = min(cdiv(rows, shape.per_block), shape.cap)
        rows_per_chunk = cdiv(rows, chunks)
        grid = cdiv(cdiv(rows, rows_per_chunk), shape.pair) * shape.pair
        chunks = grid // shape.pair  # partial rows: one per cluster of shape.pair blocks
    # One buffer for every gradient's partials (LayerNorm's bias after its weight), one kk_column_sum for all of them
    # (32 columns per block, a grid row per gradient).
    partial = x.new_empty(len(grads), chunks, cols, dtype=acc_dtype(x.dtype))
    if len(grads) == 1:
        bias_part, sums = 0, (partial, grads[0], 0, chunks, cols)
    else:
        bias_part, sums = partial.data_ptr() + chunks * cols * partial.element_size(), (partial, *grads, chunks, cols)
    if isinstance(shape, _Segmented):
        shape.launch(x, head, gx, partial, bias_part, rows_per_chunk)
    elif len(grads) == 1:
        shape.launch(grid, (*head, gx, partial, rows, cols, rows_per_chunk))
    else:
        shape.launch(grid, (*head, gx, partial, bias_part, rows, cols, rows_per_chunk))
    column_sum.launch((cdiv(cols, 32), len(grads)), BLOCK, sums, dependent=True)


# ---------------------------------------------------------------- rms_norm


@op(
    "kernelkit::rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "x": _X,
        "weight": _W,
        "rstd": TensorSpec(contiguous=True),
    },
    output=(like("x"), like("weight")),
    cpu=lambda grad, x, weight, rstd, gx, gw: _native.cpu_rms_norm_bwd(grad, x, weight, rstd, gx, gw),
)
def rms_norm_backward(grad, x, weight, rstd, grad_x, grad_weight):
    """Gradients of rms_norm for x and weight, from the saved per-row rstd."""
    _launch_backward("kk_rms_norm_bwd", x, (grad, x, weight, rstd, 0), grad_x, (grad_weight,), rstd=rstd)


def _rms_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(inputs[0], inputs[1], output[1])


def _rms_backward(ctx, grad_y, grad_rstd):
    x, w, rstd = ctx.saved_tensors
    gx, gw = rms_norm_backward(grad_y, x, w, rstd)
    return gx, gw, None


_rms_norm = op(
    "kernelkit::rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> (Tensor, Tensor)",
    inputs={"x": _X, "weight": _W},
    output=(like("x"), _STAT),
    backward=_rms_backward,
    setup_context=_rms_setup,
    cpu=lambda x, weight, eps, y, rstd: _native.cpu_rms_norm_fwd(x, weight, y, rstd, eps),
)(lambda x, weight, eps, y, rstd: _launch_forward("kk_rms_norm_fwd", x, (x, weight, y, rstd), eps))


# The inference twins launch the same kernels with 0 (a null pointer) for the statistics, which they then do not store.
_rms_norm_inference = op(
    "kernelkit::rms_norm_inference(Tensor x, Tensor weight, float eps=1e-6) -> Tensor",
    inputs={"x": _X, "weight": _W},
    output=like("x"),
    cpu=lambda x, weight, eps, y: _native.cpu_rms_norm_fwd(x, weight, y, _scratch_stat(x), eps),
)(lambda x, weight, eps, y: _launch_forward("kk_rms_norm_fwd", x, (x, weight, y, 0), eps))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim, as Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x²) + eps) * weight,
    computed in float32 (float64 for float64) and rounded once.

    >>> y = kernelkit.ops.rms_norm(x, weight, 1e-6)
    """
    if _records_grad(x, weight):
        return _rms_norm(x, weight, eps)[0]
    return _rms_norm_inference(x, weight, eps)


# ---------------------------------------------------------------- add_rms_norm


@op(
    "kernelkit::add_rms_norm_backward(Tensor grad, Tensor grad_residual, Tensor new_residual, Tensor weight, "
    "Tensor rstd) -> (Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(dtypes=FLOATS, contiguous=True, make_contiguous=True, shape=("*", "N")),
        "grad_residual": TensorSpec(same_dtype_as="grad", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "new_residual": TensorSpec(same_dtype_as="grad", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "weight": TensorSpec(same_dtype_as="grad", contiguous=True, make_contiguous=True, shape=("N",)),
        "rstd": TensorSpec(contiguous=True),
    },
    output=(like("new_residual"), like("weight")),
    cpu=lambda g, gr, h, w, rstd, gh, gw: _native.cpu_add_rms_norm_bwd(g, gr, h, w, rstd, gh, gw),
)
def add_rms_norm_backward(grad, grad_residual, new_residual, weight, rstd, grad_h, grad_weight):
    """Gradients of add_rms_norm for h = x + residual (both inputs get it) and weight."""
    head = (grad, new_residual, weight, rstd, grad_residual)
    _launch_backward("kk_rms_norm_bwd", new_residual, head, grad_h, (grad_weight,), extra=True, rstd=rstd)


def _add_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(output[1], inputs[2], output[2])


def _add_backward(ctx, grad_y, grad_residual, grad_rstd):
    h, w, rstd = ctx.saved_tensors
    if grad_residual is None:
        grad_residual = torch.zeros_like(h)
    gh, gw = add_rms_norm_backward(grad_y, grad_residual, h, w, rstd)
    return gh, gh, gw, None


_ADD_INPUTS = {
    "x": _X,
    "residual": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
    "weight": _W,
}
_add_rms_norm = op(
    "kernelkit::add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6) -> (Tensor, Tensor, Tensor)",
    inputs=_ADD_INPUTS,
    output=(like("x"), like("x"), _STAT),
    backward=_add_backward,
    setup_context=_add_setup,
    cpu=lambda x, res, w, eps, y, h, rstd: _native.cpu_add_rms_norm_fwd(x, res, w, y, h, rstd, eps),
)(lambda x, res, w, eps, y, h, rstd: _launch_forward("kk_add_rms_norm_fwd", x, (x, res, w, y, h, rstd), eps))


_add_rms_norm_inference = op(
    "kernelkit::add_rms_norm_inference(Tensor x, Tensor residual, Tensor weight, float eps=1e-6) -> (Tensor, Tensor)",
    inputs=_ADD_INPUTS,
    output=(like("x"), like("x")),
    cpu=lambda x, res, w, eps, y, h: _native.cpu_add_rms_norm_fwd(x, res, w, y, h, _scratch_stat(x), eps),
)(lambda x, res, w, eps, y, h: _launch_forward("kk_add_rms_norm_fwd", x, (x, res, w, y, h, 0), eps))


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm in one pass: returns (rms_norm(x + residual), x + residual).

    >>> normed, residual = kernelkit.ops.add_rms_norm(hidden, residual, weight, 1e-6)
    """
    if _records_grad(x, residual, weight):
        y, h, _ = _add_rms_norm(x, residual, weight, eps)
        return y, h
    return _add_rms_norm_inference(x, residual, weight, eps)


# ---------------------------------------------------------------- layer_norm


@op(
    "kernelkit::layer_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor mean, Tensor rstd) "
    "-> (Tensor, Tensor, Tensor)",
    inputs={
        "grad": TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        "x": _X,
        "weight": _W,
        "mean": TensorSpec(contiguous=True),
        "rstd": TensorSpec(contiguous=True),
    },
    output=(like("x"), like("weight"), like("weight")),
    cpu=lambda g, x, w, m, r, gx, gw, gb: _native.cpu_layer_norm_bwd(g, x, w, m, r, gx, gw, gb),
)
def layer_norm_backward(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias):
    """Gradients of layer_norm for x, weight and bias, from the saved per-row mean and rstd."""
    head = (grad, x, weight, mean, rstd)
    _launch_backward("kk_layer_norm_bwd", x, head, grad_x, (grad_weight, grad_bias), mean=mean, rstd=rstd)


def _ln_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(inputs[0], inputs[1], output[1], output[2])


def _ln_backward(ctx, grad_y, grad_mean, grad_rstd):
    x, w, mean, rstd = ctx.saved_tensors
    gx, gw, gb = layer_norm_backward(grad_y, x, w, mean, rstd)
    return gx, gw, gb, None


_layer_norm = op(
    "kernelkit::layer_norm(Tensor x, Tensor weight, Tensor bias, float eps=1e-5) -> (Tensor, Tensor, Tensor)",
    inputs={"x": _X, "weight": _W, "bias": _W},
    output=(like("x"), _STAT, _STAT),
    backward=_ln_backward,
    setup_context=_ln_setup,
    cpu=lambda x, w, b, eps, y, mean, rstd: _native.cpu_layer_norm_fwd(x, w, b, y, mean, rstd, eps),
)(lambda x, w, b, eps, y, mean, rstd: _launch_forward("kk_layer_norm_fwd", x, (x, w, b, y, mean, rstd), eps))


_layer_norm_inference = op(
    "kernelkit::layer_norm_inference(Tensor x, Tensor weight, Tensor bias, float eps=1e-5) -> Tensor",
    inputs={"x": _X, "weight": _W, "bias": _W},
    output=like("x"),
    cpu=lambda x, w, b, eps, y: _native.cpu_layer_norm_fwd(x, w, b, y, _scratch_stat(x), _scratch_stat(x), eps),
)(lambda x, w, b, eps, y: _launch_forward("kk_layer_norm_fwd", x, (x, w, b, y, 0, 0), eps))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim with affine weight and bias (a missing bias is zeros).

    >>> y = kernelkit.ops.layer_norm(x, weight, bias, 1e-5)
    """
    if bias is None:
        bias = torch.zeros_like(weight)
    if _records_grad(x, weight, bias):
        return _layer_norm(x, weight, bias, eps)[0]
    return _layer_norm_inference(x, weight, bias, eps)
