"""torch eager CPU timings for the same workloads as `cpu_bench.rs` (median of several runs).

    python crates/kernelkit-ops/examples/torch_eager_bench.py [--runs N]

Uses torch's default thread count. The reference expressions are the eager ones a user would
write: `gelu(x + bias, approximate=...)` and `a * b + c` (each allocates its outputs).
"""

import statistics
import sys
import time

import torch

N = 16 * 1024 * 1024
ROWS, COLS = 4096, 4096


def median_ms(f, runs):
    f()
    ts = []
    for _ in range(runs):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return statistics.median(ts) * 1e3


def report(name, ms, nbytes):
    print(f"{name:<34} {ms:9.3} ms  {nbytes / ms / 1e6:7.2f} GB/s")


def main():
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 15
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__} eager: {torch.get_num_threads()} threads, "
        f"capability {torch.backends.cpu.get_cpu_capability()}, median of {runs}"
    )
    a, b, c = torch.randn(N), torch.randn(N), torch.randn(N)
    x = torch.randn(ROWS, COLS)
    bias = torch.randn(COLS)
    go = torch.randn(ROWS, COLS)
    sz = 4
    report("a * b + c", median_ms(lambda: a * b + c, runs), 4 * sz * N)
    tmp, out = torch.empty(N), torch.empty(N)
    report(
        "a * b + c (out=, no alloc)",
        median_ms(lambda: torch.add(torch.mul(a, b, out=tmp), c, out=out), runs),
        4 * sz * N,
    )
    for approx in ["tanh", "none"]:
        f = lambda approx=approx: torch.nn.functional.gelu(x + bias, approximate=approx)  # noqa: E731
        report(f"gelu(x + bias) {approx}", median_ms(f, runs), 2 * sz * N)

        def bwd(approx=approx):
            v = x + bias
            g = torch.ops.aten.gelu_backward(go, v, approximate=approx)
            return g, g.sum(0)

        report(f"gelu_backward+sum(0) {approx}", median_ms(bwd, runs), 3 * sz * N)
    report("a + b", median_ms(lambda: a + b, runs), 3 * sz * N)
    report("a * b", median_ms(lambda: a * b, runs), 3 * sz * N)
    report("a.mul_(s)", median_ms(lambda: a.mul_(1.0000001), runs), 2 * sz * N)
    m = 1024
    A, B = torch.randn(m, m), torch.randn(m, m)
    ms = median_ms(lambda: A @ B, min(runs, 7))
    print(f"{'matmul 1024^3':<34} {ms:9.3} ms  {2 * m**3 / ms / 1e6:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
