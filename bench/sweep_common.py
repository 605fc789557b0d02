"""What the launch-shape sweeps (bench/sweep_*.py) share: jobs that report a failure and go on, and the
JSON report. Each sweep runs as a script from the repo root (python3 bench/sweep_x.py), which puts this
directory on the import path."""

import json

import torch


def guarded(label: str, job) -> None:
    """Runs job(); a failure (a variant that does not compile, a launch error) is printed, not fatal. The
    caching allocator's free blocks are returned after each job, as the next job's tensors differ."""
    try:
        job()
    except Exception as ex:
        print(f"FAILED {label}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
    torch.cuda.empty_cache()


def write_results(path: str, copy_gbps: float, results: list) -> None:
    """The sweep's report: the copy bandwidth it measured, the GPU, and every variant's result."""
    with open(path, "w") as f:
        json.dump({"copy_gbps": copy_gbps, "env": torch.cuda.get_device_name(), "results": results}, f, indent=1)
