"""Which rows take cross-entropy's gradient in its forward (ops/softmax.py _HELD_CE_FITS), and at which fit: the
launches of a mean loss's forward and backward as the eager autograd path makes them (_ce_reduced_with_grad, then
_ce_bwd_cuda keeping the held gradient at a loss gradient of 1), with each candidate (register packs per thread,
minimum blocks per SM) of kk_cross_entropy_held against the kernels apart, timed in interleaved rounds
(sweep_common.interleaved); % of copy for 2N bytes (one read of the logits, one write of the gradient). Called
without torch's autograd engine, whose host time (~240 us per forward and torch.autograd.grad on the H200 machine,
h200-2026-11-24-s34/ce-fused-fits-autograd.log) would hide the kernels' at these sizes.

    python3 bench/exp_ce_fused_fits.py --out ce_fused_fits.json [--wide] [--rows 8192]
"""

import importlib

import torch
from sweep_common import interleaved, run_cases

from kernelkit.ops._runtime import CTYPE, VEC, RowShape, cdiv, kernel, split_shape

S = importlib.import_module("kernelkit.ops.softmax")
SHIPPED = S._held_ce_shape


class Ctx:
    held_grad = None


# (register packs per thread, minimum blocks per SM) per element size: one block per row, and rows split over a
# cluster (sm_90+).
CANDIDATES = {2: [(4, 2), (8, 2), (8, 1), (16, 1)], 4: [(4, 2), (8, 2), (8, 1)]}
SPLIT_CANDIDATES = {2: [(8, 2), (4, 2), (8, 1)], 4: [(8, 2), (4, 2), (8, 1)]}
CASES = [
    (dtype, cols)
    for dtype, widths in (
        (torch.bfloat16, (1024, 2048, 4096, 8192, 16384, 32000, 32768, 65536, 131072, 262144)),
        (torch.float32, (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)),
    )
    for cols in widths
]
WIDE = {2: 65536, 4: 32768}  # --wide: these columns and more


def candidates(dtype, cols, dev):
    """{tag: launch shape (None: the kernels apart)} for rows of ``cols``."""
    shapes = {"kernels apart": None}
    nv, ct = cols // VEC[dtype], CTYPE[dtype]
    for packs, minb in CANDIDATES[dtype.itemsize]:
        threads = cdiv(cdiv(nv, packs), 32) * 32
        if threads <= 512:
            k = kernel("softmax", f"kk_cross_entropy_held<{ct}, {packs}, {minb}>")
            shapes[f"held P={packs} minb={minb} R={threads}"] = RowShape(k, threads, 1, 1 << 62)
    for packs, minb in SPLIT_CANDIDATES[dtype.itemsize]:
        if nv > packs * 512:
            expr = f"kk_cross_entropy_held<{ct}, {packs}, {minb}, true>"
            shape = split_shape("softmax", expr, packs, dtype, cols, dev, fixed_geometry=True)
            if shape:
                shapes[f"split P={packs} minb={minb} x{shape.ctas} R={shape.block[0]}"] = shape
    return shapes


def time_case(dtype, cols, copy, reps, wide=False, rows=None):
    if wide and cols < WIDE[dtype.itemsize]:
        return []
    rows = rows or max(2048, min(32768, 2**27 // cols))
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    t[::7] = -100  # some rows ignored, as padding is
    loss, one = torch.empty((), device="cuda", dtype=dtype), torch.ones((), device="cuda", dtype=dtype)
    stats, div = torch.empty(rows, 2, device="cuda"), torch.empty((), device="cuda")
    apart = torch.empty_like(x)

    def step(shape):
        def call():
            S._held_ce_shape = lambda dtype, cols, dev: shape
            ctx = Ctx()
            S._ce_reduced_with_grad(ctx, x, t, -100, 0.0, True, None, None, loss, stats, div)
            grad = ctx.held_grad if shape else apart
            S._ce_bwd_cuda(x, t, stats, one, -100, 0.0, div, grad, keep=shape is not None)

        return [call]

    shapes = candidates(dtype, cols, x.get_device())
    calls = {tag: step(shape) for tag, shape in shapes.items()}
    shipped = SHIPPED(dtype, cols, x.get_device())
    out = []
    try:
        results = interleaved(calls, reps, 2 * x.nbytes, copy)
    finally:
        S._held_ce_shape = SHIPPED
    for tag, us, pct, host in results:
        same = shapes[tag] is shipped or (shipped and shapes[tag] and shapes[tag].kernel is shipped.kernel)
        mark = " (shipped)" if same or (shipped is None and shapes[tag] is None) else ""
        print(f"{str(dtype)[6:]:8s} {rows}x{cols:<6d} {tag:34s} {us:8.1f} us {pct:5.1f}% of copy{mark}", flush=True)
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct, host_us=host))
    return out


if __name__ == "__main__":
    options = {
        "--wide": dict(action="store_true", help="only the widest rows"),
        "--rows": dict(type=int, help="rows of every case (default: 2^27 / columns, 2048 to 32768)"),
    }
    run_cases(CASES, time_case, reps=40, options=options)
