# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""Experiment: 8-byte packs for the flat elementwise kernels, the layout of torch.compile's Triton kernel.

ncu (h200-2026-11-23-s16/ncu-s16.txt) shows Inductor's float32 muladd at 8192 x 8192 as 131072 blocks of 256
threads, two elements (one 8-byte load per input) per thread, 16 registers: 240.1 us against kk_muladd's 240.8
(65536 blocks of 256 threads, one 16-byte pack per input). This builds kernels/elementwise.cu with packs of half
the width (common.cuh given an 8-byte load and store) and times it, in interleaved rounds, against the shipped op
and torch.compile:

    python3 bench/exp_flat_packs.py muladd:float32:8192x8192 add:float32:8192x8192

Verdict (h200-2026-11-23-s16/SUMMARY.md): float32 muladd 0.35% faster, add slower; not adopted.
"""

import argparse
import statistics

import torch
from sweep_common import source_variant

import kernelkit
from kernelkit import _native
from kernelkit.bench import _gpu_median_ms
from kernelkit.ops._runtime import CTYPE, VEC, cdiv


def eight_byte_common():
    """common.cuh whose load_vec/store_vec also move 8-byte packs."""
    src = _native.op_source("common.cuh")
    pairs = [
        (
            'static_assert(W == 1 || W * sizeof(T) == 16, "packs are scalars or 16 bytes");',
            "static_assert(W == 1 || W * sizeof(T) == 16 || W * sizeof(T) == 8);",
        ),
        (
            "  } else {\n    *reinterpret_cast<uint4*>(&r) = ld16<L>(p);",
            "  } else if constexpr (W * sizeof(T) == 8) {\n"
            "    const uint2* q = reinterpret_cast<const uint2*>(p);\n"
            "    *reinterpret_cast<uint2*>(&r) = L != kPlain ? __ldg(q) : *q;\n"
            "  } else {\n    *reinterpret_cast<uint4*>(&r) = ld16<L>(p);",
        ),
        (
            "  } else if constexpr (EVICT_FIRST) {\n    __stcs(",
            "  } else if constexpr (W * sizeof(T) == 8) {\n"
            "    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(&r);\n"
            "  } else if constexpr (EVICT_FIRST) {\n    __stcs(",
        ),
    ]
    for old, new in pairs:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="OP:DTYPE:ROWSxCOLS, OP add, mul or muladd")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    mod = source_variant(
        "elementwise", [(r"constexpr int V = kVec<T>;", "constexpr int V = kVec<T> / 2;")], common=eight_byte_common()
    )
    for spec in a.cases:
        op, dt, size = spec.split(":")
        rows, cols = map(int, size.split("x"))
        dtype = getattr(torch, dt)
        nin = 3 if op == "muladd" else 2
        ins = [torch.randn(rows, cols, device="cuda", dtype=dtype) for _ in range(nin)]
        out = torch.empty_like(ins[0])
        n = out.numel()
        shipped = getattr(kernelkit.ops, op)
        want = shipped(*ins)
        k = mod.kernel(f"kk_{op}<{CTYPE[dtype]}>")
        math = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y, "muladd": lambda x, y, z: x * y + z}[op]
        compiled = torch.compile(math, dynamic=False)  # one static kernel per shape, as kernelkit bench
        compiled(*ins)
        impls = {"shipped": lambda: shipped(*ins), "compile": lambda: compiled(*ins)}
        for block in (128, 256):
            grid = cdiv(n, VEC[dtype] // 2 * block)
            impls[f"8B block {block}"] = lambda g=grid, b=block: k.launch(g, b, (*ins, out, n))
            out.fill_(float("nan"))
            impls[f"8B block {block}"]()
            assert torch.equal(out, want), f"{spec}: 8-byte variant differs"
        times = {name: [] for name in impls}
        for _ in range(a.rounds):
            for name, fn in impls.items():
                times[name].append(_gpu_median_ms([fn], reps=20, warmup=3) * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        cells = "  ".join(f"{name} {t:7.1f}" for name, t in med.items())
        print(f"{spec:28s} {cells}  (us; compile/shipped {med['compile'] / med['shipped']:.4f})", flush=True)


if __name__ == "__main__":
    main()
