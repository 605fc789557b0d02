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
from kernelkit.bench import _gpu_median_ms, _rms_norm_reference, copy_bandwidth

SRC = r"""
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

template <typename T> struct P;  // 16-byte packs as float values
template <> struct P<float> {
  static constexpr int W = 4;
  __device__ static void unpack(const uint4& u, float (&f)[4]) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y); f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
  __device__ static uint4 pack(const float (&f)[4]) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};
template <> struct P<__nv_bfloat16> {
  static constexpr int W = 8;
  __device__ static void unpack(const uint4& u, float (&f)[8]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ static uint4 pack(const float (&f)[8]) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<unsigned*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

// One block per row at a time, S rows in flight: stage s of block b holds its rows i = s, s + S, ...
// (row blockIdx.x + i * gridDim.x). KP 16-byte packs per thread (p = tid + k * NT) hold the row for the
// output pass (REREAD: the output pass reads the stage again, which is refilled only after it). cols * sizeof(T)
// % 16 == 0 and x 16-byte aligned.
template <typename T, int KP, int S, bool LN, bool REREAD>
__global__ void __launch_bounds__(512) norm_bulk(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                                                 float* __restrict__ rstd, long long rows, int cols, float eps) {
  using Pk = P<T>;
  constexpr int W = Pk::W;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned row_bytes = (unsigned)cols * sizeof(T);
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + S * row_bytes);
  float* red = reinterpret_cast<float*>(bars + S);  // [2 buffers][2 sums][32 warps]
  const int tid = threadIdx.x, NT = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = NT >> 5;
  const int packs = cols / W;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&bars[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      const long long r = blockIdx.x + (long long)s * gridDim.x;
      if (r < rows) bulk_load(sa(smem + s * row_bytes), x + r * cols, row_bytes, sa(&bars[s]));
    }
  }
  uint4 wv[KP], bv[KP];
#pragma unroll
  for (int k = 0; k < KP; ++k) {
    const int p = tid + k * NT;
    if (p < packs) {
      wv[k] = __ldg(reinterpret_cast<const uint4*>(w) + p);
      if (LN) bv[k] = __ldg(reinterpret_cast<const uint4*>(b) + p);
    }
  }
  int i = 0;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x, ++i) {
    const int s = i % S;
    bar_wait(sa(&bars[s]), (unsigned)(i / S) & 1u);
    const uint4* st = reinterpret_cast<const uint4*>(smem + s * row_bytes);
    uint4 v[KP];
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < KP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        v[k] = st[p];
        float f[W];
        Pk::unpack(v[k], f);
#pragma unroll
        for (int j = 0; j < W; ++j) acc += LN ? f[j] : f[j] * f[j];
      }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    float* rb = red + (i & 1) * 64;
    if (lane == 0) rb[warp] = acc;
    __syncthreads();  // every thread has read stage s, and the warp sums are in
    if (!REREAD && tid == 0) {
      const long long rn = r + (long long)S * gridDim.x;
      if (rn < rows) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        bulk_load(sa(smem + s * row_bytes), x + rn * cols, row_bytes, sa(&bars[s]));
      }
    }
    float tot = 0.f;
    for (int j = 0; j < nw; ++j) tot += rb[j];
    float mu = 0.f, rs;
    if (LN) {
      mu = tot / cols;
      float q = 0.f;
#pragma unroll
      for (int k = 0; k < KP; ++k) {
        const int p = tid + k * NT;
        if (p < packs) {
          float f[W];
          Pk::unpack(v[k], f);
#pragma unroll
          for (int j = 0; j < W; ++j) q += (f[j] - mu) * (f[j] - mu);
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
    uint4* yr = reinterpret_cast<uint4*>(y + r * cols);
#pragma unroll
    for (int k = 0; k < KP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        float f[W], g[W], c[W];
        Pk::unpack(REREAD ? st[p] : v[k], f);
        Pk::unpack(wv[k], g);
        if (LN) Pk::unpack(bv[k], c);
#pragma unroll
        for (int j = 0; j < W; ++j) f[j] = LN ? fmaf((f[j] - mu) * rs, g[j], c[j]) : f[j] * rs * g[j];
        yr[p] = Pk::pack(f);
      }
    }
    if (REREAD) {
      __syncthreads();  // every thread has read stage s twice
      if (tid == 0) {
        const long long rn = r + (long long)S * gridDim.x;
        if (rn < rows) {
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          bulk_load(sa(smem + s * row_bytes), x + rn * cols, row_bytes, sa(&bars[s]));
        }
      }
    }
  }
}
"""

CT = {torch.float32: "float", torch.bfloat16: "__nv_bfloat16"}


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
                            e = f"norm_bulk<{CT[dtype]}, {kp}, {s}, {str(ln).lower()}, {str(rr).lower()}>"
                            exprs.append(e)
                            variants.append((dtype, cols, nt, kp, s, ln, e))
    mod = kernelkit.load_inline("exp_bulk_rows", SRC, name_expressions=sorted(set(exprs)))
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
