"""Quick timing of the LLM ops' CUDA kernels (CUDA-event medians via triton.testing.do_bench):
GB/s of the minimum traffic, against a 1 GiB device copy. A smoke check between full benchmark runs."""

import torch
from triton.testing import do_bench

import kernelkit.ops as K
from kernelkit.ops import norms
from kernelkit.ops.activations import _rope
from kernelkit.ops.softmax import _cross_entropy, cross_entropy_backward, softmax_backward


def gbps(ms, nbytes):
    return nbytes / ms / 1e6


def main():
    src = torch.empty(2**28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    copy = gbps(do_bench(lambda: dst.copy_(src)), 2 * src.nbytes)
    print(f"copy {copy:.0f} GB/s")
    for dtype in (torch.bfloat16, torch.float32):
        for rows, cols in ((32768, 256), (32768, 4096), (32768, 8192), (8192, 65536)):
            print(f"{str(dtype)[6:]} {rows}x{cols}: " + ", ".join(one_size(dtype, rows, cols, copy)), flush=True)


def one_size(dtype, rows, cols, copy):
    x = torch.randn(rows, cols, dtype=dtype, device="cuda")
    g, r = torch.randn_like(x), torch.randn_like(x)
    w = torch.randn(cols, dtype=dtype, device="cuda")
    nb = x.nbytes
    y, rstd = norms._rms_norm(x, w, 1e-6)
    _, _, mean_ln = norms._layer_norm(x, w, w, 1e-5)
    yy = K.softmax(x)
    t = torch.randint(0, cols, (rows,), device="cuda")
    loss, lse = _cross_entropy(x, t, -100, 0.0)
    cases = {
        "rms_norm": (lambda: norms._rms_norm(x, w, 1e-6), 2 * nb),
        "rms_norm_bwd": (lambda: norms.rms_norm_backward(g, x, w, rstd), 3 * nb),
        "add_rms_norm": (lambda: norms._add_rms_norm(x, r, w, 1e-6), 4 * nb),
        "layer_norm": (lambda: norms._layer_norm(x, w, w, 1e-5), 2 * nb),
        "softmax": (lambda: K.softmax(x), 2 * nb),
        "softmax_bwd": (lambda: softmax_backward(g, yy), 3 * nb),
        "cross_entropy": (lambda: _cross_entropy(x, t, -100, 0.0), nb),
        "cross_entropy_bwd": (lambda: cross_entropy_backward(x, t, lse, loss, -100, 0.0), 2 * nb),
        "swiglu": (lambda: K.swiglu(x, r), 3 * nb),
        "swiglu_bwd": (lambda: K.swiglu_backward(g, x, r), 5 * nb),
        "torch_rms_compiled": (None, 2 * nb),
    }
    line = []
    for name, (fn, nbytes) in cases.items():
        if fn is None:
            continue
        ms = do_bench(fn, warmup=5, rep=30)
        line.append(f"{name} {ms * 1e3:.0f}us {100 * gbps(ms, nbytes) / copy:.0f}%")
    q = torch.randn(rows // 32, 32, 128 if cols >= 128 else cols, dtype=dtype, device="cuda").view(
        -1, 8, 32, 128 if cols >= 128 else cols
    )
    cos = torch.randn(q.shape[0], 32, q.shape[-1], dtype=dtype, device="cuda")
    ms = do_bench(lambda: _rope(q, q, cos, cos, False), warmup=5, rep=30)
    line.append(f"rope {ms * 1e3:.0f}us {100 * gbps(ms, 4 * q.nbytes) / copy:.0f}%")
    return line


if __name__ == "__main__":
    main()
