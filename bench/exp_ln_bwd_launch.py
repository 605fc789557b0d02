"""Experiment: the 16-bit norm backwards' launches timed without the op's Python (ops/norms.py _launch_backward on
preallocated outputs), for the bulk-copy kernels (kk_layer_norm_bwd_bulk, kk_rms_norm_bwd_bulk) at several stage counts
and the register-prefetch kernels they replace:

- ``held`` (sessions 24-25): LayerNorm rows one block holds (4096 and 8192 columns; RMSNorm at 4096), the bulk kernel
  as single blocks and as clusters of 2 or 4 blocks that add up their weight-gradient sums before writing them
  (_BWD_BULK_PAIR), against the register-prefetch kernel (the shape the host picks without sm_90's clusters);
- ``split`` (session 25): rows split over a cluster (8192 x 65536), the bulk kernel with SPLIT at several (stages, rows
  per reduction) against the register kernel (kk_*_bwd with SPLIT, the shape the host picks when the op is not in
  _BWD_BULK_SPLIT).

Session 24's held runs compared two and three stages; session 25's first held run (held-bulk2.log) 2, 3 and 4 stages
and two rows per reduction, which measured no faster there.

Timed through the op, these cells can be host-bound on the GPU machine (a backward call's Python took 150-320 us
there, against 215-450 us of GPU time): the launches alone are GPU-bound.

    python3 bench/exp_ln_bwd_launch.py --cases split --out ln_bwd_launch.json
"""

from __future__ import annotations

import argparse

import exp_bulk_bwd
import torch
from sweep_common import interleaved, write_results

from kernelkit.bench import copy_bandwidth
from kernelkit.ops import _runtime, norms

# (tag, the ops/norms.py settings the variant's shape is picked under). The session-24 logs came from earlier forms of
# this script, which made variants by substituting kernels/norms.cu: the first bulk kernel also took chunks of
# consecutive rows, or summed its rows with block_row_sum's two barriers (kBulkStrided, kBulkOneBarrier in
# h200-2026-11-23-s24/ln-bwd-launch2.log), both slower and no longer in the source; ln-bwd-launch3.log ran when the
# kernel's stages were a template default of 2, so its "bulk, 3 stages" row is the kernel as shipped.
HELD = [
    ("bulk, 3 stages, pairs", {"_BWD_BULK_STAGES": 3, "_BWD_BULK_ROWS": 1, "_BWD_BULK_PAIR": 2}),
    ("bulk, 3 stages", {"_BWD_BULK_STAGES": 3, "_BWD_BULK_ROWS": 1, "_BWD_BULK_PAIR": 1}),
    ("bulk, 3 stages, clusters of 4", {"_BWD_BULK_STAGES": 3, "_BWD_BULK_ROWS": 1, "_BWD_BULK_PAIR": 4}),
    ("register prefetch", {"has_clusters": lambda dev: False}),
]
# the split bulk kernels at (stages, rows per reduction)
SPLIT = [
    (f"split bulk, {s} stages, {k} rows", {"_BWD_BULK_SPLIT": {"kk_layer_norm_bwd": (s, k)}})
    for s, k in ((3, 1), (6, 1), (5, 2), (6, 2))
] + [("split registers", {"_BWD_BULK_SPLIT": {}})]
SPLIT_RMS = [
    (f"split bulk, {s} stages, {k} rows", {"_BWD_BULK_SPLIT": {"kk_rms_norm_bwd": (s, k)}})
    for s, k in ((6, 1), (6, 2), (6, 4))
] + [("split registers", {"_BWD_BULK_SPLIT": {}})]
CASES = {
    "held": [
        ("kk_layer_norm_bwd", dtype, 32768, cols, HELD)
        for dtype in (torch.bfloat16, torch.float16)
        for cols in (4096, 8192)
    ]
    + [("kk_rms_norm_bwd", torch.bfloat16, 32768, 4096, HELD[:3])],
    "split": [
        ("kk_layer_norm_bwd", torch.bfloat16, 8192, 65536, SPLIT),
        ("kk_layer_norm_bwd", torch.float16, 8192, 65536, SPLIT),
        ("kk_layer_norm_bwd", torch.bfloat16, 16384, 16384, SPLIT),
        ("kk_rms_norm_bwd", torch.bfloat16, 8192, 65536, SPLIT_RMS),
    ],
}


def _launcher(name, settings, dtype, cols, dev):
    """A stand-in for norms._backward_shape returning the shape it picks under ``settings`` (ops/norms.py attributes)
    for 16-byte rows of ``cols``, compiled and bound now."""
    norms._backward_shape.cache_clear()
    real = {k: getattr(norms, k) for k in settings}
    try:
        for k, v in settings.items():
            setattr(norms, k, v)
        shape = norms._backward_shape(name, dtype, cols, dev, _runtime.VECTOR, False)
    finally:
        for k, v in real.items():
            setattr(norms, k, v)
        norms._backward_shape.cache_clear()
    row = shape[0]
    print(f"  {row.kernel.name} grid ({row.cap}, {row.ctas}) smem {row.smem}")
    return lambda *key: shape


def time_case(name, dtype, rows, cols, variants, copy, reps):
    ln = name == "kk_layer_norm_bwd"
    x, g = (torch.randn(rows, cols, dtype=dtype, device="cuda") for _ in range(2))
    w, b = (torch.randn(cols, dtype=dtype, device="cuda") for _ in range(2))
    if ln:
        _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
        want = norms.layer_norm_backward(g, x, w, mean, rstd)
        head, stats, params = (g, x, w, mean, rstd), dict(mean=mean, rstd=rstd), (w, b)
    else:
        _, rstd = norms._rms_norm(x, w, 1e-6)
        want = norms.rms_norm_backward(g, x, w, rstd)
        head, stats, params = (g, x, w, rstd, 0), dict(rstd=rstd), (w,)
    calls, outs = {}, {}
    for tag, settings in variants:
        pin = _launcher(name, settings, dtype, cols, x.get_device())
        gx, grads = torch.empty_like(x), tuple(torch.empty_like(p) for p in params)

        def run(pin=pin, gx=gx, grads=grads):
            real = norms._backward_shape
            norms._backward_shape = pin
            try:
                norms._launch_backward(name, x, head, gx, grads, **stats)
            finally:
                norms._backward_shape = real

        run()
        outs[tag] = (gx, *grads)
        calls[tag] = [run]
    # exp_bulk_bwd.py's kernel (rows strided over a grid of the resident blocks, int column indices, the column sum
    # launched after it, not as a dependent launch), where it fits
    if ln and cols <= 8192:
        nt, minb = (256, 2) if cols <= 4096 else (512, 1)
        expr = f"norm_bwd_bulk<{_runtime.CTYPE[dtype]}, 2, 2, true, {nt}, {minb}>"
        k = exp_bulk_bwd.module([expr]).kernel(expr)
        smem = 4 * cols * dtype.itemsize + 16 + 512
        grid = k.occupancy(nt, smem) * torch.cuda.get_device_properties(0).multi_processor_count
        part = torch.empty(2, grid, cols, device="cuda")
        gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
        column_sum = _runtime.kernel("norms", f"kk_column_sum<{_runtime.CTYPE[dtype]}>")

        def run_exp():
            k.launch(grid, nt, (g, x, w, mean, rstd, gx, part[0], part[1], rows, cols), shared_mem=smem)
            column_sum.launch((_runtime.cdiv(cols, 32), 2), _runtime.BLOCK, (part, gw, gb, grid, cols))

        run_exp()
        outs["exp_bulk_bwd kernel"] = (gx, gw, gb)
        calls["exp_bulk_bwd kernel"] = [run_exp]
    for tag, got in outs.items():
        same = all(torch.equal(a, e) for a, e in zip(got, want))
        err = max((a.float() - e.float()).abs().max().item() for a, e in zip(got, want))
        print(f"  {tag}: {'bitwise the op' if same else f'max abs difference from the op {err:.3e}'}")
    out = []
    op = name[3:-4] + "_backward"
    for tag, us, pct, _ in interleaved(calls, reps, 3 * x.nbytes, copy):
        print(f"{op} {str(dtype)[6:]:8s} {rows}x{cols:<5d} {tag:24s} {us:8.1f} us {pct:5.1f}%", flush=True)
        out.append(dict(op=op, dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", choices=sorted(CASES), default="held")
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    assert _runtime.has_clusters(0), "the bulk kernels need sm_90+"
    copy = copy_bandwidth()
    write_results(a.out, copy, [r for case in CASES[a.cases] for r in time_case(*case, copy, a.reps)])


if __name__ == "__main__":
    main()
