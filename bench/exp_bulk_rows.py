"""Experiment: norm forwards whose rows arrive by bulk copy (cp.async.bulk, the TMA engine) into shared-memory
stages, S rows ahead per block on a persistent grid, against the shipped kernels and torch.compile.

The held forwards keep a row in registers: the loads a thread can have in flight end at its register packs, and
at 4096/8192 columns float32 they stay at 96-97% of copy where Inductor's looped reductions reach 100%
(bench/NOTES.md sessions 8-14). A bulk copy costs one thread one instruction per row, whatever the row's size, so
the rows in flight per SM are bounded by shared memory instead.

    python3 bench/exp_bulk_rows.py --out bulk.json
"""

from __future__ import annotations

import argparse
import json

import torch

import kernelkit
from kernelkit import _native
from kernelkit.bench import _gpu_median_ms, _rms_norm_reference, copy_bandwidth
from kernelkit.ops._runtime import CTYPE

SRC = r"""
#include "common.cuh"

using kk::Vec;

// One arrival expecting `bytes`, and the bulk copy that completes them on the mbarrier at `bar`.
__device__ __forceinline__ void expect_and_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  kk::mbarrier_expect_tx(bar, bytes);
  kk::bulk_load(dst, src, bytes, bar);
}

// One block per row at a time, S rows in flight: stage s of block b holds its rows i = s, s + S, ...
// (row blockIdx.x + i * gridDim.x). KP 16-byte packs per thread (p = tid + k * NT) hold the row for the
// output pass (REREAD: the output pass reads the stage again, which is refilled only after it). cols * sizeof(T)
// % 16 == 0 and x 16-byte aligned.
template <typename T, int KP, int S, bool LN, bool REREAD>
__global__ void __launch_bounds__(512) norm_bulk(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                                                 float* __restrict__ rstd, long long rows, int cols, float eps) {
  constexpr int W = 16 / sizeof(T);
  using P = Vec<T, W>;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned row_bytes = (unsigned)cols * sizeof(T);
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + S * row_bytes);
  float* red = reinterpret_cast<float*>(bars + S);  // [2 buffers][2 sums][32 warps]
  const int tid = threadIdx.x, NT = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = NT >> 5;
  const int packs = cols / W;
  auto stage = [&](int s) { return kk::smem_address(smem + s * row_bytes); };
  auto bar = [&](int s) { return kk::smem_address(&bars[s]); };
  auto refill = [&](int s, long long r) {
    if (r < rows) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after this stage's generic reads
      expect_and_load(stage(s), x + r * cols, row_bytes, bar(s));
    }
  };
  if (tid == 0) {
    for (int s = 0; s < S; ++s) kk::mbarrier_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0)
    for (int s = 0; s < S; ++s) refill(s, blockIdx.x + (long long)s * gridDim.x);
  P wv[KP], bv[KP];
#pragma unroll
  for (int k = 0; k < KP; ++k) {
    const int p = tid + k * NT;
    if (p < packs) {
      wv[k] = kk::load_vec<W>(w + p * W);
      if (LN) bv[k] = kk::load_vec<W>(b + p * W);
    }
  }
  int i = 0;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x, ++i) {
    const int s = i % S;
    kk::mbarrier_wait(bar(s), (unsigned)(i / S) & 1u);
    const P* st = reinterpret_cast<const P*>(smem + s * row_bytes);
    P v[KP];
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < KP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        v[k] = st[p];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float f = kk::acc_at(v[k], j);
          acc += LN ? f : f * f;
        }
      }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    float* rb = red + (i & 1) * 64;
    if (lane == 0) rb[warp] = acc;
    __syncthreads();  // every thread has read stage s, and the warp sums are in
    if (!REREAD && tid == 0) refill(s, r + (long long)S * gridDim.x);
    float tot = 0.f;
    for (int j = 0; j < nw; ++j) tot += rb[j];
    float mu = 0.f, rs;
    if (LN) {
      mu = tot / cols;
      float q = 0.f;
#pragma unroll
      for (int k = 0; k < KP; ++k) {
        if (tid + k * NT < packs) {
#pragma unroll
          for (int j = 0; j < W; ++j) {
            const float d = kk::acc_at(v[k], j) - mu;
            q += d * d;
          }
        }
      }
      for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
      if (lane == 0) rb[32 + warp] = q;
      __syncthreads();
      float var = 0.f;
      for (int j = 0; j < nw; ++j) var += rb[32 + j];
      rs = rsqrtf(var / cols + eps);
    } else {
      rs = rsqrtf(tot / cols + eps);
    }
    if (tid == 0) {
      if (rstd) rstd[r] = rs;
      if (LN && mean) mean[r] = mu;
    }
#pragma unroll
    for (int k = 0; k < KP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        const P xv = REREAD ? st[p] : v[k];
        float f[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float a = kk::acc_at(xv, j), g = kk::acc_at(wv[k], j);
          f[j] = LN ? fmaf((a - mu) * rs, g, kk::acc_at(bv[k], j)) : a * rs * g;
        }
        kk::store_vec<W>(y + r * cols + p * W, kk::acc_to_vec<T, W>(f));
      }
    }
    if (REREAD) {
      __syncthreads();  // every thread has read stage s twice
      if (tid == 0) refill(s, r + (long long)S * gridDim.x);
    }
  }
}
"""


def _line(name, dtype, cols, tag, us, pct, err=None):
    tail = "" if err is None else f" err {err:.2e}"
    print(f"{name:10s} {str(dtype)[6:]:8s} {cols:5d} {tag:28s} {us:8.1f} us {pct:5.1f}%{tail}")


def time_case(mod, variants, dtype, cols, ln, sms, copy, reps, rows=32768):
    """The shipped op, torch.compile and each bulk-copy variant at ``rows`` x ``cols``."""
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    w = (1 + 0.1 * torch.randn(cols, device="cuda")).to(dtype)
    bias = (0.1 * torch.randn(cols, device="cuda")).to(dtype)
    eps = 1e-5 if ln else 1e-6
    nbytes = 2 * x.nbytes
    name = "layer_norm" if ln else "rms_norm"
    if ln:
        ref = kernelkit.ops.layer_norm(x, w, bias, eps)
        comp = torch.compile(lambda x, w, b: torch.nn.functional.layer_norm(x, (cols,), w, b, eps), dynamic=False)
        timed = {
            "shipped": lambda: kernelkit.ops.layer_norm(x, w, bias, eps),
            "torch.compile": lambda: comp(x, w, bias),
        }
    else:
        ref = kernelkit.ops.rms_norm(x, w, eps)
        comp = torch.compile(_rms_norm_reference, dynamic=False)
        timed = {"shipped": lambda: kernelkit.ops.rms_norm(x, w, eps), "torch.compile": lambda: comp(x, w)}
    out = []
    for tag, fn in timed.items():
        fn()
        us = _gpu_median_ms([fn], reps=reps) * 1e3
        out.append(dict(op=name, dtype=str(dtype)[6:], cols=cols, variant=tag, us=us))
        _line(name, dtype, cols, tag, us, nbytes / us / 1e3 / copy * 100)
    y = torch.empty_like(x)
    mean = torch.empty(rows, device="cuda")
    rstd = torch.empty(rows, device="cuda")
    for _, _, nt, kp, s, _, e in variants:
        k = mod.kernel(e)
        smem = s * cols * dtype.itemsize + s * 8 + 256 * 4
        try:
            occ = k.occupancy(nt, smem)
        except kernelkit.KernelkitError as err:
            print(e, nt, "skipped:", err)
            continue
        for bps in sorted({occ, max(1, occ - 1), min(occ, 2)} - {0}):

            def run(k=k, grid=bps * sms, nt=nt, smem=smem):
                k.launch(grid, nt, (x, w, bias, y, mean, rstd, rows, cols, eps), shared_mem=smem)

            run()
            err = (y.float() - ref.float()).abs().max().item()
            us = _gpu_median_ms([run], reps=reps) * 1e3
            tag = f"NT{nt} KP{kp} S{s} {'reread ' if e.endswith('true>') else ''}{bps}/SM"
            out.append(dict(op=name, dtype=str(dtype)[6:], cols=cols, variant=tag, us=us, err=err))
            _line(name, dtype, cols, tag, us, nbytes / us / 1e3 / copy * 100, err)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    dev = torch.cuda.current_device()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    copy = copy_bandwidth()
    exprs, variants = [], []
    for dtype in (torch.float32, torch.bfloat16):
        for cols in (4096, 8192):
            packs = cols * dtype.itemsize // 16
            for nt in (128, 256, 512):
                kp = -(-packs // nt)
                if kp > 8 or kp < 1 or packs < nt // 2:
                    continue
                for s in (1, 2, 3, 4):
                    for ln in (False, True):
                        for rr in (False, True):
                            e = f"norm_bulk<{CTYPE[dtype]}, {kp}, {s}, {str(ln).lower()}, {str(rr).lower()}>"
                            exprs.append(e)
                            variants.append((dtype, cols, nt, kp, s, ln, e))
    common = {"common.cuh": _native.op_source("common.cuh")}
    mod = kernelkit.load_inline("exp_bulk_rows", SRC, name_expressions=sorted(set(exprs)), headers=common)
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        for cols in (4096, 8192):
            for ln in (False, True):
                mine = [v for v in variants if v[:2] == (dtype, cols) and v[5] == ln]
                results += time_case(mod, mine, dtype, cols, ln, sms, copy, a.reps)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"copy_gbps": copy, "gpu": torch.cuda.get_device_name(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
