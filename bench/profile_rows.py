"""Runs one call of each row kernel worth profiling, for Nsight Compute:

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats ... python3 bench/profile_rows.py

Every implementation (kernelkit, torch.compile) is warmed up first, outside the profiled range, so the capture
holds only the timed kernels: kernelkit's, and the Triton kernels torch.compile generated for the same math.
"""

import argparse

import torch
import torch.nn.functional as F

import kernelkit.ops as K
from kernelkit.bench import _rms_norm_reference


def cases(size, dtype):
    x = torch.randn(*size, device="cuda", dtype=dtype)
    g = torch.randn_like(x)
    w = torch.randn(size[1], device="cuda", dtype=dtype)
    b = torch.randn(size[1], device="cuda", dtype=dtype)
    rms_c = torch.compile(_rms_norm_reference)
    ln_ref = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)  # noqa: E731
    ln_c = torch.compile(ln_ref)
    xg = x.detach().requires_grad_()
    y_kk = K.rms_norm(xg, w, 1e-6)
    y_c = rms_c(xg, w)
    return {
        "rms_norm kernelkit": lambda: K.rms_norm(x, w, 1e-6),
        "rms_norm torch.compile": lambda: rms_c(x, w),
        "layer_norm kernelkit": lambda: K.layer_norm(x, w, b, 1e-5),
        "layer_norm torch.compile": lambda: ln_c(x, w, b),
        "rms_norm_backward kernelkit": lambda: torch.autograd.grad(y_kk, xg, g, retain_graph=True),
        "rms_norm_backward torch.compile": lambda: torch.autograd.grad(y_c, xg, g, retain_graph=True),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="*", default=["32768x4096"])
    ap.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    ap.add_argument("--only", nargs="*", help="substrings of the case names to run")
    a = ap.parse_args()
    runs = []
    for s in a.sizes:
        size = tuple(int(v) for v in s.split("x"))
        for d in a.dtypes:
            for label, fn in cases(size, getattr(torch, d)).items():
                if not a.only or any(o in label for o in a.only):
                    runs.append((f"{label} {d} {s}", fn))
    for _, fn in runs:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for label, fn in runs:
        torch.cuda.nvtx.range_push(label)
        fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("\n".join(label for label, _ in runs))


if __name__ == "__main__":
    main()
