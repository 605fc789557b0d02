# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""Launch-shape sweep for the memory-bound kernels: how many blocks per SM (grid-stride cap).

Times kk_muladd and kk_bias_gelu_fwd on 64M elements directly through Kernel.launch with
several grid sizes, next to torch.compile of the same math. Median of CUDA-event timings.
"""

import torch
import torch.nn.functional as F

from kernelkit.bench import _gpu_median_ms
from kernelkit.ops._runtime import CTYPE, VEC, kernel, sm_count


def median_us(fn, reps=40):
    return _gpu_median_ms([fn], reps=reps) * 1e3


def main():
    sms = sm_count(0)
    rows, cols = 8192, 8192
    n = rows * cols
    for dtype in (torch.float32, torch.bfloat16):
        ct = CTYPE[dtype]
        es = torch.empty((), dtype=dtype).element_size()
        vec = VEC[dtype]
        a, b, c = (torch.randn(rows, cols, device="cuda", dtype=dtype) for _ in range(3))
        bias = torch.randn(cols, device="cuda", dtype=dtype)
        out = torch.empty_like(a)
        full = -(-n // (vec * 256 * 4))
        grids = sorted({sms, 2 * sms, 4 * sms, 8 * sms, 16 * sms, full, -(-n // (vec * 256))})
        km = kernel("elementwise", f"kk_muladd<{ct}>")
        kg = kernel("gelu", f"kk_bias_gelu_fwd<{ct}, 1>")
        print(f"--- {dtype} {rows}x{cols}, {sms} SMs")
        for g in grids:
            tm = median_us(lambda: km.launch(g, 256, (a, b, c, out, n)))
            tg = median_us(lambda: kg.launch(g, 256, (a, bias, out, rows, cols)))
            print(
                f"grid {g:6d}: muladd {tm:7.1f} us ({4 * n * es / tm / 1e3:5.0f} GB/s)  "
                f"bias_gelu {tg:7.1f} us ({2 * n * es / tg / 1e3:5.0f} GB/s)"
            )
        cm = torch.compile(lambda a, b, c: a * b + c)
        cg = torch.compile(lambda x, b: F.gelu(x + b, approximate="tanh"))
        tm, tg = median_us(lambda: cm(a, b, c)), median_us(lambda: cg(a, bias))
        print(
            f"torch.compile: muladd {tm:7.1f} us ({4 * n * es / tm / 1e3:5.0f} GB/s)  "
            f"bias_gelu {tg:7.1f} us ({2 * n * es / tg / 1e3:5.0f} GB/s)"
        )
        y = torch.empty_like(a)
        tc = median_us(lambda: y.copy_(a))
        print(f"copy_: {tc:7.1f} us ({2 * n * es / tc / 1e3:5.0f} GB/s)")


if __name__ == "__main__":
    main()
