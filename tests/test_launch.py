"""Kernel launches: argument checks everywhere, real launches on the GPU."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kernelkit

SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T>
__global__ void scale(const T* x, T* y, float s, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = (T)((float)x[i] * s);
}
extern "C" __global__ void spin_then_fill(float* y, float v, long long n, long long spins) {
    for (long long k = 0; k < spins; ++k) __nanosleep(1000);
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
extern "C" __global__ void trigger_spin_fill(float* y, float v, long long n, long long spins) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    for (long long k = 0; k < spins; ++k) __nanosleep(1000);
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
// out[block] = (cluster rank, CTAs per cluster), or (0, 1) where there are no clusters.
extern "C" __global__ void cluster_ranks(int* out) {
    unsigned rank = 0, n = 1;
#if __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
#endif
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) { out[2 * b] = rank; out[2 * b + 1] = n; }
}
extern "C" __global__ void wait_copy(const float* y, float* z, long long n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) z[i] = y[i];
}
extern "C" __global__ void write_null(float* p, int n) { p[n] = 1.0f; }
extern "C" __global__ void smem_sum(float* out, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) { float s = 0; for (int i = 0; i < n; ++i) s += buf[i]; out[0] = s; }
}
"""

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
CTYPE = {torch.float32: "float", torch.float64: "double", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}


@pytest.fixture(scope="module")
def mod():
    return kernelkit.load_inline("launch_tests", SRC)


def test_cpu_tensors_are_rejected_before_any_launch(mod):
    k = mod.kernel("scale<float>")
    x = torch.ones(4)
    with pytest.raises(ValueError, match=r"kernel 'scale<float>' argument 0: expected a CUDA tensor, got a CPU"):
        k.launch(1, 32, (x, x, 2.0, 4))


def test_bad_grid_block_and_argument_types(mod):
    k = mod.kernel("scale<float>")
    with pytest.raises(ValueError, match="grid: expected a positive int"):
        k.launch((1, 2, 3, 4), 32, ())
    with pytest.raises(ValueError, match="block: expected a positive int"):
        k.launch(1, -5, ())
    with pytest.raises(TypeError, match="argument 1: cannot pass dict"):
        k.launch(1, 32, (1, {}, 2.0, 4))
    with pytest.raises(TypeError, match="argument 0: cannot pass tuple"):
        k.launch(1, 32, ((1, 2, 3), 1, 2.0, 4))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-driver message")
def test_no_driver_gives_a_clear_error():
    try:
        info = kernelkit._native.driver_info()
    except kernelkit.LibraryNotFoundError as e:
        assert "the CUDA driver (libcuda) could not be loaded" in str(e)
        assert "fix: install the NVIDIA driver" in str(e)
    else:
        assert info["device_count"] == 0 or info["init_error"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_results_match_reference(mod, dtype):
    n = 100_003
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.full_like(x, float("nan"))
    mod.kernel(f"scale<{CTYPE[dtype]}>").launch((n + 255) // 256, 256, (x, y, 3, n))  # int -> float param
    ref = (x.float() * 3).to(dtype)  # the kernel computes in float and rounds once
    torch.testing.assert_close(y, ref, rtol=0, atol=0)


@pytest.mark.gpu
def test_wrong_argument_count_and_range_name_the_kernel(mod):
    x = torch.ones(4, device="cuda")
    k = mod.kernel("scale<float>")
    with pytest.raises(ValueError, match=r"kernel 'scale<float>' takes 4 argument\(s\).*got 3"):
        k.launch(1, 32, (x, x, 2.0))
    with pytest.raises(ValueError, match="argument 3: the parameter is a pointer or 64-bit integer, got the float 1.5"):
        k.launch(1, 32, (x, x, 2.0, 1.5))
    with pytest.raises(ValueError, match="not contiguous"):
        k.launch(1, 32, (x.view(2, 2).t(), x, 2.0, 4))
    with pytest.raises(kernelkit.KernelNotFoundError, match="scal"):
        mod.kernel("scal<float>")


@pytest.mark.gpu
def test_launches_on_the_current_and_on_a_side_stream(mod):
    k = mod.kernel("spin_then_fill")
    n = 1024
    y = torch.zeros(n, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        k.launch(4, 256, (y, 5.0, n, 20_000))  # ~20 ms of sleeping on `side`
        assert not side.query(), "the kernel must be queued on the current (side) stream"
        assert torch.cuda.default_stream().query(), "nothing was queued on the default stream"
    side.synchronize()
    assert torch.all(y == 5.0)
    z = torch.zeros(n, device="cuda")
    side.wait_stream(torch.cuda.current_stream())  # the zero fill is queued on the default stream
    k.launch(4, 256, (z, 6.0, n, 0), stream=side)  # an explicit stream object
    side.synchronize()
    assert torch.all(z == 6.0)


@pytest.mark.gpu
def test_large_dynamic_shared_memory(mod):
    out = torch.zeros(1, device="cuda")
    n = 96 * 1024 // 4
    mod.kernel("smem_sum").launch(1, 256, (out, n), shared_mem=n * 4)
    assert out.item() == n


@pytest.mark.gpu
def test_device_fault_is_reported_with_the_kernel_name(launch_in_subprocess):
    stdout, printed = launch_in_subprocess(f"""
        mod = kernelkit.load_inline("fault", {SRC!r})
        mod.kernel("write_null").launch(1, 1, (0, 0))
    """)
    assert "LAUNCH_ERROR kernel 'write_null' failed with CUDA_ERROR_ILLEGAL_ADDRESS" in stdout, printed


@pytest.mark.gpu
def test_each_instantiation_compiles_on_its_own(tmp_path):
    """A template instantiation asked for after the module is made compiles alone: a process that used
    scale<double> before scale<float> leaves the compile a process using only scale<float> needs, so the
    second process compiles nothing (its disk-cache key does not depend on what the first used)."""
    code = textwrap.dedent(f"""
        import sys, torch, kernelkit
        mod = kernelkit.load_inline("inst", {SRC!r})
        for t, dt in [(n, getattr(torch, n)) for n in sys.argv[1:]]:
            x = torch.arange(5, device="cuda", dtype=dt)
            y = torch.empty_like(x)
            mod.kernel("scale<" + t + ">").launch(1, 32, (x, y, 2.0, 5))
            assert torch.equal(y, x * 2), (t, y)
        print("OK")
    """)
    env = dict(os.environ, KERNELKIT_CACHE_DIR=str(tmp_path))

    def run(*types):
        out = subprocess.run([sys.executable, "-c", code, *types], env=env, capture_output=True, text=True, timeout=300)
        assert out.stdout.strip() == "OK", out.stdout + out.stderr
        return {p.name for p in tmp_path.iterdir() if not p.name.startswith("nvrtc-")}

    first = run("double", "float")
    assert run("float") == first, "the second process compiled scale<float> again"


@pytest.mark.gpu
def test_dependent_launch_waits_for_the_previous_kernel(mod):
    """dependent=True (programmatic dependent launch on sm_90+): the second kernel may start while the
    first still sleeps, and its griddepcontrol.wait returns only once the first has written y."""
    n = 4096
    y, z = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    for _ in range(3):
        mod.kernel("trigger_spin_fill").launch(16, 256, (y, 7.0, n, 2000))
        mod.kernel("wait_copy").launch(16, 256, (y, z, n), dependent=True)
        torch.cuda.synchronize()
        assert torch.all(z == 7.0)
        y.zero_()
        z.zero_()


@pytest.mark.parametrize("percent", [-2, 101])
def test_carveout_out_of_range_is_rejected(mod, percent):
    """set_carveout takes -1 (the driver's choice) or 0-100, checked before any driver call (no GPU needed)."""
    with pytest.raises(ValueError, match=rf"percent: expected -1 \(the driver's choice\) or 0 to 100, got {percent}"):
        mod.kernel("scale<float>").set_carveout(percent)


@pytest.mark.gpu
def test_carveout_is_set_read_back_and_launches(mod):
    """The preferred L1/shared-memory split stays with the kernel (carveout() reads it back) and its launches still
    compute the same: the most L1 (0), the most shared memory (100), then the driver's choice again (-1)."""
    k = mod.kernel("scale<float>")
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    for percent in (0, 100, -1):
        k.set_carveout(percent)
        assert k.carveout() == percent
        y = torch.empty_like(x)
        k.launch(4, 256, (x, y, 2.0, 1000))
        assert torch.equal(y, x * 2)


@pytest.mark.gpu
def test_cluster_launch_groups_blocks(mod):
    """cluster=(1, 4, 1): blocks (x, 0..3) form one cluster, ranked by y; before sm_90 it is refused."""
    k = mod.kernel("cluster_ranks")
    out = torch.full((6 * 4, 2), -1, dtype=torch.int32, device="cuda")
    if torch.cuda.get_device_capability()[0] < 9:
        assert k.max_active_clusters(128, (1, 4, 1)) == 0
        with pytest.raises(ValueError, match="sm_90"):
            k.launch((6, 4), 128, (out,), cluster=(1, 4, 1))
        return
    assert k.max_active_clusters(128, (1, 4, 1)) >= torch.cuda.get_device_properties(0).multi_processor_count // 4
    k.launch((6, 4), 128, (out,), cluster=(1, 4, 1))
    ranks = out.view(4, 6, 2).cpu()  # [y, x, (rank, n)]
    assert torch.equal(ranks[..., 1], torch.full((4, 6), 4, dtype=torch.int32))
    assert torch.equal(ranks[..., 0], torch.arange(4, dtype=torch.int32).view(4, 1).expand(4, 6))
    with pytest.raises(ValueError, match="multiple of the cluster"):
        k.launch((6, 3), 128, (out,), cluster=(1, 4, 1))
    with pytest.raises(ValueError, match="at most 16 blocks"):
        k.launch((6, 32), 128, (out,), cluster=(1, 32, 1))


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9, reason="clusters need sm_90+"
)
def test_clusters_beyond_the_portable_8_blocks(mod):
    """A cluster of 16 blocks (Hopper's non-portable size): the launch and the occupancy query opt the kernel in,
    and the blocks (x, 0..15) form one cluster, ranked by y. A fresh kernel object asks the query first."""
    k = mod.kernel("cluster_ranks")
    if not k.max_active_clusters(128, (1, 16, 1)):
        pytest.skip("this GPU hosts no cluster of 16 blocks")
    out = torch.full((3 * 16, 2), -1, dtype=torch.int32, device="cuda")
    k.launch((3, 16), 128, (out,), cluster=(1, 16, 1))
    ranks = out.view(16, 3, 2).cpu()  # [y, x, (rank, n)]
    assert torch.equal(ranks[..., 1], torch.full((16, 3), 16, dtype=torch.int32))
    assert torch.equal(ranks[..., 0], torch.arange(16, dtype=torch.int32).view(16, 1).expand(16, 3))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_cuda1_launch_on_device_1(mod):
    x = torch.randn(1000, device="cuda:1")
    y = torch.empty_like(x)
    mod.kernel("scale<float>").launch(4, 256, (x, y, 2.0, 1000))
    torch.testing.assert_close(y, x * 2)
    with pytest.raises(ValueError, match="cuda:0.*all tensors must share one device|cuda:1.*cuda:0"):
        mod.kernel("scale<float>").launch(4, 256, (x, torch.empty(1000, device="cuda:0"), 2.0, 1000))
