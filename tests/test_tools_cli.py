"""The command line and the benchmark harness, on whatever device this machine has."""

import gc
import json

import torch
from typer.testing import CliRunner

from kernelkit import bench
from kernelkit.cli import app

runner = CliRunner()


def test_bench_harness_times_a_user_op():
    case = bench.Case(
        "double",
        make=lambda size, dtype, dev: (torch.randn(*size, dtype=dtype, device=dev),),
        impls={"mine": lambda x: x * 2, "torch": lambda x: x + x},
        bytes=lambda x: 2 * x.nbytes,
    )
    results = bench.run([case], sizes=[(256, 256)], dtypes=[torch.float32], compile=False, reps=5, progress=False)
    assert {r.impl for r in results} == {"mine", "torch"}
    for r in results:
        assert r.error is None and r.time_us > 0 and r.host_us > 0 and r.gbps > 0
        assert r.size == "256x256" and r.dtype == "float32"
    assert next(r for r in results if r.impl == "torch").speedup_vs_torch == 1.0


def test_bench_reports_a_failing_implementation_without_stopping():
    def broken(x):
        raise RuntimeError("boom")

    case = bench.Case(
        "bad",
        make=lambda s, d, dev: (torch.ones(*s, dtype=d, device=dev),),
        impls={"broken": broken, "torch": torch.neg},
    )
    results = bench.run([case], sizes=[(8,)], dtypes=[torch.float32], compile=False, reps=3, progress=False)
    bad = next(r for r in results if r.impl == "broken")
    assert bad.error == "RuntimeError: boom"
    assert next(r for r in results if r.impl == "torch").error is None


def test_bench_times_the_implementations_in_interleaved_rounds_with_the_gc_off():
    order, gc_on, late_turns = [], [], []

    def impl(tag):
        def f(x):
            new_turn = not order or order[-1] != tag
            order.append(tag)
            gc_on.append(gc.isenabled())
            if tag == "late" and new_turn and not gc.isenabled():
                late_turns.append(len(order))
                if len(late_turns) == 2:  # fails in its second round of timing (on CPU and GPU alike)
                    raise RuntimeError("late failure")
            return x

        return f

    case = bench.Case(
        "turns",
        make=lambda s, d, dev: (torch.ones(*s, dtype=d, device=dev),),
        impls={"a": impl("a"), "b": impl("b"), "late": impl("late")},
    )
    results = bench.run([case], sizes=[(8,)], dtypes=[torch.float32], compile=False, reps=10, progress=False)
    # Timing is the last phase (on a GPU, peak-memory calls come first, with the collector on).
    start = gc_on.index(False)
    assert not any(gc_on[start:]), "the garbage collector ran during timing"
    timed = order[start:]
    turns = [t for i, t in enumerate(timed) if i == 0 or timed[i - 1] != t]
    # Each round in bench._balanced_orders' next order; "late" fails in round 1 and is dropped. Back-to-back turns of
    # one implementation (the end of a round and the start of the next) read as one.
    names, want = ["a", "b", "late"], []
    for r in range(bench.ROUNDS):
        orders = bench._balanced_orders(len(names))
        for i in orders[r % len(orders)]:
            if not want or want[-1] != names[i]:
                want.append(names[i])
        if r == 1:
            names.remove("late")
    assert want[:6] == ["a", "b", "late", "b", "late", "a"] and turns == want, turns
    by = {r.impl: r for r in results}
    assert by["late"].error == "RuntimeError: late failure" and by["a"].error is None and by["b"].error is None
    assert gc.isenabled()


def test_bench_cli_writes_json_and_csv(tmp_path):
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    res = runner.invoke(
        app,
        [
            "bench",
            "muladd",
            "--sizes",
            "64x128",
            "--dtype",
            "float32",
            "--reps",
            "3",
            "--no-compile",
            "--json",
            str(out),
            "--csv",
            str(csv),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["environment"]["kernelkit"] and data["environment"]["torch"] == torch.__version__
    impls = {r["impl"] for r in data["results"]}
    assert impls >= {"kernelkit", "torch"}
    assert csv.read_text().splitlines()[0].startswith("case,impl,size")


def test_bench_cli_rejects_unknown_ops_and_sizes():
    assert runner.invoke(app, ["bench", "nope"]).exit_code != 0
    res = runner.invoke(app, ["bench", "add", "--sizes", "12xabc"])
    assert res.exit_code != 0 and "expected sizes like" in res.output


def test_demo_runs_and_passes():
    res = runner.invoke(app, ["demo"])
    assert res.exit_code == 0, res.output
    assert "demo passed" in res.output and "3. checks" in res.output


def test_cache_command():
    res = runner.invoke(app, ["cache"])
    assert res.exit_code == 0 and "entries" in res.output
