"""Experiment: held 16-bit norm backwards whose (x, gy) rows arrive by bulk copy into S shared-memory stages.

Before session 24 the held bf16 backwards (32768 x 4096/8192) ran at 82-88% of copy: a block held one row in
registers and loaded the next one ahead, so each SM had two rows of (x, gy) in flight (2 blocks x 16 KB at 4096
columns), which Little's law puts near 85% at the loaded DRAM latency. Register prefetch cannot go deeper without
spilling, nor did per-thread cp.async staging help (bench/NOTES.md session 13). A bulk copy (cp.async.bulk, one
instruction per row and tensor) costs no registers: S rows in flight per block, bounded by shared memory. This times
such kernels (each followed by the shipped kk_column_sum) against the op, at the resident blocks per SM and at two.
What it found is now kk_layer_norm_bwd_bulk and kk_rms_norm_bwd_bulk (kernels/norms.cu): where they apply, "op" runs
one.

    python3 bench/exp_bulk_bwd.py --out bulk_bwd.json
    EXP_BULK_CASES=rms_norm:4096 python3 bench/exp_bulk_bwd.py   # some of the cases (NAME:COLS, comma-separated)
"""

from __future__ import annotations

import os

import torch
from sweep_common import interleaved, run_cases

import kernelkit
from kernelkit import _native
from kernelkit.bench import _gpu_median_ms
from kernelkit.ops import norms
from kernelkit.ops._runtime import BLOCK, CTYPE, cdiv, kernel

SRC = r"""
#include "common.cuh"

using kk::Vec;

// Rows r = blockIdx.x + i * gridDim.x; stage i % S holds row i's x then gy. KP packs per thread (p = tid + k * NT).
// The block's weight (and bias) gradient sums go to partial row blockIdx.x (pb: the bias's, LN only).
// 16-bit math as the shipped kernel's (kScaleOnce): c2 = rs * sum(g * (x - mu)) / cols.
template <typename T, int KP, int S, bool LN, int NTB, int MINB>
__global__ void __launch_bounds__(NTB, MINB) norm_bwd_bulk(const T* __restrict__ gy, const T* __restrict__ x,
    const T* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ gx,
    float* __restrict__ pw, float* __restrict__ pb, long long rows, int cols) {
  constexpr int W = 16 / sizeof(T);
  using P = Vec<T, W>;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned row_bytes = (unsigned)cols * sizeof(T);
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + 2 * S * row_bytes);
  float* red = reinterpret_cast<float*>(bars + S);  // [2 parities][2 sums][32 warps]: 512 bytes
  const int tid = threadIdx.x, NT = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = NT >> 5;
  const int packs = cols / W;
  auto stage = [&](int s) { return smem + 2 * s * row_bytes; };
  auto bar = [&](int s) { return kk::smem_address(&bars[s]); };
  auto refill = [&](int s, long long r) {
    if (r < rows) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after this stage's generic reads
      kk::mbarrier_expect_tx(bar(s), 2 * row_bytes);
      kk::bulk_load(kk::smem_address(stage(s)), x + r * cols, row_bytes, bar(s));
      kk::bulk_load(kk::smem_address(stage(s) + row_bytes), gy + r * cols, row_bytes, bar(s));
    }
  };
  if (tid == 0) {
    for (int s = 0; s < S; ++s) kk::mbarrier_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0)
    for (int s = 0; s < S; ++s) refill(s, blockIdx.x + (long long)s * gridDim.x);
  float wf[KP][W], aw[KP][W], ab[KP][W];
#pragma unroll
  for (int k = 0; k < KP; ++k) {
    const int p = tid + k * NT;
    kk::vec_to_acc(kk::load_vec_if<W>(w + p * W, p < packs), wf[k]);
#pragma unroll
    for (int j = 0; j < W; ++j) aw[k][j] = ab[k][j] = 0.f;
  }
  long long r = blockIdx.x;
  float rs = 0.f, mu = 0.f;
  if (r < rows) {
    rs = rstd[r];
    if (LN) mu = mean[r];
  }
  const float acols = (float)cols;
  for (int i = 0; r < rows; r += gridDim.x, ++i) {
    const int s = i % S;
    const long long rn = r + gridDim.x;
    float rsn = 0.f, mun = 0.f;
    if (rn < rows) {
      rsn = rstd[rn];
      if (LN) mun = mean[rn];
    }
    kk::mbarrier_wait(bar(s), (unsigned)(i / S) & 1u);
    const P* sx = reinterpret_cast<const P*>(stage(s));
    const P* sg = reinterpret_cast<const P*>(stage(s) + row_bytes);
    P xv[KP], gv[KP];
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int k = 0; k < KP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        xv[k] = sx[p];
        gv[k] = sg[p];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float g = kk::acc_at(gv[k], j) * wf[k][j];
          if (LN) s0 += g;
          s1 = fmaf(g, LN ? kk::acc_at(xv[k], j) - mu : kk::acc_at(xv[k], j), s1);
        }
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      if (LN) s0 += __shfl_xor_sync(0xffffffffu, s0, o);
      s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    }
    float* rb = red + (i & 1) * 64;
    if (lane == 0) {
      rb[warp] = s0;
      rb[32 + warp] = s1;
    }
    __syncthreads();  // every thread has read stage s, and the warp sums are in
    if (tid == 0) refill(s, r + (long long)S * gridDim.x);
    float t0 = 0.f, t1 = 0.f;
    for (int j = 0; j < nw; ++j) {
      if (LN) t0 += rb[j];
      t1 += rb[32 + j];
    }
    const float c1 = LN ? t0 / acols : 0.f;
    const float c2 = rs * t1 / acols;
#pragma unroll
    for (int k = 0; k < KP; ++k) {
      const int p = tid + k * NT;
      if (p < packs) {
        float o[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float dy = kk::acc_at(gv[k], j);
          const float g = dy * wf[k][j];
          const float xh = (kk::acc_at(xv[k], j) - mu) * rs;
          o[j] = rs * (g - c1 - xh * c2);
          aw[k][j] = fmaf(dy, xh, aw[k][j]);
          if (LN) ab[k][j] += dy;
        }
        kk::store_vec<W>(gx + r * cols + p * W, kk::acc_to_vec<T, W>(o));
      }
    }
    rs = rsn;
    mu = mun;
  }
#pragma unroll
  for (int k = 0; k < KP; ++k) {
    const int p = tid + k * NT;
    if (p < packs) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        pw[(long long)blockIdx.x * cols + p * W + j] = aw[k][j];
        if (LN) pb[(long long)blockIdx.x * cols + p * W + j] = ab[k][j];
      }
    }
  }
}
"""

NAMES = {"layer_norm": True, "rms_norm": False}
# (threads, stages, minimum blocks per SM) per width
FITS = {
    4096: [(256, s, b) for s in (2, 3, 4) for b in (2, 3, 4)] + [(512, s, b) for s in (2, 3) for b in (1, 2)],
    8192: [(512, s, 1) for s in (2, 3)] + [(256, 2, 2), (256, 3, 2)],
}
CASES = [
    (name, torch.bfloat16, 32768, cols)
    for name in NAMES
    for cols in (4096, 8192)
    if f"{name}:{cols}" in os.environ.get("EXP_BULK_CASES", f"{name}:{cols}").split(",")
]


def module(exprs=None):
    """The experiment's kernels: ``exprs``, or every fit of FITS (bfloat16)."""
    if exprs is None:
        exprs = []
        for ln in NAMES.values():
            for cols, fits in FITS.items():
                for nt, s, minb in fits:
                    kp = cols // 8 // nt
                    exprs.append(f"norm_bwd_bulk<__nv_bfloat16, {kp}, {s}, {str(ln).lower()}, {nt}, {minb}>")
    common = {"common.cuh": _native.op_source("common.cuh")}
    return kernelkit.load_inline("exp_bulk_bwd", SRC, name_expressions=sorted(set(exprs)), headers=common)


_MOD = []


def time_case(name, dtype, rows, cols, copy, reps):
    if not _MOD:
        _MOD.append(module())
    mod = _MOD[0]
    ln = NAMES[name]
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    g = torch.randn_like(x)
    w = torch.randn(cols, dtype=dtype, device="cuda")
    b = torch.randn(cols, dtype=dtype, device="cuda")
    if ln:
        _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
        op = lambda: norms.layer_norm_backward(g, x, w, mean, rstd)  # noqa: E731
    else:
        _, rstd = norms._rms_norm(x, w, 1e-6)
        mean = rstd
        op = lambda: norms.rms_norm_backward(g, x, w, rstd)  # noqa: E731
    ref = [t.clone() for t in op()]
    column_sum = kernel("norms", f"kk_column_sum<{CTYPE[dtype]}>")
    ngrads = 2 if ln else 1
    calls = {"op": [op]}
    checks = []
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    for nt, s, minb in FITS[cols]:
        kp = cols // 8 // nt
        k = mod.kernel(f"norm_bwd_bulk<__nv_bfloat16, {kp}, {s}, {str(ln).lower()}, {nt}, {minb}>")
        smem = 2 * s * cols * dtype.itemsize + 8 * s + 128 * 4
        try:
            occ = k.occupancy(nt, smem)
        except kernelkit.KernelkitError as err:
            print(f"{name} {cols} NT{nt} S{s} MINB{minb}: skipped: {err}")
            continue
        if occ == 0:
            print(f"{name} {cols} NT{nt} S{s} MINB{minb}: does not fit")
            continue
        # the resident blocks, and fewer (an occupancy the register bound allows but need not be best)
        for bps in sorted({occ, min(occ, 2)}, reverse=True):
            grid = bps * sms
            gx = torch.empty_like(x)
            part = torch.empty(ngrads, grid, cols, dtype=torch.float32, device="cuda")
            grads = [torch.empty(cols, dtype=dtype, device="cuda") for _ in range(ngrads)]
            pb = part[1] if ln else part[0]

            def run(k=k, grid=grid, nt=nt, smem=smem, gx=gx, part=part, pb=pb, grads=grads):
                k.launch(grid, nt, (g, x, w, mean, rstd, gx, part[0], pb, rows, cols), shared_mem=smem)
                sums = (part, grads[0], 0, grid, cols) if len(grads) == 1 else (part, *grads, grid, cols)
                column_sum.launch((cdiv(cols, 32), len(grads)), BLOCK, sums)
                return (gx, *grads)

            tag = f"bulk NT{nt} KP{kp} S{s} {bps}/SM MINB{minb}"
            got = run()
            err = max((a.float() - e.float()).abs().max().item() for a, e in zip(got, ref))
            ok = all(torch.allclose(a.float(), e.float(), rtol=2e-2, atol=2e-2) for a, e in zip(got, ref))
            checks.append((tag, err, ok))
            calls[tag] = [run]
    for tag, err, ok in checks:
        print(f"  {tag}: max abs err {err:.3e}{'' if ok else ' WRONG'}")
    _gpu_median_ms([op], reps=3)
    out = []
    nbytes = 3 * x.nbytes
    for tag, us, pct, _ in interleaved(calls, reps, nbytes, copy):
        print(f"{name}_backward bf16 {rows}x{cols:<5d} {tag:28s} {us:8.1f} us {pct:5.1f}%", flush=True)
        out.append(dict(op=f"{name}_backward", size=f"{rows}x{cols}", variant=tag, us=us, pct_copy=pct))
    return out


def main() -> None:
    torch.manual_seed(0)
    run_cases(CASES, time_case, reps=20)


if __name__ == "__main__":
    main()
