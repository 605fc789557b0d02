"""Experiment: the host microseconds of allocations, launches and whole op calls on small CUDA tensors.

Host time only: batches of calls timed without waiting for the GPU, the cases in turn (median and min of batches).
It times:

- allocations as the ops could make them (torch's Python argument parser takes a size tuple slower than
  sizes passed one by one: 1.8 against 1.1 us on the dev machine's CPU tensors);
- one launch: ``Kernel.launch`` against ``cuLaunchKernel`` called through ctypes and CuPy's RawKernel on the same
  source (the driver's floor, with ctypes' or CuPy's own cost in it);
- whole op calls against the torch ops they replace.

Run it once per installed kernelkit to compare two builds (PYTHONPATH picks the build):

    python3 bench/exp_host_calls.py --label new --out host_calls.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time

import torch
import torch.nn.functional as F

import kernelkit
import kernelkit.ops as K

SRC = r"""
extern "C" __global__ void mul3(const float* a, const float* b, float* c, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}
"""


def host_us(cases: dict, rounds: int = 40, n: int = 200) -> dict:
    """Per case, (median, min) over ``rounds`` batches of ``n`` calls of the mean host time per call, the cases taken in
    turn each round so that the host's slow spells reach every case alike (its per-call times drifted up to 2x
    within a run)."""
    for f in cases.values():
        for _ in range(200):
            f()
    torch.cuda.synchronize()
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, f in cases.items():
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
    return {name: (round(statistics.median(t), 2), round(min(t), 2)) for name, t in times.items()}


def ctypes_launch(x: torch.Tensor, y: torch.Tensor):
    """cuLaunchKernel through ctypes on mul3 loaded from kernelkit's CUBIN: the driver's share of a launch."""
    cuda = ctypes.CDLL("libcuda.so.1")
    major, minor = torch.cuda.get_device_capability()
    image = kernelkit.compile(SRC, arch=f"sm_{major}{minor}").image
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuModuleLoadData(ctypes.byref(module), image) == 0
    assert cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"mul3") == 0
    values = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(y.data_ptr())]
    values.append(ctypes.c_int64(x.numel()))
    params = (ctypes.c_void_p * 4)(*(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values))
    launch = cuda.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, None), values


def cupy_launch(x: torch.Tensor, y: torch.Tensor):
    """CuPy's RawKernel launch of mul3 on CuPy's current stream (the legacy default stream, as torch's here)."""
    import cupy

    k = cupy.RawKernel(SRC, "mul3")
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    n = cupy.int64(x.numel())
    k((1,), (32,), (cx, cx, cy, n))
    return lambda: k((1,), (32,), (cx, cx, cy, n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    args = ap.parse_args()
    x = torch.randn(16, device="cuda")
    y = torch.empty_like(x)
    dev, idx, f32 = x.device, x.get_device(), torch.float32
    k3 = kernelkit.load_inline("exp_host_calls", SRC).kernel("mul3")
    raw, keep = ctypes_launch(x, y)
    rows, cols = 64, 256
    logits = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, cols, (rows,), device="cuda")
    h = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    cases = {
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "x.new_empty(128)": lambda: x.new_empty(128),
        "x.new_empty((128,))": lambda: x.new_empty((128,)),
        "x.new_empty(64, 2, dtype=)": lambda: x.new_empty(64, 2, dtype=f32),
        "x.new_empty((64, 2), dtype=)": lambda: x.new_empty((64, 2), dtype=f32),
        "x.new_empty((), dtype=)": lambda: x.new_empty((), dtype=f32),
        "torch.empty(128, dtype=, device=x.device)": lambda: torch.empty(128, dtype=f32, device=dev),
        "torch.empty(128, dtype=, device=index)": lambda: torch.empty(128, dtype=f32, device=idx),
        "cuLaunchKernel via ctypes (3 ptrs, 1 int)": raw,
        "Kernel.launch (3 tensors, 1 int)": lambda: k3.launch(1, 32, (x, x, y, 16)),
        "Kernel.launch (3 ints as pointers, 1 int)": lambda: k3.launch(1, 32, (0, 0, 0, 0)),
        "cupy RawKernel (3 arrays, 1 int)": cupy_launch(x, y),
        "kernelkit.ops.cross_entropy": lambda: K.cross_entropy(logits, target),
        "torch F.cross_entropy": lambda: F.cross_entropy(logits, target),
        "kernelkit.ops.cross_entropy none": lambda: K.cross_entropy(logits, target, reduction="none"),
        "torch F.cross_entropy none": lambda: F.cross_entropy(logits, target, reduction="none"),
        "kernelkit.ops.rms_norm": lambda: K.rms_norm(h, w, 1e-6),
        "torch F.rms_norm": lambda: F.rms_norm(h, (cols,), w, 1e-6),
        "kernelkit.ops.layer_norm": lambda: K.layer_norm(h, w, b, 1e-5),
        "torch F.layer_norm": lambda: F.layer_norm(h, (cols,), w, b, 1e-5),
        "kernelkit.ops.softmax": lambda: K.softmax(h),
        "torch softmax": lambda: torch.softmax(h, -1),
        "kernelkit.ops.swiglu": lambda: K.swiglu(h, h),
        "kernelkit.ops.muladd": lambda: K.muladd(x, x, y),
        "torch.mul + torch.add": lambda: torch.add(torch.mul(x, x), y),
        "torch.mul": lambda: torch.mul(x, x),
    }
    res = host_us(cases)
    for name, (med, low) in res.items():
        print(f"{args.label:6s} {name:44s} median {med:7.2f} us  min {low:7.2f} us", flush=True)
    del keep
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"label": args.label, "host_us": res}, fh, indent=1)


if __name__ == "__main__":
    main()
