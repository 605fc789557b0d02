# ruff: noqa: B023, E731  (each lambda is timed before the loop moves on)
"""Launch-shape sweep for the issue-5 kernels that trail torch.compile or Liger at (32768, 4096) and
(32768, 8192): softmax forward and backward (register packs per thread, launch bounds, block, grid),
swiglu (packs per thread, block, grid) and rope (items per thread, grid), next to torch.compile and
Liger-Kernel, and the shipped cross-entropy backward.

Each variant runs through the shipped op with its launch-shape function swapped for the variant's,
so the op's checks and argument handling stay the same; its output is checked against the shipped
op's before it is timed (CUDA-event medians). Writes JSON with --out.
"""

import argparse
import functools
import importlib

import torch
import torch.nn.functional as F
from sweep_common import guarded, source_variant, write_results

from kernelkit.bench import _gpu_median_ms, _liger_functions, _rms_norm_reference, _rope_reference, copy_bandwidth
from kernelkit.ops._runtime import CTYPE, VEC, RowShape, cdiv, kernel, resident_blocks, row_cache_bytes, smem_optin

# the modules (kernelkit.ops exports functions of the same names)
activations = importlib.import_module("kernelkit.ops.activations")
norms = importlib.import_module("kernelkit.ops.norms")
softmax = importlib.import_module("kernelkit.ops.softmax")

SIZES = ((32768, 4096), (32768, 8192))


def median_us(fn, reps=30):
    return _gpu_median_ms([fn], reps=reps, warmup=3) * 1e3


def close(a, b):
    return torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-3)


class Swapped:
    """Module attributes replaced for the duration of a `with` block."""

    def __init__(self, module, **attrs):
        self.module, self.attrs = module, attrs

    def __enter__(self):
        self.saved = {k: getattr(self.module, k) for k in self.attrs}
        for k, v in self.attrs.items():
            setattr(self.module, k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(self.module, k, v)


def run_variants(case, nbytes, shipped, variants, check, results, copy, extra=()):
    """variants: (label, context manager factory); check(out) compares with the shipped output."""
    ref = shipped()
    ref = [t.clone() for t in (ref if isinstance(ref, (tuple, list)) else (ref,))]
    out = [("shipped", median_us(shipped))]
    for label, ctx in variants:
        try:
            with ctx():
                got = shipped()
                got = got if isinstance(got, (tuple, list)) else (got,)
                ok = all(check(g, r) for g, r in zip(got, ref))
                us = median_us(shipped)
            out.append((label + ("" if ok else " WRONG"), us))
        except Exception as ex:
            out.append((f"{label} FAILED {type(ex).__name__}: {str(ex)[:80]}", float("nan")))
    # The references last: Liger's rope rotates q and k in place.
    for label, fn in extra:
        try:
            out.append((label, median_us(fn)))
        except Exception as ex:  # a reference that fails here is reported, not fatal
            print(f"    {label} failed: {type(ex).__name__}: {str(ex)[:120]}")
    print(f"{case}  (copy {copy:.0f} GB/s)", flush=True)
    for label, us in out:
        pct = 100 * nbytes / (us * 1e-6) / 1e9 / copy
        print(f"    {label:62s} {us:8.1f} us  {pct:5.1f}%")
        results.append({"case": case, "variant": label, "us": us, "pct_copy": pct})


def softmax_shape(name, rp, maxt, minb, held=False):
    """A _softmax_shape for kernel <rp, minb, maxt, held>: blocks of ceil(nv / rp) threads (rounded to warps,
    <= maxt) one row each (a one-pass grid), the rest of the row in shared memory (held: none, the row
    fits the registers)."""

    def shape(_name, dtype, cols, dev, _path=None):
        vec = VEC[dtype] if cols % VEC[dtype] == 0 else 1
        nv = cols // vec
        pack_bytes = 16 if vec > 1 else dtype.itemsize
        h = str(held).lower()
        if name == "kk_softmax_fwd":
            expr, tensors = f"kk_softmax_fwd<{CTYPE[dtype]}, {minb}, {rp}, {maxt}, {h}>", 1
        else:
            expr, tensors = f"kk_softmax_bwd<{CTYPE[dtype]}, {rp}, {minb}, {maxt}, {h}>", 2
        k = kernel("softmax", expr)
        block = min(max(cdiv(cdiv(nv, rp), 32) * 32, 32), maxt)
        smem = row_cache_bytes(k, dev, nv - rp * block, tensors * pack_bytes)
        return RowShape(k, block, 1, 1 << 62, smem=smem)

    return shape


# (register packs, launch bounds (max threads, min blocks), rows held whole) per kernel and dtype; a
# handful, as every variant is an NVRTC compile of softmax.cu (about 8 s each on the GPU machine).
SOFTMAX_VARIANTS = {
    ("kk_softmax_fwd", 2): [
        (4, 512, 2, True),
        (8, 512, 2, True),
        (4, 512, 3, True),
        (2, 512, 3, True),
        (1, 512, 4, True),
    ],
    ("kk_softmax_fwd", 4): [(4, 512, 2, True), (8, 512, 2, True), (8, 512, 1, False)],
    ("kk_softmax_bwd", 2): [(2, 512, 1, True), (2, 512, 2, True), (4, 512, 2, True)],
    ("kk_softmax_bwd", 4): [(4, 512, 2, True), (8, 512, 1, True), (8, 512, 1, False)],
}


def softmax_cases(size, dtype, liger):
    """(kernel, the shipped op, the references, bytes moved) for the softmax forward and backward."""
    x = torch.randn(*size, device="cuda", dtype=dtype)
    x[:, :7] = float("-inf")  # masked positions
    g = torch.randn_like(x)
    y = softmax.softmax(x)
    cf = torch.compile(lambda t: torch.softmax(t, -1))
    extra = [("torch.compile", lambda: cf(x))]
    if "softmax" in liger:
        extra.append(("liger", lambda: liger["softmax"](x)))
    yield "kk_softmax_fwd", lambda: softmax.softmax(x), extra, 2 * x.nbytes
    cb = torch.compile(lambda g, y: y * (g - (g * y).sum(-1, keepdim=True)))
    extra = [("torch.compile (y*(g-sum(g*y)))", lambda: cb(g, y))]
    yield "kk_softmax_bwd", lambda: softmax.softmax_backward(g, y), extra, 3 * x.nbytes


def sweep_softmax(size, dtype, copy, results, liger):
    for name, shipped, extra, nbytes in softmax_cases(size, dtype, liger):
        variants = []
        nv = size[1] // VEC[dtype]
        for v in SOFTMAX_VARIANTS[name, dtype.itemsize]:
            if v[3] and nv > v[0] * v[1]:
                continue  # a held kernel traps on a row its block cannot hold
            label = f"RP {v[0]} bounds ({v[1]}, {v[2]})" + (" held" if v[3] else "")
            variants.append((label, lambda v=v: Swapped(softmax, _softmax_shape=softmax_shape(name, *v))))
        case = f"{name} {str(dtype)[6:]} {size[0]}x{size[1]}"
        run_variants(case, nbytes, shipped, variants, close, results, copy, extra)


# Rows split over a cluster (ops/softmax.py _SPLIT_FITS): (register packs, minimum blocks per SM) to time.
SPLIT_VARIANTS = {
    ("kk_softmax_fwd", 2): [(2, 2), (4, 2), (4, 1), (8, 2), (8, 1)],
    ("kk_softmax_fwd", 4): [(4, 2), (4, 1), (8, 2), (8, 1)],
    ("kk_softmax_bwd", 2): [(2, 2), (2, 1), (4, 2), (4, 1)],
    ("kk_softmax_bwd", 4): [(4, 2), (4, 1), (8, 1)],
}


def sweep_softmax_split(size, dtype, copy, results, liger):
    """Rows split over a cluster against the one-block streamed kernels (shared-memory row cache)."""
    fresh = softmax._softmax_shape.__wrapped__
    for name, shipped, extra, nbytes in softmax_cases(size, dtype, liger):
        variants = [
            (
                "not split (block per row, streamed)",
                lambda: Swapped(softmax, split_shape=lambda *a: None, _softmax_shape=functools.cache(fresh)),
            )
        ]
        for v in SPLIT_VARIANTS[name, dtype.itemsize]:
            table = {**softmax._SPLIT_FITS, (name, dtype.itemsize): (v,)}
            variants.append(
                (
                    f"split RP {v[0]} minb {v[1]}",
                    lambda table=table: Swapped(softmax, _SPLIT_FITS=table, _softmax_shape=functools.cache(fresh)),
                )
            )
        case = f"{name} {str(dtype)[6:]} {size[0]}x{size[1]}"
        run_variants(case, nbytes, shipped, variants, close, results, copy, extra)


def sweep_swiglu(size, dtype, copy, results, liger):
    gate = torch.randn(*size, device="cuda", dtype=dtype)
    up = torch.randn_like(gate)
    gr = torch.randn_like(gate)
    for bwd in (False, True):
        name = "kk_swiglu_bwd" if bwd else "kk_swiglu_fwd"
        if bwd:
            shipped = lambda: activations.swiglu_backward(gr, gate, up)
            ref = lambda gr, a, b: (gr * b * torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a))), gr * F.silu(a))
            cf = torch.compile(ref)
            extra = [("torch.compile", lambda: cf(gr, gate, up))]
            nbytes = 5 * gate.nbytes
        else:
            shipped = lambda: activations.swiglu(gate, up)
            cf = torch.compile(lambda a, b: F.silu(a) * b)
            extra = [("torch.compile", lambda: cf(gate, up))]
            if "swiglu" in liger:
                extra.append(("liger", lambda: liger["swiglu"](gate, up)))
            nbytes = 3 * gate.nbytes
        variants = []
        for u in (1, 2, 4):
            for block in (128, 256, 512):
                # an _swiglu_shape for U packs per thread in blocks of `block`
                shape = lambda name, dt, u=u, block=block: (
                    kernel("activations", f"{name}<{CTYPE[dt]}, {u}>"),
                    block,
                    block * VEC[dt] * u,
                )
                ctx = lambda shape=shape: Swapped(activations, _swiglu_shape=shape)
                variants.append((f"U {u} block {block}", ctx))
        case = f"{name} {str(dtype)[6:]} {size[0]}x{size[1]}"
        run_variants(case, nbytes, shipped, variants, close, results, copy, extra)


def sweep_rope(size, dtype, copy, results, liger):
    tokens, hidden = size
    d, seq = 128, 4096
    batch, heads = tokens // seq, hidden // d
    q = torch.randn(batch, seq, heads, d, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(batch, seq, heads, d, device="cuda", dtype=dtype).transpose(1, 2)
    inv = 10000.0 ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d)
    emb = torch.arange(seq, device="cuda", dtype=torch.float32)[:, None] * inv
    emb = torch.cat((emb, emb), -1).expand(batch, seq, d)
    cos, sin = emb.cos().to(dtype).contiguous(), emb.sin().to(dtype).contiguous()
    for bwd in (False, True):
        name = f"kk_rope<{int(bwd)}>"
        shipped = lambda: activations._rope(q, k, cos, sin, bwd)
        cf = torch.compile(_rope_reference)
        extra = [] if bwd else [("torch.compile", lambda: cf(q, k, cos, sin))]
        if "rope" in liger and not bwd:
            extra.append(("liger", lambda: liger["rope"](q, k, cos, sin)))
        nbytes = 4 * q.nbytes
        variants = []
        # (items per thread, register cap): the shipped cap (56) and others
        for items, maxr in ((1, 56), (2, 56), (1, 40), (2, 48), (2, 64), (4, 64)):
            for block in (64, 128):
                if maxr == 56:
                    make = lambda dt, backward, items=items: kernel(
                        "activations", f"kk_rope<{CTYPE[dt]}, {int(backward)}, {items}>"
                    )
                else:
                    cap = ((r"__maxnreg__\(sizeof\(T\) == 8 \? 64 : 56\)\nkk_rope", f"__maxnreg__({maxr}) kk_rope"),)
                    make = lambda dt, backward, items=items, cap=cap: source_variant("activations", cap).kernel(
                        f"kk_rope<{CTYPE[dt]}, {int(backward)}, {items}>"
                    )
                # an _rope_shape for `items` items per thread in blocks of `block`
                shape = lambda dt, backward, dev, make=make, items=items, block=block: (
                    make(dt, backward),
                    block,
                    block * items,
                )
                variants.append(
                    (
                        f"items {items} maxnreg {maxr} block {block}",
                        lambda shape=shape: Swapped(activations, _rope_shape=shape),
                    )
                )
        case = f"{name} {str(dtype)[6:]} {size[0]}x{size[1]}"
        run_variants(case, nbytes, shipped, variants, close, results, copy, extra)


class NormFit(Swapped):
    """norms._FWD_FIT for one (kernel, dtype): (register packs per thread, minimum blocks per SM)."""

    def __init__(self, name, dtype, packs, minb):
        super().__init__(norms, _FWD_FIT={(name, dtype): [(0, 1 << 62, packs, minb)]})

    def __enter__(self):
        super().__enter__()
        norms._forward_shape.cache_clear()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        norms._forward_shape.cache_clear()


def sweep_norm_fwd(size, dtype, copy, results, liger):
    x = torch.randn(*size, device="cuda", dtype=dtype)
    w = torch.randn(size[1], device="cuda", dtype=dtype)
    b = torch.randn(size[1], device="cuda", dtype=dtype)
    cases = {
        "kk_rms_norm_fwd": (lambda: norms._rms_norm(x, w, 1e-6)[0], "rms_norm", (x, w), _rms_norm_reference),
        "kk_layer_norm_fwd": (
            lambda: norms._layer_norm(x, w, b, 1e-5)[0],
            "layer_norm",
            (x, w, b),
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        ),
    }
    for name, (shipped, op, args, ref) in cases.items():
        cref = torch.compile(ref)
        extra = [("torch.compile", lambda: cref(*args))]
        if op in liger:
            extra.append(("liger", lambda: liger[op](*args)))
        variants = [
            (f"packs {p} min blocks {m}", lambda p=p, m=m: NormFit(name, dtype, p, m))
            for p, m in ((2, 3), (2, 4), (4, 1), (4, 2), (4, 3), (8, 1), (8, 2))
        ]
        case = f"{name} {str(dtype)[6:]} {size[0]}x{size[1]}"
        run_variants(case, 2 * x.nbytes, shipped, variants, close, results, copy, extra)


def sweep_norm_stream(size, dtype, copy, results, liger):
    """Norm forwards that stream the row instead of holding it (the TAIL kernels with 1-2 register packs):
    the row is read twice, the second time from L2, as torch.compile's looped reductions do
    (`bench/results/h200-2026-11-22-s7/inductor-norms.txt`), which leaves registers for more rows per SM."""
    rows, cols = size
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    w = torch.randn(cols, device="cuda", dtype=dtype)
    b = torch.randn(cols, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    st, st2 = (torch.empty(rows, device="cuda", dtype=torch.float32) for _ in range(2))
    cases = {
        "kk_rms_norm_fwd": (lambda: norms._rms_norm(x, w, 1e-6)[0], (x, w, y, st), 1e-6),
        "kk_layer_norm_fwd": (lambda: norms._layer_norm(x, w, b, 1e-5)[0], (x, w, b, y, st2, st), 1e-5),
    }
    for name, (shipped, args, eps) in cases.items():
        ref = shipped().clone()
        out = [("shipped", median_us(shipped))]
        for packs in (1, 2):
            k = kernel("norms", f"{name}<{CTYPE[dtype]}, true, {packs}, 1>")
            for r in (128, 256, 512):
                wave = resident_blocks(k, r, 0)
                for label, grid in (("1 wave", wave), ("2 waves", 2 * wave), ("4 waves", 4 * wave), ("rows", rows)):
                    go = lambda: k.launch(min(grid, rows), (r, 1), (*args, rows, cols, eps))
                    y.fill_(float("nan"))
                    go()
                    ok = close(y, ref)
                    tag = f"stream packs {packs} R {r} grid {label} ({min(grid, rows)})"
                    out.append((tag + ("" if ok else " WRONG"), median_us(go)))
        print(f"{name} stream {str(dtype)[6:]} {rows}x{cols}  (copy {copy:.0f} GB/s)", flush=True)
        for label, us in out:
            pct = 100 * 2 * x.nbytes / (us * 1e-6) / 1e9 / copy
            print(f"    {label:62s} {us:8.1f} us  {pct:5.1f}%")
            results.append({"case": f"{name} stream {str(dtype)[6:]} {rows}x{cols}", "variant": label, "us": us})


# cross-entropy forward: (packs loaded per thread before they are reduced U, register cap) by element size
CE_VARIANTS = {2: ((2, 64), (4, 64), (8, 128)), 4: ((2, 64), (4, 64), (8, 80))}


def ce_shape(u, maxr):
    """A _ce_shape whose reduced loss is kk_cross_entropy_loss<T, O, u, maxr> (the other kernels as shipped)."""
    shipped = softmax._ce_shape

    def shape(name, dtype, cols, dev, second=None):
        if name != "kk_cross_entropy_loss":
            return shipped(name, dtype, cols, dev, second)
        k = kernel("softmax", f"kk_cross_entropy_loss<{CTYPE[dtype]}, {CTYPE[second]}, {u}, {maxr}>")
        nv = cols // VEC[dtype] if cols % VEC[dtype] == 0 else cols
        block, per_block = (256, 8) if nv <= 2048 else (512, 1)
        return k, block, per_block, min(resident_blocks(k, block, dev), softmax._LOSS_MAX_BLOCKS)

    return shape


def sweep_ce(size, dtype, copy, results, liger):
    logits = torch.randn(*size, device="cuda", dtype=dtype)
    target = torch.randint(0, size[1], (size[0],), device="cuda")
    loss, stats = softmax._cross_entropy(logits, target, -100, 0.0)
    scale = torch.full((1,), 1.0 / size[0], device="cuda")
    shipped_f = lambda: softmax._cross_entropy(logits, target, -100, 0.0)
    shipped_b = lambda: softmax.cross_entropy_backward(logits, target, stats, scale, -100, 0.0)
    cf = torch.compile(lambda x, t: F.cross_entropy(x.float(), t))
    fwd_variants = [
        (f"U {u} maxnreg {r}", lambda u=u, r=r: Swapped(softmax, _ce_shape=ce_shape(u, r)))
        for u, r in CE_VARIANTS[dtype.itemsize]
    ]
    run_variants(
        f"cross_entropy fwd {str(dtype)[6:]} {size[0]}x{size[1]}",
        logits.nbytes,
        lambda: softmax.cross_entropy(logits, target),
        fwd_variants,
        close,
        results,
        copy,
        [
            (
                "per-row loss, then the mean in torch ops",
                lambda: softmax.cross_entropy(logits, target, reduction="none").mean(),
            ),
            ("per-row losses only (kernelkit::cross_entropy)", shipped_f),
            ("torch.compile (loss)", lambda: cf(logits, target)),
        ],
    )
    run_variants(
        f"cross_entropy bwd {str(dtype)[6:]} {size[0]}x{size[1]}",
        2 * logits.nbytes,
        shipped_b,
        [],
        close,
        results,
        copy,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*", default=["softmax", "swiglu", "rope", "ce", "norm_fwd", "norm_stream"])
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float32"])
    ap.add_argument("--sizes", nargs="*", default=[f"{r}x{c}" for r, c in SIZES])
    a = ap.parse_args()
    copy = copy_bandwidth()
    liger = _liger_functions()
    print(f"copy {copy:.0f} GB/s, smem opt-in {smem_optin(0)} B, liger: {sorted(liger)}", flush=True)
    results = []
    jobs = {
        "softmax": sweep_softmax,
        "softmax_split": sweep_softmax_split,
        "swiglu": sweep_swiglu,
        "rope": sweep_rope,
        "ce": sweep_ce,
        "norm_fwd": sweep_norm_fwd,
        "norm_stream": sweep_norm_stream,
    }
    for s in a.sizes:
        size = tuple(int(v) for v in s.split("x"))
        for dtype in (getattr(torch, d) for d in a.dtypes):
            for name in a.only:
                guarded(f"{name} {dtype} {size}", lambda: jobs[name](size, dtype, copy, results, liger))
    if a.out:
        write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
