"""`kernelkit demo`: the whole path from a CUDA source string to a checked, timed PyTorch op."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

SOURCE = r"""
template <typename T>
__global__ void axpby(const T* x, const T* y, T* out, float a, float b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = (T)(a * (float)x[i] + b * (float)y[i]);
}
"""


def run() -> int:
    import torch

    import kernelkit

    console = Console()
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    console.rule("[bold]kernelkit demo")
    console.print(f"device: {torch.cuda.get_device_name() if gpu else 'CPU (no GPU found)'}; torch {torch.__version__}")

    t0 = time.perf_counter()
    compiled = kernelkit.compile(SOURCE, arch="sm_90", name_expressions=["axpby<float>"], use_cache=False)
    cold_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    mod = kernelkit.load_inline("demo_axpby", SOURCE)
    load_ms = (time.perf_counter() - t0) * 1e3
    console.print(
        f"1. NVRTC compiled the kernel to a {len(compiled.image)}-byte CUBIN in {cold_ms:.0f} ms (cold); "
        f"load_inline took {load_ms:.1f} ms (disk cache)"
    )

    def launch(x, y, a, b, out):
        n = x.numel()
        kernel = mod.kernel("axpby<float>")
        kernel.launch(min((n + 255) // 256, 1024), 256, (x, y, out, a, b, n))

    def cpu(x, y, a, b, out):
        torch.add(x * a, y, alpha=b, out=out)

    def setup(ctx, inputs, output):
        ctx.a, ctx.b = inputs[2], inputs[3]

    def backward(ctx, grad):
        return grad * ctx.a, grad * ctx.b, None, None

    spec = kernelkit.TensorSpec(dtypes=(torch.float32,), contiguous=True, shape=("*", "N"))
    axpby = kernelkit.op(
        "kkdemo::axpby(Tensor x, Tensor y, float a, float b) -> Tensor",
        inputs={"x": spec, "y": spec},
        output=kernelkit.like("x"),
        backward=backward,
        setup_context=setup,
        cpu=cpu,
    )(launch)
    console.print("2. registered it as torch.ops.kkdemo.axpby (checks, fake, autograd, CPU fallback)")

    x = torch.randn(4096, 1024, device=device, requires_grad=True)
    y = torch.randn(4096, 1024, device=device)
    out = axpby(x, y, 2.0, 0.5)
    err = (out - (2.0 * x + 0.5 * y)).abs().max().item()
    out.sum().backward()
    grad_ok = bool(torch.all(x.grad == 2.0))
    compiled_fn = torch.compile(lambda x, y: axpby(x, y, 2.0, 0.5) * 2, fullgraph=True)
    cerr = (compiled_fn(x.detach(), y) - 2 * (2.0 * x.detach() + 0.5 * y)).abs().max().item()
    ok = err < 1e-5 and grad_ok and cerr < 1e-5
    console.print(
        f"3. checked: max error {err:.1e}, gradient {'ok' if grad_ok else 'WRONG'}, "
        f"torch.compile(fullgraph=True) error {cerr:.1e}"
    )

    table = Table(title=f"4. timing on {device}")
    table.add_column("implementation")
    table.add_column("time per call", justify="right")
    xd = x.detach()
    for name, fn in [("kernelkit op", lambda: axpby(xd, y, 2.0, 0.5)), ("torch eager", lambda: 2.0 * xd + 0.5 * y)]:
        table.add_row(name, f"{_time(fn, gpu) * 1e6:.1f} µs")
    console.print(table)
    console.print("[bold green]demo passed" if ok else "[bold red]demo FAILED")
    return 0 if ok else 1


def _time(fn, gpu: bool, reps: int = 50) -> float:
    import torch

    for _ in range(3):
        fn()
    if gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps
