"""The `kernelkit` command: demo, doctor, bench, cache."""

from __future__ import annotations

from typing import List, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Custom CUDA kernels as PyTorch ops.")


@app.command()
def demo() -> None:
    """Compile a kernel, make it an op, check it and time it: on the GPU if there is one, else on the CPU."""
    from kernelkit.demo import run

    raise typer.Exit(run())


@app.command()
def doctor(json_output: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Check whether this machine can run kernelkit, and say how to fix what is missing."""
    from kernelkit.doctor import run

    raise typer.Exit(run(json_output))


def _parse_sizes(text: str) -> list:
    try:
        return [tuple(int(v) for v in s.lower().split("x")) for s in text.split(",") if s]
    except ValueError:
        raise typer.BadParameter(f"expected sizes like 512x4096,8192x8192, got {text!r}") from None


@app.command()
def bench(
    ops: Optional[List[str]] = typer.Argument(
        None,
        help="Ops or groups to benchmark (default: core). Groups: core = add mul muladd bias_gelu "
        "bias_gelu_backward matmul; llm = issue 5's training ops (rms_norm add_rms_norm layer_norm softmax "
        "cross_entropy swiglu rope), each forward and <op>_backward, plus cross_entropy_fwd_bwd and "
        "cross_entropy_items_fwd_bwd (Hugging Face's loss under gradient accumulation), also against "
        "Liger-Kernel when it is installed; all = both.",
    ),
    dtype: str = typer.Option("float32,bfloat16", help="Comma-separated dtypes."),
    sizes: Optional[str] = typer.Option(
        None,
        help="Comma-separated sizes, e.g. 512x4096,8192x8192 (matmul: MxNxK; llm ops: tokens x hidden, "
        "cross_entropy: tokens x vocab). Default on a GPU: core 512x4096..16384x16384, matmul 1024³ and 4096³, "
        "llm 32768x256,32768x4096,32768x8192,8192x65536.",
    ),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write results as JSON."),
    csv_path: Optional[str] = typer.Option(None, "--csv", help="Write results as CSV."),
    plot_path: Optional[str] = typer.Option(None, "--plot", help="Write a PNG plot (needs matplotlib)."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Skip torch.compile of the references."),
    reps: int = typer.Option(50, help="Timed repetitions per measurement."),
) -> None:
    """Time kernelkit's ops against torch eager, torch.compile and (llm ops) Liger-Kernel; on the CPU without a GPU.

    e.g. kernelkit bench llm --dtype bfloat16 --json llm.json;  kernelkit bench rms_norm rms_norm_backward
    """
    import dataclasses
    import json

    import torch

    from kernelkit import bench as B

    gpu = torch.cuda.is_available()
    try:
        cases = B.op_cases(ops or None)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    try:
        dtypes = [getattr(torch, d) for d in dtype.split(",")]
    except AttributeError:
        raise typer.BadParameter(f"unknown dtype in {dtype!r}") from None
    if not gpu and dtype == "float32,bfloat16":
        dtypes = [torch.float32]
    llm = [c for c in cases if c.name in B.GROUPS["llm"]]
    mm = [c for c in cases if c.name == "matmul"]
    elementwise = [c for c in cases if c.name not in B.GROUPS["llm"] and c.name != "matmul"]
    if sizes:
        ew_sizes = mm_sizes = llm_sizes = _parse_sizes(sizes)
    elif gpu:
        ew_sizes = [(512, 4096), (4096, 4096), (8192, 8192), (16384, 16384)]
        mm_sizes = [(1024, 1024, 1024), (4096, 4096, 4096)]
        llm_sizes = B.LLM_SIZES
    else:
        ew_sizes, mm_sizes, llm_sizes = [(4096, 4096)], [(512, 512, 512)], [(2048, 1024)]
    env = B.environment()
    copy_gbps = B.copy_bandwidth() if gpu else None
    results = []
    if elementwise:
        results += B.run(elementwise, ew_sizes, dtypes, compile=not no_compile, reps=reps, copy_gbps=copy_gbps)
    if mm:
        mm_dtypes = [torch.float32] if dtype == "float32,bfloat16" else dtypes
        results += B.run(mm, mm_sizes, mm_dtypes, compile=False, reps=max(5, reps // 5), copy_gbps=copy_gbps)
    if llm:
        results += B.run(llm, llm_sizes, dtypes, compile=not no_compile, reps=reps, copy_gbps=copy_gbps)
    B.render(results, env, copy_gbps)
    rows = [dataclasses.asdict(r) for r in results]
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"environment": env, "copy_gbps": copy_gbps, "results": rows}, f, indent=1)
    if csv_path:
        import csv

        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*rows[0], *env])
            w.writeheader()
            for r in rows:
                w.writerow({**r, **env})
    if plot_path:
        B.plot(results, plot_path)


@app.command()
def cache(clear: bool = typer.Option(False, "--clear", help="Delete every cached compile.")) -> None:
    """Show (or clear) the compile cache."""
    import kernelkit
    from kernelkit import _native

    if clear:
        typer.echo(f"removed {kernelkit.clear_cache()} files from {kernelkit.cache_dir()}")
        return
    size, n = _native.cache_usage()
    typer.echo(f"{kernelkit.cache_dir()}: {n} entries, {size / 1e6:.1f} MB")


def main() -> None:
    app()
