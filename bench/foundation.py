"""Foundation benchmarks: compile, cache load, launch and op-call host costs. Writes JSON.

Run on a GPU machine: python3 bench/foundation.py --out results.json
Host times are wall-clock microseconds per call on 16-element tensors: the baseline's method (20000
calls after warm-up, as in ../shared/baseline), taken as the median of 5 such runs (hostpath.per_call_us).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid

import torch
from hostpath import per_call_us as host_us  # bench/ is on sys.path when run as a script

import kernelkit

MUL = r"""
extern "C" __global__ void kk_bench_mul(const float* a, const float* b, float* c, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}
"""


def fresh_process_load_ms(source: str) -> dict:
    """Time load_inline + kernel lookup in a new process whose disk cache already holds the compile."""
    code = textwrap.dedent(f"""
        import time, json, torch, kernelkit
        torch.cuda.init(); torch.empty(1, device="cuda")
        t0 = time.perf_counter()
        mod = kernelkit.load_inline("fresh", {source!r})
        k = mod.kernel("kk_bench_mul")
        t1 = time.perf_counter()
        x = torch.ones(16, device="cuda")
        k.launch(1, 32, (x, x, x, 16)); torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(json.dumps(dict(load_ms=(t1 - t0) * 1e3, first_launch_ms=(t2 - t1) * 1e3)))
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # fills the cache
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
        for _ in range(5)
    ]
    return {k: round(sorted(r[k] for r in runs)[2], 2) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    res: dict = {}
    p = torch.cuda.get_device_properties(0)
    res["gpu"] = f"{p.name} sm_{p.major}{p.minor} SMs={p.multi_processor_count}"
    res["torch"] = torch.__version__
    res["driver"] = kernelkit._native.driver_info()
    res["nvrtc"] = {k: v for k, v in kernelkit._native.nvrtc_info().items() if k != "supported_archs"}

    # Cold compiles: a fresh source each time (no cache), NVRTC already loaded by the first one.
    t0 = time.perf_counter()
    kernelkit.compile(MUL + f"// {uuid.uuid4()}", arch="sm_90", use_cache=False)
    res["first_compile_in_process_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    cold = []
    for _ in range(5):
        t0 = time.perf_counter()
        kernelkit.compile(MUL + f"// {uuid.uuid4()}", arch="sm_90", use_cache=False)
        cold.append((time.perf_counter() - t0) * 1e3)
    res["cold_compile_small_kernel_ms_median"] = round(sorted(cold)[2], 1)
    half_src = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + MUL
    t0 = time.perf_counter()
    kernelkit.compile(half_src + f"// {uuid.uuid4()}", arch="sm_90", use_cache=False)
    res["cold_compile_with_fp16_bf16_headers_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    res["fresh_process_disk_cache"] = fresh_process_load_ms(MUL)

    mod = kernelkit.load_inline("bench_mul", MUL)
    k = mod.kernel("kk_bench_mul")
    small = torch.randn(16, device="cuda")
    out = torch.empty_like(small)
    res["launch_us_kernelkit_kernel_launch"] = host_us(lambda: k.launch(1, 32, (small, small, out, 16)))
    res["launch_us_torch_eager_mul"] = host_us(lambda: torch.mul(small, small))

    def launch_mul(a, b, c):
        k.launch((a.numel() + 255) // 256, 256, (a, b, c, a.numel()))

    spec = kernelkit.TensorSpec(dtypes=(torch.float32,), contiguous=True)
    kk_mul = kernelkit.op(
        "kkbench::mul(Tensor a, Tensor b) -> Tensor", inputs={"a": spec, "b": spec}, output=kernelkit.like("a")
    )(launch_mul)
    res["op_call_us_kernelkit_registered_op"] = host_us(lambda: kk_mul(small, small))
    import kernelkit.ops as K

    res["op_call_us_kernelkit_ops_muladd_with_backward"] = host_us(lambda: K.muladd(small, small, small))
    res["op_call_us_torch_ops_direct"] = host_us(lambda: torch.ops.kkbench.mul.default(small, small))

    @torch.library.custom_op("kkbench::cmul", mutates_args=())
    def cmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mul(a, b)

    cmul.register_fake(lambda a, b: torch.empty_like(a))
    res["op_call_us_torch_custom_op_wrapping_mul"] = host_us(lambda: cmul(small, small))
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("KERNELKIT_CACHE_DIR", "/tmp/kernelkit-bench-cache")
    main()
