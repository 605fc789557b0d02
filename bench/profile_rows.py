"""Runs one call of each benchmark case worth profiling, for Nsight Compute:

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats ... \
        python3 bench/profile_rows.py layer_norm:bfloat16:32768x8192 softmax:bfloat16:32768x8192

A case is NAME:DTYPE:ROWSxCOLS, NAME being a `kernelkit bench` case. Every implementation of the case
(kernelkit, torch.compile of the reference, Liger where installed; --impls picks) is warmed up first,
outside the profiled range, so the capture holds only the timed kernels, each in an NVTX range named
after the case and implementation. --kernel-times N instead runs each N times under torch.profiler and
prints the GPU time of every kernel it launched (mean per call), and the span from the first kernel's
start to the last one's end.
"""

import argparse

import torch

from kernelkit import bench


def calls(spec, impls):
    name, dtype, size = spec.split(":")
    (case,) = bench.op_cases([name], group="all")
    if case.setup is not None:
        case.setup()
    size = tuple(int(v) for v in size.split("x"))
    inputs = case.make(size, getattr(torch, dtype), "cuda")
    fns = dict(case.impls)
    if case.compile_reference in fns:
        fns["torch.compile"] = torch.compile(fns[case.compile_reference], dynamic=False)
    out = []
    for impl, fn in fns.items():
        if impls and impl not in impls:
            continue
        call = case.prepare(fn, inputs) if case.prepare else (lambda fn=fn: fn(*inputs))
        out.append((f"{spec} {impl}", call))
    return out


def kernel_times(label, fn, n):
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = {}
    for e in events:
        total[e.name] = total.get(e.name, 0.0) + e.device_time
    span = (max(e.time_range.end for e in events) - min(e.time_range.start for e in events)) / n
    print(f"{label}: {span:.1f} us per call from first kernel start to last kernel end")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"    {us / n:9.1f} us  {name[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="NAME:DTYPE:ROWSxCOLS")
    ap.add_argument("--impls", nargs="*", default=["kernelkit", "torch.compile", "liger"])
    ap.add_argument("--kernel-times", type=int, default=0, metavar="N")
    a = ap.parse_args()
    runs = [r for spec in a.cases for r in calls(spec, a.impls)]
    for _, fn in runs:
        for _ in range(3):
            fn()
    if a.kernel_times:
        for label, fn in runs:
            kernel_times(label, fn, a.kernel_times)
        return
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
