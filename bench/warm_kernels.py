"""Compile every shipped kernel instantiation (kernels/check_compile.py's list) for this machine's GPU into the disk
cache (KERNELKIT_CACHE_DIR), on one thread per core, before the GPU test suite: its workers then load them from the
cache instead of each compiling the ones it meets first (on session 42's fresh H100 machine, tests that took 0.01-0.1 s
with their kernels cached took 15-30 s as the first to use them; bench/results/h100-2026-11-28-s42/test-times.txt).

    python3 bench/warm_kernels.py            # bench/gpu_run.sh tests runs it first
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from kernelkit.ops import _runtime

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))
from check_compile import instantiations  # noqa: E402


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("warm_kernels.py: no CUDA GPU (the kernels compile for the GPU's own arch)")
    torch.cuda.init()  # the primary context, before the threads ask for it
    jobs = [(source.removesuffix(".cu"), name) for source, names in instantiations().items() for name in names]
    failed = []

    def warm(job):
        try:
            _runtime.kernel(*job)  # compiles it where a GPU is present (Module.kernel), through the disk cache
        except Exception as e:  # a name the host no longer launches: reported, not fatal
            failed.append(f"{job[0]}: {job[1]}: {str(e).splitlines()[0]}")

    start = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        list(pool.map(warm, jobs))
    print(f"warmed {len(jobs) - len(failed)} of {len(jobs)} kernels in {time.perf_counter() - start:.1f} s")
    for f in failed:
        print("  not compiled:", f)


if __name__ == "__main__":
    main()
