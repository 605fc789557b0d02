"""The `kernelkit` command: demo, doctor, bench, cache."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Custom CUDA kernels as PyTorch ops.")


@app.command()
def demo() -> None:
    """Compile a kernel, make it an op, check it and time it: on the GPU if there is one, else on the CPU."""
    from kernelkit.demo import run

    raise typer.Exit(run())


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
