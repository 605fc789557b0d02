"""kernelkit.op: generated checks, fake implementation, autograd, opcheck and torch.compile."""

import pytest
import torch

import kernelkit
from kernelkit import Out, TensorSpec, like

SRC = r"""
template <typename T>
__global__ void axpy(const T* x, const T* y, T* out, float a, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (T)a * x[i] + y[i];
}
"""
FLOATS = (torch.float32, torch.float64)
CTYPE = {torch.float32: "float", torch.float64: "double"}
_mod = None


def _module():
    global _mod
    if _mod is None:
        _mod = kernelkit.load_inline("axpy_op", SRC)
    return _mod


def _axpy_cuda(x, y, a, out):
    n = x.numel()
    if n:
        _module().kernel(f"axpy<{CTYPE[x.dtype]}>").launch((n + 255) // 256, 256, (x, y, out, a, n))


def _axpy_cpu(x, y, a, out):
    torch.add(y, x, alpha=a, out=out)


def _setup(ctx, inputs, output):
    ctx.a = inputs[2]


def _backward(ctx, grad):
    return grad * ctx.a, grad, None


axpy = kernelkit.op(
    "kktest::axpy(Tensor x, Tensor y, float a) -> Tensor",
    inputs={
        "x": TensorSpec(dtypes=FLOATS, contiguous=True, shape=("*", "N")),
        "y": TensorSpec(same_dtype_as="x", contiguous=True, shape=("*", "N")),
    },
    output=like("x"),
    backward=_backward,
    setup_context=_setup,
    cpu=_axpy_cpu,
)(_axpy_cuda)

rowsum = kernelkit.op(
    "kktest::rowsum(Tensor x) -> Tensor",
    inputs={"x": TensorSpec(dtypes=FLOATS, ndim=2)},
    output=Out(shape=lambda x: (x.shape[0],), dtype="x"),
    cpu=lambda x, out: torch.sum(x, dim=1, out=out),
)(lambda x, out: torch.sum(x, dim=1, out=out))


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", devices())
def test_forward_matches_reference(device):
    x, y = torch.randn(3, 17, device=device), torch.randn(3, 17, device=device)
    torch.testing.assert_close(axpy(x, y, 2.5), 2.5 * x + y)
    torch.testing.assert_close(torch.ops.kktest.axpy(x, y, 2.5), 2.5 * x + y)
    torch.testing.assert_close(rowsum(x), x.sum(1))


def test_checks_name_the_argument():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="kktest::axpy: argument 'x' has dtype int64, expected one of: float32"):
        axpy(torch.ones(4, 8, dtype=torch.long), x, 1.0)
    with pytest.raises(ValueError, match="argument 'y' has dtype float64 but 'x' has float32"):
        axpy(x, x.double(), 1.0)
    with pytest.raises(ValueError, match="argument 'y' has N=9 but 'x' has N=8"):
        axpy(x, torch.randn(4, 9), 1.0)
    with pytest.raises(ValueError, match="argument 'x' must be contiguous"):
        axpy(x.t().contiguous().t(), x, 1.0)
    with pytest.raises(ValueError, match="argument 'x' must have 2 dims"):
        rowsum(torch.randn(3))
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="argument 'y' is on cuda:0 but 'x' is on cpu"):
            axpy(x, x.cuda(), 1.0)


def test_bad_specs_fail_at_registration():
    with pytest.raises(ValueError, match="unknown arguments"):
        kernelkit.op("kktest::bad(Tensor x) -> Tensor", inputs={"z": TensorSpec()}, output=like("x"))
    with pytest.raises(ValueError, match="schema: expected"):
        kernelkit.op("no_namespace(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match=r"kktest::bad: an output's shape or dtype function takes \['y'\]"):
        kernelkit.op("kktest::bad(Tensor x) -> Tensor", inputs={"x": TensorSpec()}, output=Out(lambda y: (), "x"))
    with pytest.raises(ValueError, match="output dtype names 'y', which is not an argument"):
        kernelkit.op("kktest::bad(Tensor x) -> Tensor", inputs={"x": TensorSpec()}, output=Out(lambda x: (), "y"))


def _summary(x, dt, total, rows):
    total.copy_(x.sum())
    rows.copy_(x.sum(-1))


_summary_seen = {}


def _everything(**args):
    _summary_seen.update(args)
    return ()


summary = kernelkit.op(
    "kktest::summary(Tensor x, ScalarType? dt=None) -> (Tensor, Tensor)",
    inputs={"x": TensorSpec(dtypes=FLOATS)},
    output=(Out(shape=_everything, dtype=lambda x, dt: dt or x.dtype), Out(lambda x: x.shape[:-1], torch.float64)),
    cpu=_summary,
)(_summary)


@pytest.mark.parametrize("device", devices())
def test_out_functions_get_the_arguments_they_name(device):
    """An Out's shape and dtype functions get the arguments they name (all of them when they take **kwargs): a 0-d
    output in a dtype from an optional argument, and one shaped by a torch.Size in a fixed dtype."""
    x = torch.randn(2, 3, 4, device=device)
    total, rows = summary(x, torch.float64)
    assert set(_summary_seen) == {"x", "dt"}
    assert (total.shape, total.dtype, rows.shape, rows.dtype) == ((), torch.float64, (2, 3), torch.float64)
    torch.testing.assert_close(total, x.sum().double())
    torch.testing.assert_close(rows, x.sum(-1).double())
    total, _ = torch.ops.kktest.summary(x)
    assert total.dtype == torch.float32


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    x = torch.randn(5, 7, device=device, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 7, device=device, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(axpy.op, (x, y, 0.5))
    torch.library.opcheck(rowsum.op, (x.detach(),))


@pytest.mark.parametrize("device", devices())
def test_gradcheck(device):
    x = torch.randn(4, 6, device=device, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 6, device=device, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: axpy(a, b, 1.7), (x, y))


@pytest.mark.parametrize("device", devices())
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()

    @torch.compile(fullgraph=True)
    def f(x, y):
        return axpy(x, y, 2.0).relu() + 1

    x, y = torch.randn(8, 32, device=device), torch.randn(8, 32, device=device)
    torch.testing.assert_close(f(x, y), (2 * x + y).relu() + 1)


def test_fake_tensor_shapes_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(6, 10)
        assert rowsum(x).shape == (6,)
        assert axpy(x, x, 1.0).shape == (6, 10)


def test_eager_fast_path_keeps_dispatcher_semantics():
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    fast = axpy(x, y, 2.0)
    with Record():
        slow = axpy(x, y, 2.0)
    assert "kktest.axpy.default" in seen, "a dispatch mode must still see the op"
    assert torch.equal(fast, slow)
    # With grad needed the call goes through autograd and records a backward.
    xr = x.clone().requires_grad_()
    assert axpy(xr, y, 2.0).grad_fn is not None
    with torch.no_grad():
        assert axpy(xr, y, 2.0).grad_fn is None


@pytest.mark.parametrize("device", devices())
def test_eager_grad_path_matches_the_dispatchers(device):
    """A call that needs a gradient runs the op's own autograd.Function around the backend impl (no
    dispatcher); its outputs, gradients and graph are those of the registered autograd formula."""
    x = torch.randn(4, 8, device=device, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 8, device=device, dtype=torch.float64, requires_grad=True)
    fast, slow = axpy(x, y, 1.5), axpy.op(x, y, 1.5)
    assert type(fast.grad_fn).__name__.startswith("kktest_axpy") and type(slow.grad_fn) is not type(fast.grad_fn)
    assert torch.equal(fast, slow)
    g = torch.randn_like(fast)
    for a, b in zip(torch.autograd.grad(fast, (x, y), g), torch.autograd.grad(slow, (x, y), g)):
        assert torch.equal(a, b)
    # Only y needs a gradient: the formula sees needs_input_grad and x gets none.
    yy = y.detach().requires_grad_()
    (gy,) = torch.autograd.grad(axpy(x.detach(), yy, 1.5), (yy,), g)
    assert torch.equal(gy, g)
    # A mode on the stack sends the call back through the dispatcher.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        assert not type(axpy(x, y, 1.5).grad_fn).__name__.startswith("kktest_axpy")


def _scaled_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1])


def _scaled_backward(ctx, grad_y, grad_stat):
    _scaled_backward.seen.append(grad_stat)
    return grad_y * 2, None


_scaled_backward.seen = []
scaled = kernelkit.op(
    "kktest::scaled(Tensor x) -> (Tensor, Tensor)",
    inputs={"x": TensorSpec(dtypes=FLOATS)},
    output=(like("x"), Out(shape=lambda x: (x.shape[0],), dtype="x")),
    backward=_scaled_backward,
    setup_context=_scaled_setup,
    cpu=lambda x, y, stat: (torch.mul(x, 2, out=y), torch.sum(x, -1, out=stat)),
)(lambda x, y, stat: (torch.mul(x, 2, out=y), torch.sum(x, -1, out=stat)))


@pytest.mark.parametrize("device", devices())
def test_non_differentiable_outputs_get_no_zero_filled_gradient(device):
    """An output marked non-differentiable (a norm's per-row stats) reaches the eager path's backward as None:
    torch's default would allocate and fill zeros for it on every backward."""
    x = torch.randn(3, 5, device=device, requires_grad=True)
    _scaled_backward.seen.clear()
    y, stat = scaled(x)
    assert not stat.requires_grad
    (gx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(gx, torch.full_like(x, 2.0))
    assert _scaled_backward.seen == [None]


def _strides_seen(x, out):
    out.copy_(x * 2)
    _strides_seen.last = x.stride()


rows_x2 = kernelkit.op(
    "kktest::rows_x2(Tensor x) -> Tensor",
    inputs={"x": TensorSpec(dtypes=FLOATS, last_dim_contiguous=True, make_contiguous=True, ndim=3)},
    output=like("x"),
    cpu=_strides_seen,
)(_strides_seen)

rows_x2_strict = kernelkit.op(
    "kktest::rows_x2_strict(Tensor x) -> Tensor",
    inputs={"x": TensorSpec(dtypes=FLOATS, last_dim_contiguous=True)},
    output=like("x"),
    cpu=_strides_seen,
)(_strides_seen)


def test_last_dim_contiguous_keeps_layouts_and_fixes_strided_last_dims():
    """A transposed input reaches the launch as it is and its output gets its strides (torch.empty_like); an
    input whose last dim is strided is made contiguous (make_contiguous) or refused, naming the argument."""
    x = torch.randn(2, 5, 3, 4).select(2, 0).transpose(0, 1)  # (5, 2, 4): not dense, last dim contiguous
    t = torch.randn(2, 5, 4).transpose(0, 1)  # (5, 2, 4): dense, not contiguous
    for a in (x, t):
        out = rows_x2(a)
        assert _strides_seen.last == a.stride() and torch.equal(out, a * 2)
        assert out.stride() == torch.empty_like(a).stride()
    assert rows_x2(t).stride() == t.stride()
    strided = torch.randn(5, 2, 8)[..., ::2]
    assert torch.equal(rows_x2(strided), strided * 2) and _strides_seen.last == (8, 4, 1)
    with pytest.raises(ValueError, match="argument 'x' must have stride 1 in its last dim"):
        rows_x2_strict(strided)
    assert torch.equal(rows_x2_strict(torch.tensor(3.0)), torch.tensor(6.0))  # 0-d: no last dim to check
    torch.library.opcheck(rows_x2.op, (x,))
    torch.library.opcheck(rows_x2.op, (t,))


def _square(x, out):
    torch.mul(x, x, out=out)


def _square_recording(ctx, x, out):
    """The launch of an eager call that records a gradient: the square and, from the same pass, the gradient for an
    output gradient of ones, kept on the ctx."""
    torch.mul(x, x, out=out)
    ctx.grad_at_ones = 2 * x


def _square_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _square_backward(ctx, grad):
    held = getattr(ctx, "grad_at_ones", None)
    _square_backward.held.append(held is not None)
    if held is None:
        (x,) = ctx.saved_tensors
        return 2 * x * grad
    ctx.grad_at_ones = None  # a second backward (retain_graph) computes afresh
    return held * grad


_square_backward.held = []
square = kernelkit.op(
    "kktest::square(Tensor x) -> Tensor",
    inputs={"x": TensorSpec(dtypes=FLOATS)},
    output=like("x"),
    backward=_square_backward,
    setup_context=_square_setup,
    device="cpu",
    launch_with_ctx=_square_recording,
)(_square)


def test_launch_with_ctx_runs_only_in_eager_calls_that_record_a_gradient():
    """The recording launch runs in an eager call that needs a gradient and hands its work to the backward through
    the ctx; calls without a gradient, through the dispatcher or under torch.compile take the plain launch, and the
    backward computes the same gradient without it."""
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, dtype=torch.float64)
    _square_backward.held.clear()
    y = square(x)
    assert torch.equal(y, x * x)
    (eager,) = torch.autograd.grad(y, x, g, retain_graph=True)
    (again,) = torch.autograd.grad(y, x, g)
    (dispatched,) = torch.autograd.grad(square.op(x), x, g)
    compiled = torch.compile(lambda t: square(t) * 1.0, fullgraph=True, backend="aot_eager")
    (traced,) = torch.autograd.grad(compiled(x), x, g)
    with torch.no_grad():
        assert square(x).grad_fn is None
    assert _square_backward.held == [True, False, False, False]
    for other in (again, dispatched, traced):
        assert torch.equal(eager, other)
    assert torch.equal(eager, 2 * x.detach() * g)
