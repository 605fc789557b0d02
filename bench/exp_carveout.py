"""Experiment: how the split of each SM's unified L1 and shared memory moves kernelkit's row kernels. Times cases
under the context's cache preferences (cuCtxSetCacheConfig: none, shared, L1; every kernel of the op takes it at
launch, as no kernel sets its own, and torch.compile's would too), alternating over rounds; GPU time alone, medians;
ratios against the first preference. With --prew, each also with the _wide RMSNorm forward's early w copy on
(kernels/norms.cu PREW, ops/norms.py _WIDE_PREFETCH) at every width it takes.

    python3 bench/exp_carveout.py rms_norm:bfloat16:32768x8192 softmax:float32:32768x4096 --prefer default l1
    python3 bench/exp_carveout.py rms_norm:float32:32768x4096 --prefer default shared --prew

Session 54 (h200-2026-11-28-s54/carveout-*.log): PREFER_SHARED made the _wide RMSNorm forwards 7-8% slower, PREW or
not; PREFER_L1 0.3% faster without PREW and twice as slow with it (its shared memory then fits fewer blocks).
"""

import argparse
import ctypes
import statistics

from ab_source import _host_settings, _use
from profile_rows import calls

from kernelkit.bench import _gpu_median_ms

PREFER = {"default": 0, "shared": 1, "l1": 2}  # CU_FUNC_CACHE_PREFER_NONE, _SHARED, _L1
PREW_ON = "norms._WIDE_PREFETCH={('kk_rms_norm_fwd', t): 2048 for t in (torch.float32, torch.float16, torch.bfloat16)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="NAME:DTYPE:ROWSxCOLS (a kernelkit bench case)")
    ap.add_argument("--prefer", nargs="+", choices=sorted(PREFER), default=["default", "l1"])
    ap.add_argument("--prew", action="store_true", help="also with the _wide RMSNorm forward's early w copy")
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    cuda = ctypes.CDLL("libcuda.so.1")
    host = _host_settings([PREW_ON])
    runs = [(spec, fn) for spec in a.cases for _, fn in calls(spec, ["kernelkit"])]
    configs = [(prew, pref) for pref in a.prefer for prew in (("A", "B") if a.prew else ("A",))]
    times = {(spec, c): [] for spec, _ in runs for c in configs}
    for r in range(a.rounds + 1):  # round 0 not kept, as in ab_source.py
        for spec, fn in runs:
            for prew, pref in configs:
                rc = cuda.cuCtxSetCacheConfig(ctypes.c_int(PREFER[pref]))
                if rc != 0:
                    raise RuntimeError(f"cuCtxSetCacheConfig({pref}) returned {rc}")
                _use("norms", None, host, prew)
                fn()
                ms = _gpu_median_ms([fn], reps=20, warmup=3, queued=True)
                if r:
                    times[spec, (prew, pref)].append(ms * 1e3)
    cuda.cuCtxSetCacheConfig(ctypes.c_int(0))
    _use("norms", None, host, "A")
    for spec, _ in runs:
        base = statistics.median(times[spec, configs[0]])
        cells = []
        for prew, pref in configs:
            med = statistics.median(times[spec, (prew, pref)])
            on = f"PREW {'on ' if prew == 'B' else 'off'} " if a.prew else ""
            cells.append(f"{on}{pref:7s} {med:7.1f} us ({med / base:.3f})")
        print(f"{spec:36s} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
