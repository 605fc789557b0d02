"""Probe: how far above torch's copy a kernel that reads and writes equal bytes can go on this GPU.

The norm forwards read a row and write one of the same size. Session 33 measured them 0.14-0.36% behind torch.compile
at float32 32768 x 4096 and 8192, where both run at 100-101% of the copy bandwidth `kernelkit bench` reports against
(torch's ``y.copy_(x)``). Whether any 1:1 kernel goes faster decides whether those cells have room left. This times,
over buffers of the norm cells' sizes:

- torch's ``copy_`` (the bench's reference);
- ``copy_rows<U>``: each 256-thread block copies its own U x 4 KB (16-byte loads, all U in flight, then the stores),
  one pass;
- ``copy_grid<U>``: resident blocks striding over the buffer, U loads in flight per thread, with plain or streaming
  (``st.global.cs``) stores;
- ``copy_bulk<S>``: one thread per CTA drives the TMA engine: chunks of C bytes loaded by bulk copies into S
  shared-memory stages (mbarriers), each stored back by a bulk copy from shared memory;
- kernelkit's rms_norm on float32 rows of the same bytes, for reference.

    cd bench && python3 exp_copy_roofline.py --out copy-roofline.json

H200 (h200-2026-11-27-s37/copy-roofline.log, copy 4253 GB/s): no copy beats the simplest. At 1024 MiB torch's copy_
took 507.5 us (99.5% of copy), one 16-byte load per thread in one pass 505.3 (99.9%), more loads in flight 518.8-526.3,
resident grids 539-549 (streaming stores 0.3-0.7% faster than plain there), bulk copies through shared memory
545-555; kernelkit's rms_norm float32 32768 x 8192 500.5 (100.9%). At 512 MiB the same order (rms_norm 100.0%).
"""

import argparse

import torch
from sweep_common import write_results

import kernelkit
import kernelkit.ops as K
from kernelkit.bench import _gpu_median_ms, copy_bandwidth

SRC = r"""
template <bool CS>
__device__ __forceinline__ void store(int4* p, const int4& v) {
  if (CS) {
    asm volatile("st.global.cs.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  } else {
    *p = v;
  }
}

template <int U>
__global__ void __launch_bounds__(256) copy_rows(const int4* __restrict__ x, int4* __restrict__ y, long long n) {
  const long long base = blockIdx.x * (256LL * U) + threadIdx.x;
  int4 v[U];
#pragma unroll
  for (int k = 0; k < U; ++k) v[k] = base + 256 * k < n ? __ldg(x + base + 256 * k) : make_int4(0, 0, 0, 0);
#pragma unroll
  for (int k = 0; k < U; ++k)
    if (base + 256 * k < n) y[base + 256 * k] = v[k];
}

template <int U, bool CS>
__global__ void __launch_bounds__(256) copy_grid(const int4* __restrict__ x, int4* __restrict__ y, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    int4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = __ldg(x + i + k * stride);
#pragma unroll
    for (int k = 0; k < U; ++k) store<CS>(y + i + k * stride, v[k]);
  }
  for (; i < n; i += stride) store<CS>(y + i, __ldg(x + i));
}

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Chunks blockIdx.x, blockIdx.x + gridDim.x, ... of `chunk` bytes each (nbytes a multiple of it), S stages.
template <int S>
__global__ void __launch_bounds__(32) copy_bulk(const char* x, char* y, long long nbytes, unsigned chunk) {
  extern __shared__ __align__(128) char buf[];
  __shared__ __align__(8) unsigned long long bar[S];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar[s])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const long long chunks = nbytes / chunk;
  auto load = [&](int s, long long c) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(&bar[s])), "r"(chunk) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem(buf + s * chunk)), "l"(x + c * chunk), "r"(chunk), "r"(smem(&bar[s])) : "memory");
  };
  for (int s = 0; s < S; ++s) {
    const long long c = blockIdx.x + (long long)s * gridDim.x;
    if (c < chunks) load(s, c);
  }
  for (long long j = 0;; ++j) {
    const long long c = blockIdx.x + j * gridDim.x;
    if (c >= chunks) break;
    const int s = int(j % S);
    const unsigned parity = unsigned(j / S) & 1u, b = smem(&bar[s]);
    unsigned done = 0;
    while (!done)
      asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                   "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(b), "r"(parity) : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(y + c * chunk), "r"(smem(buf + s * chunk)), "r"(chunk) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    const long long next = c + (long long)S * gridDim.x;
    if (next < chunks) {
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // stage s read out before it is refilled
      load(s, next);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
"""


def time_size(mod, cols: int, copy: float, sms: int, results: list) -> None:
    """Every variant over 32768 float32 rows of ``cols`` (the norm cell's bytes, read and written once)."""
    nbytes = 32768 * cols * 4
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    y = torch.empty_like(x)
    n16 = nbytes // 16
    mb = nbytes // 2**20

    def report(label: str, fn, **fields) -> None:
        ms = _gpu_median_ms([fn], reps=60)
        gbps = 2 * nbytes / ms / 1e6
        label = f"{mb} MiB {label}"
        print(f"{label:52s} {ms * 1e3:8.2f} us {gbps:6.0f} GB/s {100 * gbps / copy:6.2f}% of copy ({copy:.0f})")
        results.append(dict(fields, label=label, mib=mb, us=ms * 1e3, gbps=gbps, pct_copy=100 * gbps / copy))

    report("torch copy_", lambda: y.copy_(x), kind="torch")
    for u in (1, 2, 4, 8):
        k = mod.kernel(f"copy_rows<{u}>")
        grid = -(-n16 // (256 * u))
        report(f"rows U{u}", lambda k=k, g=grid: k.launch(g, 256, (x, y, n16)), u=u)
    for u in (2, 4, 8):
        for cs in ("false", "true"):
            k = mod.kernel(f"copy_grid<{u}, {cs}>")
            for per_sm in (4, 8):
                grid = per_sm * sms
                report(
                    f"grid U{u} cs {cs} {per_sm} blocks/SM",
                    lambda k=k, g=grid: k.launch(g, 256, (x, y, n16)),
                    u=u,
                    cs=cs,
                    per_sm=per_sm,
                )
    for s, chunk in ((2, 16384), (4, 8192), (4, 16384), (3, 32768), (6, 16384)):
        k = mod.kernel(f"copy_bulk<{s}>")
        per_sm = max(1, k.occupancy(32, s * chunk))
        grid = per_sm * sms
        report(
            f"bulk S{s} chunk {chunk // 1024} KB ({per_sm}/SM)",
            lambda k=k, g=grid, s=s, c=chunk: k.launch(g, 32, (x, y, nbytes, c), s * c),
            stages=s,
            chunk=chunk,
            per_sm=per_sm,
        )
    xf = x.view(torch.float32).view(32768, cols).normal_()
    w = torch.ones(cols, device="cuda")
    report("kernelkit rms_norm float32", lambda: K.rms_norm(xf, w, 1e-6), kind="rms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a = ap.parse_args()
    mod = kernelkit.load_inline("copy_roofline", SRC)
    copy = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for cols in (4096, 8192):  # the float32 norm cells: 32768 rows
        time_size(mod, cols, copy, sms, results)
    write_results(a.out, copy, results)


if __name__ == "__main__":
    main()
