"""Experiment: the host cost of one launch by each route the CUDA driver and runtime offer, against Kernel.launch's.

The same 4-argument kernel (from kernelkit's NVRTC CUBIN) launched through ctypes by cuLaunchKernel on a CUfunction
(cuModuleLoadData) and on a CUkernel (cuLibraryLoadData), on the legacy, a torch side, a non-blocking and the
per-thread default stream, and by the runtime's cudaLaunchKernel (the libcudart torch loaded); torch's own launch
(torch.cuda._sleep(0), one kernel behind one pybind call) and a whole torch op for scale. Host time only
(exp_host_calls.host_us: batches without waiting for the GPU, the cases in turn):

    cd bench && python3 exp_launch_routes.py

Verdict (H200 machine, h200-2026-11-23-s19/launch-routes.log, min of batches): Kernel.launch 4.32 us, cuLaunchKernel
through ctypes 4.54-4.70 on every stream and handle kind, cudaLaunchKernel 4.08, torch.cuda._sleep(0) 3.60: a launch
costs the driver about 3.5 us on that host, and Kernel.launch adds well under one. The ops' host time beyond a torch
op's is in their Python (checks, outputs, launch sizing), not in the launch. (torch.cuda.stream(side) as a context
manager costs 9 us a use: launch with stream= instead.)
"""

from __future__ import annotations

import ctypes
import re

import torch
from exp_host_calls import SRC, host_us

import kernelkit


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def main() -> None:
    x = torch.randn(16, device="cuda")
    y = torch.empty_like(x)
    major, minor = torch.cuda.get_device_capability()
    image = kernelkit.compile(SRC, arch=f"sm_{major}{minor}").image
    cuda = ctypes.CDLL("libcuda.so.1")
    cudart = sorted(set(re.findall(r"(/\S*libcudart\.so[.\d]*)", open("/proc/self/maps").read())))
    print("cudart loaded:", cudart)
    ptr = ctypes.c_void_p
    module, function, library, kern = ptr(), ptr(), ptr(), ptr()
    assert cuda.cuModuleLoadData(ctypes.byref(module), image) == 0
    assert cuda.cuModuleGetFunction(ctypes.byref(function), module, b"mul3") == 0
    assert cuda.cuLibraryLoadData(ctypes.byref(library), image, None, None, 0, None, None, 0) == 0
    assert cuda.cuLibraryGetKernel(ctypes.byref(kern), library, b"mul3") == 0
    values = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(y.data_ptr())]
    values.append(ctypes.c_int64(16))
    params = (ptr * 4)(*(ctypes.cast(ctypes.byref(v), ptr) for v in values))
    launch = cuda.cuLaunchKernel
    launch.argtypes = [ptr] + [ctypes.c_uint] * 7 + [ptr] * 3
    side = torch.cuda.Stream()
    non_blocking = ptr()
    assert cuda.cuStreamCreate(ctypes.byref(non_blocking), 1) == 0  # CU_STREAM_NON_BLOCKING
    k = kernelkit.load_inline("exp_launch_routes", SRC).kernel("mul3")

    def in_side_stream():
        with torch.cuda.stream(side):
            k.launch(1, 32, (x, x, y, 16))

    def driver(f, stream):
        return lambda: launch(f, 1, 1, 1, 32, 1, 1, 0, stream, params, None)

    current = ptr()
    cases = {
        "torch.cuda._sleep(0)": lambda: torch.cuda._sleep(0),
        "torch.mul(x, x, out=y)": lambda: torch.mul(x, x, out=y),
        "ctypes cuLaunchKernel CUfunction, stream 0": driver(function, None),
        "ctypes cuLaunchKernel CUkernel, stream 0": driver(kern, None),
        "ctypes cuLaunchKernel CUfunction, torch side stream": driver(function, side.cuda_stream),
        "ctypes cuLaunchKernel CUfunction, non-blocking stream": driver(function, non_blocking),
        "ctypes cuLaunchKernel CUfunction, per-thread stream": driver(function, 2),  # CU_STREAM_PER_THREAD
        "ctypes cuCtxGetCurrent": lambda: cuda.cuCtxGetCurrent(ctypes.byref(current)),
        "Kernel.launch, stream 0": lambda: k.launch(1, 32, (x, x, y, 16)),
        "Kernel.launch in torch.cuda.stream(side)": in_side_stream,
        "Kernel.launch stream=side handle": lambda: k.launch(1, 32, (x, x, y, 16), stream=side.cuda_stream),
    }
    if cudart:
        runtime_launch = ctypes.CDLL(cudart[0]).cudaLaunchKernel
        runtime_launch.argtypes = [ptr, Dim3, Dim3, ptr, ctypes.c_size_t, ptr]
        grid, block = Dim3(1, 1, 1), Dim3(32, 1, 1)
        cases["ctypes cudaLaunchKernel CUkernel, stream 0"] = lambda: runtime_launch(kern, grid, block, params, 0, None)
    for name, (med, low) in host_us(cases).items():
        print(f"{name:55s} median {med:6.2f}  min {low:6.2f} us")


if __name__ == "__main__":
    main()
