"""Experiment: where a norm forward's time goes between the op and its kernel.

Session 17 measured layer_norm float32 32768x4096 at 259.3 us through `kernelkit.ops.layer_norm` and 254.1 us for
an experiment kernel with the same SASS shape and bitwise-equal outputs (bench/exp_looped_rows.py ln_modes). This
times, interleaved (kernelkit.bench._time_interleaved), for each case:

- op: the public function;
- raw: the op's own kernel and launch shape (ops/norms.py _forward_shape), outputs allocated once;
- raw+alloc: the same, outputs allocated per call as the op allocates them;
- torch.compile of the reference;
- for float32 LayerNorm: bench/exp_looped_rows.py's ln_modes at the same fit, writing the same output buffer as
  raw, and the op's kernel (kk_layer_norm_fwd_wide) with parts taken out (WIDE_VARIANTS), each on that buffer.

    python3 bench/exp_op_path.py --out op_path.json

Verdict (H200, h200-2026-11-23-s18/op-path*.log): op, raw and raw+alloc take the same time, so the gap was in the
kernel: without its entry checks it took 253.0 us against 257.2 (ln_modes 252.1), which became the checks in block 0
only (kernels/norms.cu kk_layer_norm_fwd_wide).
"""

from __future__ import annotations

import torch
from sweep_common import interleaved, run_cases, source_variant

import kernelkit
from kernelkit.bench import _rms_norm_reference
from kernelkit.ops import norms
from kernelkit.ops._runtime import row_path

# (tag, [(regex, replacement)]) applied to kernels/norms.cu's kk_layer_norm_fwd_wide and ln_fwd_wide_run.
WIDE_VARIANTS = [
    ("wide no checks", [(r"if \(blockIdx.x == 0 && \(cols % 4 != 0[\s\S]*?__trap\(\);", "")]),
    (
        "wide stats always",
        [(r"(if \(tx == 0\) \{\s*)if \(mean != nullptr\) (mean\[row\] = mu;\s*)if \(rstd != nullptr\) ", r"\1\2")],
    ),
    (
        "wide mul 1/cols",
        [
            (r"const float acols = float\(cols\);", "const float acols = 1.f / float(cols);"),
            (r"wide_block_sum\(s, red\) / acols;", "wide_block_sum(s, red) * acols;"),
            (r"wide_block_sum\(s, red\) / acols \+", "wide_block_sum(s, red) * acols +"),
        ],
    ),
]

CASES = [
    ("layer_norm", torch.float32, 4096),
    ("layer_norm", torch.float32, 8192),
    ("rms_norm", torch.float32, 4096),
    ("rms_norm", torch.float32, 8192),
    ("rms_norm", torch.bfloat16, 8192),
]


def time_case(name, dtype, cols, copy, reps, rows=32768):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    w = (1 + 0.1 * torch.randn(cols, device="cuda")).to(dtype)
    b = (0.1 * torch.randn(cols, device="cuda")).to(dtype)
    ln = name == "layer_norm"
    eps = 1e-5 if ln else 1e-6
    kname = "kk_layer_norm_fwd" if ln else "kk_rms_norm_fwd"
    stat = torch.empty(rows, device="cuda")
    y = torch.empty_like(x)

    def args(y, *stats):
        return (x, w, b, y, *stats) if ln else (x, w, y, *stats)

    shape = norms._forward_shape(kname, dtype, cols, 0, row_path(cols, dtype, args(y, stat, stat)))
    grid = min(-(-rows // shape.per_block), shape.cap)
    nstat = 2 if ln else 1
    pre = (*args(y, *[torch.empty_like(stat) for _ in range(nstat)]), rows, cols, eps)

    def raw():
        shape.launch(grid, pre)

    def raw_alloc():
        yy = torch.empty_like(x)
        st = [x.new_empty((rows,), dtype=torch.float32) for _ in range(nstat)]
        shape.launch(grid, (*args(yy, *st), rows, cols, eps))
        return yy

    if ln:
        op = lambda: kernelkit.ops.layer_norm(x, w, b, eps)  # noqa: E731
        comp = torch.compile(lambda x, w, b: torch.nn.functional.layer_norm(x, (cols,), w, b, eps), dynamic=False)
        ref = lambda: comp(x, w, b)  # noqa: E731
    else:
        op = lambda: kernelkit.ops.rms_norm(x, w, eps)  # noqa: E731
        comp = torch.compile(_rms_norm_reference, dynamic=False)
        ref = lambda: comp(x, w, eps)  # noqa: E731
    raw()
    same = torch.equal(pre[3 if ln else 2], op())
    calls = {"op": [op], "raw": [raw], "raw+alloc": [raw_alloc], "torch.compile": [ref]}
    if ln and dtype == torch.float32:
        calls.update(_ln_experiments(shape, grid, pre, rows, cols, eps))
    out = []
    for tag, us, pct, host in interleaved(calls, reps, 2 * x.nbytes, copy):
        print(f"{name:10s} {str(dtype)[6:]:8s} {cols:5d} {tag:14s} {us:8.1f} us {pct:5.1f}%  host {host:5.1f} us")
        out.append(dict(op=name, dtype=str(dtype)[6:], cols=cols, impl=tag, us=us, host_us=host))
    print(f"  raw output bitwise equal to the op's: {same}")
    return out


def _ln_experiments(shape, grid, pre, rows, cols, eps):
    """ln_modes and the wide kernel's variants, launched as raw is, writing raw's output buffer."""
    import exp_looped_rows

    np_, minb = next((p, m) for lo, hi, p, m in norms._WIDE_FIT["kk_layer_norm_fwd", torch.float32] if lo < cols <= hi)
    common = {"common.cuh": kernelkit._native.op_source("common.cuh")}
    e = f"ln_modes<float, {np_}, 3, 3, false, {minb}>"
    modes = kernelkit.load_inline("exp_op_path", exp_looped_rows.SRC, name_expressions=[e], headers=common)
    k, block = modes.kernel(e), shape.block
    x, w, b, y, mean, rstd = pre[:6]
    calls = {"ln_modes": [lambda: k.launch(grid, block, (x, w, b, y, mean, rstd, rows, cols, eps))]}
    for tag, subs in WIDE_VARIANTS:
        kv = source_variant("norms", subs).kernel(f"kk_layer_norm_fwd_wide<float, {np_}, {minb}>")
        calls[tag] = [lambda kv=kv: kv.launch(grid, block, pre)]
    ref = y.clone()
    for tag, (fn,) in calls.items():
        fn()
        print(f"  {tag}: max |diff| against the op's output {(y - ref).abs().max().item():.2e}")
    return calls


def main() -> None:
    run_cases(CASES, time_case)


if __name__ == "__main__":
    main()
