"""NVRTC compilation, the disk cache and error reporting: all without a GPU."""

import os
import subprocess
import sys
import textwrap

import pytest

import kernelkit

TEMPLATED = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T>
__global__ void scale(const T* x, T* y, float s, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = (T)((float)x[i] * s);
}
extern "C" __global__ void plain(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1.0f; }
"""
TYPES = ["float", "double", "__half", "__nv_bfloat16"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_templates_fp16_bf16_compile_to_cubin(arch):
    names = [f"scale<{t}>" for t in TYPES]
    c = kernelkit.compile(TEMPLATED, arch=arch, name_expressions=names)
    assert c.kind == "cubin" and c.arch == arch
    assert c.image[:4] == b"\x7fELF", "a CUBIN is an ELF image"
    assert set(c.lowered_names) == set(names)
    assert c.lowered_names["scale<float>"] == "_Z5scaleIfEvPKT_PS0_fx"
    assert "plain" in c.kernels


def test_ptx_on_request():
    c = kernelkit.compile(TEMPLATED, arch="sm_90", name_expressions=["scale<float>"], output="ptx")
    text = c.image.decode()
    assert c.kind == "ptx" and ".target sm_90" in text and ".entry _Z5scaleIfEvPKT_PS0_fx" in text


def test_compile_error_carries_log_file_and_line():
    src = "__global__ void k(float* x) {\n  x[0] = undefined_thing;\n}\n"
    with pytest.raises(kernelkit.CompileError) as e:
        kernelkit.compile(src, file_name="my_kernel.cu")
    msg = str(e.value)
    assert "my_kernel.cu(2)" in msg and "undefined_thing" in msg, msg


def test_load_inline_reports_errors_against_the_module_name():
    with pytest.raises(kernelkit.CompileError, match=r"broken\.cu\(1\)"):
        kernelkit.load_inline("broken", "__global__ void k() { nope; }", arch="sm_80")


def test_load_from_files_with_include_dir(tmp_path):
    (tmp_path / "helpers.cuh").write_text("__device__ inline float twice(float v) { return 2 * v; }\n")
    (tmp_path / "k.cu").write_text('#include "helpers.cuh"\n__global__ void k(float* x) { x[0] = twice(x[0]); }\n')
    mod = kernelkit.load("from_files", sources=[tmp_path / "k.cu"], arch="sm_90")
    assert "_Z1kPf" in mod.kernel_names("sm_90")


def test_invalid_arguments_name_what_was_expected():
    with pytest.raises(ValueError, match="arch: expected a GPU architecture"):
        kernelkit.compile("__global__ void k() {}", arch="hopper")
    with pytest.raises(ValueError, match="output: expected 'cubin' or 'ptx'"):
        kernelkit.compile("__global__ void k() {}", output="sass")
    with pytest.raises(FileNotFoundError, match="sources: .* does not exist"):
        kernelkit.load("x", sources=["/nonexistent.cu"])


def test_cache_hit_miss_and_key_sensitivity():
    src = "__global__ void cache_probe(float* x) { x[0] = 42.0f; }"
    first = kernelkit.compile(src, arch="sm_80", file_name="probe_a.cu")
    second = kernelkit.compile(src, arch="sm_80", file_name="probe_a.cu")
    assert second.cache_key == first.cache_key
    assert second.image == first.image
    # Each of source, options and arch changes the key.
    keys = {
        first.cache_key,
        kernelkit.compile(src + "\n", arch="sm_80", file_name="probe_a.cu").cache_key,
        kernelkit.compile(src, arch="sm_80", options=["-DX=1"], file_name="probe_a.cu").cache_key,
        kernelkit.compile(src, arch="sm_90", file_name="probe_a.cu").cache_key,
    }
    assert len(keys) == 4
    files = list(kernelkit.cache_dir().glob("*.kkc"))
    assert any(f.name.startswith(first.cache_key) for f in files)


def _fresh_process(code: str) -> str:
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_fresh_process_loads_from_disk_and_repairs_corruption():
    src = "__global__ void disk_probe(float* x) { x[0] = 7.0f; }"
    probe = f"""
        import kernelkit
        c = kernelkit.compile({src!r}, arch="sm_90", file_name="disk.cu")
        print(c.from_disk_cache, c.cache_key)
    """
    hit, key = _fresh_process(probe).split()
    hit2, key2 = _fresh_process(probe).split()
    assert key == key2 and hit2 == "True"
    entry = kernelkit.cache_dir() / f"{key}.kkc"
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    hit3, _ = _fresh_process(probe).split()
    assert hit3 == "False", "a corrupt entry must be recompiled, not used"
    hit4, _ = _fresh_process(probe).split()
    assert hit4 == "True", "the recompile rewrote the entry"


def test_two_processes_racing_on_one_key():
    src = "__global__ void race_probe(float* x) { x[1] = 3.0f; }"
    code = textwrap.dedent(f"""
        import kernelkit
        for _ in range(5):
            c = kernelkit.compile({src!r}, arch="sm_90", file_name="race.cu")
            assert c.image[:4] == b"\\x7fELF"
        print(c.cache_key)
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    keys = {o[0].strip() for o in outs}
    assert len(keys) == 1
    assert not list(kernelkit.cache_dir().glob("*.tmp")), "no stray temp files"


def test_missing_nvrtc_raises_a_clear_error():
    import ctypes.util

    if ctypes.util.find_library("nvrtc"):
        pytest.skip("a system NVRTC is installed")
    code = """
        import kernelkit._native as n
        n.set_search_paths([])  # hide the pip wheels
        try:
            n.nvrtc_info()
        except n.LibraryNotFoundError as e:
            print("ERR", e)
    """
    env = dict(os.environ, KERNELKIT_NVRTC_PATH="/nonexistent/libnvrtc.so.13", CUDA_HOME="", CUDA_PATH="")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "NVRTC (libnvrtc) could not be loaded" in out.stdout
    assert "/nonexistent/libnvrtc.so.13" in out.stdout
    assert "fix: pip install nvidia-cuda-nvrtc" in out.stdout


def test_nvrtc_is_found_in_the_pip_wheels():
    info = kernelkit._native.nvrtc_info()
    assert info["version"].count(".") == 1
    assert info["include_dir"] and os.path.isfile(os.path.join(info["include_dir"], "cuda_fp16.h"))
    assert 90 in info["supported_archs"]
