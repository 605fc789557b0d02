"""The shipped ops (kernelkit.ops): reference agreement, gradients, registration, compile, edge cases.

Every test runs on CPU (the Rust implementations) and, where a GPU is present, on CUDA.
"""

import pytest
import torch
import torch.nn.functional as F

import kernelkit
import kernelkit.ops as K

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {  # (atol, rtol) against a float64 reference
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
SIZES = [0, 1, 255, 257, 2**20 + 3]
gpu = pytest.mark.gpu


def rand(*shape, dtype=torch.float32, device="cpu", gen=None):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)


def close(out, ref, dtype):
    atol, rtol = TOL[dtype]
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol)


REFS = {
    "add": (K.add, lambda a, b: a + b, 2),
    "mul": (K.mul, lambda a, b: a * b, 2),
    "muladd": (K.muladd, lambda a, b, c: a * b + c, 3),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", REFS)
@pytest.mark.parametrize("n", SIZES)
def test_elementwise_matches_float64_reference(device, dtype, name, n):
    op, ref, arity = REFS[name]
    args = [rand(n, dtype=dtype, device=device) for _ in range(arity)]
    out = op(*args)
    assert out.shape == (n,) and out.dtype == dtype and out.device.type == device
    # 16-bit inputs: the kernels compute in float32 and round once, so compare to the rounded result.
    expect = ref(*[a.double() for a in args])
    close(out, expect.to(dtype) if dtype in (torch.float16, torch.bfloat16) else expect, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", REFS)
def test_elementwise_broadcasts_and_handles_strided_views(device, name):
    op, ref, arity = REFS[name]
    base = rand(6, 1, 5, device=device)
    others = [rand(4, 5, device=device), rand(5, device=device)][: arity - 1]
    torch.testing.assert_close(op(base, *others), ref(base, *others))
    # Transposed and misaligned (odd offset) views give correct results, not silently wrong ones.
    big = rand(2 * 33 * 17 + 1, device=device)
    t = big[1:].view(2 * 33, 17)[::2].t()
    u = rand(17, 33, device=device)
    args = [t, u, u][:arity]
    torch.testing.assert_close(op(*args), ref(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", REFS)
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_elementwise_contiguous_operands_at_every_alignment(device, dtype, name, offset):
    """Contiguous operands that start `offset` elements into their storage: the pack path where every pointer is
    aligned to the pack (float32 muladd's packs are 8 bytes, the rest 16), the scalar path elsewhere, and a ragged
    tail of n % pack elements."""
    op, ref, arity = REFS[name]
    n = 4099
    args = [rand(n + offset, dtype=dtype, device=device)[offset:] for _ in range(arity)]
    expect = ref(*[a.double() for a in args])
    close(op(*args), expect.to(dtype) if dtype == torch.bfloat16 else expect, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    a = rand(8, device=device)
    with pytest.raises(ValueError, match="kernelkit::add: argument 'b' has dtype float64 but 'a' has float32"):
        K.add(a, a.double())
    with pytest.raises(ValueError, match="argument 'a' has dtype int64, expected one of"):
        K.mul(torch.ones(3, dtype=torch.long, device=device), torch.ones(3, dtype=torch.long, device=device))
    with pytest.raises(RuntimeError, match="shape|size|broadcast"):
        K.add(a, rand(7, device=device))
    with pytest.raises(ValueError, match="argument 'bias' has N=3 but 'x' has N=8"):
        K.bias_gelu(rand(2, 8, device=device), rand(3, device=device))
    with pytest.raises(ValueError, match="approximate must be 'tanh' or 'none'"):
        K.bias_gelu(rand(2, 8, device=device), rand(8, device=device), "erf")
    with pytest.raises(ValueError, match="argument 'b' has K=5 but 'a' has K=4"):
        K.matmul(rand(3, 4, device=device), rand(5, 2, device=device))


@gpu
def test_mixed_devices_are_rejected():
    with pytest.raises(ValueError, match="argument 'b' is on cpu but 'a' is on cuda:0"):
        K.add(rand(4, device="cuda"), rand(4))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_in_place(device, dtype):
    x = rand(1000, dtype=dtype, device=device)
    expect = (x.double() * 1.5).to(dtype)
    assert K.scale_(x, 1.5) is x
    close(x, expect, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_scale_strided_and_under_autograd(device):
    y = rand(40, 30, device=device)
    before = y.clone()
    K.scale_(y.t(), -2.0)
    torch.testing.assert_close(y, before * -2.0)
    leaf = rand(5, device=device).requires_grad_()
    z = leaf * 1.0
    K.scale_(z, 3.0)
    z.sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full_like(leaf, 3.0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("rows,cols", [(0, 8), (1, 1), (3, 255), (5, 257), (257, 4096 + 8)])
def test_bias_gelu_forward_and_backward(device, dtype, approximate, rows, cols):
    x = rand(rows, cols, dtype=dtype, device=device)
    bias = rand(cols, dtype=dtype, device=device)
    grad = rand(rows, cols, dtype=dtype, device=device)
    y = K.bias_gelu(x, bias, approximate)
    xd, bd = x.double().requires_grad_(), bias.double().requires_grad_()
    yd = F.gelu(xd + bd, approximate=approximate)
    close(y, yd.to(dtype) if dtype in (torch.float16, torch.bfloat16) else yd, dtype)
    gx, gb = K.bias_gelu_backward(grad, x, bias, approximate)
    yd.backward(grad.double())
    close(gx, xd.grad, dtype)
    # grad_bias sums `rows` rounded grad_x values: allow the accumulated rounding.
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(gb.double(), bd.grad, atol=atol * max(rows, 1) ** 0.5 * 4, rtol=rtol * 4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 13, 5), (129, 65, 33), (130, 257, 17), (0, 4, 3), (3, 0, 2)])
def test_matmul(device, dtype, mkn):
    m, k, n = mkn
    a, b = rand(m, k, dtype=dtype, device=device), rand(k, n, dtype=dtype, device=device)
    out = K.matmul(a, b)
    ref = a.double() @ b.double()
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.double(), ref, atol=atol * max(k, 1) ** 0.5 * 4, rtol=rtol * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_non_contiguous_inputs(device):
    a, b = rand(40, 24, device=device), rand(31, 40, device=device)
    torch.testing.assert_close(K.matmul(a.t(), b.t()), a.t() @ b.t(), atol=1e-4, rtol=1e-4)


def _grad_cases(device):
    d = dict(dtype=torch.float64, device=device)
    return [
        (K.add, (rand(3, 4, **d), rand(4, **d))),
        (K.mul, (rand(3, 4, **d), rand(3, 1, **d))),
        (K.muladd, (rand(3, 4, **d), rand(4, **d), rand(3, 4, **d))),
        (lambda x, b: K.bias_gelu(x, b, "tanh"), (rand(5, 6, **d), rand(6, **d))),
        (lambda x, b: K.bias_gelu(x, b, "none"), (rand(5, 6, **d), rand(6, **d))),
        (K.matmul, (rand(4, 3, **d), rand(3, 5, **d))),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(6))
def test_gradcheck_float64(device, case):
    fn, args = _grad_cases(device)[case]
    args = tuple(a.requires_grad_() for a in args)
    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    d = dict(device=device)
    for op, args in [
        (K.add, (rand(3, 4, **d), rand(4, **d))),
        (K.mul, (rand(3, 4, **d), rand(3, 4, **d))),
        (K.muladd, (rand(3, 4, **d), rand(3, 4, **d), rand(4, **d))),
        (K.bias_gelu, (rand(5, 6, **d), rand(6, **d), "none")),
        (K.bias_gelu_backward, (rand(5, 6, **d), rand(5, 6, **d), rand(6, **d), "tanh")),
        (K.matmul, (rand(4, 3, **d), rand(3, 5, **d))),
    ]:
        torch.library.opcheck(op.op, args)
        grad_args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
        if op is not K.bias_gelu_backward:
            torch.library.opcheck(op.op, grad_args)
    torch.library.opcheck(torch.ops.kernelkit.scale_.default, (rand(10, **d), 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()

    @torch.compile(fullgraph=True)
    def f(x, b, w, c):
        h = K.bias_gelu(x, b)
        return K.muladd(K.matmul(h, w), K.add(c, c), K.mul(c, c))

    x, b = rand(16, 32, device=device), rand(32, device=device)
    w, c = rand(32, 8, device=device), rand(16, 8, device=device)
    ref = F.gelu(x + b, approximate="tanh") @ w * (c + c) + c * c
    torch.testing.assert_close(f(x, b, w, c), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_bitwise_deterministic(device):
    g = torch.Generator().manual_seed(1)
    x, b = rand(513, 1024, device=device, gen=g), rand(1024, device=device, gen=g)
    grad = rand(513, 1024, device=device, gen=g)
    for fn in [
        lambda: K.bias_gelu(x, b),
        lambda: K.bias_gelu_backward(grad, x, b)[1],
        lambda: K.muladd(x, x, b),
        lambda: K.matmul(x[:, :64], x[:64]),
    ]:
        assert torch.equal(fn(), fn())


@pytest.mark.parametrize("device", DEVICES)
def test_nn_module_trains_one_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(kernelkit.nn.LinearGELU(16, 32), torch.nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = rand(64, 16, device=device), rand(64, 1, device=device)
    bias_before = model[0].act.bias.detach().clone()
    loss0 = F.mse_loss(model(x), y)
    loss0.backward()
    assert model[0].act.bias.grad is not None and model[0].weight.grad is not None
    opt.step()
    assert not torch.equal(model[0].act.bias, bias_before)
    assert F.mse_loss(model(x), y) < loss0


@gpu
def test_cuda_results_match_cpu_implementations():
    x, b = rand(300, 777), rand(777)
    torch.testing.assert_close(K.bias_gelu(x.cuda(), b.cuda()).cpu(), K.bias_gelu(x, b), atol=1e-5, rtol=1e-5)
    x, b = rand(300, 776), rand(777)
    out = K.bias_gelu(x.cuda(), b.cuda()[1:])  # misaligned bias: the scalar path
    torch.testing.assert_close(out.cpu(), K.bias_gelu(x, b[1:]), atol=1e-5, rtol=1e-5)


@gpu
@pytest.mark.parametrize("rows,cols", [(7, 100), (33, 1030), (5, 4096 + 8), (1000, 3)])
def test_bias_gelu_kernels_are_correct_for_any_grid(rows, cols):
    """The forward and backward kernels launched with grids and blocks other than the host's, so that
    blocks loop (grid-stride; over column tiles and row chunks) and columns wrap within a thread."""
    from kernelkit.ops._runtime import cdiv, kernel

    fwd = kernel("gelu", "kk_bias_gelu_fwd<float, 1>")
    bwd = kernel("gelu", "kk_bias_gelu_bwd<float, 1>")
    x, b, g = rand(rows, cols, device="cuda"), rand(cols, device="cuda"), rand(rows, cols, device="cuda")
    ref = K.bias_gelu(x.cpu(), b.cpu())
    ref_gx, ref_gb = K.bias_gelu_backward(g.cpu(), x.cpu(), b.cpu(), "tanh")
    for grid, block in [(1, 256), (3, 96), (70, 32), (5000, 128)]:
        y = torch.full_like(x, float("nan"))
        fwd.launch(grid, block, (x, b, y, rows, cols))
        torch.testing.assert_close(y.cpu(), ref, atol=1e-5, rtol=1e-5)
    for grid, rpc in [((1, 1), 1), ((2, 3), 5), ((9, 70), 3), ((1, 1), 1000)]:
        part = torch.empty(cdiv(rows, rpc), cols, device="cuda")
        counters = torch.zeros(cdiv(cols, 32), dtype=torch.int32, device="cuda")
        runs = []
        for _ in range(2):  # the counters are back at 0 for the second launch
            gx = torch.full_like(x, float("nan"))
            runs.append(torch.full_like(b, float("nan")))
            bwd.launch(grid, 256, (g, x, b, gx, part, runs[-1], counters, rows, cols, rpc))
            assert not counters.any()
            torch.testing.assert_close(gx.cpu(), ref_gx, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(runs[0].cpu(), ref_gb, atol=1e-4, rtol=1e-4)
        assert torch.equal(runs[0], runs[1])


@gpu
@pytest.mark.parametrize("chunks,cols", [(0, 5), (1, 33), (263, 4096), (70, 1000), (9, 31)])
def test_column_sum_for_any_launch(chunks, cols):
    """kk_column_sum adds each column of the partials for any block (lanes of chunks per column) and grid
    (grid-stride over 32-column tiles), the same bits for a given block; a second grid row sums the next
    chunks x cols partials into the second output."""
    from kernelkit.ops._runtime import cdiv, kernel

    column_sum = kernel("norms", "kk_column_sum<__nv_bfloat16>")
    part = rand(2, chunks, cols, device="cuda")
    want = part.double().sum(1).to(torch.bfloat16).cpu()
    nan = lambda: torch.full((cols,), float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    for grid, block in [(cdiv(cols, 32), 256), (1, 32), (3, 96), (cdiv(cols, 32), 1024)]:
        one, both = [], []
        for _ in range(2):
            one.append(nan())
            column_sum.launch(grid, block, (part, one[-1], 0, chunks, cols))
            both.append((nan(), nan()))
            column_sum.launch((grid, 2), block, (part, *both[-1], chunks, cols))
        torch.testing.assert_close(one[0].cpu(), want[0], atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(torch.stack(both[0]).cpu(), want, atol=1e-2, rtol=1e-2)
        assert torch.equal(one[0], one[1]) and torch.equal(one[0], both[0][0])
        assert torch.equal(torch.stack(both[0]), torch.stack(both[1]))


@gpu
@pytest.mark.parametrize("grid, outs", [((4, 3), "o, o"), ((4, 2), "o, 0")], ids=["three-rows", "null-second"])
def test_column_sum_misuse_fails_the_launch(launch_in_subprocess, grid, outs):
    """A kk_column_sum grid of more rows than it has outputs, or a null output for a grid row, traps: a LaunchError
    naming the kernel, in a subprocess (the trap ends the CUDA context)."""
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        part, o = torch.zeros(3, 4, 128, device="cuda"), torch.empty(128, device="cuda", dtype=torch.bfloat16)
        kernel("norms", "kk_column_sum<__nv_bfloat16>").launch({grid}, 256, (part, {outs}, 4, 128))
    """)
    assert "LAUNCH_ERROR kernel 'kk_column_sum<__nv_bfloat16>' failed" in stdout, printed


@gpu
def test_bias_gelu_backward_on_concurrent_streams():
    """The backward's tile counters are per stream: launches on two streams at once each get the grad_bias
    of the default stream's run, bitwise."""
    x, b = rand(4096, 1024, device="cuda"), rand(1024, device="cuda")
    grads = [rand(4096, 1024, device="cuda") for _ in range(2)]
    want = [K.bias_gelu_backward(g, x, b, "tanh")[1] for g in grads]
    streams = [torch.cuda.Stream() for _ in grads]
    torch.cuda.synchronize()
    got = [[], []]
    for _ in range(4):
        for i, (s, g) in enumerate(zip(streams, grads)):
            with torch.cuda.stream(s):
                got[i].append(K.bias_gelu_backward(g, x, b, "tanh")[1])
    torch.cuda.synchronize()
    for w, runs in zip(want, got):
        assert all(torch.equal(r, w) for r in runs)


@gpu
def test_indexing_past_2_to_the_31():
    n = 2**31 + 5
    a = torch.full((n,), 1.5, dtype=torch.float16, device="cuda")
    a[-3:] = torch.tensor([2.0, 3.0, 4.0], dtype=torch.float16, device="cuda")
    out = K.mul(a, a)
    assert out[-3:].tolist() == [4.0, 9.0, 16.0] and out[0].item() == 2.25
    del a, out
    torch.cuda.empty_cache()


@gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ops_on_cuda1():
    x, b = rand(64, 128, device="cuda:1"), rand(128, device="cuda:1")
    y = K.bias_gelu(x, b)
    assert y.device == torch.device("cuda:1")
    torch.testing.assert_close(y, F.gelu(x + b, approximate="tanh"), atol=1e-5, rtol=1e-5)


def _make_rows(arity, bias=False):
    def make(size, dtype, device, gen):
        rows = max(size // 64, 0) if size > 64 else size
        cols = 64 if size > 64 else 1
        ts = tuple(torch.randn(rows, cols, generator=gen, device=device).to(dtype) for _ in range(arity))
        return ts + (torch.randn(cols, generator=gen, device=device).to(dtype),) if bias else ts

    return make


CHECK_OP_CASES = {
    "add": (K.add, lambda a, b: a + b, _make_rows(2)),
    "mul": (K.mul, lambda a, b: a * b, _make_rows(2)),
    "muladd": (K.muladd, lambda a, b, c: a * b + c, _make_rows(3)),
    "bias_gelu": (K.bias_gelu, lambda x, b: F.gelu(x + b, approximate="tanh"), _make_rows(1, bias=True)),
    "matmul": (
        K.matmul,
        lambda a, b: a @ b,
        lambda size, dtype, device, gen: (
            torch.randn(size, 33, generator=gen, device=device).to(dtype),
            torch.randn(33, 17, generator=gen, device=device).to(dtype),
        ),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", CHECK_OP_CASES)
def test_shipped_ops_pass_check_op(device, name):
    from kernelkit.testing import check_op

    op, ref, make = CHECK_OP_CASES[name]
    sizes = [0, 1, 255, 257, 2**20 + 3] if device == "cuda" else [0, 1, 255, 257, 4099]
    dtypes = (torch.float32, torch.bfloat16) if device == "cuda" else (torch.float32,)
    atol = {torch.float32: 1e-4, torch.bfloat16: 3e-2} if name == "matmul" else None
    report = check_op(op, ref, make, device=device, dtypes=dtypes, sizes=sizes, atol=atol, compile_backend="eager")
    assert report.passed
    assert {r.name for r in report.results if r.status == "passed"} >= {"reference agreement", "determinism"}
