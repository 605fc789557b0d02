"""Probe: the read-only bandwidth of this GPU, next to the copy bandwidth that `kernelkit bench` reports against, and
what the cross-entropy forward's shape and math cost on top of it.

cross_entropy's forward only reads its logits, so its "% of copy" compares a read-only kernel with a copy's bytes read
+ written. This times (1) a kernel reading a buffer in 16-byte loads (U loads in flight per thread, a grid of W waves
of resident blocks striding over it), then (2) over the bf16 32768 x 4096 cell, a warp per 8 KB row as the
cross-entropy forward's warp rows (math 0: loads only; 1: one ex2 per element, summed; 2: also the running max and
the rescale; rows gw + k * warps, or a contiguous run per warp):

    cd bench && python3 exp_read_roofline.py --out read.json

H200 (h200-2026-11-24-s28/read.log, read-rows.log, read-math.log): 268 MB read in 62.4-63.3 us (100-102% of copy),
537 MB 106%, 1074 MB 108%; the warp rows 63.4-63.6 us either order; with one ex2 per element 70.0 us, with the max
too 65.7. On another machine of the same kind (read-review.log): 63.5, 65.3, 66.7 and 68.9 us. The math costs 1.4-6 us
and the two runs disagree on which form costs more. The shipped cross-entropy forward takes 72.1 us there.
"""

import argparse

import torch
from sweep_common import write_results

import kernelkit
from kernelkit.bench import _gpu_median_ms, copy_bandwidth

SRC = r"""
template <int U>
__global__ void __launch_bounds__(256) read_all(const int4* x, long long n, unsigned* out) {
  unsigned acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    int4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = __ldg(x + i + k * stride);
#pragma unroll
    for (int k = 0; k < U; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < n; i += stride) {
    const int4 v = __ldg(x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;  // keeps the loads; practically never taken
}

__device__ __forceinline__ float ex2(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// MATH 1: each bf16 element's exp2 summed (one MUFU per element, as cross-entropy); 2: also the running max per
// group of U packs and the sum's rescale (cross-entropy's online max and sum exp, in float).
// Element e (0..7) of a pack of 8 bf16 as a float: the low or high half of its 32-bit word moved to the top bits.
__device__ __forceinline__ float bf16_at(const int4& v, int e) {
  const unsigned w = unsigned(e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w);
  return __uint_as_float(e % 2 ? w & 0xffff0000u : w << 16);
}

template <int MATH, int U>
__device__ __forceinline__ void fold(const int4 (&v)[U], float& m, float& s) {
  float cm = m;
  if (MATH == 2) {
#pragma unroll
    for (int k = 0; k < U; ++k)
#pragma unroll
      for (int e = 0; e < 8; ++e) cm = fmaxf(cm, bf16_at(v[k], e));
    s *= ex2((m - cm) * 1.4427f);
  }
#pragma unroll
  for (int k = 0; k < U; ++k)
#pragma unroll
    for (int e = 0; e < 8; ++e) s += ex2((bf16_at(v[k], e) - cm) * 1.4427f);
  m = cm;
}

// A warp per row of `packs` 16-byte packs, U loads per lane in flight, as the cross-entropy forward's warp rows (with
// fold's MATH on them): rows gw, gw + warps, ... (CONTIG false, the cross-entropy order) or a contiguous run of rows
// per warp (CONTIG true).
template <int U, bool CONTIG, int MATH = 0>
__global__ void __launch_bounds__(256) read_rows(const int4* x, long long rows, int packs, unsigned* out) {
  unsigned acc = 0;
  float m = 0.f, sum = 0.f;
  const int lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
  const long long gw = blockIdx.x * (long long)(blockDim.x >> 5) + (threadIdx.x >> 5);
  const long long per = (rows + warps - 1) / warps;
  const long long r0 = CONTIG ? gw * per : gw, r1 = CONTIG ? min(rows, r0 + per) : rows, step = CONTIG ? 1 : warps;
  for (long long r = r0; r < r1; r += step) {
    const int4* xr = x + r * packs;
    for (int q = lane; q < packs; q += 32 * U) {
      int4 v[U];
#pragma unroll
      for (int k = 0; k < U; ++k) v[k] = q + 32 * k < packs ? __ldg(xr + q + 32 * k) : make_int4(0, 0, 0, 0);
      if (MATH) {
        fold<MATH, U>(v, m, sum);
      } else {
#pragma unroll
        for (int k = 0; k < U; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
      }
    }
    acc = __shfl_xor_sync(0xffffffffu, acc, 1) + acc;  // a dependent step per row, as a row's reduction
  }
  if (MATH) acc ^= __float_as_uint(sum);
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a = ap.parse_args()
    mod = kernelkit.load_inline("read_roofline", SRC)
    copy = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.zeros(64 * sms, dtype=torch.int32, device="cuda")
    results = []

    def report(label: str, k, grid: int, args: tuple, nbytes: int, **fields) -> None:
        ms = _gpu_median_ms([lambda: k.launch(grid, 256, args)], reps=100)
        gbps = nbytes / ms / 1e6
        print(f"{label}: {ms * 1e3:7.2f} us {gbps:6.0f} GB/s {100 * gbps / copy:5.1f}% of copy ({copy:.0f} GB/s)")
        results.append(dict(fields, us=ms * 1e3, gbps=gbps, pct_copy=100 * gbps / copy))

    for mb in (268, 537, 1074):
        x = torch.empty(mb * 1000 * 1000 // 16 * 16, dtype=torch.uint8, device="cuda").random_()
        args = (x, x.numel() // 16, out)
        for u in (2, 4, 8):
            k = mod.kernel(f"read_all<{u}>")
            for waves in (1, 2, 4):
                grid = waves * 8 * sms  # 8 blocks of 256 threads per SM
                report(f"read {mb:5d} MB U{u} waves {waves}", k, grid, args, x.numel(), mb=mb, u=u, waves=waves)
    # the cross-entropy cell's shape: 32768 rows of 4096 bf16 (8 KB), warp rows at 4 or 8 blocks of 256 per SM
    x = torch.empty(32768 * 4096 * 2, dtype=torch.uint8, device="cuda").random_()
    args = (x, 32768, 512, out)
    for contig, math in (("false", 0), ("false", 1), ("false", 2), ("true", 0)):
        k = mod.kernel(f"read_rows<4, {contig}, {math}>")
        for per_sm, waves in ((4, 2), (8, 1)):
            grid = per_sm * waves * sms
            label = f"rows 32768 x 8 KB U4 contiguous {contig:5s} math {math} {per_sm} blocks/SM x {waves} waves"
            report(label, k, grid, args, x.numel(), rows_contig=contig, math=math, u=4, per_sm=per_sm, waves=waves)
    write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
