"""Property tests: the elementwise ops agree with torch for any broadcastable shapes and any views."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkit.ops as K

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@st.composite
def operand(draw, shape):
    """A tensor broadcastable to `shape`: some dims dropped or set to 1, stored transposed or strided."""
    ndim = len(shape)
    keep = draw(st.integers(0, ndim))
    sub = [1 if draw(st.booleans()) else s for s in shape[ndim - keep :]]
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided", "offset"]))
    if layout == "strided" and sub:
        base = torch.randn(*sub[:-1], sub[-1] * 2, dtype=torch.float64)
        t = base[..., ::2]
    elif layout == "offset":
        n = 1
        for s in sub:
            n *= s
        t = torch.randn(n + 1, dtype=torch.float64)[1:].view(sub)
    elif layout == "transposed" and len(sub) >= 2:
        t = torch.randn(*reversed(sub), dtype=torch.float64).permute(*reversed(range(len(sub))))
    else:
        t = torch.randn(sub, dtype=torch.float64)
    return t


@st.composite
def case(draw):
    shape = draw(st.lists(st.integers(1, 6), min_size=0, max_size=4))
    arity = draw(st.sampled_from([2, 3]))
    return [draw(operand(shape)) for _ in range(arity)]


@settings(max_examples=60, deadline=None)
@given(case(), st.sampled_from(DEVICES), st.sampled_from([torch.float32, torch.float64]))
def test_elementwise_ops_match_torch_on_any_layout(operands, device, dtype):
    ts = [t.to(device=device, dtype=dtype) for t in operands]
    if len(ts) == 2:
        pairs = [(K.add(*ts), ts[0] + ts[1]), (K.mul(*ts), ts[0] * ts[1])]
    else:
        pairs = [(K.muladd(*ts), ts[0] * ts[1] + ts[2])]
    for out, ref in pairs:
        assert out.shape == ref.shape and out.is_contiguous()
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=4), st.sampled_from(DEVICES), st.booleans())
def test_scale_in_place_through_any_permutation(shape, device, flip):
    x = torch.randn(*shape, device=device)
    view = x.permute(*reversed(range(len(shape)))) if flip else x
    expect = view * 1.5
    K.scale_(view, 1.5)
    torch.testing.assert_close(view, expect)
