"""kernelkit's ops inside CUDA graphs: captured with torch.cuda.graph, and by torch.compile's reduce-overhead mode.

Every op's forward and backward are also captured by kernelkit.testing.check_op's "CUDA graph" check; these tests
cover what one op at a time does not: the loss's per-stream buffers, a whole training step, and a first call inside a
capture."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from kernelkit import ops as K
from kernelkit.ops import _runtime

pytestmark = pytest.mark.gpu


def _graphed(fn, *args, stream=None):
    """(graph, fn(*args) as captured) after torch's recipe: a warm-up on a side stream, then the capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = fn(*args)
    return graph, out


def _dirty_free_memory(nbytes=1 << 30):
    """Leave garbage in memory the driver will hand out next, so a buffer that is never zeroed shows."""
    junk = torch.full((nbytes // 4,), -7.0, device="cuda")
    del junk
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def test_loss_buffers_made_in_a_capture_are_zeroed_by_each_graph(monkeypatch):
    """The cross-entropy keeps zeroed counters per stream. Made during a capture, their zeroing is a node of that
    graph: a second graph captured on the same stream must make its own, or it reads counters that only the first
    graph's replays would have zeroed."""
    for cache in ("_tickets", "_scratch", "_held_scratch"):
        monkeypatch.setattr(_runtime, cache, {})
    torch.manual_seed(0)
    x = torch.randn(1000, 4000, device="cuda")
    t = torch.randint(0, 4000, (1000,), device="cuda")
    t[::7] = -100
    want = F.cross_entropy(x, t)
    leaf = x.clone().requires_grad_()
    want_grad = torch.autograd.grad(F.cross_entropy(leaf, t), leaf)[0]

    def loss(x):  # the reduced loss (no grad) and the held one (grad written in the forward)
        with torch.no_grad():
            reduced = K.cross_entropy(x, t)
        leaf = x.detach().requires_grad_()
        held = K.cross_entropy(leaf, t)
        return reduced, held.detach(), torch.autograd.grad(held, leaf)[0]

    stream = torch.cuda.Stream()
    _dirty_free_memory()
    first = _graphed(loss, x, stream=stream)  # kept alive, never replayed
    second = _graphed(loss, x, stream=stream)
    key = (0, stream.cuda_stream)
    assert key not in _runtime._scratch and key not in _runtime._held_scratch
    graph, (reduced, held, grad) = second
    for _ in range(2):  # only the second graph replays, twice: it must leave its counters as it found them
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(reduced, want)
        torch.testing.assert_close(held, want)
        torch.testing.assert_close(grad, want_grad)
    del first


def test_buffers_a_graph_took_outlive_a_larger_call_on_its_stream(monkeypatch):
    """torch.compile's cudagraph trees warm up and record on one stream, so a graph takes the loss's cached buffers of
    that stream. A later call there that needs larger ones must not free them: the graph would replay into memory
    handed to other tensors (its counters overwritten: a wrong loss; their values overwritten by its row losses)."""
    for cache in ("_tickets", "_scratch", "_held_scratch"):
        monkeypatch.setattr(_runtime, cache, {})
    torch.manual_seed(0)
    x = torch.randn(1000, 4096, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 4096, (1000,), device="cuda")
    leaf = x.float().requires_grad_()
    want = F.cross_entropy(leaf, t)
    (want_grad,) = torch.autograd.grad(want, leaf)

    def loss(x):
        leaf = x.detach().requires_grad_()
        held = K.cross_entropy(leaf, t)
        return held.detach(), torch.autograd.grad(held, leaf)[0]

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        loss(x)  # the warm-up caches this stream's buffers
    key = (0, stream.cuda_stream)
    taken = _runtime._held_scratch[key]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        held, grad = loss(x)
    assert _runtime._held_scratch[key] is taken  # the graph holds the cached set
    room, words = taken.row_loss.numel(), taken.count.untyped_storage().nbytes() // 8
    del taken  # the test keeps no reference to it
    with torch.cuda.stream(stream):
        rows = 2 * room + 1  # more rows than the set has room for: a new, larger set
        big = torch.randn(rows, 2048, device="cuda", dtype=torch.bfloat16).requires_grad_()
        torch.autograd.grad(K.cross_entropy(big, torch.randint(0, 2048, (rows,), device="cuda")), big)
        assert _runtime._held_scratch[key].row_loss.numel() > room
        del big
        # Memory of the replaced set's size, on its stream, handed out again and filled.
        junk = [torch.full((words,), -7, dtype=torch.int64, device="cuda") for _ in range(32)]
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):
        held.zero_()
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(held.float(), want, rtol=1e-2, atol=0)
        torch.testing.assert_close(grad.float(), want_grad, rtol=2e-2, atol=1e-6)
    assert all((j == -7).all() for j in junk)


def test_divisor_is_read_at_each_replay():
    """A mean over a given count (num_items_in_batch) reads the count on the device: a graph replayed after the count
    tensor changes gives the new loss and gradient, for the held loss (gradient in the forward) and the reduced one."""
    torch.manual_seed(0)
    x = torch.randn(1000, 4096, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 4096, (1000,), device="cuda")
    items = torch.tensor(900, device="cuda")

    def loss(x):
        with torch.no_grad():
            reduced = K.cross_entropy(x, t, divisor=items)
        leaf = x.detach().requires_grad_()
        held = K.cross_entropy(leaf, t, divisor=items)
        return reduced, held.detach(), torch.autograd.grad(held, leaf)[0]

    graph, outs = _graphed(loss, x)
    for n in (2000, 35):
        items.fill_(n)
        graph.replay()
        torch.cuda.synchronize()
        leaf = x.float().requires_grad_()
        want = F.cross_entropy(leaf, t, reduction="sum") / n
        (want_grad,) = torch.autograd.grad(want, leaf)
        for got in outs[:2]:
            torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-2, atol=0)
        torch.testing.assert_close(outs[2].float(), want_grad, rtol=2e-2, atol=1e-6)


def _step(x, residual, w_norm, w_gate, w_up, q, k, cos, sin, target):
    """A decoder-shaped step through kernelkit's ops (no matmul: cuBLAS may pick another algorithm in a capture):
    the loss and every leaf's gradient."""
    h, new_residual = K.add_rms_norm(x, residual, w_norm)
    a = K.swiglu(h * w_gate, h * w_up)
    qr, kr = K.rope(q, k, cos, sin)
    logits = a + new_residual * 1e-3 + (qr.sum() + kr.sum()) * 1e-3
    loss = K.cross_entropy(logits.float(), target)
    leaves = [t for t in (x, residual, w_norm, w_gate, w_up, q, k) if t.requires_grad]
    return [loss, *torch.autograd.grad(loss, leaves)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_training_step_replays_on_new_data_as_eager_computes_it(dtype):
    """Forward and backward captured once, replayed on new inputs copied in: the loss and gradients equal an eager
    step's on those inputs, bit for bit (the same kernels on the same shapes)."""
    gen = torch.Generator(device="cuda").manual_seed(1)

    def inputs():
        f = dict(device="cuda", dtype=dtype, generator=gen)
        leaf = lambda *s: torch.randn(*s, **f).requires_grad_()  # noqa: E731
        return (
            leaf(256, 512),
            leaf(256, 512),
            leaf(512),
            leaf(512),
            leaf(512),
            leaf(2, 4, 64, 32),
            leaf(2, 2, 64, 32),
            torch.randn(2, 64, 32, **f),
            torch.randn(2, 64, 32, **f),
            torch.randint(0, 512, (256,), device="cuda", generator=gen),
        )

    static = inputs()
    graph, captured = _graphed(_step, *static)
    for _ in range(3):
        fresh = inputs()
        want = _step(*fresh)
        with torch.no_grad():
            for s, f in zip(static, fresh):
                s.copy_(f)
        graph.replay()
        for got, exp in zip(captured, want):
            assert torch.equal(got, exp)


def test_reduce_overhead_compile_runs_kernelkit_ops_in_cuda_graphs():
    """torch.compile(mode="reduce-overhead") captures kernelkit's ops with inductor's code (no cudagraph skips) and
    matches eager on every new input."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    w = torch.randn(1024, device="cuda", requires_grad=True)

    def model(x, target):
        h = K.rms_norm(torch.relu(x), w)
        gate, up = h.chunk(2, dim=-1)
        return K.cross_entropy(K.swiglu(gate, up), target)

    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    gen = torch.Generator(device="cuda").manual_seed(2)
    for _ in range(4):  # the first calls warm up, the next record and replay the graph
        x = torch.randn(512, 1024, device="cuda", generator=gen, requires_grad=True)
        t = torch.randint(0, 512, (512,), device="cuda", generator=gen)
        loss = compiled(x, t)
        gx, gw = torch.autograd.grad(loss, (x, w))
        x2 = x.detach().requires_grad_()
        want = model(x2, t)
        wx, ww = torch.autograd.grad(want, (x2, w))
        torch.testing.assert_close(loss, want)
        torch.testing.assert_close(gx, wx)
        torch.testing.assert_close(gw, ww)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_a_first_call_inside_a_capture_compiles_loads_and_replays(tmp_path):
    """No warm-up: the kernel is compiled by NVRTC and its module loaded while the stream captures (a fresh process
    with an empty compile cache), and the replay computes the op."""
    code = textwrap.dedent(
        """
        import torch, kernelkit
        x = torch.randn(64, 1000, device="cuda")
        w = torch.randn(1000, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = kernelkit.ops.rms_norm(x, w)
        x.copy_(torch.randn(64, 1000, device="cuda"))
        g.replay()
        want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        print("MAX_ERR", float((y - want).abs().max()))
        """
    )
    env = {**os.environ, "KERNELKIT_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "MAX_ERR" in out.stdout, out.stdout + out.stderr
    assert float(out.stdout.split("MAX_ERR")[1]) < 1e-4, out.stdout
