# ruff: noqa: B023, E731  (each lambda is timed before the loop moves on)
"""Variant sweep for the flat kernels of issue 3 (add, muladd, bias_gelu forward and backward) at 64M
elements: packs per thread, register caps, grid sizes and cache hints, each next to torch.compile.

Every variant is kernels/<family>.cu with one line rewritten, compiled with NVRTC, launched straight
through Kernel.launch, and checked against the shipped op's output before it is timed (CUDA-event
medians, inputs far larger than L2). Writes JSON with --out.
"""

import argparse
import importlib
import json
import re

import torch
import torch.nn.functional as F

import kernelkit
from kernelkit import _native
from kernelkit.bench import _gpu_median_ms
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, sm_count

ROWS, COLS = 8192, 8192
_modules = {}


def median_us(fn, reps=30):
    return _gpu_median_ms([fn], reps=reps, warmup=3) * 1e3


def variant(family, subs=()):
    """kernels/<family>.cu with each (pattern, replacement) applied once, compiled."""
    key = (family, subs)
    if key not in _modules:
        src = _native.op_source(f"{family}.cu")
        for pat, rep in subs:
            src, n = re.subn(pat, rep, src, count=1)
            if n != 1:
                raise ValueError(f"pattern {pat!r} not found in {family}.cu")
        tag = abs(hash(key)) % 10**8
        _modules[key] = kernelkit.load_inline(
            f"flat_{family}_{tag}", src, headers={"common.cuh": _native.op_source("common.cuh")}
        )
    return _modules[key]


def report(case, out, nbytes, copy, results):
    ok = [o for o in out if "WRONG" not in o[0] and o[1] == o[1]]
    best = min(ok, key=lambda o: o[1])
    pct = lambda us: 100 * nbytes / (us * 1e-6) / 1e9 / copy
    print(f"{case}: best {best[1]:.1f} us ({pct(best[1]):.1f}%) {best[0]}", flush=True)
    for label, us in out:
        print(f"    {label:64s} {us:8.1f} us {pct(us):5.1f}%")
    results.append({"case": case, "bytes": nbytes, "configs": [{"config": c, "us": u} for c, u in out]})


def same(a, b, tol):
    return torch.allclose(a.float(), b.float(), rtol=tol, atol=tol)


def sweep_gelu_fwd(dtype, copy, results):
    ct = CTYPE[dtype]
    x = torch.randn(ROWS, COLS, device="cuda", dtype=dtype)
    bias = torch.randn(COLS, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    ref = kernelkit.ops.bias_gelu(x, bias)
    n = x.numel()
    out = [("shipped op", median_us(lambda: kernelkit.ops.bias_gelu(x, bias)))]
    cg = torch.compile(lambda x, b: F.gelu(x + b, approximate="tanh"))
    out.append(("torch.compile", median_us(lambda: cg(x, bias))))
    sms = sm_count(0)
    unroll = r"constexpr int U = sizeof\(T\) == 8 \? 2 : kUnroll;"
    for u in (1, 2, 4):
        subs = ((unroll, f"constexpr int U = sizeof(T) == 8 ? 2 : {u};"),) if u != 4 else ()
        k = variant("gelu", subs).kernel(f"kk_bias_gelu_fwd<{ct}, 1>")
        for block in (128, 256, 512):
            occ = max(1, k.occupancy(block, 0, 0))
            full = cdiv(n, VEC[dtype] * block * u)
            for gname, g in (
                ("full", full),
                ("2wave", 2 * occ * sms),
                ("4wave", 4 * occ * sms),
                ("8wave", 8 * occ * sms),
            ):
                g = min(g, full)
                fn = lambda: k.launch(g, block, (x, bias, y, ROWS, COLS))
                y.fill_(float("nan"))
                fn()
                tag = f"U{u} block {block} occ{occ} grid {gname}={g}"
                out.append((tag + ("" if same(y, ref, 1e-2) else " WRONG"), median_us(fn)))
    report(f"bias_gelu fwd {str(dtype)[6:]} {ROWS}x{COLS}", out, 2 * x.nbytes, copy, results)


def sweep_gelu_bwd(dtype, copy, results):
    ct = CTYPE[dtype]
    x = torch.randn(ROWS, COLS, device="cuda", dtype=dtype)
    g = torch.randn_like(x)
    bias = torch.randn(COLS, device="cuda", dtype=dtype)
    gelu_mod = importlib.import_module("kernelkit.ops.gelu")
    ref_gx, ref_gb = gelu_mod.bias_gelu_backward(g, x, bias, "tanh")
    out = [("shipped op", median_us(lambda: gelu_mod.bias_gelu_backward(g, x, bias, "tanh")))]
    xr = x.detach().requires_grad_()
    br = bias.detach().requires_grad_()

    def compiled_bwd(x, b, g):
        return torch.autograd.grad(F.gelu(x + b, approximate="tanh"), (x, b), g)

    cb = torch.compile(compiled_bwd)
    out.append(("torch.compile fwd+bwd (reference only)", median_us(lambda: cb(xr, br, g))))
    sms = sm_count(0)
    vec = VEC[dtype]
    grid_x = cdiv(COLS, 8 * vec)
    gx = torch.empty_like(x)
    gb = torch.empty_like(bias)
    for u in (1, 2):
        for minb in (2, 3, 4):
            subs = (
                (r"constexpr int U = sizeof\(T\) == 8 \? 1 : 2;", f"constexpr int U = sizeof(T) == 8 ? 1 : {u};"),
                (r"__launch_bounds__\(256, 2\)\nkk_bias_gelu_bwd", f"__launch_bounds__(256, {minb})\nkk_bias_gelu_bwd"),
            )
            label = f"U{u} lb{minb}"
            try:
                mod = variant("gelu", subs)
                k = mod.kernel(f"kk_bias_gelu_bwd<{ct}, 1>")
                cs = mod.kernel(f"kk_column_sum<{ct}>")
            except Exception as ex:
                out.append((f"{label} compile error {str(ex)[:60]}", float("nan")))
                continue
            occ = max(1, k.occupancy(256, 0, 0))
            for mult in (1, 2):
                chunks = max(1, min(mult * occ * sms // grid_x, cdiv(ROWS, 16), 64))
                rpc = cdiv(ROWS, chunks)
                chunks = cdiv(ROWS, rpc)
                part = torch.empty((chunks, COLS), dtype=torch.float32, device="cuda")

                def fn():
                    k.launch((grid_x, chunks), 256, (g, x, bias, gx, part, ROWS, COLS, rpc))
                    cs.launch(cdiv(COLS, 256), 256, (part, gb, chunks, COLS))

                gx.fill_(float("nan"))
                fn()
                good = same(gx, ref_gx, 1e-2) and same(gb, ref_gb, 5e-2)
                tag = f"{label} occ{occ} chunks {mult}x={chunks}"
                out.append((tag + ("" if good else " WRONG"), median_us(fn)))
    report(f"bias_gelu bwd {str(dtype)[6:]} {ROWS}x{COLS}", out, 3 * x.nbytes, copy, results)


_STORE = r"\*reinterpret_cast<uint4\*>\(p\) = \*reinterpret_cast<const uint4\*>\(&r\);"


def sweep_elementwise(op, dtype, copy, results):
    ct = CTYPE[dtype]
    nin = 3 if op == "muladd" else 2
    ins = [torch.randn(ROWS, COLS, device="cuda", dtype=dtype) for _ in range(nin)]
    o = torch.empty_like(ins[0])
    ref = getattr(kernelkit.ops, op)(*ins)
    n = o.numel()
    out = [("shipped op", median_us(lambda: getattr(kernelkit.ops, op)(*ins)))]
    math = {"add": lambda a, b: a + b, "muladd": lambda a, b, c: a * b + c}[op]
    cm = torch.compile(math)
    out.append(("torch.compile", median_us(lambda: cm(*ins))))
    common = _native.op_source("common.cuh")
    hints = {
        "plain": common,
        "st.cs": re.sub(_STORE, "__stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&r));", common),
    }
    for hname, hsrc in hints.items():
        for u in (1, 2, 4):
            src = _native.op_source("elementwise.cu").replace(
                "constexpr int U = NIN == 1 ? 2 * kUnroll : kUnroll;", f"constexpr int U = NIN == 1 ? 8 : {u};"
            )
            key = ("ew", hname, u)
            if key not in _modules:
                _modules[key] = kernelkit.load_inline(
                    f"flat_ew_{hname.replace('.', '')}_{u}", src, headers={"common.cuh": hsrc}
                )
            k = _modules[key].kernel(f"kk_{op}<{ct}>")
            for block in (128, 256, 512):
                g = cdiv(n, VEC[dtype] * block * u)
                fn = lambda: k.launch(g, block, (*ins, o, n))
                o.fill_(float("nan"))
                fn()
                tag = f"{hname} U{u} block {block} grid {g}"
                out.append((tag + ("" if torch.equal(o, ref) else " WRONG"), median_us(fn)))
    report(f"{op} {str(dtype)[6:]} {ROWS}x{COLS}", out, (nin + 1) * o.nbytes, copy, results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*", default=["gelu_fwd", "gelu_bwd", "ew"])
    a = ap.parse_args()
    src = torch.empty(2**28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    copy = 2 * src.nbytes / (median_us(lambda: dst.copy_(src)) * 1e-6) / 1e9
    print(f"copy {copy:.0f} GB/s", flush=True)
    results = []
    for dtype in (torch.bfloat16, torch.float32):
        jobs = []
        if "gelu_fwd" in a.only:
            jobs.append(lambda: sweep_gelu_fwd(dtype, copy, results))
        if "gelu_bwd" in a.only:
            jobs.append(lambda: sweep_gelu_bwd(dtype, copy, results))
        if "ew" in a.only:
            jobs += [lambda op=op: sweep_elementwise(op, dtype, copy, results) for op in ("add", "muladd")]
        for job in jobs:
            try:
                job()
            except Exception as ex:
                print(f"FAILED {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"copy_gbps": copy, "env": torch.cuda.get_device_name(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
