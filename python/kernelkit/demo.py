"""`kernelkit demo`: from a CUDA source string to a checked, benchmarked PyTorch op, in one run.

It compiles a kernel with NVRTC, registers it as an op, checks it with kernelkit.testing, and
benchmarks a few shipped ops against torch: on the GPU when there is one, else on the CPU.
"""

from __future__ import annotations

import time

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T>
__global__ void axpby(const T* x, const T* y, T* out, float a, float b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = (T)(a * (float)x[i] + b * (float)y[i]);
}
"""


def run() -> int:
    import torch
    from rich.console import Console
    from rich.table import Table

    import kernelkit
    from kernelkit import bench, testing

    ctype = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}
    console = Console()
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    console.rule("[bold]kernelkit demo")
    where = torch.cuda.get_device_name() if gpu else "CPU (no GPU found: the CPU implementations run)"
    console.print(f"device: {where} · torch {torch.__version__} · kernelkit {kernelkit.__version__}")

    # 1. Compile.
    t0 = time.perf_counter()
    names = [f"axpby<{c}>" for c in ctype.values()]
    compiled = kernelkit.compile(SOURCE, arch="sm_90", name_expressions=names, use_cache=False)
    cold_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    mod = kernelkit.load_inline("demo_axpby", SOURCE, name_expressions=names)
    load_ms = (time.perf_counter() - t0) * 1e3
    console.print(
        f"[bold]1. compile[/]: NVRTC built {len(names)} instantiations into a {len(compiled.image)}-byte CUBIN "
        f"in {cold_ms:.0f} ms (cold); load_inline for this machine took {load_ms:.0f} ms"
    )

    # 2. Register as an op.
    def launch(x, y, a, b, out):
        n = x.numel()
        if n:
            k = mod.kernel(f"axpby<{ctype[x.dtype]}>")
            k.launch(max(1, min((n + 255) // 256, 4096)), 256, (x, y, out, a, b, n))

    def cpu(x, y, a, b, out):
        torch.add(x * a, y * b, out=out)

    def setup(ctx, inputs, output):
        ctx.a, ctx.b = inputs[2], inputs[3]

    def backward(ctx, grad):
        return grad * ctx.a, grad * ctx.b, None, None

    spec = kernelkit.TensorSpec(
        dtypes=(torch.float32, torch.float16, torch.bfloat16), contiguous=True, make_contiguous=True, shape=("*", "N")
    )
    axpby = kernelkit.op(
        "kkdemo::axpby(Tensor x, Tensor y, float a, float b) -> Tensor",
        inputs={
            "x": spec,
            "y": kernelkit.TensorSpec(same_dtype_as="x", contiguous=True, make_contiguous=True, shape=("*", "N")),
        },
        output=kernelkit.like("x"),
        backward=backward,
        setup_context=setup,
        cpu=cpu,
    )(launch)
    console.print("[bold]2. op[/]: torch.ops.kkdemo.axpby with generated checks, fake, autograd and a CPU fallback")

    # 3. Check it with the testing harness.
    def make(size, dtype, dev, gen):
        return (
            torch.randn(size, dtype=dtype, device=dev, generator=gen),
            torch.randn(size, dtype=dtype, device=dev, generator=gen),
            2.0,
            -0.5,
        )

    report = testing.check_op(
        axpby,
        lambda x, y, a, b: a * x + b * y,
        make,
        dtypes=(torch.float32, torch.bfloat16) if gpu else (torch.float32,),
        sizes=[0, 1, 255, 257, 100_003],
        raise_on_failure=False,
    )
    console.print(f"[bold]3. checks[/]: {report.summary()}")
    for r in report.results:
        if r.status == "failed":
            console.print(f"   [red]{r.name}[/]: {r.detail}")

    # 4. Benchmark shipped ops.
    cases = bench.op_cases(["muladd", "bias_gelu"])
    sizes = [(4096, 4096)] if gpu else [(2048, 2048)]
    dtypes = [torch.float32, torch.bfloat16] if gpu else [torch.float32]
    results = bench.run(cases, sizes, dtypes, compile=False, reps=20, progress=False)
    table = Table(title=f"4. shipped ops on {device} ({'x'.join(map(str, sizes[0]))})")
    for col in ["op", "dtype", "kernelkit µs", "torch µs", "speedup", "kernelkit GB/s"]:
        table.add_column(col, justify="left" if col in ("op", "dtype") else "right")
    for case in cases:
        for dt in dtypes:
            name = str(dt).replace("torch.", "")
            row = {r.impl: r for r in results if r.case == case.name and r.dtype == name}
            kk, ref = row.get("kernelkit"), row.get("torch")
            if kk is None or ref is None or kk.error or ref.error:
                table.add_row(case.name, name, "error", "", "", "")
                continue
            table.add_row(
                case.name,
                name,
                f"{kk.time_us:.1f}",
                f"{ref.time_us:.1f}",
                f"{ref.time_us / kk.time_us:.2f}x",
                f"{kk.gbps:.0f}",
            )
    console.print(table)
    ok = report.passed
    console.print("[bold green]demo passed" if ok else "[bold red]demo FAILED: a check failed (see above)")
    return 0 if ok else 1
