"""`kernelkit doctor`: what kernelkit found on this machine, whether it works, and how to fix what doesn't.

The work is split in three so each part can be tested alone:

* :func:`collect` gathers facts (driver, NVRTC, torch, GPUs, cache) and runs two probes (a compile,
  and a launch when there is a GPU). It never raises: a failure becomes a fact.
* :func:`diagnose` turns facts into findings, each ``{what, fix, fatal, level, section}``. It is pure.
* :func:`render` prints a report on a rich console; :func:`run` is the command.

>>> from kernelkit import doctor
>>> report = doctor.collect()
>>> report["nvrtc"]["version"], report["usable"]
('13.0', True)
>>> [p["what"] for p in report["problems"] if p["fatal"]]
[]
>>> doctor.run(json_output=True)  # prints the same report as JSON; returns the exit status
0
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from kernelkit import _native

__all__ = ["collect", "diagnose", "exit_status", "render", "run"]

Facts = Dict[str, Any]
Finding = Dict[str, Any]

# A unique comment per call keeps the probe out of kernelkit's in-memory compile cache,
# so the time reported is a real NVRTC compile.
_PROBE_SOURCE = r"""// kernelkit doctor probe {tag}
extern "C" __global__ void kernelkit_doctor_probe(float* x, float a, long long n) {{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + 1.0f;
}}
"""
_PROBE_KERNEL = "kernelkit_doctor_probe"
_PROBE_N = 1000

# The first CUDA release whose NVRTC targets each arch, for the "upgrade NVRTC" fix.
_FIRST_CUDA_FOR_ARCH = {
    75: "10.0",
    80: "11.0",
    86: "11.1",
    87: "11.4",
    89: "11.8",
    90: "11.8",
    100: "12.8",
    101: "12.8",
    120: "12.8",
    103: "12.9",
    121: "12.9",
    110: "13.0",
}
# The oldest driver release for each CUDA major version.
_MIN_DRIVER_FOR_CUDA = {12: "525", 13: "580"}

_NO_GPU = "no GPU: kernelkit runs its CPU implementations; GPU kernels can be compiled but not launched"
_ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "KERNELKIT_NVRTC_PATH",
    "KERNELKIT_CUDA_DRIVER_PATH",
    "KERNELKIT_CACHE_DIR",
    "CUDA_HOME",
    "CUDA_PATH",
)


# ----------------------------------------------------------------------------- small helpers


def _first_line(e: object) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _version_tuple(v: Optional[str]) -> Optional[Tuple[int, int]]:
    """'13.2' -> (13, 2); None for anything else."""
    m = re.match(r"^\s*(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _cuda_of_driver(version: int) -> Tuple[int, int]:
    """cuDriverGetVersion's 13000 -> (13, 0)."""
    return version // 1000, (version % 1000) // 10


def _release_from_path(path: str) -> Optional[str]:
    """The driver release from the libcuda file name, e.g. libcuda.so.580.159.04 -> '580.159.04'."""
    m = re.search(r"libcuda\.so\.(\d{3,}\.\d+(?:\.\d+)?)$", path or "")
    return m.group(1) if m else None


def _release_from_proc(text: str) -> Optional[str]:
    """The kernel module's release from /proc/driver/nvidia/version's NVRM line."""
    for line in text.splitlines():
        if line.startswith("NVRM"):
            m = re.search(r"\s(\d{3,}\.\d+(?:\.\d+)?)\s", line + " ")
            return m.group(1) if m else None
    return None


def _kernel_module_release() -> Optional[str]:
    try:
        return _release_from_proc(Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        return None


def _writable(path: Path) -> bool:
    """Whether kernelkit could write cache entries under ``path`` (creating it if need be)."""
    p = path
    while not p.exists() and p.parent != p:
        p = p.parent
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


def _nvrtc_pip(driver_major: Optional[int], upgrade: bool = False) -> str:
    """The pip command for an NVRTC that matches the driver's CUDA major version."""
    pip = "pip install -U" if upgrade else "pip install"
    if driver_major == 12:
        return f"{pip} nvidia-cuda-nvrtc-cu12"
    if driver_major is not None and driver_major >= 13:
        return f"{pip} nvidia-cuda-nvrtc"
    return f"{pip} nvidia-cuda-nvrtc (CUDA 13) or nvidia-cuda-nvrtc-cu12 (CUDA 12)"


def _finding(section: str, level: str, what: str, fix: str) -> Finding:
    return {"what": what, "fix": fix, "fatal": level == "error", "level": level, "section": section}


# ----------------------------------------------------------------------------- facts


def _driver_facts() -> Facts:
    out: Facts = {
        "found": False,
        "path": None,
        "version": None,
        "cuda_version": None,
        "release": None,
        "kernel_module": _kernel_module_release(),
        "device_count": 0,
        "init_error": None,
        "error": None,
    }
    try:
        info = _native.driver_info()
    except Exception as e:  # LibraryNotFoundError on machines without a driver
        out["error"] = str(e)
        return out
    major, minor = _cuda_of_driver(int(info["version"]))
    out.update(
        found=True,
        path=info["path"],
        version=int(info["version"]),
        cuda_version=f"{major}.{minor}",
        release=_release_from_path(info["path"]) or out["kernel_module"],
        device_count=int(info["device_count"]) if info["init_error"] is None else 0,
        init_error=info["init_error"],
    )
    return out


def _nvrtc_facts() -> Facts:
    out: Facts = {"found": False, "path": None, "version": None, "include_dir": None, "supported_archs": []}
    out["error"] = None
    try:
        info = _native.nvrtc_info()
    except Exception as e:
        out["error"] = str(e)
        return out
    out.update(
        found=True,
        path=info["path"],
        version=info["version"],
        include_dir=info["include_dir"],
        supported_archs=sorted(int(a) for a in info["supported_archs"]),
    )
    return out


def _gpu_facts(count: int, supported: List[int]) -> List[Facts]:
    gpus = []
    for i in range(count):
        g: Facts = {"index": i}
        try:
            info = _native.device_info(i)
            major, minor = (int(x) for x in info["compute_capability"])
            cc = 10 * major + minor
            g.update(
                name=info["name"],
                arch=f"sm_{cc}",
                compute_capability=[major, minor],
                sm_count=int(info["multiprocessor_count"]),
                memory_bytes=int(info["total_memory_bytes"]),
                memory_gib=round(info["total_memory_bytes"] / 2**30, 1),
                # An NVRTC too old to list its archs (before CUDA 11.2) leaves this unknown.
                nvrtc_can_target=(cc in supported) if supported else None,
                error=None,
            )
        except Exception as e:
            g["error"] = _first_line(e)
        gpus.append(g)
    return gpus


def _torch_facts() -> Facts:
    out: Facts = {"found": False, "version": None, "cuda": None, "cuda_available": False, "device_count": 0}
    out.update(warning=None, error=None)  # torch's own explanation, and an import or CUDA error
    try:
        import torch
    except Exception as e:
        out["error"] = _first_line(e)
        return out
    out.update(found=True, version=str(torch.__version__), cuda=torch.version.cuda)
    # torch says why it can't use the GPU (e.g. "driver too old") in a warning: keep it.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out["cuda_available"] = bool(torch.cuda.is_available())
            out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
        except Exception as e:
            out["error"] = _first_line(e)
    if caught:
        out["warning"] = " ".join(" ".join(str(w.message) for w in caught).split())
    return out


def _cache_facts() -> Facts:
    out: Facts = {"dir": None, "bytes": 0, "entries": 0, "writable": None, "error": None}
    try:
        d = Path(_native.cache_dir())
        out["dir"] = str(d)
        out["bytes"], out["entries"] = (int(x) for x in _native.cache_usage())
        out["writable"] = _writable(d)
    except Exception as e:
        out["error"] = _first_line(e)
    return out


def _probe_arch(gpus: List[Facts], supported: List[int]) -> str:
    """The first GPU's arch when NVRTC can target it, else sm_80 (or the oldest arch NVRTC knows)."""
    if gpus and gpus[0].get("nvrtc_can_target") is not False and gpus[0].get("arch"):
        return gpus[0]["arch"]
    if not supported or 80 in supported:
        return "sm_80"
    return f"sm_{supported[0]}"


def _compile_probe(arch: str) -> Facts:
    import kernelkit

    out: Facts = {"ran": True, "ok": False, "arch": arch, "ms": None, "cubin_bytes": None, "error": None}
    source = _PROBE_SOURCE.format(tag=uuid.uuid4().hex)
    t0 = time.perf_counter()
    try:
        c = kernelkit.compile(source, arch=arch, use_cache=False)
        out.update(ok=True, cubin_bytes=len(c.image))
    except Exception as e:
        out["error"] = str(e).strip()
    out["ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    return out


def _launch_probe(arch: str, device: int) -> Facts:
    out: Facts = {"ran": True, "ok": False, "device": device, "ms": None, "max_error": None, "error": None}
    t0 = time.perf_counter()
    try:
        import torch

        import kernelkit

        source = _PROBE_SOURCE.format(tag=uuid.uuid4().hex)
        mod = kernelkit.load_inline("kernelkit_doctor", source, arch=arch, use_cache=False)
        with torch.cuda.device(device):
            x = torch.arange(_PROBE_N, dtype=torch.float32, device=f"cuda:{device}")
            mod.kernel(_PROBE_KERNEL).launch(grid=(_PROBE_N + 255) // 256, block=256, args=(x, 2.0, _PROBE_N))
            torch.cuda.synchronize(device)
        expected = torch.arange(_PROBE_N, dtype=torch.float32) * 2.0 + 1.0
        err = (x.cpu() - expected).abs().max().item()
        out.update(ok=err == 0.0, max_error=err)
        if err != 0.0:
            out["error"] = f"the kernel ran but its result is wrong (max error {err:g})"
    except Exception as e:
        out["error"] = str(e).strip()
    out["ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    return out


def _skipped(reason: str) -> Facts:
    return {"ran": False, "ok": None, "skipped": reason, "error": None}


def collect(probe: bool = True) -> Facts:
    """Gather what kernelkit sees, run the probes, and diagnose. Never raises.

    Returns a JSON-ready dict with the sections ``kernelkit``, ``env``, ``driver``, ``nvrtc``,
    ``torch``, ``gpus``, ``cache``, ``probes``, then ``problems`` (errors and warnings),
    ``notes`` (information), ``usable`` and ``exit_status``. ``probe=False`` skips the compile
    and launch probes.

    >>> r = collect()  # on a machine without a GPU
    >>> r["driver"]["found"], r["probes"]["compile"]["ok"], r["exit_status"]
    (False, True, 0)
    """
    import kernelkit

    facts: Facts = {
        "kernelkit": {"version": kernelkit.__version__, "python": sys.version.split()[0]},
        "env": {k: os.environ[k] for k in _ENV_VARS if k in os.environ},
    }
    facts["driver"] = _driver_facts()
    # NVRTC before torch: importing a CUDA torch loads its own libnvrtc, which would hide
    # whether kernelkit finds NVRTC by itself.
    facts["nvrtc"] = _nvrtc_facts()
    supported = facts["nvrtc"]["supported_archs"]
    facts["gpus"] = _gpu_facts(facts["driver"]["device_count"], supported)
    facts["cache"] = _cache_facts()
    facts["torch"] = _torch_facts()
    facts["probes"] = _probes(facts, probe)
    findings = diagnose(facts)
    facts["problems"] = [f for f in findings if f["level"] != "info"]
    facts["notes"] = [f for f in findings if f["level"] == "info"]
    facts["exit_status"] = exit_status(findings)
    facts["usable"] = facts["exit_status"] == 0
    return facts


def _probes(facts: Facts, probe: bool) -> Facts:
    if not probe:
        return {"compile": _skipped("probes were not asked for"), "launch": _skipped("probes were not asked for")}
    if not facts["nvrtc"]["found"]:
        return {"compile": _skipped("NVRTC not found"), "launch": _skipped("NVRTC not found")}
    gpus, torch_facts = facts["gpus"], facts["torch"]
    arch = _probe_arch(gpus, facts["nvrtc"]["supported_archs"])
    compiled = _compile_probe(arch)
    if not gpus:
        launch = _skipped("no GPU")
    elif gpus[0].get("error") or gpus[0].get("nvrtc_can_target") is False:
        launch = _skipped("GPU 0 cannot be compiled for")
    elif not compiled["ok"]:
        launch = _skipped("the compile probe failed")
    elif not torch_facts["cuda_available"]:
        launch = _skipped("torch cannot use the GPU")
    else:
        launch = _launch_probe(arch, 0)
    return {"compile": compiled, "launch": launch}


# ----------------------------------------------------------------------------- diagnosis


def diagnose(facts: Facts) -> List[Finding]:
    """Findings from facts shaped like :func:`collect`'s sections. Pure: reads only ``facts``.

    Each finding is ``{what, fix, fatal, level, section}`` with level ``error`` (fatal: kernelkit
    is not usable), ``warning`` or ``info``.

    >>> facts = {"driver": {"found": True, "version": 12080, "device_count": 1},
    ...          "nvrtc": {"found": True, "version": "13.0"}}
    >>> [f["level"] for f in diagnose(facts)]
    ['warning']
    """
    out: List[Finding] = []
    driver = facts.get("driver") or {}
    nvrtc = facts.get("nvrtc") or {}
    torch_f = facts.get("torch") or {}
    gpus = facts.get("gpus") or []
    cache = facts.get("cache") or {}
    probes = facts.get("probes") or {}
    env = facts.get("env") or {}
    drv_cuda = _cuda_of_driver(driver["version"]) if driver.get("found") and driver.get("version") else None
    drv_major = drv_cuda[0] if drv_cuda else None

    out += _diagnose_driver(driver, env)
    if not nvrtc.get("found"):
        err = nvrtc.get("error") or ""
        if "too old" in err:
            what = "NVRTC is too old for kernelkit (it needs CUDA 11.2 or later): kernels cannot be compiled"
            upgrade = _nvrtc_pip(drv_major, upgrade=True)
            fix = f"upgrade NVRTC: {upgrade}, or set KERNELKIT_NVRTC_PATH to a newer libnvrtc.so"
        else:
            what = "NVRTC (libnvrtc) not found: kernelkit cannot compile kernels"
            fix = (
                f"{_nvrtc_pip(drv_major)}; a CUDA build of torch brings it too. Or set KERNELKIT_NVRTC_PATH "
                "to a libnvrtc.so, or CUDA_HOME to a CUDA toolkit"
            )
        out.append(_finding("nvrtc", "error", what, fix))
    else:
        if nvrtc.get("include_dir") is None and "include_dir" in nvrtc:
            runtime = "nvidia-cuda-runtime-cu12" if drv_major == 12 else "nvidia-cuda-runtime"
            out.append(
                _finding(
                    "nvrtc",
                    "warning",
                    "cuda_fp16.h / cuda_bf16.h not found next to NVRTC: kernels that include them won't compile",
                    f"pip install {runtime}, or set CUDA_HOME to a CUDA toolkit",
                )
            )
        out += _diagnose_nvrtc_vs_driver(nvrtc, drv_cuda)
    for g in gpus:
        out += _diagnose_gpu(g, nvrtc, drv_major)
    out += _diagnose_torch(torch_f, gpus, drv_cuda)
    if cache.get("error"):
        out.append(
            _finding(
                "cache",
                "warning",
                f"the compile cache could not be read: {cache['error']}",
                "set KERNELKIT_CACHE_DIR to a writable folder",
            )
        )
    elif cache.get("writable") is False:
        out.append(
            _finding(
                "cache",
                "warning",
                f"the cache folder {cache.get('dir')} is not writable: every process recompiles its kernels",
                f"set KERNELKIT_CACHE_DIR to a writable folder, or make {cache.get('dir')} writable by this user",
            )
        )
    out += _diagnose_probes(probes, nvrtc, drv_cuda, gpus)
    return out


def _diagnose_driver(driver: Facts, env: Facts) -> List[Finding]:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    hide_hint = f" (CUDA_VISIBLE_DEVICES={visible!r} hides GPUs: unset it)" if visible is not None else ""
    if not driver.get("found"):
        err = driver.get("error") or ""
        if "too old" in err:
            return [
                _finding(
                    "driver",
                    "error",
                    "the NVIDIA driver is too old for kernelkit (it needs a driver for CUDA 12.0 or later)",
                    "upgrade the NVIDIA driver to release 525 or newer (580 or newer for CUDA 13)",
                )
            ]
        return [
            _finding(
                "driver",
                "warning",
                f"{_NO_GPU} (no NVIDIA driver, libcuda.so.1, was found)",
                "on a GPU machine, install the NVIDIA driver (it provides libcuda.so.1), or point "
                "KERNELKIT_CUDA_DRIVER_PATH at libcuda.so.1" + hide_hint,
            )
        ]
    init_error = driver.get("init_error")
    lib, module = driver.get("release"), driver.get("kernel_module")
    mismatch = bool(lib and module and lib != module)
    mismatch_fix = (
        f"the driver library ({lib}) and the kernel module ({module}) differ, as after a driver upgrade: "
        "reboot, or reload the nvidia kernel module"
    )
    what = f"{_NO_GPU} (the NVIDIA driver is installed but sees no device)"
    no_device = _finding("gpu", "warning", what, "check nvidia-smi" + hide_hint)
    if init_error and "NO_DEVICE" in init_error:
        return [no_device]
    if init_error:
        fix = (
            mismatch_fix
            if mismatch
            else "check that nvidia-smi sees the GPU and that this user can open /dev/nvidia*" + hide_hint
        )
        return [_finding("driver", "error", f"the CUDA driver failed to initialise: {init_error}", fix)]
    out = []
    if mismatch:
        out.append(_finding("driver", "warning", "the NVIDIA driver library and kernel module differ", mismatch_fix))
    if not driver.get("device_count"):
        out.append(no_device)
    return out


def _diagnose_nvrtc_vs_driver(nvrtc: Facts, drv_cuda: Optional[Tuple[int, int]]) -> List[Finding]:
    nv = _version_tuple(nvrtc.get("version"))
    if not nv or not drv_cuda or nv <= drv_cuda:
        return []
    nv_s, drv_s = f"{nv[0]}.{nv[1]}", f"{drv_cuda[0]}.{drv_cuda[1]}"
    if nv[0] == drv_cuda[0]:
        # CUDA's minor-version compatibility: a CUBIN from a newer 13.x runs on any 13.x driver; PTX doesn't.
        return [
            _finding(
                "nvrtc",
                "info",
                f"NVRTC {nv_s} is newer than the driver's CUDA {drv_s}: PTX from it would not load, so kernelkit "
                "compiles to CUBIN (its default), which this driver runs",
                f"nothing to do; for output='ptx', use NVRTC {drv_s} or upgrade the driver",
            )
        ]
    need = _MIN_DRIVER_FOR_CUDA.get(nv[0])
    return [
        _finding(
            "nvrtc",
            "warning",
            f"NVRTC {nv_s} is a newer major version than the driver's CUDA {drv_s}: its CUBINs may not load "
            "(compatibility across minor versions stops at the major version)",
            f"upgrade the NVIDIA driver to one for CUDA {nv[0]}"
            + (f" (release {need} or newer)" if need else "")
            + f", or use NVRTC {drv_cuda[0]}: {_nvrtc_pip(drv_cuda[0])} and set KERNELKIT_NVRTC_PATH to it",
        )
    ]


def _diagnose_gpu(g: Facts, nvrtc: Facts, drv_major: Optional[int]) -> List[Finding]:
    section = f"gpu:{g.get('index', 0)}"
    if g.get("error"):
        return [
            _finding(
                section,
                "error",
                f"GPU {g.get('index', 0)} could not be queried: {g['error']}",
                "check that nvidia-smi sees the GPU and that no other process holds it in exclusive mode",
            )
        ]
    if g.get("nvrtc_can_target") is not False or not nvrtc.get("found"):
        return []
    arch, cc = g["arch"], 10 * g["compute_capability"][0] + g["compute_capability"][1]
    supported = nvrtc.get("supported_archs") or []
    what = f"NVRTC {nvrtc.get('version')} cannot target GPU {g['index']} ({g.get('name')}, {arch})"
    if supported and cc < supported[0]:
        fix = (
            f"NVRTC {nvrtc.get('version')} no longer targets {arch}: use NVRTC 12 "
            "(pip install nvidia-cuda-nvrtc-cu12) and set KERNELKIT_NVRTC_PATH to its libnvrtc.so.12"
        )
    else:
        first = _FIRST_CUDA_FOR_ARCH.get(cc)
        release = f"CUDA {first} or later" if first else "a CUDA version"
        fix = (
            f"upgrade NVRTC to {release}, which supports {arch}: {_nvrtc_pip(drv_major, upgrade=True)}, "
            "or set KERNELKIT_NVRTC_PATH to a newer libnvrtc.so"
        )
    return [_finding(section, "error", what, fix)]


def _torch_index(drv_cuda: Optional[Tuple[int, int]]) -> str:
    """A torch wheel index whose CUDA the driver runs."""
    tag = "cu130" if not drv_cuda or drv_cuda[0] >= 13 else "cu126"
    return f"pip install torch --index-url https://download.pytorch.org/whl/{tag}"


def _diagnose_torch(torch_f: Facts, gpus: List[Facts], drv_cuda: Optional[Tuple[int, int]]) -> List[Finding]:
    if not torch_f:
        return []
    has_gpu = bool(gpus)
    if not torch_f.get("found"):
        level = "error" if has_gpu else "warning"
        return [
            _finding(
                "torch",
                level,
                f"torch cannot be imported ({torch_f.get('error')}): kernelkit's ops and launches need it",
                "pip install torch" + (f" (a CUDA build: {_torch_index(drv_cuda)})" if has_gpu else ""),
            )
        ]
    if not has_gpu or torch_f.get("cuda_available"):
        return []
    version = torch_f.get("version")
    if torch_f.get("cuda") is None:
        return [
            _finding(
                "torch",
                "error",
                f"torch {version} is a CPU-only build: kernels cannot be launched on its tensors",
                f"install a CUDA build of torch: {_torch_index(drv_cuda)}",
            )
        ]
    tc = _version_tuple(torch_f.get("cuda"))
    if tc and drv_cuda and tc[0] > drv_cuda[0]:
        need = _MIN_DRIVER_FOR_CUDA.get(tc[0])
        return [
            _finding(
                "torch",
                "error",
                f"torch {version} is built for CUDA {torch_f['cuda']} but the driver supports CUDA "
                f"{drv_cuda[0]}.{drv_cuda[1]}: torch cannot use the GPU",
                "upgrade the NVIDIA driver"
                + (f" to release {need} or newer" if need else "")
                + f", or install a torch build for CUDA {drv_cuda[0]}: {_torch_index(drv_cuda)}",
            )
        ]
    detail = f": {torch_f['warning']}" if torch_f.get("warning") else ""
    return [
        _finding(
            "torch",
            "error",
            f"torch {version} cannot use the GPU that the driver sees (torch.cuda.is_available() is False){detail}",
            "check CUDA_VISIBLE_DEVICES and that torch's CUDA version is one the driver runs",
        )
    ]


def _diagnose_probes(
    probes: Facts, nvrtc: Facts, drv_cuda: Optional[Tuple[int, int]], gpus: List[Facts]
) -> List[Finding]:
    out = []
    comp = probes.get("compile") or {}
    if comp.get("ran") and not comp.get("ok"):
        err = comp.get("error") or "unknown error"
        if "builtins" in err.lower():
            fix = (
                "NVRTC's companion library libnvrtc-builtins.so is missing or of another version: reinstall "
                "NVRTC as one package (pip install --force-reinstall nvidia-cuda-nvrtc, or -cu12)"
            )
        else:
            fix = (
                "reinstall NVRTC (pip install --force-reinstall nvidia-cuda-nvrtc, or -cu12), or set "
                "KERNELKIT_NVRTC_PATH to a working libnvrtc.so"
            )
        out.append(
            _finding("compile", "error", f"compiling a test kernel for {comp.get('arch')} failed: {_short(err)}", fix)
        )
    launch = probes.get("launch") or {}
    if launch.get("ran") and not launch.get("ok"):
        err = launch.get("error") or "unknown error"
        image_errors = ("NO_BINARY_FOR_GPU", "UNSUPPORTED_PTX_VERSION", "INVALID_IMAGE", "INVALID_PTX")
        if any(s in err for s in image_errors):
            nv = nvrtc.get("version")
            drv = f"{drv_cuda[0]}.{drv_cuda[1]}" if drv_cuda else "?"
            fix = (
                f"the driver (CUDA {drv}) cannot load code from NVRTC {nv}: upgrade the NVIDIA driver, or use "
                "an NVRTC no newer than the driver and set KERNELKIT_NVRTC_PATH to it"
            )
        elif "result is wrong" in err:
            fix = "report this as a kernelkit bug, with the output of `kernelkit doctor --json`"
        else:
            fix = "check that nvidia-smi shows the GPU healthy and idle; rerun with KERNELKIT_LAUNCH_BLOCKING=1"
        device = launch.get("device", 0)
        name = gpus[device].get("name") if device < len(gpus) else None
        where = f"GPU {device}" + (f" ({name})" if name else "")
        out.append(_finding("launch", "error", f"launching a test kernel on {where} failed: {_short(err)}", fix))
    return out


def _short(text: str, limit: int = 300) -> str:
    """An error flattened to one capped line, so a finding stays readable; the full text stays in the facts."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def exit_status(findings: List[Finding]) -> int:
    """0 when kernelkit is usable (no fatal finding), else 1."""
    return 1 if any(f["fatal"] for f in findings) else 0


# ----------------------------------------------------------------------------- rendering


def _marks(console: Any) -> Dict[str, str]:
    utf = (console.encoding or "").lower().replace("-", "").startswith("utf")
    ok, warn, err, info = ("✓", "!", "✗", "i") if utf else ("ok", "!", "x", "i")
    return {
        "ok": f"[green]{ok}[/]",
        "warning": f"[yellow]{warn}[/]",
        "error": f"[bold red]{err}[/]",
        "info": f"[blue]{info}[/]",
        "none": "[dim]-[/]",
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _home(path: str) -> str:
    """Shorten a path for display: the home folder as ~."""
    home = str(Path.home())
    return "~" + path[len(home) :] if home not in ("", "/") and path.startswith(home + "/") else path


def _arch_range(archs: List[int]) -> str:
    return f"targets sm_{archs[0]} to sm_{archs[-1]}" if archs else "target list unknown"


def render(report: Facts, console: Any) -> None:
    """Print ``report`` (from :func:`collect`) on a rich ``console``, in one screen.

    >>> from rich.console import Console
    >>> render(collect(), Console())
    """
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    marks = _marks(console)
    findings = report.get("problems", []) + report.get("notes", [])
    order = {"ok": 0, "info": 1, "warning": 2, "error": 3}

    def mark(*sections: str, default: str = "ok") -> str:
        levels = [f["level"] for f in findings if f["section"] in sections]
        return marks[max([default, *levels], key=order.__getitem__)]

    e = escape
    t = Table(box=None, show_header=False, pad_edge=False, expand=False)
    t.add_column(width=2)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")

    drv = report["driver"]
    if drv["found"]:
        release = f"driver {drv['release']}, " if drv.get("release") else ""
        detail = f"{e(release)}CUDA {drv['cuda_version']}  [dim]{e(_home(drv['path']))}[/]"
        t.add_row(mark("driver"), "driver", detail)
    else:
        t.add_row(mark("driver", default="warning"), "driver", "not found")

    nv = report["nvrtc"]
    if nv["found"]:
        detail = f"{e(nv['version'])}, {_arch_range(nv['supported_archs'])}  [dim]{e(_home(nv['path']))}[/]"
        t.add_row(mark("nvrtc"), "NVRTC", detail)
    else:
        t.add_row(mark("nvrtc"), "NVRTC", "not found")

    tf = report["torch"]
    if tf["found"]:
        cuda = f"CUDA {tf['cuda']}" if tf["cuda"] else "CPU-only build"
        gpu_use = ", sees the GPU" if tf["cuda_available"] else ""
        t.add_row(mark("torch"), "torch", e(f"{tf['version']} ({cuda}){gpu_use}"))
    else:
        t.add_row(mark("torch"), "torch", "not importable")

    if not report["gpus"]:
        t.add_row(mark("gpu", default="warning"), "GPU", "none")
    for g in report["gpus"]:
        sec = f"gpu:{g['index']}"
        if g.get("error"):
            t.add_row(mark(sec), f"GPU {g['index']}", e(g["error"]))
            continue
        target = {True: "NVRTC targets it", False: "[red]NVRTC cannot target it[/]", None: ""}
        t.add_row(
            mark(sec),
            f"GPU {g['index']}",
            f"{e(g['name'])}  {g['arch']}  {g['sm_count']} SMs  {g['memory_gib']} GiB  {target[g['nvrtc_can_target']]}",
        )

    c = report["cache"]
    if c.get("dir"):
        writable = "" if c.get("writable") else "  [yellow]not writable[/]"
        entries = f"{c['entries']} entr{'y' if c['entries'] == 1 else 'ies'}"
        t.add_row(mark("cache"), "cache", f"{e(_home(c['dir']))}  {entries}, {_mb(c['bytes'])}{writable}")
    else:
        t.add_row(mark("cache"), "cache", "unknown")

    for key, label in (("compile", "compile"), ("launch", "launch")):
        p = report["probes"][key]
        if not p.get("ran"):
            t.add_row(marks["none"], label, f"[dim]skipped: {e(p.get('skipped') or '')}[/]")
        elif p.get("ok") and key == "compile":
            t.add_row(mark(key), label, f"{p['arch']} CUBIN ({p['cubin_bytes']} bytes) in {p['ms']:.0f} ms")
        elif p.get("ok"):
            t.add_row(mark(key), label, f"GPU {p['device']}: result correct, {p['ms']:.0f} ms (compile + launch)")
        else:
            t.add_row(marks["error"], label, "failed")

    version = report.get("kernelkit", {}).get("version", "?")
    console.print(Panel(t, title=f"kernelkit {e(version)} doctor", title_align="left", expand=False))
    if findings:
        # A grid keeps wrapped lines indented under their mark; errors first.
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=2)
        grid.add_column(overflow="fold")
        for f in sorted(findings, key=lambda f: -order[f["level"]]):
            grid.add_row(marks[f["level"]], f"{e(f['what'])}\n[dim]fix:[/] {e(f['fix'])}")
        console.print(grid)
    n_fatal = sum(f["fatal"] for f in findings)
    if report["usable"]:
        suffix = "" if report["gpus"] else " (compile and CPU ops only: no GPU)"
        console.print(f"[bold green]kernelkit is usable[/]{suffix}")
    else:
        console.print(f"[bold red]kernelkit is not usable[/]: {n_fatal} problem{'s' * (n_fatal != 1)} to fix")


# ----------------------------------------------------------------------------- the command


def run(json_output: bool = False) -> int:
    """`kernelkit doctor [--json]`: print the report and return the exit status (0 = usable).

    With ``json_output`` the report goes to stdout as JSON and nothing else does.

    >>> raise SystemExit(run())
    """
    if json_output:
        # Anything a library prints while probing would corrupt the JSON: send it to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            report = collect()
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
        sys.stdout.flush()
    else:
        from rich.console import Console

        report = collect()
        render(report, Console())
    return int(report["exit_status"])


if __name__ == "__main__":
    raise SystemExit(run(json_output="--json" in sys.argv[1:]))
