# ruff: noqa: B023, E731  (each lambda is timed before the loop moves on)
"""Variant sweep for the flat kernels of issue 3 (add, muladd, bias_gelu forward and backward) at 64M
elements: load instructions (cache hints), packs per thread, block and grid sizes, next to torch.compile.

Every variant is kernels/<family>.cu with one line rewritten, compiled with NVRTC, launched straight
through Kernel.launch, and checked against the shipped op's output before it is timed (CUDA-event
medians, inputs far larger than L2). Writes JSON with --out.
"""

import argparse
import importlib

import torch
import torch.nn.functional as F
from sweep_common import guarded, source_variant, write_results

import kernelkit
from kernelkit import _native
from kernelkit.bench import _gpu_median_ms, copy_bandwidth
from kernelkit.ops._runtime import CTYPE, VEC, cdiv, sm_count

ROWS, COLS = 8192, 8192


def median_us(fn, reps=30):
    return _gpu_median_ms([fn], reps=reps, warmup=3) * 1e3


_LDG = "if constexpr (L == kNc) return __ldg(q);"
# 16-byte load instructions for the read-only path (kk::kNc) of kk::ld16 (kernels/common.cuh).
HINTS = {
    "ld.nc": None,
    "ld.plain": "ld.global.v4.u32",
    "ld.nc.L2::256B": "ld.global.nc.L2::256B.v4.u32",
    "ld.nc.L1::no_allocate.L2::256B": "ld.global.nc.L1::no_allocate.L2::256B.v4.u32",
}


def common_with(hint):
    """common.cuh whose read-only 16-byte loads use the PTX instruction HINTS[hint]."""
    src = _native.op_source("common.cuh")
    ins = HINTS[hint]
    if ins is None:
        return src
    helper = (
        "__device__ __forceinline__ uint4 sweep_ld(const void* p) {\n  uint4 u;\n"
        f'  asm("{ins} {{%0, %1, %2, %3}}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));\n'
        "  return u;\n}\n"
    )
    assert _LDG in src
    src = src.replace(_LDG, "if constexpr (L == kNc) return sweep_ld(q);")
    return src.replace("namespace kk {\n", "namespace kk {\n" + helper, 1)


def variant(family, hint="ld.nc", subs=()):
    """kernels/<family>.cu with each (pattern, replacement) applied once and the load hint, compiled."""
    return source_variant(family, subs, common=common_with(hint))


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


GELU_PACKS = r"constexpr int kGeluFwdPacks = sizeof\(T\) == 2 && APPROX \? kUnroll : 2;"
GELU_REGS = r"__maxnreg__\(\(kk::kGeluFwdRegs<T, APPROX>\)\)"
GELU_MATH = r"gelu_f<APPROX, \(sizeof\(T\) < 4\)>"


def gelu_fwd_variant(packs, regs, hint="ld.nc", mufu=False):
    """kernels/gelu.cu with the forward at ``packs`` packs per thread under ``regs`` registers (every dtype and GELU
    form), its read-only 16-byte loads by the HINTS instruction ``hint``; ``mufu``: float32 with 16-bit's MUFU math."""
    subs = [(GELU_PACKS, f"constexpr int kGeluFwdPacks = {packs};"), (GELU_REGS, f"__maxnreg__({regs})")]
    if mufu:  # the first two gelu_f calls are the forward's
        subs += [(GELU_MATH, "gelu_f<APPROX, true>")] * 2
    return variant("gelu", hint, tuple(subs))


def parse_gelu_fit(text):
    """PACKS:MAXNREG[:HINT] -> (packs, register cap, hint); HINT (one of HINTS) defaults to ld.nc."""
    packs, regs, *hint = text.split(":", 2)
    return int(packs), int(regs), hint[0] if hint else "ld.nc"


def sweep_gelu_fwd(dtype, copy, results, fits=((2, 40), (4, 64)), fast=False):
    """fits: (packs per thread, register cap) pairs; fast: also each with float32's MUFU math (16-bit's)."""
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
    maths = [False, True] if fast and dtype == torch.float32 else [False]
    for (u, nreg), mufu in ((f, m) for f in fits for m in maths):
        k = gelu_fwd_variant(u, nreg, mufu=mufu).kernel(f"kk_bias_gelu_fwd<{ct}, 1>")
        for block in (128, 256):
            occ = max(1, k.occupancy(block, 0, 0))
            full = cdiv(n, VEC[dtype] * block * u)
            for gname, g in (("full", full), ("8wave", 8 * occ * sms)):
                g = min(g, full)
                fn = lambda: k.launch(g, block, (x, bias, y, ROWS, COLS))
                y.fill_(float("nan"))
                fn()
                tag = f"U{u} R{nreg}{' mufu' if mufu else ''} block {block} occ{occ} grid {gname}={g}"
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
    sms = sm_count(0)
    gx = torch.empty_like(x)
    gb = torch.empty_like(bias)
    tile_line = r"W > 1 \? 16 : 32"
    # column tile width (packs) x row chunks (one or two waves); grad_bias summed in-kernel by the last chunk
    # of each tile (the column-sum launch these variants once had is gone: bench/NOTES.md, session 9)
    for tcv in (16, 32):
        k = variant("gelu", "ld.nc", ((tile_line, f"W > 1 ? {tcv} : 32"),)).kernel(f"kk_bias_gelu_bwd<{ct}, 1>")
        occ = max(1, k.occupancy(256, 0, 0))
        grid_x = cdiv(COLS, tcv * VEC[dtype])
        counters = torch.zeros(cdiv(COLS, 32), dtype=torch.int32, device="cuda")
        for waves in (1, 2):
            chunks = max(1, waves * occ * sms // grid_x)
            rpc = cdiv(ROWS, chunks)
            chunks = cdiv(ROWS, rpc)
            part = torch.empty((chunks, COLS), dtype=torch.float32, device="cuda")
            run = lambda: k.launch((grid_x, chunks), 256, (g, x, bias, gx, part, gb, counters, ROWS, COLS, rpc))
            gx.fill_(float("nan"))
            gb.fill_(float("nan"))
            run()
            good = same(gx, ref_gx, 1e-2) and same(gb, ref_gb, 5e-2)
            tag = f"tile {tcv} packs occ{occ} grid {grid_x}x{chunks} ({grid_x * chunks / (occ * sms):.2f} waves)"
            out.append((tag + ("" if good else " WRONG"), median_us(run)))
    report(f"bias_gelu bwd {str(dtype)[6:]} {ROWS}x{COLS}", out, 3 * x.nbytes, copy, results)


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
    unroll = r"constexpr int U = NIN == 1 \? 2 \* kUnroll : 1;"
    for hint in HINTS:
        for u in (1, 2):
            subs = ((unroll, f"constexpr int U = NIN == 1 ? 8 : {u};"),)
            k = variant("elementwise", hint, subs).kernel(f"kk_{op}<{ct}>")
            for block in (128, 256):
                g = cdiv(n, VEC[dtype] * block * u)
                fn = lambda: k.launch(g, block, (*ins, o, n))
                o.fill_(float("nan"))
                fn()
                tag = f"{hint} U{u} block {block} grid {g}"
                out.append((tag + ("" if torch.equal(o, ref) else " WRONG"), median_us(fn)))
    report(f"{op} {str(dtype)[6:]} {ROWS}x{COLS}", out, (nin + 1) * o.nbytes, copy, results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*", default=["gelu_fwd", "gelu_bwd", "ew"])
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float32", "float16"])
    ap.add_argument(
        "--gelu-fits",
        nargs="*",
        default=["2:40", "4:64"],
        help="forward PACKS:MAXNREG (shipped float32 2:40, 16-bit 4:64)",
    )
    ap.add_argument("--gelu-fast", action="store_true", help="also float32 forwards with 16-bit's MUFU math")
    a = ap.parse_args()
    copy = copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    results = []
    fits = [parse_gelu_fit(f)[:2] for f in a.gelu_fits]
    for dtype in (getattr(torch, d) for d in a.dtypes):
        jobs = []
        if "gelu_fwd" in a.only:  # float16 too: its tanh forward has a 4-byte spill (check_compile.py)
            jobs.append(lambda: sweep_gelu_fwd(dtype, copy, results, fits, a.gelu_fast))
        if "gelu_bwd" in a.only and dtype != torch.float16:
            jobs.append(lambda: sweep_gelu_bwd(dtype, copy, results))
        if "ew" in a.only and dtype != torch.float16:
            jobs += [lambda op=op: sweep_elementwise(op, dtype, copy, results) for op in ("add", "muladd")]
        for job in jobs:
            guarded(str(dtype), job)
    if a.out:
        write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
