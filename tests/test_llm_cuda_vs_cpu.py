"""The CUDA and the Rust CPU implementations of the LLM ops agree, forward and backward, over the
launch-shape regimes of the CUDA kernels: warp-per-row and block-per-row rows, rows with a streamed
tail, the scalar path (odd widths, misaligned pointers) and the 16-byte vector path."""

import importlib

import pytest
import torch

import kernelkit.ops as K
from kernelkit.ops import _runtime, norms
from kernelkit.ops._runtime import (
    CTYPE,
    LOW_DRAM_GBPS_PER_SM,
    SCALAR,
    SHIFTED,
    VECTOR,
    has_clusters,
    held_loss_scratch,
    kernel,
    scratch,
    sm_count,
)
from kernelkit.ops.softmax import (
    _HELD_CE_FITS,
    _ce_grid,
    _cross_entropy,
    _cross_entropy_reduced,
    _held_ce_shape,
    _softmax_shape,
    cross_entropy_backward,
    softmax_backward,
)

pytestmark = pytest.mark.gpu
# the module, not the op kernelkit.ops exports under its name
softmax_module = importlib.import_module("kernelkit.ops.softmax")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# Row widths across the kernels' regimes (warp/block teams, register part, L2/shared-memory tails, rows
# split over a cluster of 2, 3, 4 and 8 CTAs on sm_90+).
WIDTHS = [1, 7, 64, 255, 256, 257, 1000, 4096, 4097, 8192, 16392, 65536, 131072, 262144]


def rows_for(cols: int) -> int:
    return max(2, min(96, 2**19 // cols))


def rand(rows, cols, dtype, offset=0, scale=1.0):
    """A CUDA tensor whose data pointer is ``offset`` elements past an allocation (misaligned if odd)."""
    base = torch.empty(rows * cols + offset, dtype=dtype, device="cuda")
    t = base[offset:].view(rows, cols)
    t.copy_(torch.randn(rows, cols, dtype=torch.float64) * scale)
    return t


def agree(cuda_out, cpu_out, dtype, factor=1.0):
    tol = TOL[dtype] * factor
    torch.testing.assert_close(cuda_out.cpu().double(), cpu_out.double(), atol=tol, rtol=tol, equal_nan=True)


def both(fn, *tensors):
    """fn on the CUDA tensors and on CPU copies of them (other arguments passed as they are)."""
    return fn(*tensors), fn(*(t.cpu() if isinstance(t, torch.Tensor) else t for t in tensors))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 7, 257, 1001, 4097, 9001, 12289, 16391, 16393, 50257, 131075])
def test_norm_forwards_on_shifted_rows(dtype, cols):
    """The norm forwards' rows off the 16-byte path take the packs between their 16-byte boundaries, their head and tail
    elements one by one, and w's (and b's) packs at the rows' shift (kk::RowShift, kk::load_shifted): every row starts
    elsewhere in its 16-byte unit, and rows narrower than a pack get a thread for each element. Rows one block holds
    stay in it; longer ones are split over a cluster (sm_90+; float64's take the scalar path). They agree with the CPU
    and are bitwise the same across runs (the residual sum of add_rms_norm included)."""
    rows = 37
    x, r = rand(rows, cols, dtype, scale=3), rand(rows, cols, dtype)
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    assert _runtime.row_path(cols, dtype, (x, w, b, r)) == SHIFTED
    # a row's whole packs (at most cols // VEC) in 512 threads: float64's 4 packs of 2 up to 4096 columns, the others'
    # 32 columns a thread up to 16384 (and 7 extra elements; float32 3)
    held = cols <= {torch.float64: 4097, torch.float32: 16387}.get(dtype, 16391)
    split = not held and dtype != torch.float64 and has_clusters(0)
    for name in ("kk_rms_norm_fwd", "kk_add_rms_norm_fwd", "kk_layer_norm_fwd"):
        shape = norms._forward_shape(name, dtype, cols, 0, SHIFTED)
        assert shape.shifted == (held or split), shape.kernel.name
        assert (shape.ctas > 1) == split, shape.kernel.name
    calls = {
        "rms_norm": (lambda *a: norms._rms_norm(*a, 1e-6), (x, w)),
        "add_rms_norm": (lambda *a: norms._add_rms_norm(*a, 1e-6), (x, r, w)),
        "layer_norm": (lambda *a: norms._layer_norm(*a, 1e-5), (x, w, b)),
    }
    for name, (fn, args) in calls.items():
        out, outc = both(fn, *args)
        for o, oc in zip(out, outc):
            agree(o, oc, o.dtype, 2)
        again = fn(*args)
        assert all(torch.equal(a, o) for a, o in zip(again, out)), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 7, 257, 1001, 3001, 4097, 5001, 8195, 8199, 9001, 50257])
@pytest.mark.parametrize("rows", [3, 37])
def test_norm_backwards_on_shifted_rows(dtype, cols, rows):
    """The norm backwards' rows off the 16-byte path take shifted rows (kernels/norms.cu norm_bwd_run SHIFT), held in
    one block (16-bit LayerNorm and RMSNorm at 3001 and 5001 columns by the bulk kernels' SHIFT,
    norm_bwd_bulk_shifted_run) or split over a cluster (sm_90+; float64's take the scalar path): each chunk takes rows
    of one shift, so
    that a thread's weight-gradient sums keep their columns; with 3 rows most shift classes have none, and their chunks'
    partials are zeros. The input and weight (and bias) gradients agree with the CPU and are bitwise the same across
    runs."""
    x, r, g = rand(rows, cols, dtype, scale=3), rand(rows, cols, dtype), rand(rows, cols, dtype)
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    for name in ("kk_rms_norm_bwd", "kk_layer_norm_bwd"):
        shape, _ = norms._backward_shape(name, dtype, cols, 0, SHIFTED, False)
        # rows held in one block: their whole packs in 512 threads (2 packs of 8 16-bit columns each: 8192, and 7 extra
        # elements; float32 4 of 4, but LayerNorm's 2 (_BWD_SHIFTED_PACKS: its sums spill at 4); float64 2 of 2);
        # longer ones are split (float64's, and float32 LayerNorm's within one CTA of 4 packs: the scalar path)
        ln32 = (name, dtype) == ("kk_layer_norm_bwd", torch.float32)
        held = cols <= (4099 if ln32 else {torch.float64: 2049, torch.float32: 8195}.get(dtype, 8199))
        one_cta = ln32 and cols <= 8195
        split = not held and not one_cta and dtype != torch.float64 and has_clusters(0)
        assert shape.shifted == (held or split), shape.kernel.name
        assert (shape.ctas > 1) == split, shape.kernel.name
    _, rstd = norms._rms_norm(x, w, 1e-6)
    _, h, hrstd = norms._add_rms_norm(x, r, w, 1e-6)
    _, mean, lrstd = norms._layer_norm(x, w, b, 1e-5)
    calls = {
        "rms_norm": (norms.rms_norm_backward, (g, x, w, rstd)),
        "add_rms_norm": (norms.add_rms_norm_backward, (g, r, h, w, hrstd)),
        "layer_norm": (norms.layer_norm_backward, (g, x, w, mean, lrstd)),
    }
    for name, (fn, args) in calls.items():
        out, outc = both(fn, *args)
        agree(out[0], outc[0], dtype, 8)
        for o, oc in zip(out[1:], outc[1:]):
            agree(o, oc, dtype, 4 * rows**0.5)
        again = fn(*args)
        assert all(torch.equal(a, o) for a, o in zip(again, out)), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("offset", [0, 1])
def test_norms(dtype, cols, offset):
    rows = rows_for(cols)
    x, r, g = (rand(rows, cols, dtype, offset) for _ in range(3))
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)

    (y, rstd), (yc, rstdc) = both(lambda *a: norms._rms_norm(*a, 1e-6), x, w)
    agree(y, yc, dtype)
    agree(rstd, rstdc, torch.float32 if dtype != torch.float64 else dtype)
    # The weight gradient sums `rows` products: its tolerance grows with the row count.
    (gx, gw), (gxc, gwc) = both(norms.rms_norm_backward, g, x, w, rstd)
    agree(gx, gxc, dtype, 4)
    agree(gw, gwc, dtype, 4 * rows**0.5)

    (y, h, rstd), (yc, hc, rstdc) = both(lambda *a: norms._add_rms_norm(*a, 1e-6), x, r, w)
    agree(y, yc, dtype)
    agree(h, hc, dtype)
    (gh, gw), (ghc, gwc) = both(norms.add_rms_norm_backward, g, r, h, w, rstd)
    agree(gh, ghc, dtype, 4)
    agree(gw, gwc, dtype, 4 * rows**0.5)

    (y, mean, rstd), (yc, meanc, rstdc) = both(lambda *a: norms._layer_norm(*a, 1e-5), x, w, b)
    agree(y, yc, dtype, 2)
    (gx, gw, gb), (gxc, gwc, gbc) = both(norms.layer_norm_backward, g, x, w, mean, rstd)
    agree(gx, gxc, dtype, 8)
    agree(gw, gwc, dtype, 4 * rows**0.5)
    agree(gb, gbc, dtype, 4 * rows**0.5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 64, 2048, 4097, 8192, 65536, 262144])
def test_layer_norm_rows_far_from_zero_mean(dtype, cols):
    """The one-pass variance (16-bit rows, rows split over a cluster at 65536 columns, and float32 rows with a
    streamed tail at 262144) stands where the mean is small against the spread and gives way to the two-pass one
    elsewhere: rows on both sides, mixed in one warp and one block, agree with a float64 reference and with the CPU."""
    rows = 64
    offsets = torch.tensor([0.0, 0.5, 0.99, 1.01, 3.0, 100.0, -1000.0, 0.0], dtype=torch.float64).repeat(rows // 8)
    x64 = torch.randn(rows, cols, dtype=torch.float64) + offsets[:, None]
    x = x64.to(dtype).cuda()
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    (y, mean, rstd), (yc, _, rstdc) = both(lambda *a: norms._layer_norm(*a, 1e-5), x, w, b)
    xr = x.cpu().double()
    ref = torch.nn.functional.layer_norm(xr, (cols,), w.cpu().double(), b.cpu().double(), 1e-5)
    acc = torch.float32 if dtype != torch.float64 else dtype
    for o in offsets.unique().tolist():
        rows_o = offsets == o
        # Accumulating in A, any implementation's mean is off by about |mean| * eps(A), and y by that over the
        # spread (1 here): the tolerance grows with the offset.
        f = 2 * max(1.0, abs(o))
        agree(y.cpu()[rows_o], ref[rows_o], dtype, f)
        agree(y.cpu()[rows_o], yc[rows_o], dtype, f)
        agree(rstd.cpu()[rows_o], rstdc[rows_o], acc, 2 * f)
    torch.testing.assert_close(mean.cpu().double(), xr.mean(-1), atol=TOL[acc], rtol=TOL[acc])


WIDE_CASES = (
    [("kk_layer_norm_fwd", torch.float32, cols) for cols in (260, 1024, 2048, 2052, 4096, 6000, 8192)]
    + [("kk_rms_norm_fwd", torch.float32, cols) for cols in (2052, 4096, 6000, 8192)]  # beyond 4096: PREW
    + [
        ("kk_rms_norm_fwd", dtype, cols)
        for dtype in (torch.float16, torch.bfloat16)
        for cols in (2056, 4096, 6000, 8192)
    ]
)


@pytest.mark.parametrize("name, dtype, cols", WIDE_CASES)
def test_wide_norm_rows_match_the_general_kernel(name, dtype, cols):
    """Rows that _WIDE_FIT lists take the lean <kernel>_wide, which computes what the general kernel does at the same
    fit in the same order: the same bits, for rows near and far from zero mean."""
    shape = norms._forward_shape(name, dtype, cols, torch.cuda.current_device(), VECTOR)
    assert shape.kernel.name.startswith(f"{name}_wide<")
    rows = 300
    x = rand(rows, cols, dtype) + torch.linspace(-50, 50, rows, device="cuda")[:, None].to(dtype)
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    packs, minb = next((p, m) for lo, hi, p, m in norms._WIDE_FIT[name, dtype] if lo < cols <= hi)
    general = kernel("norms", f"{name}<{CTYPE[dtype]}, false, {packs}, {minb}>")
    if name == "kk_layer_norm_fwd":
        outs = norms._layer_norm(x, w, b, 1e-5)
        head, eps = (x, w, b), 1e-5
    else:
        outs = norms._rms_norm(x, w, 1e-6)
        head, eps = (x, w), 1e-6
    again = [torch.empty_like(t) for t in outs]
    general.launch(rows, shape.block, (*head, *again, rows, cols, eps))
    for got, want in zip(outs, again):
        assert torch.equal(got, want)


_LN_WIDE, _RMS_WIDE = "kk_layer_norm_fwd_wide<float, 2, 4>", "kk_rms_norm_fwd_wide<__nv_bfloat16, 2, 4>"
_RMS_WIDE_PREW = "kk_rms_norm_fwd_wide<float, 4, 3, true>"


@pytest.mark.parametrize(
    "expr, dtype, cols, block, offset",
    [
        (_LN_WIDE, "float32", 4098, 512, 0),
        (_LN_WIDE, "float32", 4096, 256, 0),
        (_LN_WIDE, "float32", 4096, 512, 1),
        (_RMS_WIDE, "bfloat16", 8196, 512, 0),
        (_RMS_WIDE, "bfloat16", 8192, 512, 1),
        (_RMS_WIDE_PREW, "float32", 8196, 512, 0),
        (_LN_WIDE, "float32", 0, 512, 0),
        (_RMS_WIDE, "bfloat16", 0, 512, 0),
    ],
    ids=[
        "ln-cols-not-whole-packs",
        "ln-row-wider-than-the-block",
        "ln-misaligned-x",
        "rms-cols",
        "rms-misaligned-x",
        "rms-prefetch-w-row-wider-than-the-block",
        "ln-no-cols",
        "rms-no-cols",
    ],
)
def test_wide_norm_launch_checks_fail_the_launch(launch_in_subprocess, expr, dtype, cols, block, offset):
    """kk_layer_norm_fwd_wide and kk_rms_norm_fwd_wide check their launch in block 0 only, once its rows are done; a
    launch they do not fit fails with an error that names the kernel (in a subprocess: the trap ends the CUDA
    context)."""
    ln = expr == _LN_WIDE
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        rows, cols, dt = 64, {cols}, torch.{dtype}
        x = torch.randn(rows * cols + 8, device="cuda", dtype=dt)[{offset}:][: rows * cols].view(rows, cols)
        w, b = torch.ones(cols, device="cuda", dtype=dt), torch.zeros(cols, device="cuda", dtype=dt)
        y, stat = torch.empty(rows, cols, device="cuda", dtype=dt), torch.empty(rows, device="cuda")
        args = (x, w, b, y, stat, stat, rows, cols, 1e-5) if {ln} else (x, w, y, stat, rows, cols, 1e-6)
        kernel("norms", "{expr}").launch(rows, {block}, args)
    """)
    assert f"LAUNCH_ERROR kernel '{expr}' failed" in stdout, printed


_RMS_HELD = "kk_rms_norm_fwd<float, false, 4, 3>"
_RMS_VEC_ONLY = "kk_rms_norm_fwd<float, false, 4, 3, false, 0, false, true>"
_LN_HELD = "kk_layer_norm_fwd<__nv_bfloat16, false, 4, 2>"
_LN_VEC_ONLY = "kk_layer_norm_fwd<__nv_bfloat16, false, 4, 2, false, 0, kk_norms::kLnFwdLd, false, true>"


@pytest.mark.parametrize(
    "expr, block, cols, want",
    [
        (_RMS_HELD, 256, 8192, "LAUNCH_ERROR"),
        (_RMS_HELD, 512, 8192, "NO ERROR"),
        (_RMS_VEC_ONLY, 256, 8192, "LAUNCH_ERROR"),
        (_RMS_VEC_ONLY, 512, 8190, "LAUNCH_ERROR"),
        (_RMS_VEC_ONLY, 512, 0, "LAUNCH_ERROR"),
        (_RMS_VEC_ONLY, 512, 8192, "NO ERROR"),
        (_LN_VEC_ONLY, 128, 8192, "LAUNCH_ERROR"),
        (_LN_VEC_ONLY, 256, 8188, "LAUNCH_ERROR"),
        (_LN_VEC_ONLY, 256, 0, "LAUNCH_ERROR"),
        (_LN_VEC_ONLY, 256, 8192, "NO ERROR"),
    ],
    ids=[
        "row-wider",
        "row-fits",
        "vec-only-row-wider",
        "vec-only-off-the-16-byte-path",
        "vec-only-no-cols",
        "vec-only",
        "ln-vec-only-row-wider",
        "ln-vec-only-off-the-16-byte-path",
        "ln-vec-only-no-cols",
        "ln-vec-only",
    ],
)
def test_held_norm_launch_checks_fail_the_launch(launch_in_subprocess, expr, block, cols, want):
    """A held forward (TAIL = false) checks that its rows fit its registers (kernels/norms.cu check_fits): rows of 8192
    floats at 4 packs need 512 threads (bf16 at 4 packs, 256), so a narrower launch fails with an error that names the
    kernel. Its 16-byte-only instantiation (VEC_ONLY) checks that and its path in block 0 after its rows: a launch of
    rows off the 16-byte path or of no columns fails too, and one that fits matches the general kernel bit for bit."""
    ln = expr.startswith("kk_layer_norm_fwd")
    general, dt, full = (_LN_HELD, "torch.bfloat16", 256) if ln else (_RMS_HELD, "torch.float32", 512)
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        rows, cols = 300, {cols}
        x, w = torch.randn(rows, cols, device="cuda", dtype={dt}), torch.rand(cols, device="cuda", dtype={dt})
        b = torch.randn(cols, device="cuda", dtype={dt})

        def run(expr, block):
            y, mean, rstd = torch.empty_like(x), torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
            args = (x, w, b, y, mean, rstd, rows, cols, 1e-5) if {ln} else (x, w, y, rstd, rows, cols, 1e-6)
            kernel("norms", expr).launch(rows, block, args)
            torch.cuda.synchronize()
            return (y, mean, rstd) if {ln} else (y, rstd)

        got, base = run("{expr}", {block}), run("{general}", {full})
        assert all(torch.equal(g, e) for g, e in zip(got, base))
    """)
    assert stdout.startswith(want), printed
    if want == "LAUNCH_ERROR":
        assert f"kernel '{expr}' failed" in stdout, printed


# (a split forward at its shipped fit, CTAs per 65536-column row, its shared-memory parameter slots per thread, the
# arguments after x)
SPLIT_FORWARDS = [
    ("kk_layer_norm_fwd<float, false, 4, 2, true>", 8, 2 * 4 * 16, "w, b, y, stat, stat"),
    ("kk_rms_norm_fwd<float, false, 8, 2, true>", 4, 8 * 16, "w, y, stat"),
]


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize("expr, ctas, slots, args", SPLIT_FORWARDS, ids=["layer_norm", "rms_norm"])
def test_split_forward_without_its_parameter_slots_fails_the_launch(launch_in_subprocess, expr, ctas, slots, args):
    """A norm forward split over a cluster stages its w (LayerNorm: and b) packs in dynamic shared memory (16 bytes
    per pack and thread): a launch with less fails with an error that names the kernel, where the right amount
    runs."""
    for smem, want in ((slots * 512 - 16, f"LAUNCH_ERROR kernel '{expr}' failed"), (slots * 512, "NO ERROR")):
        stdout, printed = launch_in_subprocess(f"""
            from kernelkit.ops._runtime import kernel
            rows, cols = 16, 65536
            x = torch.randn(rows, cols, device="cuda")
            w, b = torch.ones(cols, device="cuda"), torch.zeros(cols, device="cuda")
            y, stat = torch.empty_like(x), torch.empty(rows, device="cuda")
            args = (x, {args}, rows, cols, 1e-5)
            kernel("norms", "{expr}").launch((8, {ctas}), (512, 1), args, {smem}, cluster=(1, {ctas}, 1))
        """)
        assert want in stdout, printed


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize("block, ctas", [(512, 2), (256, 4)], ids=["other-cluster", "other-block"])
@pytest.mark.parametrize("name", ["kk_layer_norm_fwd", "kk_rms_norm_fwd"])
def test_split_forward_on_a_fixed_geometry_fails_another_launch(launch_in_subprocess, name, block, ctas):
    """A split forward with CTAS = 4 is compiled for 512-thread blocks in clusters of 4: a launch of other clusters
    or blocks fails with an error that names the kernel, where its own geometry runs and matches the general kernel:
    the same statistics, and outputs within one bf16 ulp (LayerNorm's one-pass rows take fma(x, rs, -mu * rs))."""
    expr = f"{name}<__nv_bfloat16, false, 4, 2, true, 4>"
    general = f"{name}<__nv_bfloat16, false, 4, 2, true>"
    ln = name == "kk_layer_norm_fwd"
    for launch, want in (((block, ctas), f"LAUNCH_ERROR kernel '{expr}' failed"), ((512, 4), "NO ERROR")):
        stdout, printed = launch_in_subprocess(f"""
            from kernelkit.ops._runtime import kernel
            rows, cols, (threads, ctas), ln = 16, 65536, {launch}, {ln}
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            w, b = torch.randn(cols, device="cuda", dtype=x.dtype), torch.randn(cols, device="cuda", dtype=x.dtype)
            ys = [torch.empty_like(x) for _ in range(2)]
            stats = [torch.empty(rows, device="cuda") for _ in range(4)]
            for e, y, m, r in (("{general}", ys[0], *stats[:2]), ("{expr}", ys[1], *stats[2:])):
                t = (512, 4) if e == "{general}" else (threads, ctas)
                args = (x, w, b, y, m, r, rows, cols, 1e-5) if ln else (x, w, y, r, rows, cols, 1e-6)
                smem = (2 if ln else 1) * 4 * 16 * t[0]
                kernel("norms", e).launch((4, t[1]), (t[0], 1), args, smem, cluster=(1, t[1], 1))
            torch.cuda.synchronize()
            assert torch.equal(stats[1], stats[3]) and (not ln or torch.equal(stats[0], stats[2]))
            torch.testing.assert_close(ys[1], ys[0], rtol=2**-7, atol=1e-6)
        """)
        assert want in stdout, printed


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize(
    "name, dtype, cols, kernel",
    [
        ("kk_layer_norm_fwd", torch.bfloat16, 16392, "__nv_bfloat16, false, 4, 2, true, 2"),
        ("kk_layer_norm_fwd", torch.bfloat16, 40960, "__nv_bfloat16, false, 4, 2, true, 3"),
        ("kk_layer_norm_fwd", torch.float16, 65536, "__half, false, 4, 2, true, 4"),
        ("kk_layer_norm_fwd", torch.bfloat16, 131072, "__nv_bfloat16, false, 4, 2, true, 8"),
        ("kk_layer_norm_fwd", torch.float32, 16392, "float, false, 4, 2, true, 3"),
        ("kk_layer_norm_fwd", torch.float32, 65536, "float, false, 4, 2, true, 8"),
        ("kk_rms_norm_fwd", torch.bfloat16, 16392, "__nv_bfloat16, false, 4, 2, true, 2"),
        ("kk_rms_norm_fwd", torch.float16, 65536, "__half, false, 4, 2, true, 4"),
        ("kk_add_rms_norm_fwd", torch.bfloat16, 65536, "__nv_bfloat16, false, 2, 3, true, 8"),
        ("kk_add_rms_norm_fwd", torch.bfloat16, 131072, "__nv_bfloat16, false, 4, 2, true, 8"),
        ("kk_rms_norm_fwd", torch.float32, 65536, "float, false, 8, 2, true, 4"),
        ("kk_add_rms_norm_fwd", torch.bfloat16, 262144, "__nv_bfloat16, false, 8, 1, true, 8"),
    ],
)
def test_split_forward_takes_its_fixed_geometry(name, dtype, cols, kernel):
    """Rows split over a cluster of 512-thread CTAs launch the kernel compiled for their cluster's CTAs (_SPLIT_FIXED)
    at each split fit; float64 keeps the general kernel."""
    shape = norms._forward_shape(name, dtype, cols, 0, VECTOR)
    assert shape.kernel.name == f"{name}<{kernel}>"
    assert (shape.block, shape.ctas) == ((512, 1), int(kernel.rsplit(", ", 1)[1]))
    general = norms._forward_shape("kk_rms_norm_fwd", torch.float64, 16392, 0, VECTOR)
    assert general.kernel.name == "kk_rms_norm_fwd<double, false, 4, 2, true>"


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_split_softmax_and_layer_norm_backward_take_their_fixed_geometry(dtype):
    """Softmax rows split over a cluster, and the 16-bit LayerNorm backward's bulk split rows, launch the kernels
    compiled for their cluster's CTAs (kernels/softmax.cu split_rows' CTAS; ops/norms.py _BWD_SPLIT_FIXED)."""
    for name in ("kk_softmax_fwd", "kk_softmax_bwd"):
        shape = _softmax_shape(name, dtype, 65536, 0, VECTOR)
        assert shape.kernel.name.endswith(f", 512, true, true, {shape.ctas}>"), shape.kernel.name
        assert shape.block == (512, 1)
    if dtype != torch.float32:
        shape, _ = norms._backward_shape("kk_layer_norm_bwd", dtype, 65536, 0, VECTOR, False)
        assert shape.kernel.name == "kk_layer_norm_bwd_bulk<__nv_bfloat16, 512, 1, 5, true, 2, 8>"
        shape, _ = norms._backward_shape("kk_rms_norm_bwd", dtype, 65536, 0, VECTOR, False)
        assert shape.kernel.name == "kk_rms_norm_bwd_bulk<__nv_bfloat16, 512, 1, 6, true, 1>"


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize("block, ctas", [(512, 4), (256, 2)], ids=["other-cluster", "other-block"])
def test_split_softmax_on_a_fixed_geometry_fails_another_launch(launch_in_subprocess, block, ctas):
    """kk_softmax_fwd with CTAS = 2 runs on 512-thread blocks in clusters of 2 only, bitwise as the general kernel."""
    expr = "kk_softmax_fwd<__nv_bfloat16, 2, 8, 512, true, true, 2>"
    general = "kk_softmax_fwd<__nv_bfloat16, 2, 8, 512, true, true>"
    for launch, want in (((block, ctas), f"LAUNCH_ERROR kernel '{expr}' failed"), ((512, 2), "NO ERROR")):
        stdout, printed = launch_in_subprocess(f"""
            from kernelkit.ops._runtime import kernel
            rows, cols, (threads, ctas) = 16, 65536, {launch}
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            ys = [torch.empty_like(x) for _ in range(2)]
            for e, y in (("{general}", ys[0]), ("{expr}", ys[1])):
                t = (512, 2) if e == "{general}" else (threads, ctas)
                kernel("softmax", e).launch((4, t[1]), (t[0], 1), (x, y, rows, cols), 0, cluster=(1, t[1], 1))
            torch.cuda.synchronize()
            assert torch.equal(ys[0], ys[1])
        """)
        assert want in stdout, printed


def backward_agrees_with_cpu(name: str, dtype: torch.dtype, rows: int, cols: int) -> None:
    """LayerNorm's (name kk_layer_norm_bwd) or RMSNorm's backward of random rows, one of them constant (LayerNorm's
    x == mean, so xhat is exactly 0), agrees with the CPU and is bitwise the same across runs."""
    x, g = rand(rows, cols, dtype, scale=3), rand(rows, cols, dtype)
    x[5] = 0.5  # a constant row: LayerNorm's x == mean, so xhat is exactly 0
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    if name == "kk_layer_norm_bwd":
        _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
        fn, args = norms.layer_norm_backward, (g, x, w, mean, rstd)
    else:
        _, rstd = norms._rms_norm(x, w, 1e-6)
        fn, args = norms.rms_norm_backward, (g, x, w, rstd)
    out, outc = both(fn, *args)
    agree(out[0], outc[0], dtype, 8)
    for o, oc in zip(out[1:], outc[1:]):
        agree(o, oc, dtype, 4 * rows**0.5)
    assert all(torch.equal(a, b) for a, b in zip(fn(*args), out))


@pytest.mark.parametrize(
    "name, dtype, cols",
    [
        *(
            (n, t, c)
            for n in ("kk_layer_norm_bwd", "kk_rms_norm_bwd")
            for t in (torch.float32,)
            for c in (65544, 262144)
        ),
        ("kk_rms_norm_bwd", torch.bfloat16, 65544),
        ("kk_rms_norm_bwd", torch.bfloat16, 131072),
        ("kk_rms_norm_bwd", torch.bfloat16, 262144),
        ("kk_layer_norm_bwd", torch.float32, 131072),
        # the 16-bit LayerNorm backward splits rows up to 131072 columns over 16 CTAs
        ("kk_layer_norm_bwd", torch.bfloat16, 139264),
        ("kk_layer_norm_bwd", torch.bfloat16, 262144),
    ],
)
def test_norm_backward_of_rows_too_wide_for_a_cluster(name, dtype, cols):
    """Rows beyond the split kernels' reach take the segmented backward (kk_norm_bwd_seg*): it agrees with the CPU
    and is bitwise repeatable, on more rows than one chunk holds; add_rms_norm's adds its residual gradient."""
    shape, _ = norms._backward_shape(name, dtype, cols, 0, VECTOR, False)
    assert isinstance(shape, norms._Segmented), shape
    backward_agrees_with_cpu(name, dtype, 2 * shape.cap + 3, cols)  # more rows than chunks (shape.cap)
    if name == "kk_rms_norm_bwd":
        rows = 5
        g, gr, h = (rand(rows, cols, dtype) for _ in range(3))
        w = rand(1, cols, dtype).view(cols)
        _, _, rstd = norms._add_rms_norm(h, torch.zeros_like(h), w, 1e-6)
        out, outc = both(norms.add_rms_norm_backward, g, gr, h, w, rstd)
        agree(out[0], outc[0], dtype, 8)
        agree(out[1], outc[1], dtype, 4 * rows**0.5)


_BULK = "kk_layer_norm_bwd_bulk<__nv_bfloat16, 256, 2, 3, false, 1>"


@pytest.fixture(params=[25.4, 36.5], ids=["H100-bandwidth", "H200-bandwidth"])
def dram_gbps_per_sm(request, monkeypatch):
    """The GPU's DRAM bandwidth per SM as the norm backwards', softmax's and the held cross-entropy's fits see it
    (LOW_DRAM_GBPS_PER_SM): an H100's and an H200's, so that every sm_90 GPU tests both sets of fits."""
    caches = (norms._backward_shape, softmax_module._softmax_shape, softmax_module._held_ce_shape)
    monkeypatch.setattr(_runtime, "dram_gbps_per_sm", lambda dev: request.param)
    for c in caches:
        c.cache_clear()
    yield request.param
    for c in caches:
        c.cache_clear()


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cols", [2056, 3000, 4096, 4104, 6144, 8192])
@pytest.mark.parametrize("name", ["kk_layer_norm_bwd", "kk_rms_norm_bwd"])
def test_norm_backward_bulk_rows(dram_gbps_per_sm, name, dtype, cols):
    """16-bit rows on the 16-byte path take <kernel>_bulk on sm_90+ (x and gy by bulk copies into shared-memory stages)
    up to 4096 columns (blocks of 256 threads), and LayerNorm's up to 8192 (blocks of 512) at an H200's DRAM bandwidth
    per SM; with more rows than resident blocks and rows that do not fill their block. The gradients agree with the CPU
    and are bitwise the same across runs; longer rows, add_rms_norm's and rows off the 16-byte path keep the register
    kernels."""
    wide_bulk = name == "kk_layer_norm_bwd" and dram_gbps_per_sm >= LOW_DRAM_GBPS_PER_SM
    shape, _ = norms._backward_shape(name, dtype, cols, 0, VECTOR, False)
    if cols <= 4096 or wide_bulk:
        assert shape.kernel.name.startswith(f"{name}_bulk<"), shape.kernel.name
        assert shape.block[0] == 32 * -(-cols // 16 // 32) and shape.smem == 2 * norms._BWD_BULK_STAGES * cols * 2
    else:
        assert "bulk" not in shape.kernel.name
    assert "bulk" not in norms._backward_shape(name, dtype, cols, 0, SCALAR, False)[0].kernel.name
    assert "bulk" not in norms._backward_shape(name, dtype, cols, 0, VECTOR, True)[0].kernel.name
    backward_agrees_with_cpu(name, dtype, 700, cols)


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize("name", ["kk_layer_norm_bwd", "kk_rms_norm_bwd"])
def test_norm_backward_bulk_fit_by_dram_bandwidth(dram_gbps_per_sm, name):
    """At 4096 bf16 columns the 16-bit backwards take their bulk kernel at both bandwidths: below
    LOW_DRAM_GBPS_PER_SM (an H100) compiled for two blocks per SM and launched one per SM, from it (an H200) their
    _BWD_BULK_FIT."""
    shape, _ = norms._backward_shape(name, torch.bfloat16, 4096, 0, VECTOR, False)
    fits = norms._BWD_BULK_FIT_LOW_GBPS if dram_gbps_per_sm < LOW_DRAM_GBPS_PER_SM else norms._BWD_BULK_FIT
    nt, minb, per_sm = fits[name][0]
    assert shape.kernel.name == f"{name}_bulk<__nv_bfloat16, {nt}, {minb}, 3, false, 1>"
    assert 0 < shape.cap <= per_sm * sm_count(0)


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize("grid", [6, 100])
@pytest.mark.parametrize("pair", [1, 2, 4])
def test_layer_norm_backward_bulk_any_grid(grid, pair):
    """Block b takes rows b, b + grid, ... through its stages; launched as clusters of ``pair`` blocks, the cluster's
    blocks add up their sums and write partial row b / pair (zeros where they have no row). gx is bitwise the op's
    (each row's math is the same); the partials sum to its weight and bias gradients."""
    rows, cols = 70, 4096
    grid = grid // pair * pair
    x, g = rand(rows, cols, torch.bfloat16), rand(rows, cols, torch.bfloat16)
    w, b = rand(1, cols, torch.bfloat16).view(cols), rand(1, cols, torch.bfloat16).view(cols)
    _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
    want = norms.layer_norm_backward(g, x, w, mean, rstd)
    gx = torch.empty_like(x)
    part = torch.full((2, grid // pair, cols), float("nan"), device="cuda")
    args = (g, x, w, mean, rstd, gx, part[0], part[1], rows, cols, 0)
    kernel("norms", _BULK).launch(grid, (256, 1), args, 6 * cols * 2, cluster=(pair, 1, 1))
    assert torch.equal(gx, want[0])
    assert not part[:, -(-rows // pair) :].any()
    for p, gw in zip(part, want[1:]):
        torch.testing.assert_close(p.sum(0), gw.float(), atol=0.05, rtol=1.6e-2)


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize(
    "block, smem, offset",
    [(128, 6 * 4096 * 2, 0), (256, 6 * 4096 * 2 - 16, 0), (256, 6 * 4096 * 2, 1), (256, 6 * 4096 * 2, 0)],
    ids=["row-wider-than-the-block", "too-little-shared-memory", "misaligned-x", "fits"],
)
def test_layer_norm_backward_bulk_launch_checks(launch_in_subprocess, block, smem, offset):
    """kk_layer_norm_bwd_bulk traps on a launch it does not fit (a row beyond its block's 2 packs per thread, less
    shared memory than three stages of x and gy, a misaligned pointer): the error names the kernel."""
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        rows, cols, dt = 16, 4096, torch.bfloat16
        x = torch.randn(rows * cols + 8, device="cuda", dtype=dt)[{offset}:][: rows * cols].view(rows, cols)
        g, gx = torch.randn(rows, cols, device="cuda", dtype=dt), torch.empty(rows, cols, device="cuda", dtype=dt)
        w, stat = torch.ones(cols, device="cuda", dtype=dt), torch.ones(rows, device="cuda")
        part = torch.empty(2, rows, cols, device="cuda")
        args = (g, x, w, stat, stat, gx, part[0], part[1], rows, cols, 1)
        kernel("norms", "{_BULK}").launch(rows, ({block}, 1), args, {smem})
    """)
    want = "NO ERROR" if (block, smem, offset) == (256, 6 * 4096 * 2, 0) else f"LAUNCH_ERROR kernel '{_BULK}' failed"
    assert want in stdout, printed


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize("extra", [False, True], ids=["fits", "with-g_extra"])
def test_rms_norm_backward_bulk_takes_no_extra_gradient(launch_in_subprocess, extra):
    """kk_rms_norm_bwd_bulk has no add_rms_norm path: a launch given g_extra traps, naming the kernel."""
    expr = "kk_rms_norm_bwd_bulk<__nv_bfloat16, 256, 4, 3, false, 1>"
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        rows, cols, dt = 16, 4096, torch.bfloat16
        x, g, gx = (torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(3))
        w, rstd = torch.ones(cols, device="cuda", dtype=dt), torch.ones(rows, device="cuda")
        part = torch.empty(rows, cols, device="cuda")
        args = (g, x, w, rstd, g if {extra} else 0, gx, part, rows, cols, 1)
        kernel("norms", "{expr}").launch(rows, (256, 1), args, 6 * cols * 2)
    """)
    assert (f"LAUNCH_ERROR kernel '{expr}' failed" if extra else "NO ERROR") in stdout, printed


_SPLIT_BULK = "kk_layer_norm_bwd_bulk<__nv_bfloat16, 512, 1, 6, true, 2>"
_SPLIT_SMEM = 6 * 2 * 16 * 1024  # six stages of x and gy, 16 KB each per CTA


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cols", [8200, 16384, 40000, 65536])
@pytest.mark.parametrize("name", ["kk_layer_norm_bwd", "kk_rms_norm_bwd"])
def test_norm_backward_bulk_split_rows(name, dtype, cols):
    """16-bit rows beyond 8192 columns on the 16-byte path take <kernel>_bulk with SPLIT: a cluster of
    ceil(cols / 8192) CTAs of 512 threads, each CTA's slice of x and gy brought by bulk copies into its stages (the
    last CTA's slice partial where cols is not a multiple of 8192), LayerNorm's two rows per reduction. The gradients
    agree with the CPU and are bitwise the same across runs; add_rms_norm's split rows keep the register kernel."""
    shape, _ = norms._backward_shape(name, dtype, cols, 0, VECTOR, False)
    assert shape.kernel.name.startswith(f"{name}_bulk<") and ", true, " in shape.kernel.name, shape.kernel.name
    assert shape.ctas == -(-cols // 8192) and shape.block == (512, 1)
    assert shape.smem == 2 * norms._BWD_BULK_SPLIT[name][0] * 2 * 16 * 512
    assert "bulk" not in norms._backward_shape(name, dtype, cols, 0, VECTOR, True)[0].kernel.name
    backward_agrees_with_cpu(name, dtype, max(41, min(301, 2**23 // cols)), cols)  # odd: some reductions have one row


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize("grid", [3, 5, 100])
def test_layer_norm_backward_bulk_split_any_grid(grid):
    """Cluster b takes rows b, b + grid, ... (two per reduction, the last one alone where their count is odd) and writes
    partial row b (zeros where it has no row): gx is bitwise the op's, and the partials sum to its weight and bias
    gradients."""
    rows, cols = 70, 16384
    x, g = rand(rows, cols, torch.bfloat16), rand(rows, cols, torch.bfloat16)
    w, b = rand(1, cols, torch.bfloat16).view(cols), rand(1, cols, torch.bfloat16).view(cols)
    _, mean, rstd = norms._layer_norm(x, w, b, 1e-5)
    want = norms.layer_norm_backward(g, x, w, mean, rstd)
    gx = torch.empty_like(x)
    part = torch.full((2, grid, cols), float("nan"), device="cuda")
    args = (g, x, w, mean, rstd, gx, part[0], part[1], rows, cols, 0)
    kernel("norms", _SPLIT_BULK).launch((grid, 2), (512, 1), args, _SPLIT_SMEM, cluster=(1, 2, 1))
    assert torch.equal(gx, want[0])
    assert not part[:, rows:].any()
    for p, gw in zip(part, want[1:]):
        torch.testing.assert_close(p.sum(0), gw.float(), atol=0.05, rtol=1.6e-2)


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="bulk copies need sm_90+")
@pytest.mark.parametrize(
    "ctas, cluster, smem",
    [(2, 2, _SPLIT_SMEM), (2, 1, _SPLIT_SMEM), (1, 1, _SPLIT_SMEM), (2, 2, _SPLIT_SMEM - 16)],
    ids=["fits", "not-a-cluster", "row-wider-than-the-cluster", "too-little-shared-memory"],
)
def test_layer_norm_backward_bulk_split_launch_checks(launch_in_subprocess, ctas, cluster, smem):
    """The split bulk backward traps on a launch it does not fit (CTAs of a row that are not one cluster, a row wider
    than its cluster's 2 packs per thread, less shared memory than six stages of the CTA's slices): the error names
    the kernel."""
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        rows, cols, dt = 16, 16384, torch.bfloat16
        x, g, gx = (torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(3))
        w, stat = torch.ones(cols, device="cuda", dtype=dt), torch.ones(rows, device="cuda")
        part = torch.empty(2, rows, cols, device="cuda")
        args = (g, x, w, stat, stat, gx, part[0], part[1], rows, cols, 1)
        kernel("norms", "{_SPLIT_BULK}").launch((rows, {ctas}), (512, 1), args, {smem}, cluster=(1, {cluster}, 1))
    """)
    fits = (ctas, cluster, smem) == (2, 2, _SPLIT_SMEM)
    assert ("NO ERROR" if fits else f"LAUNCH_ERROR kernel '{_SPLIT_BULK}' failed") in stdout, printed


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("offset", [0, 1])
def test_softmax_and_cross_entropy(dtype, cols, offset):
    rows = rows_for(cols)
    x, g = rand(rows, cols, dtype, offset, scale=4), rand(rows, cols, dtype, offset)
    x[0, : max(1, cols // 3)] = float("-inf")  # masked positions
    y, yc = both(K.softmax, x)
    agree(y, yc, dtype)
    gx, gxc = both(softmax_backward, g, y)
    agree(gx, gxc, dtype, 4)

    target = torch.randint(0, cols, (rows,), device="cuda")
    target[1] = -100
    x[0] = torch.randn(cols, dtype=torch.float64).to(dtype)  # cross-entropy of a finite row
    for smoothing in (0.0, 0.1):
        (loss, stats), (lossc, statsc) = both(_cross_entropy, x, target, -100, smoothing)
        agree(loss, lossc, torch.float32 if dtype != torch.float64 else dtype, 4)
        agree(stats, statsc, torch.float32 if dtype != torch.float64 else dtype, 4)
        scale = torch.rand(rows, dtype=stats.dtype, device="cuda")
        grad, gradc = both(cross_entropy_backward, x, target, stats, scale, -100, smoothing)
        agree(grad, gradc, dtype, 2)
        assert not grad[1].any(), "an ignored row has a zero gradient"
        check_reduced(x, target, smoothing, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("cols", [16, 64, 128, 256, 255])
@pytest.mark.parametrize("rows", [1, 3, 37, 135171])
def test_narrow_rows_in_warp_teams(dtype, cols, rows):
    """Rows of at most 16 lanes' packs go 2 or 4 to a warp (kernels/softmax.cu team_lanes): softmax, its backward
    and the cross-entropy backward agree with the CPU where the last team of a warp has no row (1, 3, 37 rows) and
    where warps take several turns over 135171 rows (the resident grid's last turn partly empty); 255 columns: shifted
    rows."""
    x, g = rand(rows, cols, dtype, scale=4), rand(rows, cols, dtype)
    y, yc = both(K.softmax, x)
    agree(y, yc, dtype)
    gx, gxc = both(softmax_backward, g, y)
    agree(gx, gxc, dtype, 4)
    target = torch.randint(0, cols, (rows,), device="cuda")
    target[rows // 2] = -100
    _, stats = _cross_entropy(x, target, -100, 0.0)
    scale = torch.rand(rows, dtype=stats.dtype, device="cuda")
    grad, gradc = both(cross_entropy_backward, x, target, stats, scale, -100, 0.0)
    agree(grad, gradc, dtype, 2)
    assert not grad[rows // 2].any(), "an ignored row has a zero gradient"


@pytest.mark.parametrize(
    "dtype, cols", [(torch.float32, 4096), (torch.float32, 8196), (torch.bfloat16, 16392), (torch.float16, 65536)]
)
def test_cross_entropy_backward_flat_grid_matches_the_resident_kernel(monkeypatch, dtype, cols):
    """kk_cross_entropy_bwd_flat (ops/softmax.py _CE_BWD_FLAT: rows of one and of several blocks, the last one partly
    filled) writes kk_cross_entropy_bwd's bits, with per-row and single scales, a divisor, label smoothing and
    ignored rows, and in place."""
    rows = 37
    x = rand(rows, cols, dtype, scale=4)
    target = torch.randint(0, cols, (rows,), device="cuda")
    target[::5] = -100
    assert softmax_module._ce_bwd_flat(dtype, torch.float32, cols) is not None, "the flat grid takes these rows"
    narrower = cols // 2 if dtype == torch.float32 else 2048 * 8
    assert softmax_module._ce_bwd_flat(dtype, torch.float32, narrower) is None, "the resident kernel takes these"
    for smoothing in (0.0, 0.1):
        _, stats = _cross_entropy(x, target, -100, smoothing)
        for scale in (torch.rand(rows, device="cuda"), torch.rand((), device="cuda").to(dtype)):
            divisor = torch.tensor([3.0], device="cuda")
            flat = cross_entropy_backward(x, target, stats, scale, -100, smoothing, divisor)
            in_place = x.clone()
            softmax_module._ce_bwd_cuda(in_place, target, stats, scale, -100, smoothing, divisor, in_place)
            with monkeypatch.context() as m:
                m.setattr(softmax_module, "_CE_BWD_FLAT", {})
                softmax_module._ce_bwd_flat.cache_clear()
                resident = cross_entropy_backward(x, target, stats, scale, -100, smoothing, divisor)
            softmax_module._ce_bwd_flat.cache_clear()
            assert torch.equal(flat, resident) and torch.equal(in_place, resident)
            assert not flat[::5].any(), "ignored rows have a zero gradient"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("cols", [4096, 6000, 8192])
def test_softmax_held_rows_at_either_dram_bandwidth(dram_gbps_per_sm, dtype, cols):
    """The forward's held rows of 4096-8192 columns at an H100's DRAM bandwidth per SM (_HELD_LOW_GBPS: fewer packs per
    thread) and an H200's (_HELD), with masked positions, agree with the CPU."""
    shape = softmax_module._softmax_shape("kk_softmax_fwd", dtype, cols, 0, VECTOR)
    assert shape.kernel.name.endswith("512, true>") and shape.per_block == 1, shape.kernel.name
    warps = shape.kernel.occupancy(shape.block, shape.smem, 0) * shape.block // 32
    capped = dtype.itemsize == 2 and dram_gbps_per_sm < LOW_DRAM_GBPS_PER_SM  # _HELD_WARPS_LOW_GBPS
    assert (48 - shape.block // 32 < warps <= 48) if capped else shape.smem == 0, (warps, shape.smem)
    x = rand(300, cols, dtype, scale=4)
    x[0, : cols // 3] = float("-inf")
    y, yc = both(K.softmax, x)
    agree(y, yc, dtype)


def test_softmax_held_rows_need_a_block_per_row(launch_in_subprocess):
    """kk_softmax_fwd's held block rows take one row per block, with no grid-stride loop: one block per row agrees
    with torch, and a grid of fewer blocks than rows fails its launch instead of leaving rows unwritten."""
    expr = "kk_softmax_fwd<__nv_bfloat16, 3, 2, 512, true>"
    stdout, printed = launch_in_subprocess(f"""
        from kernelkit.ops._runtime import kernel
        k = kernel("softmax", "{expr}")
        x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        k.launch(8, 256, (x, y, 8, 4096))
        torch.cuda.synchronize()
        assert (y.float() - torch.softmax(x.float(), -1)).abs().max() < 1e-3
        print("ONE BLOCK PER ROW AGREES")
        k.launch(7, 256, (x, y, 8, 4096))
    """)
    lines = stdout.splitlines() + ["", ""]
    assert lines[0] == "ONE BLOCK PER ROW AGREES", printed
    assert lines[1].startswith(f"LAUNCH_ERROR kernel '{expr}' failed"), printed


SPLIT_WIDTHS = [8200, 24576, 40960, 65536, 98304, 131072]


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
def test_softmax_split_widths_cover_2_to_8_ctas():
    """The widths below take the split launches of every cluster size up to 8 but 7 (ops/softmax.py _SPLIT_FITS)."""
    ctas = {
        _softmax_shape(n, dtype, c, 0, VECTOR).ctas
        for n in ("kk_softmax_fwd", "kk_softmax_bwd")
        for dtype in (torch.bfloat16, torch.float32)
        for c in SPLIT_WIDTHS
    }
    assert {2, 3, 4, 5, 6, 8} <= ctas, sorted(ctas)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", SPLIT_WIDTHS)
def test_softmax_rows_split_over_a_cluster(dtype, cols):
    """Rows beyond one block's registers, split over clusters of 2 to 8 CTAs on sm_90+ (ops/softmax.py _SPLIT_FITS):
    more rows than resident clusters, so each cluster loops over rows and alternates its exchange slots.
    Row 0 is masked over its first third (whole CTA parts), row 1 entirely (NaN, as torch), row 2 holds a NaN
    in its last CTA part. Forward and backward agree with the CPU, and are bitwise the same across runs."""
    rows = 200
    x, g = rand(rows, cols, dtype, scale=4), rand(rows, cols, dtype)
    x[0, : cols // 3] = float("-inf")
    x[1] = float("-inf")
    x[2, -1] = float("nan")
    y, yc = both(K.softmax, x)
    agree(y, yc, dtype)
    assert y[1].isnan().all() and y[2].isnan().all() and not y[3:].isnan().any()
    g[:3] = 0  # the NaN rows' gradients are NaN: keep them out of the comparison's other rows
    y[:3] = 0
    gx, gxc = both(softmax_backward, g, y)
    agree(gx, gxc, dtype, 4)
    assert torch.equal(K.softmax(x)[3:], y[3:]) and torch.equal(softmax_backward(g, y), gx)


# Widths off the 16-byte path, on each launch of softmax's shifted rows: warp rows (fewer columns than one pack
# included), held block rows, rows split over a cluster (sm_90+), and float64's streamed rows.
SHIFTED_WIDTHS = [1, 7, 257, 1001, 4097, 9001, 50257, 131075]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", SHIFTED_WIDTHS)
def test_softmax_shifted_rows(dtype, cols):
    """Rows whose width is not a multiple of the 16-byte pack take the packs between their 16-byte boundaries and their
    head and tail elements one by one (kk::RowShift; row_path SHIFTED): every row starts elsewhere in its 16-byte unit.
    Row 0 is masked over its first third, row 1 entirely (NaN, as torch). Forward and backward agree with the CPU and
    are bitwise the same across runs; inputs off their 16-byte units take the scalar path and agree too (9001 columns
    once launched the scalar forward on blocks of 140 threads, which trapped)."""
    rows = 37
    x, g = rand(rows, cols, dtype, scale=4), rand(rows, cols, dtype)
    assert _runtime.row_path(cols, dtype, (x, x)) == SHIFTED
    for name in ("kk_softmax_fwd", "kk_softmax_bwd"):
        assert _softmax_shape(name, dtype, cols, 0, SHIFTED).shifted
    x[0, : cols // 3] = float("-inf")
    x[1] = float("-inf")
    y, yc = both(K.softmax, x)
    agree(y, yc, dtype)
    assert y[1].isnan().all() and not y[2:].isnan().any()
    y[1] = 0  # its gradient would be NaN
    gx, gxc = both(softmax_backward, g, y)
    agree(gx, gxc, dtype, 4)
    assert torch.equal(K.softmax(x)[2:], y[2:]) and torch.equal(softmax_backward(g, y), gx)
    odd = rand(rows, cols, dtype, offset=1, scale=4)  # y is 16-byte aligned: not congruent, so the scalar path
    assert _runtime.row_path(cols, dtype, (odd, y)) == SCALAR
    agree(K.softmax(odd), K.softmax(odd.cpu()), dtype)


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize(
    "name, dtype, cols, want, ctas, smem",
    [
        ("kk_rms_norm_fwd", torch.float32, 262144, "kk_rms_norm_fwd<float, false, 8, 2, true, 16>", 16, 64 * 1024),
        (
            "kk_add_rms_norm_fwd",
            torch.float32,
            262144,
            "kk_add_rms_norm_fwd<float, false, 8, 2, true, 16>",
            16,
            64 * 1024,
        ),
        ("kk_layer_norm_fwd", torch.float32, 262144, "kk_layer_norm_fwd<float, false, 8, 1, true, 16>", 16, 128 * 1024),
        ("kk_layer_norm_fwd", torch.float32, 139264, "kk_layer_norm_fwd<float, false, 8, 1, true, 9>", 9, 128 * 1024),
        ("kk_layer_norm_fwd", torch.float32, 131072, "kk_layer_norm_fwd<float, false, 4, 2, true, 16>", 16, 65536),
        ("kk_rms_norm_fwd", torch.bfloat16, 262144, "kk_rms_norm_fwd<__nv_bfloat16, false, 4, 2, true, 16>", 16, 32768),
        ("kk_layer_norm_fwd", torch.float16, 262144, "kk_layer_norm_fwd<__half, false, 4, 2, true, 16>", 16, 65536),
        ("kk_softmax_fwd", torch.float32, 262144, "kk_softmax_fwd<float, 2, 8, 512, true, true, 16>", 16, 0),
        ("kk_softmax_bwd", torch.float32, 131072, "kk_softmax_bwd<float, 4, 2, 512, true, true, 16>", 16, 0),
        ("kk_softmax_bwd", torch.float32, 262144, "kk_softmax_bwd<float, 8, 1, 512, true, true, 16>", 16, 0),
        ("kk_softmax_bwd", torch.bfloat16, 262144, "kk_softmax_bwd<__nv_bfloat16, 4, 2, 512, true, true, 16>", 16, 0),
        (
            "kk_layer_norm_bwd",
            torch.bfloat16,
            131072,
            "kk_layer_norm_bwd_bulk<__nv_bfloat16, 512, 1, 5, true, 2, 16>",
            16,
            2 * 5 * 2 * 16 * 512,
        ),
    ],
)
def test_widest_rows_split_over_16_ctas(name, dtype, cols, want, ctas, smem):
    """Rows up to 262144 columns stay split over a cluster: kernels on a compile-time geometry take clusters of 9 to
    16 CTAs (non-portable; _runtime.SPLIT_MAX_CTAS) where the GPU hosts them, float32 LayerNorm's and softmax
    backward's at their last fit (8 packs, one block per SM)."""
    family = "softmax" if name.startswith("kk_softmax") else "norms"
    if not kernel(family, want).max_active_clusters((512, 1), (1, ctas, 1), smem, 0):
        pytest.skip(f"this GPU hosts no cluster of {ctas} such CTAs")
    if family == "softmax":
        shape = _softmax_shape(name, dtype, cols, 0, VECTOR)
    elif name.endswith("_bwd"):
        shape = norms._backward_shape(name, dtype, cols, 0, VECTOR, False)[0]
    else:
        shape = norms._forward_shape(name, dtype, cols, 0, VECTOR)
    assert (shape.kernel.name, shape.ctas, shape.block, shape.smem) == (want, ctas, (512, 1), smem)


@pytest.mark.skipif(not torch.cuda.is_available() or not has_clusters(0), reason="clusters need sm_90+")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_widest_rows_over_many_clusters(dtype):
    """Rows of 262144 columns, more than resident clusters (each cluster loops over rows, alternating its
    exchange slots), on the widest split fits (clusters of 16 CTAs but for 16-bit add_rms_norm): the norm forwards
    and softmax forward and backward agree with the CPU and are bitwise the same across runs; so does the 16-bit
    LayerNorm backward's bulk split at 131072 columns (float32: column segments)."""
    rows, cols = 24, 262144
    x, r, g = (rand(rows, cols, dtype) for _ in range(3))
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    x[1] += 100  # a row far from zero mean
    # (each returning a tuple of outputs, its arguments, the tolerance's factor, and its factor on the far row: a
    # LayerNorm mean is off by about |mean| * eps in any implementation, and y by that over the spread, 1 here, as in
    # test_layer_norm_rows_far_from_zero_mean; float32 y differed by 6.4e-5 there in one run, against 4e-5 allowed)
    cases = [
        (lambda *a: norms._rms_norm(*a, 1e-6), (x, w), 2, 1),
        (lambda *a: norms._add_rms_norm(*a, 1e-6), (x, r, w), 2, 1),
        (lambda *a: norms._layer_norm(*a, 1e-5), (x, w, b), 2, 100),
        (lambda *a: (K.softmax(*a),), (x,), 2, 1),
        (lambda *a: (softmax_backward(*a),), (g, K.softmax(x)), 4, 1),
    ]
    near = torch.arange(rows) != 1
    for fn, args, factor, far in cases:
        out, outc = both(fn, *args)
        for o, oc in zip(out, outc):
            acc = dtype if o.dtype == dtype else torch.float32
            agree(o[near.to(o.device)], oc[near], acc, factor)
            agree(o[1], oc[1], acc, factor * far)
        assert all(torch.equal(a, c) for a, c in zip(fn(*args), out))
    backward_agrees_with_cpu("kk_layer_norm_bwd", dtype, rows, cols // 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [4096, 8192, 16392, 40960, 65536])
def test_norms_with_many_rows_per_chunk(dtype, cols):
    """Backward rows held by one block (4096, 8192) or split over clusters of 3, 5 and 8 CTAs on sm_90+, with
    more rows than resident blocks or clusters: each sums the weight (and bias) gradients of several rows in
    shared-memory slots or registers (ops/norms.py _BWD_SPLIT_FIT, _BWD_HELD_FIT), and the clusters alternate
    their exchange slots. The gradients agree with the CPU and are bitwise the same across runs. The forwards'
    split rows loop too (LayerNorm's reading the w and b packs its CTAs staged once in shared memory)."""
    rows = 600 if cols <= 8192 else 200
    x, r, g = (rand(rows, cols, dtype) for _ in range(3))
    w, b = rand(1, cols, dtype).view(cols), rand(1, cols, dtype).view(cols)
    for fn, args in ((norms._rms_norm, (x, w, 1e-6)), (norms._layer_norm, (x, w, b, 1e-5))):
        out, outc = both(fn, *args)
        agree(out[0], outc[0], dtype)
    _, rstd = norms._rms_norm(x, w, 1e-6)
    _, mean, lrstd = norms._layer_norm(x, w, b, 1e-5)
    cases = [
        (norms.rms_norm_backward, (g, x, w, rstd)),
        (norms.add_rms_norm_backward, (g, r, x, w, rstd)),
        (norms.layer_norm_backward, (g, x, w, mean, lrstd)),
    ]
    for fn, args in cases:
        out, outc = both(fn, *args)
        agree(out[0], outc[0], dtype, 8)
        for o, oc in zip(out[1:], outc[1:]):
            agree(o, oc, dtype, 4 * rows**0.5)
        assert all(torch.equal(a, b) for a, b in zip(fn(*args), out)), fn.__name__


def check_reduced(x, target, smoothing, dtype):
    """kernelkit::cross_entropy_reduced (mean and sum, in the logits' dtype and in float32) and the backward
    of such a loss: its gradient in the loss's dtype, divided by the forward's divisor."""
    acc = torch.float32 if dtype != torch.float64 else dtype
    for mean in (True, False):
        for out_dtype in (None, torch.float32):
            (loss, stats, div), (lossc, statsc, divc) = both(
                _cross_entropy_reduced, x, target, -100, smoothing, mean, out_dtype
            )
            assert loss.dtype == lossc.dtype == (out_dtype or dtype) and loss.shape == ()
            agree(loss, lossc, loss.dtype if loss.dtype != torch.float32 else acc, 4)
            assert div.item() == divc.item() == ((target != -100).sum().item() if mean else 1)
            agree(stats, statsc, acc, 4)
            g = torch.rand((), device="cuda").to(loss.dtype)
            grad, gradc = both(cross_entropy_backward, x, target, stats, g, -100, smoothing, div)
            agree(grad, gradc, dtype, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [0, 1, 9, 70001])
def test_cross_entropy_reduced_over_many_blocks(dtype, rows):
    """The forward's per-block partials and their reduction, from no rows (mean NaN, sum 0) to many rows
    per block of a one-wave grid; bitwise the same across two runs."""
    x = rand(rows, 33, dtype, scale=4)
    target = torch.randint(0, 33, (rows,), device="cuda")
    target[::7] = -100
    check_reduced(x, target, 0.1, dtype)
    first, again = (_cross_entropy_reduced(x, target, -100, 0.1, True, None)[0] for _ in range(2))
    # No row counted (no rows, or the one row ignored) gives NaN, as torch's mean does.
    assert torch.equal(first, again) or (first.isnan() and again.isnan() and (target == -100).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [0.05, 20.0])
@pytest.mark.parametrize("rows", [9, 70001, 2**20 + 7])
def test_cross_entropy_reduced_fixed_point_error(dtype, scale, rows):
    """The loss kernel adds its blocks' float32 partials in fixed point, units of 2^-frac_bits (kk_sm::loss_frac_bits:
    the finest that hold `most` rows, the most a block of nw warps takes, at a mean loss of 64). Against the float64
    sum of the same kernels' per-row losses (reduction none), the float64 mean errs by at most the blocks' float32
    sums (a row per term, at most `most` terms each) and the fixed point's rounding, (rows + nw grid) * 2^-36 in all.
    Row losses near log(64) (scale 0.05) and near 50 (scale 20, short of the 64 where a block would spill), over few
    and many rows per block."""
    cols = 64
    x = rand(rows, cols, dtype, scale=scale)
    target = torch.randint(0, cols, (rows,), device="cuda")
    target[::5] = -100
    per_row = _cross_entropy(x, target, -100, 0.0)[0].double()
    loss, _, div = _cross_entropy_reduced(x, target, -100, 0.0, True, torch.float64)
    count = (target != -100).sum().item()
    assert div.item() == count
    exact = per_row.sum().item() / count
    _, grid, block = _ce_grid(x, "kk_cross_entropy_loss", torch.float64)
    nw = block // 32
    most = nw * -(-rows // (nw * grid))
    bound = (rows + nw * grid) * 2.0**-36 / count + most * 2.0**-24 * exact
    assert abs(loss.item() - exact) <= bound, (loss.item(), exact, bound)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_cross_entropy_reduced_spilled_partials(dtype):
    """Blocks whose rows' losses reach the hundreds (logits of scale 2000 in rows 1000-1099), every float64 block, and
    blocks with a NaN row leave the fixed point: their partials go through spill slots, added in a fixed order. The loss
    agrees with the CPU's and is bitwise the same across runs; the last block leaves the slots empty (all ones) and
    the words zero, so that a launch after it, with nothing spilled, agrees as well."""
    rows, cols = 70001, 33
    x = rand(rows, cols, dtype, scale=4)
    x[1000:1100] *= 500
    target = torch.randint(0, cols, (rows,), device="cuda")
    target[::7] = -100
    check_reduced(x, target, 0.1, dtype)
    first, again = (_cross_entropy_reduced(x, target, -100, 0.1, True, None)[0] for _ in range(2))
    assert torch.equal(first, again)
    x[5, 3] = float("nan")
    assert _cross_entropy_reduced(x, target, -100, 0.0, True, None)[0].isnan()
    torch.cuda.synchronize()
    spill, words = scratch(x.get_device(), 1)
    assert (spill == -1).all() and (words == 0).all()
    calm = rand(rows, cols, dtype, scale=4)
    check_reduced(calm, target, 0.1, dtype)


# Each fit of the held cross-entropy (ops/softmax.py _HELD_CE_FITS, _HELD_CE_SPLIT_FITS): its narrowest and widest
# rows, widths that are not a multiple of its packs, rows split over 2, 3, 4 and 16 CTAs, and shifted rows (widths off
# the 16-byte path, held and split: GPT-2's 50257).
HELD_CE_CASES = [
    *((torch.float32, c) for c in (512, 1024, 2048, 4097, 4104, 16384, 16392, 32768, 49152, 50257, 65536)),
    *((torch.bfloat16, c) for c in (2048, 4096, 4097, 4104, 32768, 40000, 50257, 65536, 65544, 131072, 524288)),
    *((torch.float16, c) for c in (4104, 9003, 65536)),
]


def held_shape(dtype, cols):
    return _held_ce_shape(dtype, cols, torch.cuda.current_device())


def test_held_cross_entropy_cases_cover_every_fit():
    shapes = [held_shape(dtype, cols) for dtype, cols in HELD_CE_CASES]
    fits = [(d, p, m) for d in (torch.float32, torch.bfloat16) for p, m, _ in _HELD_CE_FITS[d.itemsize]]
    assert {s.kernel.name for s in shapes if s.ctas == 1} >= {
        f"kk_cross_entropy_held<{CTYPE[d]}, {p}, {m}>" for d, p, m in fits
    }
    assert {s.ctas for s in shapes} >= {1, 2, 3, 4, 16}
    assert held_shape(torch.float32, 262148) is None and held_shape(torch.bfloat16, 4100).shifted
    assert held_shape(torch.bfloat16, 1024) is None  # narrower rows keep the kernels apart


def held_case(dtype, cols, rows=70, scale=4.0, offset=0):
    x = rand(rows, cols, dtype, offset, scale=scale).requires_grad_()
    target = torch.randint(0, cols, (rows,), device="cuda")
    target[::7] = -100
    return x, target


@pytest.mark.parametrize("dtype, cols", HELD_CE_CASES)
@pytest.mark.parametrize("reduce", ["mean", "sum", "divisor"])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_cross_entropy_gradient_written_in_the_forward(dtype, cols, reduce, out_dtype):
    """An eager call whose logits need a gradient writes it in the loss's forward (kk_cross_entropy_held) and the
    backward returns it: bitwise the gradient kk_cross_entropy_bwd writes from the same stats and divisor, for a loss
    gradient of 1 (kept) and of 0.37 (rewritten); a second backward computes it afresh and leaves the first alone. The
    loss, stats and gradient agree with the CPU's. "divisor": a mean over a given count (an int64 tensor on the device,
    as Hugging Face's num_items_in_batch), which the held kernel divides by with no count kernel before it."""
    x, target = held_case(dtype, cols)
    mean = reduce != "sum"
    by = torch.tensor(1234, device="cuda") if reduce == "divisor" else None
    want_div = 1234 if by is not None else (target != -100).sum().item() if mean else 1
    for scale in (None, 0.37):
        loss, stats, div = _cross_entropy_reduced(x, target, -100, 0.0, mean, out_dtype, by)
        assert loss.grad_fn.held_grad is not None  # the forward wrote the gradient
        byc = None if by is None else by.cpu()
        (lossc, statsc, divc) = _cross_entropy_reduced(x.detach().cpu(), target.cpu(), -100, 0.0, mean, out_dtype, byc)
        acc = torch.float32
        agree(loss, lossc, loss.dtype if loss.dtype != torch.float32 else acc, 4)
        agree(stats, statsc, acc, 4)
        assert div.item() == divc.item() == want_div
        g = torch.ones((), device="cuda", dtype=loss.dtype) if scale is None else torch.tensor(scale).to(loss)
        (grad,) = torch.autograd.grad(loss, x, g, retain_graph=True)
        want = cross_entropy_backward(x.detach(), target, stats, g, -100, 0.0, div)
        assert torch.equal(grad, want)
        agree(grad, cross_entropy_backward(x.detach().cpu(), target.cpu(), statsc, g.cpu(), -100, 0.0, divc), dtype, 2)
        kept = grad.clone()
        (again,) = torch.autograd.grad(loss, x, g)
        assert torch.equal(again, want) and torch.equal(grad, kept) and again.data_ptr() != grad.data_ptr()
    held = held_loss_scratch(x.get_device(), 1, 1)
    torch.cuda.synchronize()
    assert held.count.item() == 0 and held.ticket.item() == 0  # set back to zero for the next call


@pytest.mark.parametrize("dtype, cols", [(torch.bfloat16, 4096), (torch.float16, 8200), (torch.bfloat16, 16384)])
def test_held_cross_entropy_at_either_dram_bandwidth(dram_gbps_per_sm, dtype, cols):
    """The held loss's 16-bit rows at an H100's fits (_HELD_CE_FITS_LOW_GBPS: 4 packs, blocks of 128-512 threads, two
    block reductions) and an H200's (8 packs, 64-256 threads, (max, sum) pairs below 128): the loss and stats agree
    with the CPU's, and the gradient written in the forward is kk_cross_entropy_bwd's bitwise."""
    x, target = held_case(dtype, cols)
    x.data[0, : cols // 3] = float("-inf")  # masked positions
    loss, stats, div = _cross_entropy_reduced(x, target, -100, 0.0, True, None, None)
    assert loss.grad_fn.held_grad is not None
    lossc, statsc, divc = _cross_entropy_reduced(x.detach().cpu(), target.cpu(), -100, 0.0, True, None, None)
    agree(loss, lossc, torch.float32, 4)
    agree(stats, statsc, torch.float32, 4)
    (grad,) = torch.autograd.grad(loss, x)
    g = torch.ones((), device="cuda", dtype=loss.dtype)
    assert torch.equal(grad, cross_entropy_backward(x.detach(), target, stats, g, -100, 0.0, div))


@pytest.mark.parametrize("kind", [torch.float32, torch.float64, torch.int32, torch.int64])
@pytest.mark.parametrize("dtype, cols", [(torch.bfloat16, 4096), (torch.bfloat16, 1024), (torch.float32, 65536)])
def test_cross_entropy_divisor_of_each_dtype(kind, dtype, cols):
    """The held loss (4096 and 65536 columns, the latter split over a cluster) and the reduced one (1024 bf16 columns
    keep the kernels apart) read a given divisor in each dtype the kernels take: the loss is the float64 sum divided
    by it, the divisor output holds it, and the gradient is bitwise kk_cross_entropy_bwd's with that divisor."""
    x, target = held_case(dtype, cols)
    by = torch.tensor(37.5 if kind.is_floating_point else 37, dtype=kind, device="cuda")
    loss, stats, div = _cross_entropy_reduced(x, target, -100, 0.0, True, torch.float32, by)
    assert (getattr(loss.grad_fn, "held_grad", None) is not None) == (cols != 1024)
    assert div.item() == by.item()
    total = _cross_entropy_reduced(x.detach(), target, -100, 0.0, False, torch.float64)[0].item()
    assert abs(loss.item() - total / by.item()) <= 1e-6 * abs(loss.item())
    (grad,) = torch.autograd.grad(loss, x)
    assert torch.equal(grad, cross_entropy_backward(x.detach(), target, stats, torch.ones_like(loss), -100, 0.0, div))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_gradient_in_the_forward_edge_rows(dtype):
    """Every target ignored (mean NaN, sum 0, gradient 0), a target out of range (NaN in its row's loss), logits with
    -inf and huge entries, a misaligned or label-smoothed call (the kernels apart); bitwise the same across runs."""
    cols = 4096
    x, target = held_case(dtype, cols)
    ignored = torch.full_like(target, -100)
    for mean in (True, False):
        loss, _, _ = _cross_entropy_reduced(x, ignored, -100, 0.0, mean, None)
        assert loss.grad_fn.held_grad is not None
        (grad,) = torch.autograd.grad(loss, x)
        assert (loss.isnan() if mean else loss == 0) and not grad.any()
    bad = target.clone()
    bad[3] = cols
    loss, stats, div = _cross_entropy_reduced(x, bad, -100, 0.0, False, None)
    assert loss.isnan()
    (grad,) = torch.autograd.grad(loss, x)
    assert torch.equal(grad, cross_entropy_backward(x.detach(), bad, stats, torch.ones_like(loss), -100, 0.0, div))
    with torch.no_grad():
        x[0, :7] = float("-inf")
        x[1, 5] = 1e4
    got = [torch.autograd.grad(K.cross_entropy(x, target), x)[0] for _ in range(2)]
    losses = [K.cross_entropy(x, target) for _ in range(2)]
    assert torch.equal(got[0], got[1]) and torch.equal(losses[0], losses[1]) and not got[0].isnan().any()
    ref = torch.nn.functional.cross_entropy(x.detach().double().requires_grad_(), target)
    torch.testing.assert_close(losses[0].double(), ref, atol=TOL[dtype] * 4, rtol=TOL[dtype] * 4)
    for other in (held_case(dtype, cols, offset=1)[0], x):
        smoothing = 0.1 if other is x else 0.0
        loss, _, _ = _cross_entropy_reduced(other, target, -100, smoothing, True, None)
        assert getattr(loss.grad_fn, "held_grad", None) is None  # label smoothing, misaligned logits: kernels apart


def test_cross_entropy_loss_on_two_streams_at_once():
    """The loss kernel's blocks add their partials to words kept per stream, which its last block sets back to 0:
    launches alternating between two streams that run at once give one launch's loss."""
    x = torch.randn(262147, 1024, device="cuda", dtype=torch.bfloat16) * 4  # ~150 us a launch: the streams overlap
    target = torch.randint(0, 1024, (262147,), device="cuda")
    want = K.cross_entropy(x, target)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    losses = []
    for i in range(8):
        with torch.cuda.stream(side if i % 2 else torch.cuda.current_stream()):
            losses.append(K.cross_entropy(x, target))
    torch.cuda.synchronize()
    assert all(torch.equal(loss, want) for loss in losses), [loss.item() for loss in losses]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 255, 4097, 2**20 + 3])
@pytest.mark.parametrize("offset", [0, 1])
def test_swiglu(dtype, n, offset):
    gate, up, g = (rand(1, n, dtype, offset).view(n) for _ in range(3))
    out, outc = both(K.swiglu, gate, up)
    agree(out, outc, dtype)
    (gg, gu), (ggc, guc) = both(K.swiglu_backward, g, gate, up)
    agree(gg, ggc, dtype, 2)
    agree(gu, guc, dtype, 2)


def rope_inputs(b, hq, hk, s, d, dtype, layout, offset=0):
    """q (b, hq, s, d) and k (b, hk, s, d): "contiguous", or Hugging Face's transposed projections ("hf":
    (b, s, h, d) memory viewed as (b, h, s, d)); ``offset`` elements past an allocation (misaligned if odd)."""
    if layout == "hf":
        return tuple(rand(b * s, h * d, dtype, offset).view(b, s, h, d).transpose(1, 2) for h in (hq, hk))
    return tuple(rand(b * h * s, d, dtype, offset).view(b, h, s, d) for h in (hq, hk))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 2, 5, 128), (1, 2, 2, 7, 6), (2, 1, 1, 3, 2), (3, 4, 1, 33, 64)])
@pytest.mark.parametrize("per_batch_tables", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "hf"])
@pytest.mark.parametrize("offset", [0, 1])
def test_rope(dtype, shape, per_batch_tables, layout, offset):
    """q and k of (batch, q heads, k heads, seq, head_dim) in one launch, forward and backward."""
    b, hq, hk, s, d = shape
    q, k = rope_inputs(b, hq, hk, s, d, dtype, layout, offset)
    cos = rand(b if per_batch_tables else 1, s * d, dtype).view(-1, s, d)
    sin = rand(b if per_batch_tables else 1, s * d, dtype).view(-1, s, d)
    from kernelkit.ops.activations import _rope

    for backward in (False, True):
        (oq, ok), (oqc, okc) = both(_rope, q, k, cos, sin, backward)
        agree(oq, oqc, dtype, 2)
        agree(ok, okc, dtype, 2)
        assert oq.stride() == q.stride() and ok.stride() == k.stride()


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("heads_first", [False, True])
def test_rope_offsets_past_2_to_the_31(offset, heads_first):
    """q's second batch lies 2**31 elements past its first (a 4 GiB buffer, few elements): the kernel's 64-bit
    index path, vector (offset 0) and scalar (offset 1), with rows heads-inner (q's head stride below its seq
    stride, as Hugging Face's) and seq-inner. Bitwise equal to the 32-bit path on a contiguous copy of q."""
    from kernelkit.ops.activations import _rope

    b, hq, hk, s, d = 2, 3, 2, 5, 16
    base = torch.empty(2**31 + 2 * hq * s * d + offset, dtype=torch.float16, device="cuda")
    head, seq = (d, hq * d) if heads_first else (s * d, d)
    q = base[offset:].as_strided((b, hq, s, d), (2**31, head, seq, 1))
    q.copy_(torch.randn(b, hq, s, d, dtype=torch.float64))
    k = rope_inputs(b, hq, hk, s, d, torch.float16, "hf")[1]
    cos, sin = rand(b, s * d, torch.float16).view(b, s, d), rand(b, s * d, torch.float16).view(b, s, d)
    for backward in (False, True):
        oq, ok = _rope(q, k, cos, sin, backward)
        rq, rk = _rope(q.contiguous(), k, cos, sin, backward)
        assert torch.equal(oq, rq) and torch.equal(ok, rk)
    del base, q
    torch.cuda.empty_cache()


def test_backward_ops_reject_short_statistics():
    x = torch.randn(4, 64, device="cuda")
    w = torch.randn(64, device="cuda")
    with pytest.raises(ValueError, match="'rstd' must hold 4 float32 values"):
        norms.rms_norm_backward(x, x, w, torch.ones(3, device="cuda"))
    with pytest.raises(ValueError, match="'stats' must hold 8 float32 values \\(2 per row\\)"):
        cross_entropy_backward(
            x,
            torch.zeros(4, dtype=torch.long, device="cuda"),
            torch.ones(4, device="cuda"),
            torch.ones(4, device="cuda"),
            -100,
            0.0,
        )
