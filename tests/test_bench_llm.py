"""The benchmark cases for issue 5's LLM training ops (forward and backward), on whatever device this machine has."""

import collections
import json
import math

import pytest
import torch
from typer.testing import CliRunner

from kernelkit import bench
from kernelkit.cli import app

OPS = ["rms_norm", "add_rms_norm", "layer_norm", "softmax", "cross_entropy", "swiglu", "rope"]
TINY = (64, 256)


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def test_llm_group_has_a_forward_and_a_backward_case_per_op():
    names = [c.name for c in bench.op_cases(["llm"])]
    assert names == list(bench.GROUPS["llm"])
    for op in OPS:
        assert op in names and f"{op}_backward" in names
    assert "cross_entropy_fwd_bwd" in names
    # The default stays issue 3's ops; names and groups mix.
    assert [c.name for c in bench.op_cases()] == list(bench.GROUPS["core"])
    assert [c.name for c in bench.op_cases(["rms_norm_backward", "add"])] == ["add", "rms_norm_backward"]
    with pytest.raises(ValueError, match="no such ops"):
        bench.op_cases(["rms_norm", "nope"])


def test_llm_cases_time_kernelkit_and_torch_forward_and_backward():
    cases = bench.op_cases(["llm"])
    results = bench.run(cases, sizes=[TINY], dtypes=[torch.float32], compile=False, reps=3, progress=False)
    by_case = {}
    for r in results:
        by_case.setdefault(r.case, {})[r.impl] = r
    assert set(by_case) == set(bench.GROUPS["llm"])
    for case, impls in by_case.items():
        for impl in ("kernelkit", "torch"):
            r = impls[impl]
            assert r.error is None, (case, impl, r.error)
            assert math.isfinite(r.time_us) and r.time_us > 0 and r.host_us > 0
            assert r.gbps > 0 and r.size == "64x256" and r.dtype == "float32"
            assert r.speedup_vs_torch > 0 and r.speedup_vs_compile is None  # compile=False
            if r.device == "cuda":  # neither impl waits on the GPU inside a call, so both get a queued time
                assert r.gpu_us > 0 and r.gpu_pct_copy_bw > 0, (case, impl)
            else:
                assert r.gpu_us is None and r.gpu_pct_copy_bw is None  # no queued GPU time on the CPU
        assert impls["torch"].speedup_vs_torch == 1.0


@pytest.mark.parametrize("name", [n for n in bench.GROUPS["llm"] if n.endswith(("_backward", "_fwd_bwd"))])
def test_backward_cases_compute_the_same_gradients_for_every_impl(name):
    (case,) = bench.op_cases([name])
    assert case.prepare is not None
    inputs = case.make(TINY, torch.float32, "cpu")
    before = [a.clone() for a in inputs]
    grads = {}
    for impl, fn in case.impls.items():
        if impl == "liger":  # Triton kernels: GPU only (the GPU test below compares them)
            continue
        torch.manual_seed(0)  # the same random output gradients for every implementation
        call = case.prepare(fn, inputs)
        first, second = call(), call()  # timed repeatedly: the graph must survive its backward
        for a, b in zip(first, second):
            torch.testing.assert_close(a, b)
        grads[impl] = first
    ref = grads["torch"]
    assert len(ref) >= 1 and all(g is not None for g in ref)
    for impl, gs in grads.items():
        assert len(gs) == len(ref)
        for g, r in zip(gs, ref):
            torch.testing.assert_close(g.float(), r.float(), rtol=1e-4, atol=1e-4, msg=f"{name} {impl}")
    # The case's own input set is neither changed nor given .grad (leaves are fresh clones).
    for a, b in zip(inputs, before):
        assert torch.equal(a, b) and a.grad is None


def test_bytes_count_the_minimum_traffic():
    cases = {c.name: c for c in bench.op_cases(["llm"])}
    rows, cols = TINY
    t = rows * cols * 4  # one float32 row tensor
    w = cols * 4

    def nbytes(name):
        case = cases[name]
        return case.bytes(*case.make(TINY, torch.float32, "cpu"))

    assert nbytes("rms_norm") == 2 * t + w and nbytes("rms_norm_backward") == 3 * t + 2 * w
    assert nbytes("add_rms_norm") == 4 * t + w and nbytes("add_rms_norm_backward") == 4 * t + 2 * w
    assert nbytes("softmax") == 2 * t and nbytes("softmax_backward") == 3 * t
    assert nbytes("swiglu") == 3 * t and nbytes("swiglu_backward") == 5 * t
    assert nbytes("cross_entropy") == t + rows * 8 and nbytes("cross_entropy_backward") == 2 * t + rows * 8
    assert nbytes("cross_entropy_fwd_bwd") == nbytes("cross_entropy_items_fwd_bwd") == nbytes("cross_entropy_backward")
    table = rows * 128 * 4  # cos and sin: (batch, seq, head_dim)
    assert nbytes("rope") == nbytes("rope_backward") == 4 * t + 2 * table


def test_rope_reads_tokens_by_hidden_as_hugging_face_q_and_k():
    (case,) = bench.op_cases(["rope"])
    q, k, cos, sin = case.make((8192, 256), torch.float32, "cpu")
    assert q.shape == k.shape == (2, 2, 4096, 128)  # batch 2 of seq 4096, 256 / 128 heads
    assert q.transpose(1, 2).is_contiguous() and not q.is_contiguous()  # a (batch, seq, heads, dim) projection
    assert cos.shape == sin.shape == (2, 4096, 128)
    torch.testing.assert_close(cos[:, :, :64], cos[:, :, 64:])  # Hugging Face's duplicated halves
    y = _as_tuple(case.impls["kernelkit"](q, k, cos, sin))
    ref = _as_tuple(case.impls["torch"](q, k, cos, sin))
    for a, b in zip(y, ref):
        torch.testing.assert_close(a, b)
        assert a.stride() == b.stride() == q.stride()  # read and written in that layout, as torch does


def test_speedups_against_compile_and_liger_are_filled_and_rendered(capsys, monkeypatch):
    # Stand-ins named like the real columns, so the CPU run exercises the comparison and the table.
    case = bench.Case(
        "double",
        make=lambda size, dtype, dev: (torch.randn(*size, dtype=dtype, device=dev),),
        impls={"kernelkit": lambda x: x * 2, "torch": lambda x: x + x, "torch.compile": torch.neg, "liger": torch.abs},
        bytes=lambda x: 2 * x.nbytes,
    )
    results = bench.run([case], sizes=[(128, 128)], dtypes=[torch.float32], compile=False, reps=3, progress=False)
    times = {r.impl: r.time_us for r in results}
    for r in results:
        assert r.speedup_vs_compile == pytest.approx(times["torch.compile"] / r.time_us)
        assert r.speedup_vs_liger == pytest.approx(times["liger"] / r.time_us)
    monkeypatch.setenv("COLUMNS", "200")  # room for every column's header
    bench.render(results, bench.environment(), copy_gbps=None)
    out = capsys.readouterr().out
    assert "vs compile" in out and "vs liger" in out and "TFLOP/s" not in out


def test_a_user_case_can_time_its_backward_with_the_prepare_hook():
    case = bench.Case(
        "square_backward",
        make=lambda size, dtype, dev: (torch.randn(*size, dtype=dtype, device=dev),),
        impls={"torch": lambda x: x * x},
        bytes=lambda x: 3 * x.nbytes,
        prepare=bench.backward((0,)),
    )
    (r,) = bench.run([case], sizes=[(256, 256)], dtypes=[torch.float32], compile=False, reps=3, progress=False)
    assert r.error is None and r.time_us > 0
    x = torch.randn(4, 4)
    torch.manual_seed(1)
    (g,) = bench.backward((0,))(lambda v: v * v, (x,))()
    torch.manual_seed(1)
    assert torch.allclose(g, 2 * x * torch.randn(4, 4))


@pytest.mark.parametrize("n", range(1, 8))
def test_round_orders_balance_places_and_predecessors(n):
    """Over bench's round orders each implementation takes every place, and follows every other one, equally often."""
    orders = bench._balanced_orders(n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    places = collections.Counter((i, p) for o in orders for p, i in enumerate(o))
    follows = collections.Counter(pair for o in orders for pair in zip(o, o[1:]))
    assert len(places) == n * n and len(set(places.values())) == 1
    assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1


def test_bench_cli_runs_the_llm_group(tmp_path):
    out = tmp_path / "llm.json"
    res = CliRunner().invoke(
        app,
        ["bench", "llm", "--sizes", "32x256", "--dtype", "float32", "--reps", "3", "--no-compile", "--json", str(out)],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["results"]
    assert {r["case"] for r in rows} == set(bench.GROUPS["llm"])
    assert all(r["error"] is None for r in rows if r["impl"] in ("kernelkit", "torch"))
    assert {"speedup_vs_compile", "speedup_vs_liger", "pct_copy_bw", "gbps"} <= set(rows[0])
    res = CliRunner().invoke(app, ["bench", "llm", "bogus"])
    assert res.exit_code != 0 and "no such ops" in res.output


@pytest.mark.gpu
def test_llm_cases_agree_across_implementations_on_the_gpu():
    """kernelkit, torch and (when installed) Liger give the same gradients; torch.compile is timed too."""
    for case in bench.op_cases(["llm"]):
        if case.prepare is None:
            continue
        inputs = case.make((512, 1024), torch.float32, "cuda")
        grads = {}
        for impl, fn in case.impls.items():
            torch.manual_seed(0)
            grads[impl] = case.prepare(fn, inputs)()
        for impl, gs in grads.items():
            for g, r in zip(gs, grads["torch"]):
                torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-3, msg=f"{case.name} {impl}")
    cases = bench.op_cases(["rms_norm", "rms_norm_backward"])
    results = bench.run(cases, sizes=[(4096, 1024)], dtypes=[torch.bfloat16], reps=5, progress=False)
    for r in results:
        assert r.error is None, (r.case, r.impl, r.error)
        assert r.pct_copy_bw > 0 and r.speedup_vs_compile > 0
    assert {r.impl for r in results} >= {"kernelkit", "torch", "torch.compile"}


@pytest.mark.gpu
def test_queued_timing_measures_the_gpu_work_alone():
    """A call whose host work (1 ms) outlasts its kernel is timed at the host's pace in time_us, and at the
    kernel's in gpu_us; a call that waits on the GPU has no gpu_us, and the hold's timeout keeps it from hanging."""
    import time

    def host_bound(x):
        time.sleep(1e-3)
        return x.add_(1)

    def syncs(x):
        return x.add_(1).sum().item()

    case = bench.Case(
        "hold",
        make=lambda size, dtype, dev: (torch.randn(size, dtype=dtype, device=dev),),
        impls={"host_bound": host_bound, "syncs": syncs},
        bytes=lambda x: 2 * x.nbytes,
    )
    start = time.perf_counter()
    timed = bench.run([case], [(1 << 20,)], [torch.float32], compile=False, reps=20, progress=False)
    results = {r.impl: r for r in timed}
    assert time.perf_counter() - start < 30
    slow, sync = results["host_bound"], results["syncs"]
    assert slow.error is None and sync.error is None
    assert slow.time_us > 900, slow  # each call's events span the host's sleep
    assert 0 < slow.gpu_us < 0.1 * slow.time_us, slow  # 8 MB read and written: ~5 µs on an H100
    assert slow.gpu_pct_copy_bw > 10 * slow.pct_copy_bw
    assert sync.gpu_us is None and sync.gpu_pct_copy_bw is None and sync.time_us > 0


@pytest.mark.gpu
def test_stream_hold_releases_on_the_flag_and_gives_up_at_its_timeout():
    import time

    hold = bench._StreamHold()
    x = torch.zeros(4, device="cuda")
    # Loaded before the hold: CUDA loads kernels lazily, and a load may wait for the work queued on the GPU.
    x.add_(1)
    torch.cuda.synchronize()
    hold.hold()
    x.add_(1)
    added = torch.cuda.Event()
    added.record()
    time.sleep(0.02)
    assert not added.query()  # the add waits behind the hold
    hold.release()
    torch.cuda.synchronize()
    assert not hold.timed_out() and x.tolist() == [2.0] * 4
    hold.TIMEOUT_MS = 20.0
    start = time.perf_counter()
    hold.hold()
    x.add_(1)
    torch.cuda.synchronize()  # never released: the hold ends at its timeout
    assert hold.timed_out() and x.tolist() == [3.0] * 4
    assert time.perf_counter() - start < 5
