"""LLM training ops (issue 5) on CPU: torch references, gradients, registration, compile, edge cases.

Their CUDA kernels are not registered yet (they need a GPU session to be verified), so these run on CPU.
"""

import pytest
import torch
import torch.nn.functional as F

import kernelkit.ops as K

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
WIDTHS = [1, 255, 257, 4097]


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


def leaf(t, double=False):
    """A fresh leaf for autograd: never the input itself (.double() of a float64 tensor is a no-op)."""
    t = t.detach().clone()
    return (t.double() if double else t).requires_grad_()


def close(out, ref, dtype, factor=1.0):
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.double(), ref.double(), atol=atol * factor, rtol=rtol * factor)


def ref_rms(x, w, eps):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", WIDTHS)
def test_rms_norm_forward_backward(dtype, cols):
    x, w, g = rand(5, cols, dtype=dtype), rand(cols, dtype=dtype), rand(5, cols, dtype=dtype)
    close(K.rms_norm(x, w, 1e-6), ref_rms(x, w, 1e-6), dtype)
    xr, wr = leaf(x, True), leaf(w, True)
    ref_rms(xr, wr, 1e-6).backward(g.double())
    xk, wk = leaf(x), leaf(w)
    K.rms_norm(xk, wk, 1e-6).backward(g)
    close(xk.grad, xr.grad, dtype, 4)
    close(wk.grad, wr.grad, dtype, 4 * 5**0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_returns_normed_and_residual(dtype):
    x, r, w = rand(4, 300, dtype=dtype), rand(4, 300, dtype=dtype), rand(300, dtype=dtype)
    y, h = K.add_rms_norm(x, r, w, 1e-5)
    hsum = x + r
    torch.testing.assert_close(h, hsum)
    close(y, ref_rms(hsum, w, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", WIDTHS)
def test_layer_norm_matches_torch(dtype, cols):
    x, w, b = rand(3, cols, dtype=dtype), rand(cols, dtype=dtype), rand(cols, dtype=dtype)
    ref = F.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
    close(K.layer_norm(x, w, b, 1e-5), ref, dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", WIDTHS)
def test_softmax_matches_torch(dtype, cols):
    x = rand(6, cols, dtype=dtype, scale=4)
    close(K.softmax(x), torch.softmax(x.double(), -1), dtype)


def test_softmax_masked_and_huge_values_and_other_dims():
    x = torch.tensor([[0.0, float("-inf"), 1.0], [1e30, 1e30, -1e30], [float("-inf")] * 3])
    out, ref = K.softmax(x), torch.softmax(x, -1)
    torch.testing.assert_close(out[:2], ref[:2])
    assert torch.isnan(out[2]).all() and torch.isnan(ref[2]).all()
    y = rand(4, 5, 6)
    torch.testing.assert_close(K.softmax(y, dim=1), torch.softmax(y, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_matches_torch(dtype, reduction, smoothing):
    logits = rand(33, 257, dtype=dtype, scale=3)
    target = torch.randint(0, 257, (33,))
    target[::5] = -100
    ref = F.cross_entropy(logits.double(), target, reduction=reduction, label_smoothing=smoothing)
    out = K.cross_entropy(logits, target, reduction=reduction, label_smoothing=smoothing)
    close(out, ref, dtype, 2)
    lr = leaf(logits, True)
    F.cross_entropy(lr, target, reduction="mean", label_smoothing=smoothing).backward()
    lk = leaf(logits)
    K.cross_entropy(lk, target, label_smoothing=smoothing).backward()
    close(lk.grad, lr.grad, dtype, 2)


def test_cross_entropy_all_ignored_and_masked_logits():
    logits = rand(4, 10)
    target = torch.full((4,), -100)
    assert torch.isnan(K.cross_entropy(logits, target)) == torch.isnan(F.cross_entropy(logits, target))
    assert K.cross_entropy(logits, target, reduction="sum").item() == 0.0
    logits[:, 3:] = float("-inf")
    t = torch.tensor([0, 1, 2, 0])
    torch.testing.assert_close(K.cross_entropy(logits, t), F.cross_entropy(logits, t))


def test_cross_entropy_rejects_bad_targets():
    with pytest.raises(ValueError, match="argument `target` holds 10 at row 1, outside \\[0, 10\\)"):
        K.cross_entropy(rand(2, 10), torch.tensor([1, 10]))
    with pytest.raises(ValueError, match="target"):
        K.cross_entropy(rand(3, 10), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="reduction must be"):
        K.cross_entropy(rand(2, 10), torch.tensor([1, 2]), reduction="avg")


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu(dtype):
    g, u, gr = rand(7, 257, dtype=dtype), rand(7, 257, dtype=dtype), rand(7, 257, dtype=dtype)
    ref = F.silu(g.double()) * u.double()
    close(K.swiglu(g, u), ref, dtype)
    gd, ud = leaf(g, True), leaf(u, True)
    (F.silu(gd) * ud).backward(gr.double())
    gk, uk = leaf(g), leaf(u)
    K.swiglu(gk, uk).backward(gr)
    close(gk.grad, gd.grad, dtype, 2)
    close(uk.grad, ud.grad, dtype, 2)


def hf_rope(q, k, cos, sin):
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_tables", [1, 2])
def test_rope_matches_hugging_face(dtype, batch_tables):
    q, k = rand(2, 4, 9, 16, dtype=dtype), rand(2, 2, 9, 16, dtype=dtype)
    cos, sin = rand(batch_tables, 9, 16, dtype=dtype), rand(batch_tables, 9, 16, dtype=dtype)
    rq, rk = hf_rope(q.double(), k.double(), cos.double(), sin.double())
    oq, ok = K.rope(q, k, cos, sin)
    close(oq, rq, dtype, 2)
    close(ok, rk, dtype, 2)


def test_gradcheck_float64():
    d = dict(dtype=torch.float64)
    cos, sin = rand(5, 8, **d), rand(5, 8, **d)
    cases = [
        (lambda x, w: K.rms_norm(x, w, 1e-6), (rand(3, 8, **d), rand(8, **d))),
        (lambda x, r, w: K.add_rms_norm(x, r, w, 1e-6)[0], (rand(3, 8, **d), rand(3, 8, **d), rand(8, **d))),
        (lambda x, w, b: K.layer_norm(x, w, b, 1e-5), (rand(3, 8, **d), rand(8, **d), rand(8, **d))),
        (K.softmax, (rand(3, 8, **d),)),
        (lambda x: K.cross_entropy(x, torch.tensor([1, -100, 7]), label_smoothing=0.1), (rand(3, 8, **d),)),
        (K.swiglu, (rand(3, 8, **d), rand(3, 8, **d))),
        (lambda q: K.rope(q, q, cos, sin)[0], (rand(2, 3, 5, 8, **d),)),
    ]
    torch.manual_seed(0)
    for fn, args in cases:
        assert torch.autograd.gradcheck(fn, tuple(a.requires_grad_() for a in args))


def test_opcheck_and_compile():
    x, w, b = rand(4, 16), rand(16), rand(16)
    t = torch.tensor([1, 2, -100, 3])
    for o, args in [
        (torch.ops.kernelkit.rms_norm.default, (x, w, 1e-6)),
        (torch.ops.kernelkit.add_rms_norm.default, (x, x.clone(), w, 1e-6)),
        (torch.ops.kernelkit.layer_norm.default, (x, w, b, 1e-5)),
        (torch.ops.kernelkit.softmax.default, (x,)),
        (torch.ops.kernelkit.cross_entropy.default, (x, t, -100, 0.0)),
        (torch.ops.kernelkit.swiglu.default, (x, x.clone())),
        (torch.ops.kernelkit.rope.default, (rand(1, 2, 3, 16), rand(3, 16), rand(3, 16), False)),
    ]:
        torch.library.opcheck(o, args)
    torch._dynamo.reset()

    @torch.compile(fullgraph=True)
    def f(x, w, b, t):
        h = K.swiglu(K.rms_norm(x, w), K.layer_norm(x, w, b))
        return K.cross_entropy(K.softmax(h), t)

    ref = F.cross_entropy(torch.softmax(F.silu(ref_rms(x, w, 1e-6).float()) * F.layer_norm(x, (16,), w, b), -1), t)
    torch.testing.assert_close(f(x, w, b, t), ref, atol=1e-5, rtol=1e-5)


def test_deterministic_weight_gradients():
    x, w, g = rand(513, 1024), rand(1024), rand(513, 1024)

    def grads():
        xk, wk = leaf(x), leaf(w)
        K.rms_norm(xk, wk).backward(g)
        return wk.grad

    assert torch.equal(grads(), grads())


def test_wide_rows():
    x, w = rand(2, 262144), rand(262144)
    close(K.rms_norm(x, w), ref_rms(x, w, 1e-6), torch.float32, 4)
    close(K.softmax(x), torch.softmax(x.double(), -1), torch.float32, 4)
