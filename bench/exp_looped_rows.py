"""Experiment: load cache policies in the RMSNorm forward, against the shipped kernel and torch.compile.

At float32 4096/8192 columns Inductor's `triton_red_` kernel (its PTX: bench/results/h200-2026-11-23-s17/
inductor-ptx/) has no loop at all: 512 threads, each loading its packs of x with `ld.global.L1::evict_last.
L2::cache_hint` (a `createpolicy.fractional.L2::evict_last` policy, Triton's eviction_policy='evict_last'), then
after the row sum w the same way and x again with evict_first. It reached DRAM 88.6% busy where the shipped kernel,
which holds the row in registers, reached 80.8% at the same occupancy (bench/NOTES.md session 16).

`rms_modes` is the shipped held kernel's shape (NP 16-byte packs per thread, one row per block) with each load's
policy a template argument, and optionally the output pass reading x again instead of holding it:

    TRITON_CACHE_DIR=/tmp/tc python3 bench/exp_looped_rows.py --out modes.json [--ptx-dir DIR]

(--ptx-dir: where to copy the PTX of the `triton_red_` kernels torch.compile built in the run.)

Verdict (H200, exp-looped-modes.log in the results folder above): x loaded evict_last in L1 and L2 and held in
registers matched torch.compile (float32 4096: 252.5 against 251.3 us, shipped 258.7; 8192: 502.2 against 499.7,
shipped 520.6; bf16 8192: 252.0 against 251.7, shipped 263.4); evict_first on x was 5% slower than the shipped
read-only loads, the policy on w alone changed nothing, and re-reading x as Inductor does was no faster than holding
it. The policy became `kk::kKeep` (kernels/common.cuh).

`ln_modes` is LayerNorm on the same shape (two reductions, or one of x and x^2): float32 4096 253.6 us with `kKeep`
loads and two passes (torch.compile 253.5, shipped 266.2), 8192 501.0 (517.3, 518.9), where the shipped
kk_layer_norm_fwd at its 512-thread fits took 305-407 us (ln-modes.log). That became kk_layer_norm_fwd_wide.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil

import torch
from sweep_common import interleaved, write_results

import kernelkit
from kernelkit import _native
from kernelkit.bench import _rms_norm_reference, copy_bandwidth
from kernelkit.ops._runtime import CTYPE

SRC = r"""
#include "common.cuh"

using kk::Vec;

#define KK_LD(q) asm(q " {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p))
#define KK_LDP(q, pol) \
  asm("{ .reg .b64 pol; createpolicy.fractional.L2::" pol ".b64 pol, 1.0; " q " {%0, %1, %2, %3}, [%4], pol; }" \
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p))

// Load MODE: 0 kk::kNc (ld.global.nc); 1 kk::kPlain (ld.global); 2 L1::evict_last; 3 kk::kKeep (L1::evict_last with an
// L2 evict_last policy, Triton's eviction_policy='evict_last'); 4 L1::evict_first; 5 L1::evict_first with an L2
// evict_first policy. 2, 4 and 5 are this experiment's own.
template <int MODE> __device__ __forceinline__ uint4 ld16(const void* p) {
  uint4 r;
  if constexpr (MODE == 0) r = kk::ld16<kk::kNc>(p);
  else if constexpr (MODE == 1) r = kk::ld16<kk::kPlain>(p);
  else if constexpr (MODE == 2) KK_LD("ld.global.L1::evict_last.v4.u32");
  else if constexpr (MODE == 3) r = kk::ld16<kk::kKeep>(p);
  else if constexpr (MODE == 4) KK_LD("ld.global.L1::evict_first.v4.u32");
  else KK_LDP("ld.global.L1::evict_first.L2::cache_hint.v4.u32", "evict_first");
  return r;
}

template <typename T> __device__ __forceinline__ Vec<T, 16 / sizeof(T)> as_pack(uint4 r) {
  Vec<T, 16 / sizeof(T)> v;
  *reinterpret_cast<uint4*>(&v) = r;
  return v;
}

// v[i] <- its sum over the block (one row per block): warp butterflies, then the warps' sums through `red` (N * 32).
template <int N> __device__ __forceinline__ void block_sum(float (&v)[N], float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < N; ++i) red[i * 32 + warp] = v[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = lane < nw ? red[i * 32 + lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
  }
  __syncthreads();
}

// One row per block, NP 16-byte packs per thread (p = tid + k * NT), as the shipped held kernels. XM: the load mode of
// x's first read; REREAD: the output pass reads x again with mode RM instead of keeping it in registers; WM: w's mode.
// cols % (16 / sizeof(T)) == 0, cols <= NP * NT * 16 / sizeof(T), pointers 16-byte aligned.
template <typename T, int NP, int XM, bool REREAD, int RM, int WM, int MINB>
__global__ void __launch_bounds__(512, MINB) rms_modes(const T* __restrict__ x, const T* __restrict__ w,
                                                       T* __restrict__ y, float* __restrict__ rstd, long long rows,
                                                       int cols, float eps) {
  constexpr int W = 16 / sizeof(T);
  __shared__ float red[32];
  const int tid = threadIdx.x, NT = blockDim.x;
  const int packs = cols / W;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + row * cols);
    uint4 v[NP];
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int p = tid + k * NT;
      v[k] = p < packs ? ld16<XM>(xr + p) : make_uint4(0, 0, 0, 0);
    }
    float acc[W];
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] = 0.f;
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const Vec<T, W> q = as_pack<T>(v[k]);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float a = kk::acc_at(q, j);
        acc[j] = fmaf(a, a, acc[j]);
      }
    }
    float s[1] = {0.f};
#pragma unroll
    for (int j = 0; j < W; ++j) s[0] += acc[j];
    block_sum(s, red);
    const float rs = rsqrtf(s[0] / float(cols) + eps);
    if (tid == 0 && rstd != nullptr) rstd[row] = rs;
    const uint4* wr = reinterpret_cast<const uint4*>(w);
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        const Vec<T, W> g = as_pack<T>(ld16<WM>(wr + p));
        const Vec<T, W> q = as_pack<T>(REREAD ? ld16<RM>(xr + p) : v[k]);
        float a[W];
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = kk::acc_at(g, j) * (kk::acc_at(q, j) * rs);
        kk::store_vec<W>(y + row * cols + (long long)p * W, kk::acc_to_vec<T, W>(a));
      }
    }
  }
}
// LayerNorm on rms_modes' shape, x held: ONEPASS sums x and x^2 in one block reduction (var = E[x^2] - mu^2, fine
// for these inputs), else the mean, then the squared deviations from the registers (two reductions). XM: x's load
// mode; WM: w's and b's.
template <typename T, int NP, int XM, int WM, bool ONEPASS, int MINB>
__global__ void __launch_bounds__(512, MINB) ln_modes(const T* __restrict__ x, const T* __restrict__ w,
                                                      const T* __restrict__ b, T* __restrict__ y,
                                                      float* __restrict__ mean, float* __restrict__ rstd,
                                                      long long rows, int cols, float eps) {
  constexpr int W = 16 / sizeof(T);
  __shared__ float red[2 * 32];
  const int tid = threadIdx.x, NT = blockDim.x;
  const int packs = cols / W;
  const float inv = 1.f / float(cols);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + row * cols);
    Vec<T, W> v[NP];
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int p = tid + k * NT;
      v[k] = as_pack<T>(p < packs ? ld16<XM>(xr + p) : make_uint4(0, 0, 0, 0));
    }
    float mu, var;
    if constexpr (ONEPASS) {
      float s[2] = {0.f, 0.f};
#pragma unroll
      for (int k = 0; k < NP; ++k)
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float a = kk::acc_at(v[k], j);
          s[0] += a;
          s[1] = fmaf(a, a, s[1]);
        }
      block_sum(s, red);
      mu = s[0] * inv;
      var = fmaxf(s[1] * inv - mu * mu, 0.f);
    } else {
      float s[1] = {0.f};
#pragma unroll
      for (int k = 0; k < NP; ++k)
#pragma unroll
        for (int j = 0; j < W; ++j) s[0] += kk::acc_at(v[k], j);
      block_sum(s, red);
      mu = s[0] * inv;
      s[0] = 0.f;
#pragma unroll
      for (int k = 0; k < NP; ++k)
        if (tid + k * NT < packs)
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float d = kk::acc_at(v[k], j) - mu;
            s[0] = fmaf(d, d, s[0]);
          }
      block_sum(s, red);
      var = s[0] * inv;
    }
    const float rs = rsqrtf(var + eps);
    if (tid == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    const uint4 *wr = reinterpret_cast<const uint4*>(w), *br = reinterpret_cast<const uint4*>(b);
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        const Vec<T, W> g = as_pack<T>(ld16<WM>(wr + p)), c = as_pack<T>(ld16<WM>(br + p));
        float a[W];
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = fmaf((kk::acc_at(v[k], j) - mu) * rs, kk::acc_at(g, j), kk::acc_at(c, j));
        kk::store_vec<W>(y + row * cols + (long long)p * W, kk::acc_to_vec<T, W>(a));
      }
    }
  }
}
"""

# (tag, XM, REREAD, RM, WM): see rms_modes.
VARIANTS = [
    ("held nc", 0, False, 0, 0),
    ("held w:last", 0, False, 0, 3),
    ("held x:first w:last", 5, False, 0, 3),
    ("held x:last w:last", 3, False, 0, 3),
    ("held x:l1first w:l1last", 4, False, 0, 2),
    ("reread nc", 0, True, 0, 0),
    ("reread l1 hints", 2, True, 4, 2),
    ("reread as inductor", 3, True, 5, 3),
    ("reread as inductor w:nc", 3, True, 5, 0),
]
# (dtype, cols) -> [(NT, NP, MINB)]
SHAPES = {
    (torch.float32, 4096): [(512, 2, 4)],
    (torch.float32, 8192): [(512, 4, 4), (512, 4, 3)],
    (torch.bfloat16, 8192): [(512, 2, 4)],
    (torch.bfloat16, 4096): [(512, 1, 4), (256, 2, 8)],
}


# LayerNorm: (tag, XM, WM, ONEPASS), see ln_modes; (dtype, cols) -> [(NT, NP, MINB)].
LN_VARIANTS = [
    ("two-pass nc", 0, 0, False),
    ("two-pass keep", 3, 3, False),
    ("one-pass nc", 0, 0, True),
    ("one-pass keep", 3, 3, True),
]
LN_SHAPES = {
    (torch.float32, 4096): [(512, 2, 4), (512, 2, 3), (256, 4, 2)],
    (torch.float32, 8192): [(512, 4, 3)],
    (torch.bfloat16, 8192): [(512, 2, 4)],
}


def time_case(mod, dtype, cols, variants, copy, reps, ln=False, rows=32768):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    w = (1 + 0.1 * torch.randn(cols, device="cuda")).to(dtype)
    bias = (0.1 * torch.randn(cols, device="cuda")).to(dtype)
    eps = 1e-5 if ln else 1e-6
    if ln:
        ref = kernelkit.ops.layer_norm(x, w, bias, eps)
        comp = torch.compile(lambda x, w, b: torch.nn.functional.layer_norm(x, (cols,), w, b, eps), dynamic=False)
        calls = {
            "shipped": [lambda: kernelkit.ops.layer_norm(x, w, bias, eps)],
            "torch.compile": [lambda: comp(x, w, bias)],
        }
    else:
        ref = kernelkit.ops.rms_norm(x, w, eps)
        comp = torch.compile(_rms_norm_reference, dynamic=False)
        calls = {"shipped": [lambda: kernelkit.ops.rms_norm(x, w, eps)], "torch.compile": [lambda: comp(x, w)]}
    mean = torch.empty(rows, device="cuda")
    rstd = torch.empty(rows, device="cuda")
    errs = {}
    for tag, nt, e in variants:
        k = mod.kernel(e)
        y = torch.empty_like(x)
        args = (x, w, bias, y, mean, rstd, rows, cols, eps) if ln else (x, w, y, rstd, rows, cols, eps)

        def run(k=k, nt=nt, args=args):
            k.launch(rows, nt, args)

        run()
        errs[tag] = (y.float() - ref.float()).abs().max().item()
        calls[tag] = [run]
    name = "layer_norm" if ln else "rms_norm"
    out = []
    for tag, us, pct, _ in interleaved(calls, reps, 2 * x.nbytes, copy):
        err = errs.get(tag)
        tail = "" if err is None else f" err {err:.2e}"
        print(f"{name} {str(dtype)[6:]:8s} {cols:5d} {tag:24s} {us:8.1f} us {pct:5.1f}%{tail}")
        out.append(dict(op=name, dtype=str(dtype)[6:], cols=cols, variant=tag, us=us, err=err))
    return out


def dump_inductor_ptx(dest):
    """The PTX of the `triton_red_` kernels torch.compile built in this process (TRITON_CACHE_DIR)."""
    root = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
    os.makedirs(dest, exist_ok=True)
    for p in glob.glob(os.path.join(root, "*", "triton_red*.ptx")):
        shutil.copy(p, os.path.join(dest, os.path.basename(os.path.dirname(p))[:8] + "-" + os.path.basename(p)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--ptx-dir")
    ap.add_argument("--only", nargs="*", default=["rms", "ln"], help="rms, ln")
    a = ap.parse_args()
    copy = copy_bandwidth()
    jobs = []
    if "rms" in a.only:
        for (dtype, cols), shapes in SHAPES.items():
            vs = []
            for nt, np_, minb in shapes:
                for tag, xm, rr, rm, wm in VARIANTS:
                    e = f"rms_modes<{CTYPE[dtype]}, {np_}, {xm}, {str(rr).lower()}, {rm}, {wm}, {minb}>"
                    vs.append((f"NT{nt} NP{np_} B{minb} {tag}", nt, e))
            jobs.append((dtype, cols, vs, False))
    if "ln" in a.only:
        for (dtype, cols), shapes in LN_SHAPES.items():
            vs = []
            for nt, np_, minb in shapes:
                for tag, xm, wm, one in LN_VARIANTS:
                    e = f"ln_modes<{CTYPE[dtype]}, {np_}, {xm}, {wm}, {str(one).lower()}, {minb}>"
                    vs.append((f"NT{nt} NP{np_} B{minb} {tag}", nt, e))
            jobs.append((dtype, cols, vs, True))
    exprs = sorted({e for _, _, vs, _ in jobs for _, _, e in vs})
    common = {"common.cuh": _native.op_source("common.cuh")}
    mod = kernelkit.load_inline("exp_looped_rows", SRC, name_expressions=exprs, headers=common)
    results = []
    for dtype, cols, vs, ln in jobs:
        results += time_case(mod, dtype, cols, vs, copy, a.reps, ln)
    if a.ptx_dir:
        dump_inductor_ptx(a.ptx_dir)
    write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
