"""Which rows take cross-entropy's gradient in its forward (ops/softmax.py _HELD_CE_FITS), and at which fit: the
launches of a mean loss's forward and backward as the eager autograd path makes them (_ce_reduced_with_grad, then
_ce_bwd_cuda keeping the held gradient at a loss gradient of 1), with each candidate (register packs per thread,
minimum blocks per SM) of kk_cross_entropy_held against the kernels apart, timed in interleaved rounds
(sweep_common.interleaved); % of copy for 2N bytes (one read of the logits, one write of the gradient). Called
without torch's autograd engine, whose host time (~240 us per forward and torch.autograd.grad on the H200 machine,
h200-2026-11-24-s34/ce-fused-fits-autograd.log) would hide the kernels' at these sizes.

    python3 bench/exp_ce_fused_fits.py --out ce_fused_fits.json
"""

import importlib

import torch
from sweep_common import interleaved, run_cases

from kernelkit.ops._runtime import CTYPE, VEC, cdiv

S = importlib.import_module("kernelkit.ops.softmax")
SHIPPED = S._held_ce_shape


class Ctx:
    held_grad = None


CANDIDATES = {2: [(4, 2), (8, 2), (8, 1), (16, 1)], 4: [(4, 2), (8, 2), (8, 1)]}
CASES = [
    (dtype, cols)
    for dtype, widths in (
        (torch.bfloat16, (1024, 2048, 4096, 8192, 16384, 32000, 32768, 65536)),
        (torch.float32, (512, 1024, 2048, 4096, 8192, 16384)),
    )
    for cols in widths
]


def time_case(dtype, cols, copy, reps):
    rows = 32768 if cols <= 16384 else 16384 if cols <= 32768 else 8192
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (rows,), device="cuda")
    t[::7] = -100  # some rows ignored, as padding is
    nv = cols // VEC[dtype]
    loss, one = torch.empty((), device="cuda", dtype=dtype), torch.ones((), device="cuda", dtype=dtype)
    stats, div = torch.empty(rows, 2, device="cuda"), torch.empty((), device="cuda")
    apart = torch.empty_like(x)

    def step(shape):
        def call():
            S._held_ce_shape = lambda dtype, cols: shape
            ctx = Ctx()
            S._ce_reduced_with_grad(ctx, x, t, -100, 0.0, True, None, loss, stats, div)
            grad = ctx.held_grad if shape else apart
            S._ce_bwd_cuda(x, t, stats, one, -100, 0.0, div, grad, keep=shape is not None)

        return [call]

    shapes = {"kernels apart": None}
    for packs, minb in CANDIDATES[dtype.itemsize]:
        threads = cdiv(cdiv(nv, packs), 32) * 32
        if cols % VEC[dtype] == 0 and threads <= 512:
            shapes[f"held P={packs} minb={minb} R={threads}"] = (
                f"kk_cross_entropy_held<{CTYPE[dtype]}, {packs}, {minb}>",
                threads,
            )
    calls = {tag: step(shape) for tag, shape in shapes.items()}
    shipped = SHIPPED(dtype, cols)
    out = []
    try:
        results = interleaved(calls, reps, 2 * x.nbytes, copy)
    finally:
        S._held_ce_shape = SHIPPED
    for tag, us, pct, host in results:
        mark = " (shipped)" if shapes[tag] == shipped else ""
        print(f"{str(dtype)[6:]:8s} {rows}x{cols:<6d} {tag:30s} {us:8.1f} us {pct:5.1f}% of copy{mark}", flush=True)
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct, host_us=host))
    return out


if __name__ == "__main__":
    run_cases(CASES, time_case, reps=40)
