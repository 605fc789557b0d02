"""Experiment: the 16-bit LayerNorm backward's launches timed without the op's Python (ops/norms.py
_launch_backward on preallocated outputs), for the bulk-copy kernel (kk_layer_norm_bwd_bulk) at two and three stages,
and the register-prefetch kernel it replaced (the shape the host picks without sm_90's clusters).

Timed through the op, these cells can be host-bound on the GPU machine (a backward call's Python took 150-320 us
there, against 215-450 us of GPU time): the launches alone are GPU-bound.

    python3 bench/exp_ln_bwd_launch.py --out ln_bwd_launch.json
"""

from __future__ import annotations

import exp_bulk_bwd
import torch
from sweep_common import interleaved, run_cases

from kernelkit.ops import _runtime, norms

# (tag, shared-memory stages of the bulk kernel; None: the register-prefetch kernel). The session-24 logs came from
# earlier forms of this script, which made variants by substituting kernels/norms.cu: the first bulk kernel also took
# chunks of consecutive rows, or summed its rows with block_row_sum's two barriers (kBulkStrided, kBulkOneBarrier in
# h200-2026-11-23-s24/ln-bwd-launch2.log), both slower and no longer in the source; ln-bwd-launch3.log ran when the
# kernel's stages were a template default of 2, so its "bulk, 3 stages" row is the kernel as shipped.
VARIANTS = [("bulk", 3), ("bulk, 2 stages", 2), ("register prefetch", None)]
CASES = [(dtype, 32768, cols) for dtype in (torch.bfloat16, torch.float16) for cols in (4096, 8192)]


def _launcher(stages, dtype, cols, dev):
    """A stand-in for norms._backward_shape that returns the bulk kernel's shape at ``stages`` (None: the shape the host
    picks on a GPU without clusters) for 16-byte LayerNorm rows of ``cols``, compiled and bound now."""
    norms._backward_shape.cache_clear()
    real_clusters, real_stages = norms.has_clusters, norms._BWD_BULK_STAGES
    try:
        if stages is None:
            norms.has_clusters = lambda dev: False
        else:
            norms._BWD_BULK_STAGES = stages
        shape = norms._backward_shape("kk_layer_norm_bwd", dtype, cols, dev, True, False)
    finally:
        norms.has_clusters, norms._BWD_BULK_STAGES = real_clusters, real_stages
        norms._backward_shape.cache_clear()
    return lambda *key: shape


def time_case(dtype, rows, cols, copy, reps):
    x, g = (torch.randn(rows, cols, dtype=dtype, device="cuda") for _ in range(2))
    w, b = (torch.randn(cols, dtype=dtype, device="cuda") for _ in range(2))
    _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
    want = norms.layer_norm_backward(g, x, w, mean, rstd)
    head = (g, x, w, mean, rstd)
    calls, outs = {}, {}
    for tag, stages in VARIANTS:
        pin = _launcher(stages, dtype, cols, x.get_device())
        gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)

        def run(pin=pin, gx=gx, gw=gw, gb=gb):
            real = norms._backward_shape
            norms._backward_shape = pin
            try:
                norms._launch_backward("kk_layer_norm_bwd", x, head, gx, (gw, gb), mean=mean, rstd=rstd)
            finally:
                norms._backward_shape = real

        run()
        outs[tag] = (gx, gw, gb)
        calls[tag] = [run]
    # exp_bulk_bwd.py's kernel (rows strided over a grid of the resident blocks, int column indices, the column sum
    # launched after it, not as a dependent launch), where it fits
    if cols <= 8192:
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
    for tag, us, pct, _ in interleaved(calls, reps, 3 * x.nbytes, copy):
        print(f"layer_norm_backward {str(dtype)[6:]:8s} {rows}x{cols:<5d} {tag:24s} {us:8.1f} us {pct:5.1f}%")
        out.append(dict(dtype=str(dtype)[6:], size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


def main() -> None:
    torch.manual_seed(0)
    assert _runtime.has_clusters(0), "the bulk kernel needs sm_90+"
    run_cases(CASES, time_case, reps=30)


if __name__ == "__main__":
    main()
