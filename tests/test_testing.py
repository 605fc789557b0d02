"""kernelkit.testing.check_op: a correct op passes every check, and each kind of broken op is caught."""

import pytest
import torch

import kernelkit
from kernelkit import TensorSpec, like
from kernelkit.testing import CHECKS, DEFAULT_SIZES, CheckFailure, CheckReport, check_op

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Small sizes keep the suite fast; DEFAULT_SIZES adds 2**20 + 3.
SIZES = [0, 1, 255, 257, 4099]


def make_axpy(size, dtype, device, gen):
    x = torch.randn(size, dtype=dtype, device=device, generator=gen)
    y = torch.randn(size, dtype=dtype, device=device, generator=gen)
    return x, y, 2.5


def axpy_ref(x, y, a):
    return a * x + y


def _setup(ctx, inputs, output):
    ctx.a = inputs[2]


def _backward(ctx, grad):
    return grad * ctx.a, grad, None


def _backward_twice(ctx, grad):
    return 2 * grad * ctx.a, 2 * grad, None


def axpy_op(name, launch, backward=None, contiguous=False, dtypes=FLOATS):
    """Register a CPU-only kktesting::<name>(x, y, a) = a * x + y with the given launch function."""
    return kernelkit.op(
        f"kktesting::{name}(Tensor x, Tensor y, float a) -> Tensor",
        inputs={
            "x": TensorSpec(dtypes=dtypes, contiguous=contiguous),
            "y": TensorSpec(same_dtype_as="x", contiguous=contiguous),
        },
        output=like("x"),
        backward=backward,
        setup_context=_setup if backward else None,
        device="cpu",
    )(launch)


def _axpy(x, y, a, out):
    torch.add(y, x, alpha=a, out=out)


def _axpy_skips_last(x, y, a, out):
    # The bounds-check bug `i < n - 1`: the last element is never written (zeroed here, so it is deterministic).
    out.zero_()
    torch.add(y[:-1], x[:-1], alpha=a, out=out[:-1])


def _axpy_noisy(x, y, a, out):
    torch.add(y, x, alpha=a, out=out)
    out.add_(1e-7 * torch.rand_like(out))


def _axpy_ignores_strides(x, y, a, out):
    # Reads memory as if every input were contiguous, like a kernel indexing x[i] on a strided tensor.
    n = x.numel()
    flat_x = x.as_strided((n,), (1,), x.storage_offset())
    flat_y = y.as_strided((n,), (1,), y.storage_offset())
    torch.add(flat_y, flat_x, alpha=a, out=out.view(-1))


axpy = axpy_op("axpy", _axpy, backward=_backward)
axpy_skips_last = axpy_op("axpy_skips_last", _axpy_skips_last, backward=_backward)
axpy_wrong_grad = axpy_op("axpy_wrong_grad", _axpy, backward=_backward_twice)
axpy_noisy = axpy_op("axpy_noisy", _axpy_noisy, backward=_backward)
axpy_contiguous_only = axpy_op("axpy_contiguous_only", _axpy, backward=_backward, contiguous=True)
axpy_ignores_strides = axpy_op("axpy_ignores_strides", _axpy_ignores_strides)
axpy_float32_only = axpy_op("axpy_float32_only", _axpy, backward=_backward, dtypes=(torch.float32,))

# Registered straight through torch.library with a CPU kernel and nothing else: no fake, no autograd.
_lib = torch.library.Library("kktesting", "FRAGMENT")
_lib.define("axpy_no_fake(Tensor x, Tensor y, float a) -> Tensor")
_lib.impl("axpy_no_fake", lambda x, y, a: torch.add(y, x, alpha=a), "CPU")
axpy_no_fake = torch.ops.kktesting.axpy_no_fake.default


def by_name(report: CheckReport, name: str):
    return [r for r in report.results if r.name == name]


def statuses(report: CheckReport, name: str) -> set:
    return {r.status for r in by_name(report, name)}


def test_correct_op_passes_every_check():
    report = check_op(
        axpy, axpy_ref, make_axpy, dtypes=(torch.float32, torch.float64, torch.bfloat16), device="cpu", sizes=SIZES
    )
    assert report.passed
    assert report.op_name == "kktesting::axpy"
    assert list(dict.fromkeys(r.name for r in report.results)) == list(CHECKS)
    assert {r.status for r in report.results if r.name != "CUDA graph"} == {"passed"}
    (graph,) = by_name(report, "CUDA graph")
    assert graph.status == "skipped" and graph.detail == "needs a CUDA device"
    # One result per dtype and size: the middle size is "reference agreement", the rest are "edge sizes".
    assert len(by_name(report, "reference agreement")) == 3
    assert len(by_name(report, "edge sizes")) == 3 * (len(SIZES) - 1)
    assert all("size=257" in r.case for r in by_name(report, "reference agreement"))
    assert [r.case.split(",")[0] for r in by_name(report, "determinism")] == ["size=257", "size=4099"]
    assert "x=float32[257] stride (2,)" in by_name(report, "non-contiguous")[0].case
    text = str(report)
    assert text.splitlines()[0].startswith("check_op(kktesting::axpy): ")
    assert all(name in text for name in CHECKS)
    d = report.to_dict()
    assert d["passed"] and d["op_name"] == "kktesting::axpy" and len(d["results"]) == len(report.results)
    assert set(d["results"][0]) == {"name", "status", "detail", "case"}


def test_default_sizes_cover_the_edges():
    assert DEFAULT_SIZES == (0, 1, 255, 257, 2**20 + 3)


def test_off_by_one_fails_reference_agreement():
    with pytest.raises(CheckFailure) as info:
        check_op(axpy_skips_last, axpy_ref, make_axpy, device="cpu", sizes=SIZES, opcheck=False, compile=False)
    message = str(info.value)
    assert message.startswith("check_op(kktesting::axpy_skips_last): ")
    assert "- reference agreement [size=257, dtype=float32, device=cpu; args (x=float32[257], y=float32[257]" in message
    assert "1 of 257 elements differ" in message
    assert "worst at index (256,)" in message
    assert "max abs err" in message and "max rel err" in message
    report = info.value.report
    assert statuses(report, "reference agreement") == {"failed"}
    edge = {r.case.split(",")[0]: r.status for r in by_name(report, "edge sizes")}
    assert edge == {"size=0": "passed", "size=1": "failed", "size=255": "failed", "size=4099": "failed"}
    assert statuses(report, "determinism") == {"passed"}  # wrong, but the same wrong every time


def test_wrong_gradient_fails_gradcheck():
    report = check_op(
        axpy_wrong_grad,
        axpy_ref,
        make_axpy,
        device="cpu",
        sizes=SIZES,
        compile=False,
        opcheck=False,
        raise_on_failure=False,
    )
    assert not report.passed
    assert [r.name for r in report.failures] == ["gradcheck"]
    (result,) = report.failures
    assert "Jacobian mismatch for output 0 with respect to input 0" in result.detail
    # d out / d x = a = 2.5, but the backward says 5.
    assert "/ d x[0]: analytical 5, numerical 2.5" in result.detail
    assert result.case.startswith("size=7, dtype=float64")


def test_nondeterministic_op_fails_determinism():
    report = check_op(axpy_noisy, axpy_ref, make_axpy, device="cpu", sizes=SIZES, raise_on_failure=False)
    # The checks with a tolerance pass; gradcheck's finite differences (eps 1e-6) amplify the noise too.
    assert {r.name for r in report.failures} == {"determinism", "gradcheck"}
    for name in ("reference agreement", "edge sizes", "non-contiguous", "opcheck", "torch.compile"):
        assert statuses(report, name) == {"passed"}, name
    detail = by_name(report, "determinism")[0].detail
    assert "elements differ between two runs" in detail and "max abs diff" in detail


def test_missing_fake_fails_opcheck_and_compile():
    report = check_op(
        axpy_no_fake, axpy_ref, make_axpy, device="cpu", sizes=SIZES, compile_backend="eager", raise_on_failure=False
    )
    assert report.op_name == "kktesting::axpy_no_fake"
    assert {r.name for r in report.failures} == {"opcheck", "torch.compile"}
    assert "test_faketensor failed" in by_name(report, "opcheck")[0].detail
    assert "fake" in by_name(report, "torch.compile")[0].detail
    assert statuses(report, "reference agreement") == {"passed"}
    gradcheck = by_name(report, "gradcheck")[0]
    assert gradcheck.status == "skipped" and "no autograd formula" in gradcheck.detail
    with pytest.raises(CheckFailure, match=r"(?s)- opcheck \[size=7.*- torch\.compile \[size=257"):
        check_op(axpy_no_fake, axpy_ref, make_axpy, device="cpu", sizes=SIZES, compile_backend="eager")


def test_plain_function_skips_opcheck():
    report = check_op(axpy_ref, axpy_ref, make_axpy, device="cpu", sizes=SIZES, compile_backend="eager")
    assert report.passed
    (opcheck,) = by_name(report, "opcheck")
    assert opcheck.status == "skipped" and "plain function" in opcheck.detail
    # A plain function of torch ops has autograd, so gradcheck runs.
    assert statuses(report, "gradcheck") == {"passed"}


def test_explicit_contiguity_rejection_is_not_a_failure():
    report = check_op(axpy_contiguous_only, axpy_ref, make_axpy, device="cpu", sizes=SIZES, compile=False)
    (result,) = by_name(report, "non-contiguous")
    assert result.status == "passed"
    assert result.detail.startswith("rejected with a clear error: ValueError:")
    assert "argument 'x' must be contiguous" in result.detail


def test_float32_only_op_skips_gradcheck():
    report = check_op(axpy_float32_only, axpy_ref, make_axpy, device="cpu", sizes=SIZES, compile=False)
    (result,) = by_name(report, "gradcheck")
    assert result.status == "skipped"
    assert "gradcheck needs float64 inputs; the op raised ValueError" in result.detail
    assert "has dtype float64, expected one of: float32" in result.detail
    # Asked for explicitly, it is a failure.
    with pytest.raises(CheckFailure, match="- gradcheck .*gradcheck needs float64"):
        check_op(axpy_float32_only, axpy_ref, make_axpy, device="cpu", sizes=SIZES, compile=False, grad=True)


def test_silently_wrong_on_strided_inputs_fails():
    report = check_op(
        axpy_ignores_strides,
        axpy_ref,
        make_axpy,
        device="cpu",
        sizes=SIZES,
        compile=False,
        opcheck=False,
        raise_on_failure=False,
    )
    assert [r.name for r in report.failures] == ["non-contiguous"]
    # The gaps between strided elements hold NaN, so the misread shows as non-finite output.
    assert "(128 non-finite where reference output is finite)" in report.failures[0].detail


def test_tolerance_override_and_multiple_outputs():
    def split(x):
        return x.clone(), torch.nextafter(x, torch.tensor(float("inf")))  # exact, and one ulp high

    def make(size, dtype, device, gen):
        return (torch.rand(size, dtype=dtype, device=device, generator=gen) + 1,)

    def ref(x):
        return x, x

    kwargs = dict(device="cpu", sizes=[3, 65], grad=False, compile=False, raise_on_failure=False)
    loose = check_op(split, ref, make, **kwargs)
    assert loose.passed  # one ulp is inside the float32 defaults
    strict = check_op(split, ref, make, atol=0.0, rtol={torch.float32: 0.0}, **kwargs)
    assert {r.name for r in strict.failures} == {"reference agreement", "edge sizes", "non-contiguous"}
    detail = by_name(strict, "reference agreement")[0].detail
    assert detail.startswith(
        "output 0: max abs err 0, max rel err 0 (atol 0, rtol 0); output 1: 65 of 65 elements differ"
    )


def test_nan_where_reference_is_finite_fails():
    def nan_at_3(x):
        out = x.clone()
        out[3] = float("nan")
        return out

    def make(size, dtype, device, gen):
        return (torch.randn(size, dtype=dtype, device=device, generator=gen),)

    report = check_op(
        nan_at_3, lambda x: x, make, device="cpu", sizes=[9], grad=False, compile=False, raise_on_failure=False
    )
    detail = by_name(report, "reference agreement")[0].detail
    assert "1 of 9 elements differ (1 non-finite where reference output is finite)" in detail
    assert "max abs err inf" in detail and "worst at index (3,): op nan" in detail


CUDA_AXPY = r"""
extern "C" __global__ void axpy(const float* x, const float* y, float* out, float a, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void axpy_skips_last(const float* x, const float* y, float* out, float a, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n - 1) out[i] = a * x[i] + y[i];
}
"""


def _cuda_op(kernel):
    mod = kernelkit.load_inline("kktesting_axpy", CUDA_AXPY)

    def launch(x, y, a, out):
        n = x.numel()
        if n:
            mod.kernel(kernel).launch((n + 255) // 256, 256, (x, y, out, a, n))

    return kernelkit.op(
        f"kktesting::cuda_{kernel}(Tensor x, Tensor y, float a) -> Tensor",
        inputs={
            "x": TensorSpec(dtypes=(torch.float32,), device="cuda", contiguous=True),
            "y": TensorSpec(same_dtype_as="x", contiguous=True),
        },
        output=like("x"),
        backward=_backward,
        setup_context=_setup,
    )(launch)


@pytest.mark.gpu
def test_cuda_kernel_with_default_sizes():
    report = check_op(_cuda_op("axpy"), axpy_ref, make_axpy, raise_on_failure=False)
    assert report.passed, str(report)
    assert [r.case.split(",")[0] for r in by_name(report, "determinism")] == ["size=257", f"size={2**20 + 3}"]
    (graph,) = by_name(report, "CUDA graph")
    assert graph.detail.startswith("forward and backward captured, replayed on new inputs, matches eager")

    # The unwritten last element lands in NaN-poisoned memory, whatever the allocator had there before.
    broken = check_op(_cuda_op("axpy_skips_last"), axpy_ref, make_axpy, compile=False, raise_on_failure=False)
    failed = by_name(broken, "reference agreement")[0]
    assert failed.status == "failed"
    assert (
        "1 of 257 elements differ (1 non-finite where reference output is finite)" in failed.detail
        and "worst at index (256,): op nan" in failed.detail
    )


@pytest.mark.gpu
def test_cuda_graph_check_catches_an_op_that_syncs_with_the_host():
    def syncs(x, y, a):  # reads a device value on the host: a capture refuses the copy
        return x * float(y.detach().abs().max()) + y

    report = check_op(syncs, lambda x, y, a: x * y.abs().max() + y, make_axpy, sizes=[257], raise_on_failure=False)
    (graph,) = by_name(report, "CUDA graph")
    # Caught by a probe before the capture: a failed capture can leave torch's allocator unusable.
    assert graph.status == "failed" and graph.detail.startswith("a call that syncs with the host raised"), graph.detail
    assert by_name(report, "reference agreement")[0].status == "passed"
