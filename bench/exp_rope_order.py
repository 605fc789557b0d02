"""Experiment: does rope lose to torch.compile (float32, 0.97-0.98x) because one launch interleaves q's and k's rows?

kernelkit.ops.rope numbers its rows (batch, seq, head) over q's and k's heads together, so each position's blocks
stream four tensors at once (q, k and both outputs). This times, in interleaved rounds on the `kernelkit bench`
inputs (Hugging Face's transposed layout):
  one    the shipped launch (q and k together);
  split  the same kernel launched twice, on q alone (no k heads), then on k alone;
  compile  torch.compile of the reference.

    python3 bench/exp_rope_order.py float32:32768x4096 float32:8192x65536 bfloat16:32768x4096

Verdict (h200-2026-11-23-s16/SUMMARY.md): two launches are slower (float32 4096: 527.9 against 519.7 us), so the
interleaving is not the gap to torch.compile (508.6). ncu shows Inductor's code as one kernel for q and k too.
"""

import argparse
import statistics

import torch

from kernelkit import bench
from kernelkit.ops import activations as act


def run_case(make, spec, rounds):
    dt, size = spec.split(":")
    rows, cols = map(int, size.split("x"))
    q, k, cos, sin = make((rows, cols), getattr(torch, dt), "cuda")
    oq, ok = torch.empty_like(q), torch.empty_like(k)
    ref = torch.compile(bench._rope_reference, dynamic=False)  # one static kernel per shape, as kernelkit bench

    def one():
        act._rope_cuda(q, k, cos, sin, False, oq, ok)

    def split():  # the op's own launch, given no k heads, then no q heads
        act._rope_cuda(q, k[:, :0], cos, sin, False, oq, ok[:, :0])
        act._rope_cuda(q[:, :0], k, cos, sin, False, oq[:, :0], ok)

    def comp():
        return ref(q, k, cos, sin)

    one()
    want = bench._rope_reference(q.double(), k.double(), cos.double(), sin.double())
    got1 = (oq.clone(), ok.clone())
    split()
    assert torch.equal(oq, got1[0]) and torch.equal(ok, got1[1]), "split launch differs"
    for g, w in zip(got1, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-2, atol=1e-2)
    comp()
    times = {n: [] for n in ("one", "split", "compile")}
    for _ in range(rounds):
        for n, f in (("one", one), ("split", split), ("compile", comp)):
            times[n].append(bench._gpu_median_ms([f], reps=20, warmup=3) * 1e3)
    med = {n: statistics.median(v) for n, v in times.items()}
    print(
        f"{spec:24s} one {med['one']:8.1f} us  split {med['split']:8.1f} us  compile {med['compile']:8.1f} us"
        f"  one/compile {med['compile'] / med['one']:.3f}x  split/compile {med['compile'] / med['split']:.3f}x",
        flush=True,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="DTYPE:ROWSxCOLS")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    make = next(c.make for c in bench._llm_cases() if c.name == "rope")
    for spec in a.cases:
        run_case(make, spec, a.rounds)


if __name__ == "__main__":
    main()
