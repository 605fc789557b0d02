"""Where the host time of cross-entropy's forward and backward goes (bench: kernelkit's cross_entropy_fwd_bwd host time
is 50-75 us above torch eager's on the H200 machine, h200-2026-11-24-s34/llm-softmax.json). Per call, on the host
clock, median of 7 runs of 200 calls: the forward that records a graph, torch.autograd.grad on graphs built
beforehand, and the floor of a Python autograd.Function whose forward and backward each launch one small torch op.

    python3 bench/exp_ce_autograd_host.py
"""

import statistics
import time

import torch

import kernelkit.ops as K

N = 200


def per_call_us(fn, setup=None):
    runs = []
    for _ in range(7):
        state = setup() if setup else None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(N):
            fn(state, i)
        runs.append((time.perf_counter() - t0) / N * 1e6)
        torch.cuda.synchronize()
    return statistics.median(runs)


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def measure(label, loss, leaf):
    fwd = per_call_us(lambda s, i: loss())
    bwd = per_call_us(lambda s, i: torch.autograd.grad(s[i], leaf), lambda: [loss() for _ in range(N)])
    both = per_call_us(lambda s, i: torch.autograd.grad(loss(), leaf))
    with torch.no_grad():
        nograd = per_call_us(lambda s, i: loss())
    print(
        f"{label:40s} forward {fwd:6.1f} us (no grad {nograd:6.1f})  autograd.grad {bwd:6.1f}  both {both:6.1f}",
        flush=True,
    )


def main():
    small = torch.randn(1024, device="cuda", requires_grad=True)
    measure("Function floor", lambda: Twice.apply(small).sum(), small)
    for dtype, cols in ((torch.bfloat16, 256), (torch.float32, 256), (torch.bfloat16, 4096)):
        x = torch.randn(32768, cols, device="cuda", dtype=dtype, requires_grad=True)
        t = torch.randint(0, cols, (32768,), device="cuda")
        size = f"{str(dtype)[6:]} 32768x{cols}"
        measure(f"{size} kernelkit", lambda x=x, t=t: K.cross_entropy(x, t), x)
        measure(f"{size} torch", lambda x=x, t=t: torch.nn.functional.cross_entropy(x, t), x)


if __name__ == "__main__":
    main()
