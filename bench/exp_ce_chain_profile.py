"""Probe: cross-entropy's forward + backward timed by CUDA events (the held path: count, held, mean, and the backward's
launch that returns at once at a loss gradient of 1) next to the softmax forward over the same logits (the same bytes:
read once, written once); then each kernel's GPU time from torch.profiler's CUDA activity. Under the profiler the op
goes through the dispatcher (kernelkit.op leaves its eager path while a profiler runs), so that profile shows the
kernels apart (kk_cross_entropy_loss, kk_cross_entropy_bwd), not the held path.

H200 (h200-2026-11-27-s37/ce-chain-*.log): bf16 8192 x 65536 567.0 us per step (89.0% of copy) against the softmax
forward's 543.3 (92.9%); float32 1089.2 (92.8%) against 1050.2.

    python3 bench/exp_ce_chain_profile.py [--dtype bfloat16] [--size 8192x65536]
"""

import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

import kernelkit.ops as K
from kernelkit.bench import _gpu_median_ms, copy_bandwidth


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--size", default="8192x65536")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    rows, cols = map(int, a.size.split("x"))
    copy = copy_bandwidth()
    nbytes = 2 * rows * cols * dtype.itemsize
    sets = []
    for _ in range(2):
        x = torch.randn(rows, cols, device="cuda", dtype=dtype).requires_grad_()
        t = torch.randint(0, cols, (rows,), device="cuda")
        sets.append((x, t))
    calls = {
        "fwd+grad": [lambda x=x, t=t: torch.autograd.grad(K.cross_entropy(x, t), x) for x, t in sets],
        "softmax": [lambda x=x: K.softmax(x.detach()) for x, _ in sets],
    }
    for name, fns in calls.items():
        ms = _gpu_median_ms(fns, reps=40)
        print(f"{name:10s} {ms * 1e3:8.1f} us per call, {100 * nbytes / (ms * 1e-3) / 1e9 / copy:5.1f}% of copy")
    for name, fns in calls.items():
        for f in fns * 5:
            f()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for f in fns * 10:
                f()
            torch.cuda.synchronize()
        per = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name].append(e.device_time)
        print(f"{name}: kernels (mean us over {len(fns) * 10} calls)")
        for k, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {sum(v) / len(v):9.2f} us x{len(v):3d}  {k[:110]}")


if __name__ == "__main__":
    main()
