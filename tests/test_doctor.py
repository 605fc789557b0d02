"""`kernelkit doctor`: the report on this machine, its JSON, its exit status, and the diagnosis rules."""

from __future__ import annotations

import copy
import ctypes.util
import io
import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from kernelkit import _native, doctor


def _driver_loads() -> bool:
    try:
        _native.driver_info()
        return True
    except Exception:
        return False


HAS_DRIVER = _driver_loads()
no_driver_only = pytest.mark.skipif(HAS_DRIVER, reason="checks the no-driver report; this machine has a driver")


@pytest.fixture(scope="module")
def report():
    return doctor.collect()


# ----------------------------------------------------------------------------- this machine


def test_nvrtc_is_found_with_its_version_and_path(report):
    nv = report["nvrtc"]
    assert nv["found"] and nv["error"] is None
    assert nv["version"] == "{}.{}".format(*doctor._version_tuple(nv["version"]))
    assert os.path.isfile(nv["path"]) and "nvrtc" in os.path.basename(nv["path"])
    assert 90 in nv["supported_archs"] and nv["supported_archs"] == sorted(nv["supported_archs"])


def test_compile_probe_passes_and_is_timed(report):
    c = report["probes"]["compile"]
    assert c["ran"] and c["ok"] and c["error"] is None
    assert c["arch"] == (report["gpus"][0]["arch"] if report["gpus"] else "sm_80")
    assert 0 < c["ms"] < 30_000 and c["cubin_bytes"] > 0


def test_cache_section(report):
    from kernelkit import cache_dir

    c = report["cache"]
    assert c["dir"] == str(cache_dir()) and c["writable"] is True
    assert c["entries"] >= 0 and c["bytes"] >= 0


@no_driver_only
def test_without_a_driver_the_report_says_no_gpu_and_exit_is_zero(report):
    drv = report["driver"]
    assert drv["found"] is False and "libcuda" in drv["error"]
    assert report["gpus"] == []
    assert report["probes"]["launch"] == {"ran": False, "ok": None, "skipped": "no GPU", "error": None}
    (p,) = [p for p in report["problems"] if p["section"] == "driver"]
    assert p["fatal"] is False and p["level"] == "warning"
    assert "no GPU: kernelkit runs its CPU implementations" in p["what"]
    assert "install the NVIDIA driver" in p["fix"]
    assert report["usable"] is True and report["exit_status"] == 0


@no_driver_only
def test_render_without_a_driver():
    out = io.StringIO()
    rep = doctor.collect(probe=False)
    doctor.render(rep, Console(file=out, width=100))
    text = out.getvalue()
    assert f"kernelkit {rep['kernelkit']['version']} doctor" in text
    assert re.search(r"driver\s+not found", text) and re.search(r"GPU\s+none", text)
    assert re.search(rf"NVRTC\s+{re.escape(rep['nvrtc']['version'])}, targets sm_", text)
    assert "no GPU: kernelkit runs its CPU implementations" in text
    assert "kernelkit is usable" in text


def test_run_json_prints_only_json_with_the_documented_keys(capsys):
    status = doctor.run(json_output=True)
    out = capsys.readouterr().out
    data = json.loads(out)  # nothing but the JSON on stdout
    assert status == data["exit_status"] == 0 and data["usable"] is True
    for key in ("kernelkit", "env", "driver", "nvrtc", "torch", "gpus", "cache", "probes", "problems", "notes"):
        assert key in data
    assert set(data["probes"]) == {"compile", "launch"}
    for p in data["problems"] + data["notes"]:
        assert {"what", "fix", "fatal"} <= set(p) and isinstance(p["fatal"], bool)
    assert data["nvrtc"]["found"] is True and data["probes"]["compile"]["ok"] is True


def test_run_text_returns_the_exit_status(capsys):
    assert doctor.run() == 0
    out = capsys.readouterr().out
    assert "kernelkit is usable" in out and "compile" in out


def test_hidden_nvrtc_is_fatal_with_a_fix():
    if ctypes.util.find_library("nvrtc"):
        pytest.skip("a system NVRTC would be found through the system loader")
    env = dict(os.environ, KERNELKIT_NVRTC_PATH="/nonexistent/libnvrtc.so.13")
    code = (
        "import kernelkit._native as n; n.set_search_paths([]); "
        "import kernelkit.doctor as d; raise SystemExit(d.run(True))"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["nvrtc"]["found"] is False and "/nonexistent/libnvrtc.so.13" in data["nvrtc"]["error"]
    assert data["probes"]["compile"]["skipped"] == "NVRTC not found"
    (p,) = [p for p in data["problems"] if p["section"] == "nvrtc"]
    assert p["fatal"] is True and "NVRTC" in p["what"]
    assert "KERNELKIT_NVRTC_PATH" in p["fix"] and "pip install nvidia-cuda-nvrtc" in p["fix"]
    assert data["usable"] is False and data["exit_status"] == 1


def test_collect_never_raises_when_native_calls_fail(monkeypatch):
    def boom(*a):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(doctor._native, "cache_usage", boom)
    monkeypatch.setattr(doctor._native, "nvrtc_info", boom)
    rep = doctor.collect(probe=False)
    assert rep["cache"]["error"] == "simulated failure"
    assert rep["nvrtc"]["found"] is False and rep["exit_status"] == 1
    json.dumps(rep)


# ----------------------------------------------------------------------------- diagnosis rules

H100 = {
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "arch": "sm_90",
    "compute_capability": [9, 0],
    "sm_count": 132,
    "memory_bytes": 85_029_158_912,
    "memory_gib": 79.2,
    "nvrtc_can_target": True,
    "error": None,
}
ARCHS_13 = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]


def healthy(**sections) -> dict:
    """Facts from a working H100 machine (driver 580 for CUDA 13.0, NVRTC 13.0, torch cu130), then `sections`."""
    facts = {
        "env": {},
        "driver": {
            "found": True,
            "path": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
            "version": 13000,
            "cuda_version": "13.0",
            "release": "580.159.04",
            "kernel_module": "580.159.04",
            "device_count": 1,
            "init_error": None,
            "error": None,
        },
        "nvrtc": {
            "found": True,
            "path": "/venv/nvidia/cu13/lib/libnvrtc.so.13",
            "version": "13.0",
            "include_dir": "/venv/nvidia/cu13/include",
            "supported_archs": ARCHS_13,
            "error": None,
        },
        "gpus": [copy.deepcopy(H100)],
        "torch": {"found": True, "version": "2.11.0+cu130", "cuda": "13.0", "cuda_available": True, "device_count": 1},
        "cache": {"dir": "/root/.cache/kernelkit", "bytes": 0, "entries": 0, "writable": True, "error": None},
        "probes": {
            "compile": {"ran": True, "ok": True, "arch": "sm_90", "ms": 20.0, "cubin_bytes": 3000, "error": None},
            "launch": {"ran": True, "ok": True, "device": 0, "ms": 5.0, "max_error": 0.0, "error": None},
        },
    }
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(facts.get(name), dict):
            facts[name].update(value)
        else:
            facts[name] = value
    return facts


def levels(findings):
    return [(f["section"], f["level"]) for f in findings]


def test_a_healthy_gpu_machine_has_no_findings():
    assert doctor.diagnose(healthy()) == []
    assert doctor.exit_status([]) == 0


def test_nvrtc_newer_minor_than_driver_is_a_note_about_cubin():
    findings = doctor.diagnose(healthy(nvrtc={"version": "13.2"}))
    assert levels(findings) == [("nvrtc", "info")]
    (f,) = findings
    assert f["fatal"] is False
    assert "NVRTC 13.2 is newer than the driver's CUDA 13.0" in f["what"] and "CUBIN" in f["what"]
    assert doctor.exit_status(findings) == 0


def test_nvrtc_newer_major_than_driver_is_a_warning_with_driver_fix():
    findings = doctor.diagnose(healthy(driver={"version": 12080, "cuda_version": "12.8"}))
    assert levels(findings) == [("nvrtc", "warning")]
    f = findings[0]
    assert "NVRTC 13.0 is a newer major version than the driver's CUDA 12.8" in f["what"]
    assert "release 580 or newer" in f["fix"] and "nvidia-cuda-nvrtc-cu12" in f["fix"]


@pytest.mark.parametrize("nvrtc_version", ["13.0", "12.8", "12.4"])
def test_nvrtc_not_newer_than_driver_says_nothing(nvrtc_version):
    assert doctor.diagnose(healthy(nvrtc={"version": nvrtc_version})) == []


def test_nvrtc_version_check_needs_a_driver():
    facts = healthy(nvrtc={"version": "13.2"}, driver={"found": False, "version": None}, gpus=[])
    assert not any(f["section"] == "nvrtc" for f in doctor.diagnose(facts))


def test_nvrtc_too_old_for_a_new_gpu_is_fatal_with_an_upgrade_fix():
    b200 = dict(H100, name="NVIDIA B200", arch="sm_100", compute_capability=[10, 0], nvrtc_can_target=False)
    facts = healthy(nvrtc={"version": "12.4", "supported_archs": [50, 60, 70, 75, 80, 86, 89, 90]}, gpus=[b200])
    facts["driver"].update(version=12080)
    findings = doctor.diagnose(facts)
    (f,) = [f for f in findings if f["section"] == "gpu:0"]
    assert f["fatal"] and "NVRTC 12.4 cannot target GPU 0 (NVIDIA B200, sm_100)" == f["what"]
    assert "CUDA 12.8 or later" in f["fix"] and "nvidia-cuda-nvrtc-cu12" in f["fix"]
    assert doctor.exit_status(findings) == 1


def test_nvrtc_13_on_a_volta_gpu_points_to_nvrtc_12():
    v100 = dict(H100, name="Tesla V100", arch="sm_70", compute_capability=[7, 0], nvrtc_can_target=False)
    (f,) = doctor.diagnose(healthy(gpus=[v100]))
    assert f["fatal"] and f["section"] == "gpu:0"
    assert "no longer targets sm_70" in f["fix"] and "KERNELKIT_NVRTC_PATH" in f["fix"]


def test_unknown_nvrtc_arch_list_is_not_a_problem():
    gpu = dict(H100, nvrtc_can_target=None)
    assert doctor.diagnose(healthy(gpus=[gpu], nvrtc={"supported_archs": []})) == []


def test_no_driver_is_a_warning_not_fatal():
    facts = healthy(driver={"found": False, "version": None, "device_count": 0, "error": "not found"}, gpus=[])
    facts["torch"].update(cuda=None, cuda_available=False)
    facts["probes"]["launch"] = {"ran": False, "ok": None, "skipped": "no GPU", "error": None}
    findings = doctor.diagnose(facts)
    assert levels(findings) == [("driver", "warning")]
    assert "no GPU" in findings[0]["what"] and doctor.exit_status(findings) == 0


def test_driver_without_devices_is_a_warning_that_names_cuda_visible_devices():
    facts = healthy(driver={"init_error": "CUDA driver call cuInit failed with CUDA_ERROR_NO_DEVICE: no CUDA-capable"})
    facts.update(gpus=[], env={"CUDA_VISIBLE_DEVICES": ""})
    (f,) = doctor.diagnose(facts)
    assert f["level"] == "warning" and "no GPU" in f["what"] and "CUDA_VISIBLE_DEVICES" in f["fix"]


def test_driver_kernel_module_mismatch_failing_init_is_fatal_with_reboot_fix():
    facts = healthy(
        driver={"kernel_module": "575.57.08", "init_error": "cuInit failed with CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"}
    )
    facts["gpus"] = []
    (f,) = doctor.diagnose(facts)
    assert f["fatal"] and f["section"] == "driver" and "reboot" in f["fix"] and "575.57.08" in f["fix"]


def test_cpu_only_torch_on_a_gpu_machine_is_fatal():
    findings = doctor.diagnose(healthy(torch={"version": "2.11.0+cpu", "cuda": None, "cuda_available": False}))
    (f,) = [f for f in findings if f["section"] == "torch"]
    assert f["fatal"] and "CPU-only build" in f["what"]
    assert "install a CUDA build of torch" in f["fix"] and "whl/cu130" in f["fix"]


def test_torch_for_a_newer_cuda_than_the_driver_is_fatal():
    facts = healthy(driver={"version": 12040}, nvrtc={"version": "12.4"}, torch={"cuda_available": False})
    (f,) = [f for f in doctor.diagnose(facts) if f["section"] == "torch"]
    assert f["fatal"] and "built for CUDA 13.0 but the driver supports CUDA 12.4" in f["what"]
    assert "release 580 or newer" in f["fix"] and "whl/cu126" in f["fix"]


def test_failed_probes_are_fatal():
    facts = healthy()
    facts["probes"]["launch"].update(ok=False, error="kernel 'p' failed with CUDA_ERROR_NO_BINARY_FOR_GPU: no kernel")
    (f,) = doctor.diagnose(facts)
    assert f["fatal"] and f["section"] == "launch" and "GPU 0 (NVIDIA H100 80GB HBM3)" in f["what"]
    assert "upgrade the NVIDIA driver" in f["fix"]
    facts = healthy()
    facts["probes"]["compile"].update(ok=False, error="NVRTC call nvrtcCompileProgram failed: builtins missing")
    (f,) = doctor.diagnose(facts)
    assert f["fatal"] and f["section"] == "compile" and "libnvrtc-builtins" in f["fix"]


def test_unwritable_cache_and_missing_fp16_headers_are_warnings():
    facts = healthy(cache={"writable": False}, nvrtc={"include_dir": None})
    findings = doctor.diagnose(facts)
    assert sorted(levels(findings)) == [("cache", "warning"), ("nvrtc", "warning")]
    cache = next(f for f in findings if f["section"] == "cache")
    assert "KERNELKIT_CACHE_DIR" in cache["fix"]
    assert doctor.exit_status(findings) == 0


def test_render_a_gpu_report_with_problems():
    facts = healthy(nvrtc={"version": "13.2"})
    facts["probes"]["launch"].update(ok=False, error="boom [bold]not markup[/bold]")
    facts["kernelkit"] = {"version": "0.1.0"}
    findings = doctor.diagnose(facts)
    facts["problems"] = [f for f in findings if f["level"] != "info"]
    facts["notes"] = [f for f in findings if f["level"] == "info"]
    facts["exit_status"] = doctor.exit_status(findings)
    facts["usable"] = facts["exit_status"] == 0
    out = io.StringIO()
    doctor.render(facts, Console(file=out, width=120))
    text = out.getvalue()
    assert "NVIDIA H100 80GB HBM3  sm_90  132 SMs  79.2 GiB  NVRTC targets it" in text
    assert "driver 580.159.04, CUDA 13.0" in text
    assert "[bold]not markup[/bold]" in text, "error text is printed as is, not as rich markup"
    assert "kernelkit is not usable: 1 problem to fix" in text


def test_driver_release_parsing():
    assert doctor._release_from_path("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04") == "580.159.04"
    assert doctor._release_from_path("/usr/lib/wsl/lib/libcuda.so.1") is None
    proc = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)\n"
        "GCC version:  gcc version 12.3.0\n"
    )
    assert doctor._release_from_proc(proc) == "580.95.05"
    assert doctor._release_from_proc("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug") == (
        "535.104.05"
    )
