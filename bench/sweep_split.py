# ruff: noqa: B023, E731  (each lambda is timed before the loop moves on)
"""Launch-shape sweep for norm rows split over a thread-block cluster (sm_90+), at 8192 x 65536.

Each variant is launched straight through Kernel.launch: threads per CTA (R), CTAs per row (the cluster)
and the grid (forwards: one row per cluster, or m x the resident clusters looping over rows; backwards:
the resident clusters, one chunk of rows each). Every variant's
output is checked against the shipped op's; CUDA-event medians. Writes JSON with --out.
"""

import argparse

import torch
from sweep_common import guarded, norm_forward, source_variant, write_results

from kernelkit.bench import _gpu_median_ms, copy_bandwidth
from kernelkit.ops import norms
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, kernel, pow2ceil, resident_blocks, row_cache_bytes

ROWS, COLS = 8192, 65536


def median_us(fn, reps=20):
    return _gpu_median_ms([fn], reps=reps, warmup=3) * 1e3


def close(a, b):
    return torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def forward(name, dtype, results):
    lib, args, eps, y, _, nbytes = norm_forward(name, dtype, ROWS, COLS)
    ref = lib()[0].clone()
    case = f"{name} {str(dtype)[6:]}"
    out = [("shipped", median_us(lib))]
    full = norms._FWD_PACKS[dtype]
    # (register packs per thread, minimum blocks per SM): the shipped fit, then half the packs (twice the
    # CTAs per row) at 64 and at 40 registers (3 blocks per SM; check_compile: no spills).
    for np_, minb in ((full, 2), (full // 2, 2), (full // 2, 3)):
        k = kernel("norms", f"{name}<{CTYPE[dtype]}, false, {np_}, {minb}, true>")
        for rt in (512, 256):
            ctas = cdiv(COLS, rt * np_ * VEC[dtype])
            if ctas > 8:
                continue
            smem = norms.split_param_bytes(name, np_) * rt
            clusters = k.max_active_clusters((rt, 1), (1, ctas, 1), smem)
            grids = [("per row", ROWS)] if np_ == full else []
            for label, grid in grids + [(f"persistent x{m}", m * clusters) for m in (1, 2)]:
                go = lambda: k.launch((grid, ctas), (rt, 1), (*args, ROWS, COLS, eps), smem, cluster=(1, ctas, 1))
                y.zero_()
                go()
                ok = close(y, ref)
                label = f"NP {np_} minb {minb} R {rt} x {ctas} CTAs, {label} ({grid})" + ("" if ok else " WRONG")
                out.append((label, median_us(go)))
    # One block per row streaming the tail twice (TAIL kernels), its first pass caching what fits in dynamic
    # shared memory for the later passes (kernels/norms.cu RowCache); "no cache" re-reads it all from L2.
    nv = COLS // VEC[dtype]
    for np_, minb, cached in ((full, 1, False), (full, 1, True), (full, 2, True), (full // 2, 2, True)):
        k = kernel("norms", f"{name}<{CTYPE[dtype]}, true, {np_}, {minb}>")
        smem = row_cache_bytes(k, 0, nv - np_ * 512, 16) if cached else 0
        grid = resident_blocks(k, 512, 0, smem)
        go = lambda: k.launch(grid, (512, 1), (*args, ROWS, COLS, eps), smem)
        y.zero_()
        go()
        ok = close(y, ref)
        what = f"{smem // 1024} KB row cache" if cached else "no cache"
        label = f"tail NP {np_} minb {minb}, {what}, {grid} blocks" + ("" if ok else " WRONG")
        out.append((label, median_us(go)))
    report(case, out, nbytes, results)


def backward(name, dtype, results, rows=ROWS, cols=COLS, fits=None, packs=None):
    """The backward of ``name`` at rows x cols with the weight sums (and weights) in registers or shared memory
    (SMEM) at 1 or 2 blocks per SM: rows split over a cluster where one 512-thread block cannot hold them, else
    one row per block (Y = 1) on a grid of the resident blocks. ``packs``: register packs per tensor (default the
    shipped _BWD_PACKS)."""
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    g = torch.randn_like(x)
    w = torch.randn(cols, dtype=dtype, device="cuda")
    b = torch.randn(cols, dtype=dtype, device="cuda")
    if name == "kk_rms_norm_bwd":
        _, rstd = norms._rms_norm(x, w, 1e-6)
        lib = lambda: norms.rms_norm_backward(g, x, w, rstd)
        head = (g, x, w, rstd, 0)
        nparts = 1
    elif name == "kk_add_rms_norm_bwd":  # kk_rms_norm_bwd with EXTRA (the residual's gradient)
        gr = torch.randn_like(x)
        _, rstd = norms._rms_norm(x, w, 1e-6)
        lib = lambda: norms.add_rms_norm_backward(g, gr, x, w, rstd)
        head = (g, x, w, rstd, gr)
        nparts = 1
    else:
        _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
        lib = lambda: norms.layer_norm_backward(g, x, w, mean, rstd)
        head = (g, x, w, mean, rstd)
        nparts = 2
    ref, ref_w = (t.clone() for t in lib()[:2])
    case = f"{name} {str(dtype)[6:]} {rows}x{cols}"
    out = [("shipped", median_us(lib))]
    gx = torch.empty_like(x)
    np_ = packs or norms._BWD_PACKS[dtype]
    extra = {"kk_rms_norm_bwd": "false, ", "kk_add_rms_norm_bwd": "true, "}.get(name, "")
    kname = "kk_layer_norm_bwd" if name == "kk_layer_norm_bwd" else "kk_rms_norm_bwd"
    e = np_ * VEC[dtype]
    split = cols > 512 * e
    ctas = cdiv(cols, 512 * e) if split else 1
    rt = 512 if split else pow2ceil(cdiv(cols, e))
    # (weights and sums in shared memory: 0 none, 1 the sums, 2 the weights too; minimum blocks per SM; the
    # next row loaded ahead, or None for the kernel's default).
    if fits is None:
        fits = [(0, 1, None)] + [(sm, mb, pf) for sm in (1, 2) for mb in (1, 2) for pf in (True, False)]
    for smem, minb, pf in fits:
        expr = f"{kname}<{CTYPE[dtype]}, false, {np_}, {minb}, {extra}{str(split).lower()}, {smem}>"
        if pf is None:
            k = kernel("norms", expr)
        else:
            flip = ((r"SMEM \? MINB == 1 \|\| kSmemRoomForNextRow :", f"SMEM ? {str(pf).lower()} :"),)
            k = source_variant("norms", flip).kernel(expr)
        dyn = norms.bwd_slot_bytes(kname, dtype, smem, np_, name == "kk_add_rms_norm_bwd" and not split) * rt
        if split:
            chunks = k.max_active_clusters((rt, 1), (1, ctas, 1), dyn)
            go = lambda: k.launch((chunks, ctas), (rt, 1), bargs, dyn, cluster=(1, ctas, 1))
        else:
            chunks = resident_blocks(k, rt, 0, dyn)
            go = lambda: k.launch(chunks, (rt, 1), bargs, dyn)
        rpc = cdiv(rows, chunks)
        chunks = cdiv(rows, rpc)  # the chunks the kernel writes (the grid may have more blocks than chunks)
        parts = [torch.empty(chunks, cols, dtype=torch.float32, device="cuda") for _ in range(nparts)]
        bargs = (*head, gx, *parts, rows, cols, rpc)
        gx.zero_()
        go()
        ok = close(gx, ref) and close(parts[0].sum(0), ref_w)
        what = f"packs {np_} smem {smem} minb {minb} prefetch {'default' if pf is None else pf}"
        label = f"{what}: R {rt} x {ctas} CTAs, {chunks} chunks, no column sum" + ("" if ok else " WRONG")
        out.append((label, median_us(go)))
    report(case, out, (4 if name == "kk_add_rms_norm_bwd" else 3) * x.nbytes, results)


def report(case, out, nbytes, results):
    copy = copy_bandwidth()
    print(f"{case}  (copy {copy:.0f} GB/s)")
    for label, us in out:
        pct = 100 * nbytes / (us * 1e-6) / 1e9 / copy
        print(f"    {label:70s} {us:8.1f} us  {pct:5.1f}%")
        results.append({"case": case, "variant": label, "us": us, "pct_copy": pct})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--backward-only", action="store_true")
    ap.add_argument(
        "--held-backward",
        action="store_true",
        help="only the backwards of rows one block holds (32768 x 4096 and 8192), registers against shared memory",
    )
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float32"])
    ap.add_argument("--names", nargs="*", default=["kk_rms_norm_bwd", "kk_add_rms_norm_bwd", "kk_layer_norm_bwd"])
    ap.add_argument(
        "--all-fits", action="store_true", help="held backwards: every (SMEM, minimum blocks, prefetch), as the split"
    )
    ap.add_argument(
        "--packs", type=int, help="backwards: the fits at these register packs per tensor, after the shipped one"
    )
    args = ap.parse_args()
    dtypes = [getattr(torch, d) for d in args.dtypes]
    results = []
    if args.held_backward:
        for dtype in dtypes:
            for name in args.names:
                for cols in (4096, 8192):
                    if args.packs:  # the shipped kernel alone, then every fit at args.packs
                        guarded(name, lambda: backward(name, dtype, results, 32768, cols, [(0, 1, None)]))
                        guarded(name, lambda: backward(name, dtype, results, 32768, cols, None, args.packs))
                        continue
                    fits = None if args.all_fits else [(0, 1, None), (1, 1, None), (2, 2, None)]
                    guarded(name, lambda: backward(name, dtype, results, 32768, cols, fits))
        write_results(args.out, copy_bandwidth(), results)
        return
    for dtype in dtypes:
        for name in () if args.backward_only else ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd"):
            forward(name, dtype, results)
        for name in () if args.forward_only else args.names:
            if args.packs:  # the shipped kernel alone, then the shared-memory fits at args.packs
                guarded(f"{name} {dtype}", lambda: backward(name, dtype, results, fits=[(0, 1, None)]))
                fits = [(sm, 1, pf) for sm in (1, 2) for pf in (None, False)]
                guarded(f"{name} {dtype}", lambda: backward(name, dtype, results, fits=fits, packs=args.packs))
                continue
            guarded(f"{name} {dtype}", lambda: backward(name, dtype, results))
    if args.out:
        write_results(args.out, copy_bandwidth(), results)


if __name__ == "__main__":
    main()
