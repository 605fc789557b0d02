# ruff: noqa: B023, E731  (each lambda is timed before the loop moves on)
"""Launch-shape sweep for the row kernels (norms, softmax, cross-entropy) at the issue-5 sizes.

Times each kernel straight through Kernel.launch under several launch shapes and compile variants
(minimum blocks per SM in __launch_bounds__, packs per thread), checks every variant's output against
the shipped op's, and prints the best shape per case next to the shipped one. CUDA-event medians; the
inputs (>= 128 MB) do not fit in L2. Writes JSON with --out.
"""

import argparse
import importlib

import torch
import torch.nn.functional as F
from sweep_common import guarded, norm_forward, source_variant, write_results

from kernelkit import _native
from kernelkit.bench import _add_rms_norm_reference, _gpu_median_ms, _rms_norm_reference, copy_bandwidth
from kernelkit.ops import norms
from kernelkit.ops._runtime import BLOCK, CTYPE, VEC, VECTOR, cdiv, kernel, resident_blocks, sm_count

SIZES = [(32768, 4096), (32768, 8192), (8192, 65536)]
softmax = importlib.import_module("kernelkit.ops.softmax")  # the package exports a function of that name


def median_us(fn, reps=25):
    return _gpu_median_ms([fn], reps=reps, warmup=3) * 1e3


def close(a, b):
    return torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def sweep_norm_fwd(name, dtype, rows, cols, results):
    lib, args, eps, y, _, nbytes = norm_forward(name, dtype, rows, cols)
    ref = lib()[0]
    case = f"{name} {str(dtype)[6:]} {rows}x{cols}"
    out = [("shipped", median_us(lib))]
    vec = VEC[dtype]
    for np_ in sorted({norms._FWD_PACKS[dtype], 4}):
        e = np_ * vec
        r0 = min(512, max(32, 1 << (cdiv(cols, e) - 1).bit_length()))
        tail = cols > 512 * e
        for minb in (None, 1):  # the kernel's default bound (2; 1 with a tail), and 1 (128 registers)
            if tail and minb:
                continue
            try:
                bound = "" if minb is None else f", {minb}"
                k = kernel("norms", f"{name}<{CTYPE[dtype]}, {str(tail).lower()}, {np_}{bound}>")
            except Exception as ex:  # a variant that does not compile is reported, not fatal
                out.append((f"NP{np_} lb{minb} compile error {str(ex)[:60]}", float("nan")))
                continue
            for rr in sorted({r0, min(512, 2 * r0)}):
                wave = resident_blocks(k, rr, 0)
                for gname, grid in (("full", rows), ("1wave", wave), ("2wave", 2 * wave), ("4wave", 4 * wave)):
                    grid = min(grid, rows)
                    fn = lambda: k.launch(grid, (rr, 1), (*args, rows, cols, eps))
                    fn()
                    ok = close(y, ref)
                    t = median_us(fn)
                    out.append((f"NP{np_} lb{minb} R{rr} grid {gname}={grid}{'' if ok else ' WRONG'}", t))
    report(case, out, nbytes, results)


def sweep_norm_bwd(name, dtype, rows, cols, results):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    g = torch.randn_like(x)
    w = torch.randn(cols, dtype=dtype, device="cuda")
    gx = torch.empty_like(x)
    ln = name == "kk_layer_norm_bwd"
    if ln:
        _, mean, rstd = norms._layer_norm(x, w, w, 1e-5)
        lib = lambda: norms.layer_norm_backward(g, x, w, mean, rstd)
        head = (g, x, w, mean, rstd)
    else:
        _, rstd = norms._rms_norm(x, w, 1e-6)
        lib = lambda: norms.rms_norm_backward(g, x, w, rstd)
        head = (g, x, w, rstd, 0)
    ref = lib()[0]
    case = f"{name} {str(dtype)[6:]} {rows}x{cols}"
    out = [("shipped", median_us(lib))]
    cs = kernel("norms", f"kk_column_sum<{CTYPE[dtype]}>")
    dw = torch.empty_like(w)
    vec = VEC[dtype]
    for np_ in sorted({norms._BWD_PACKS[dtype], 4}):
        e = np_ * vec
        r0 = min(512, max(32, 1 << (cdiv(cols, e) - 1).bit_length()))
        fits = cols <= 512 * e
        for tail, minb in ((True, 1), (False, 1), (False, 2)):
            if not tail and not fits:
                continue
            try:
                k = kernel("norms", f"{name}<{CTYPE[dtype]}, {str(tail).lower()}, {np_}, {minb}>")
            except Exception as ex:  # a variant that does not compile is reported, not fatal
                out.append((f"NP{np_} tail {tail} lb{minb} compile error {str(ex)[:60]}", float("nan")))
                continue
            wave = resident_blocks(k, r0, 0)
            for mult in (1, 2):
                chunks = min(rows, mult * wave)
                rpc = cdiv(rows, chunks)
                chunks = cdiv(rows, rpc)
                parts = [torch.empty((chunks, cols), dtype=torch.float32, device="cuda") for _ in range(2 if ln else 1)]

                def fn():
                    k.launch(chunks, (r0, 1), (*head, gx, *parts, rows, cols, rpc))
                    for p in parts:
                        cs.launch(cdiv(cols, BLOCK), BLOCK, (p, dw, 0, chunks, cols))

                fn()
                ok = close(gx, ref)
                label = f"NP{np_} tail {tail} lb{minb} R{r0} occ {wave // sm_count(0)} chunks {mult}wave={chunks}"
                out.append((label + ("" if ok else " WRONG"), median_us(fn)))
    report(case, out, 3 * x.nbytes, results)


# Forward fits: (packs, min blocks per SM) by element size; R = the threads that hold the row, one row per
# block. torch.compile's float32 kernels run 512 threads per row at full occupancy (ncu, session 9).
FWD_FITS = {2: [(4, 1), (2, 2), (2, 3), (2, 4), (1, 4)], 4: [(4, 1), (4, 2), (4, 3), (2, 2), (2, 3), (2, 4)]}
# --sub (regex, replacement) pairs: the fits sweep times kernels from norms.cu with them applied.
NORMS_SUBS: list = []


def sweep_norm_fwd_fits(name, dtype, rows, cols, results):
    lib, args, eps, y, inputs, nbytes = norm_forward(name, dtype, rows, cols)
    ref = lib()[0].clone()
    case = f"{name} fits {str(dtype)[6:]} {rows}x{cols}"
    out = [("shipped", median_us(lib))]
    shape = norms._forward_shape(name, dtype, cols, 0, VECTOR)
    launch = lambda: shape.launch(cdiv(rows, shape.per_block), (*args, rows, cols, eps))
    out.append((f"shipped launch only, block {shape.block}", median_us(launch)))
    for np_, minb in FWD_FITS[dtype.itemsize]:
        r, _, tail = norms._row_block(np_, dtype, cols, True)
        if tail:
            continue
        expr = f"{name}<{CTYPE[dtype]}, false, {np_}, {minb}>"
        k = source_variant("norms", NORMS_SUBS).kernel(expr) if NORMS_SUBS else kernel("norms", expr)
        fn = lambda: k.launch(rows, (r, 1), (*args, rows, cols, eps))
        y.zero_()
        fn()
        ok = close(y, ref)
        out.append((f"NP{np_} minb {minb} R{r}{'' if ok else ' WRONG'}", median_us(fn)))
    reference = {
        "kk_rms_norm_fwd": _rms_norm_reference,
        "kk_add_rms_norm_fwd": _add_rms_norm_reference,
        "kk_layer_norm_fwd": lambda x, w, b: F.layer_norm(x, (cols,), w, b, 1e-5),
    }[name]
    compiled = torch.compile(reference)
    compiled(*inputs)
    out.append(("torch.compile (reference)", median_us(lambda: compiled(*inputs))))
    report(case, out, nbytes, results)


def sweep_softmax(name, dtype, rows, cols, results):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    y = torch.softmax(x.float(), -1).to(dtype)
    g = torch.randn_like(x)
    o = torch.empty_like(x)
    if name == "kk_softmax_fwd":
        lib, args, nbytes, packs, tensors = (lambda: softmax._softmax(x)), (x, o), 2 * x.nbytes, 4, 1
    else:
        lib, args, nbytes, packs, tensors = (lambda: softmax.softmax_backward(g, y)), (g, y, o), 3 * x.nbytes, 2, 2
    ref = lib()
    case = f"{name} {str(dtype)[6:]} {rows}x{cols}"
    out = [("shipped", median_us(lib))]
    nv = cols // VEC[dtype]
    for minb in (None, 2):
        # minimum blocks per SM in __launch_bounds__ (None: the kernel's default)
        bound = "" if minb is None else (f", {minb}" if name == "kk_softmax_fwd" else f", 2, {minb}")
        k = kernel("softmax", f"{name}<{CTYPE[dtype]}{bound}>")
        for block in (128, 256, 512):
            if nv <= packs * 32:
                continue
            smem = 0
            if nv > packs * block:
                attrs = k.attributes(0)
                room = _native.device_info(0)["max_shared_memory_per_block_optin"] - attrs["shared_size_bytes"]
                smem = min(room, (nv - packs * block) * 16 * tensors) // (16 * tensors) * 16 * tensors
            wave = resident_blocks(k, block, 0, smem)
            for gname, grid in (("full", rows), ("1wave", wave), ("2wave", 2 * wave), ("4wave", 4 * wave)):
                grid = min(grid, rows)
                fn = lambda: k.launch(grid, block, (*args, rows, cols), smem)
                fn()
                ok = close(o, ref)
                out.append((f"lb{minb} B{block} smem{smem} grid {gname}={grid}{'' if ok else ' WRONG'}", median_us(fn)))
    report(case, out, nbytes, results)


def sweep_ce(name, dtype, rows, cols, results):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    t = torch.randint(0, cols, (rows,), device="cuda")
    loss, lse = softmax._cross_entropy(x, t, -100, 0.0)
    o = torch.empty_like(x)
    l2, s2 = torch.empty_like(loss), torch.empty_like(lse)
    if name == "kk_cross_entropy_fwd":
        lib, args, nbytes, got = (lambda: softmax._cross_entropy(x, t, -100, 0.0)), (x, t, l2, s2), x.nbytes, l2
        ref = loss
    else:
        lib = lambda: softmax.cross_entropy_backward(x, t, lse, loss, -100, 0.0)
        args, nbytes, got = (x, t, lse, loss, 1, 0, o), 2 * x.nbytes, o
        ref = lib()
    case = f"{name} {str(dtype)[6:]} {rows}x{cols}"
    out = [("shipped", median_us(lib))]
    nv = cols // VEC[dtype]
    k = kernel("softmax", f"{name}<{CTYPE[dtype]}>")
    block, per = (256, 8) if nv <= 1024 else (512, 1)
    wave = resident_blocks(k, block, 0)
    for gname, grid in (("full", cdiv(rows, per)), ("1wave", wave), ("2wave", 2 * wave), ("4wave", 4 * wave)):
        grid = min(grid, cdiv(rows, per))
        fn = lambda: k.launch(grid, block, (*args, rows, cols, -100, 0.0))
        fn()
        ok = close(got, ref)
        out.append((f"B{block} grid {gname}={grid}{'' if ok else ' WRONG'}", median_us(fn)))
    report(case, out, nbytes, results)


COPY = [None]


def report(case, out, nbytes, results):
    best = min((o for o in out if "WRONG" not in o[0] and o[1] == o[1]), key=lambda o: o[1])
    pct = lambda us: 100 * nbytes / (us * 1e-6) / 1e9 / COPY[0]
    shipped = f"shipped {out[0][1]:.0f} us ({pct(out[0][1]):.0f}%)"
    print(f"{case}: {shipped}, best {best[1]:.0f} us ({pct(best[1]):.0f}%) {best[0]}", flush=True)
    for label, us in out[1:]:
        print(f"    {label:60s} {us:8.1f} us {pct(us):5.1f}%")
    results.append({"case": case, "bytes": nbytes, "configs": [{"config": c, "us": u} for c, u in out]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*", default=["norm_bwd", "softmax", "ce"])
    ap.add_argument("--kernels", nargs="*", help="substrings of the kernel names to sweep (default: all)")
    ap.add_argument("--sub", nargs=2, action="append", default=[], metavar=("REGEX", "REPLACEMENT"))
    a = ap.parse_args()
    NORMS_SUBS[:] = [tuple(s) for s in a.sub]
    COPY[0] = copy_bandwidth()
    print(f"copy {COPY[0]:.0f} GB/s", flush=True)
    results = []
    for dtype in (torch.bfloat16, torch.float32):
        for rows, cols in SIZES:
            jobs = []
            if "norm_fwd" in a.only:
                jobs += [(sweep_norm_fwd, n) for n in ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd")]
            if "norm_bwd" in a.only:
                jobs += [(sweep_norm_bwd, n) for n in ("kk_rms_norm_bwd", "kk_layer_norm_bwd")]
            if "norm_fwd_fits" in a.only and cols <= 8192:
                names = ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd")
                jobs += [(sweep_norm_fwd_fits, n) for n in names]
            if "softmax" in a.only:
                jobs += [(sweep_softmax, n) for n in ("kk_softmax_fwd", "kk_softmax_bwd")]
            if "ce" in a.only:
                jobs += [(sweep_ce, n) for n in ("kk_cross_entropy_fwd", "kk_cross_entropy_bwd")]
            jobs = [(fn, n) for fn, n in jobs if not a.kernels or any(k in n for k in a.kernels)]
            for fn, n in jobs:
                guarded(f"{n} {dtype} {rows}x{cols}", lambda: fn(n, dtype, rows, cols, results))
    if a.out:
        write_results(a.out, COPY[0], results)


if __name__ == "__main__":
    main()
