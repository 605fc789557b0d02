"""Probe: cProfile of the host path of op calls that record a graph, on small CUDA tensors (GPU time negligible).

What each Python function and each C call (allocations, launches, the autograd engine) costs per call, sorted by its
own time: kernelkit.ops.cross_entropy under no_grad, cross_entropy forward + torch.autograd.grad, rms_norm forward +
torch.autograd.grad. cProfile's own overhead inflates the Python frames; read the shares, not the totals
(bench/exp_autograd_parts.py has the unprofiled times).

    python3 bench/exp_host_profile.py
"""

import cProfile
import io
import pstats

import torch

import kernelkit.ops as K


def profile(label, fn, n=3000):
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print("=" * 30, label)
    print("\n".join(line for line in s.getvalue().splitlines() if line.strip()))


def main():
    x = torch.randn(4096, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 256, (4096,), device="cuda")
    w = torch.ones(256, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def nograd():
        with torch.no_grad():
            K.cross_entropy(x, t)

    profile("ce no_grad", nograd)
    profile("ce fwd+grad", lambda: torch.autograd.grad(K.cross_entropy(x, t), x))
    profile("rms fwd+grad", lambda: torch.autograd.grad(K.rms_norm(x, w, 1e-6).sum(), (x, w)))


if __name__ == "__main__":
    main()
