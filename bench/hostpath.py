"""Where the host microseconds of one launch and one op call go. Prints a table; --out writes JSON.

Each figure is the median of 5 runs of 20000 calls on 16-element CUDA tensors (wall clock, as in
../shared/baseline: long loops can be bound by the GPU's launch throughput). host_only_* figures
are medians of 40 batches of 200 calls timed without waiting for the GPU: the host cost alone.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import kernelkit

SRC = r"""
extern "C" __global__ void noargs() {}
extern "C" __global__ void ints(int a, int b, int c, long long d) {}
extern "C" __global__ void mul3(const float* a, const float* b, float* c, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}
"""


def per_call_us(f, n=20000, runs=5) -> float:
    out = []
    for _ in range(runs):
        for _ in range(200):
            f()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return round(sorted(out)[runs // 2], 2)


def host_only_us(f, batch=200, runs=40) -> float:
    """Host cost alone: batches short enough never to fill the launch queue, no sync inside the timing."""
    out = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            f()
        out.append((time.perf_counter() - t0) / batch * 1e6)
    torch.cuda.synchronize()
    return round(sorted(out)[runs // 2], 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    mod = kernelkit.load_inline("hostpath", SRC)
    k0, ki, k3 = mod.kernel("noargs"), mod.kernel("ints"), mod.kernel("mul3")
    x = torch.randn(16, device="cuda")
    y = torch.empty_like(x)
    raw = torch._C._cuda_getCurrentRawStream
    res = {
        "python_loop_only": per_call_us(lambda: None),
        "torch_current_raw_stream": per_call_us(lambda: raw(0)),
        "tensor_data_ptr": per_call_us(lambda: x.data_ptr()),
        "tensor_get_device": per_call_us(lambda: x.get_device()),
        "tensor_is_contiguous": per_call_us(lambda: x.is_contiguous()),
        "torch_empty_like": per_call_us(lambda: torch.empty_like(x)),
        "tensor_new_empty": per_call_us(lambda: x.new_empty(x.shape)),
        "torch_empty_shape_dtype_device": per_call_us(lambda: torch.empty(x.shape, dtype=x.dtype, device=x.device)),
        "launch_no_args": per_call_us(lambda: k0.launch(1, 32, ())),
        "launch_4_ints": per_call_us(lambda: ki.launch(1, 32, (1, 2, 3, 4))),
        "launch_3_tensors_1_int": per_call_us(lambda: k3.launch(1, 32, (x, x, y, 16))),
        "launch_3_tensors_explicit_stream": per_call_us(lambda: k3.launch(1, 32, (x, x, y, 16), stream=0)),
        "torch_mul_eager": per_call_us(lambda: torch.mul(x, x)),
        "torch_add_eager": per_call_us(lambda: torch.add(x, x)),
    }
    import kernelkit.ops as K
    from kernelkit.ops import norms

    z = torch.randn(16, device="cuda")
    res["kernelkit_ops_muladd_eager"] = per_call_us(lambda: K.muladd(x, z, x))
    res["kernelkit_ops_add_eager"] = per_call_us(lambda: K.add(x, z))
    res["torch_mul_then_add_eager"] = per_call_us(lambda: torch.add(torch.mul(x, z), x))
    res["torch_ops_kernelkit_muladd_dispatcher"] = per_call_us(lambda: torch.ops.kernelkit.muladd.default(x, z, x))
    lib = torch.library.Library("kkhost", "FRAGMENT")
    lib.define("ident(Tensor a) -> Tensor")
    lib.impl("ident", lambda a: a, "CUDA")
    res["dispatcher_to_python_identity"] = per_call_us(lambda: torch.ops.kkhost.ident.default(x))
    host_only = {
        "launch_3_tensors_1_int": lambda: k3.launch(1, 32, (x, x, y, 16)),
        "torch_mul_eager": lambda: torch.mul(x, x),
        "kernelkit_ops_muladd_eager": lambda: K.muladd(x, z, x),
        "torch_mul_then_add_eager": lambda: torch.add(torch.mul(x, z), x),
        "kernelkit_ops_add_eager": lambda: K.add(x, z),
        "torch_add_eager": lambda: torch.add(x, z),
    }
    # Training calls (forward and backward, autograd.grad) on (8, 64) rows: kernelkit's eager path (the
    # op's autograd.Function around the backend impl) against the dispatcher's (register_autograd's kernel).
    kk = torch.ops.kernelkit
    rows = torch.randn(8, 64, device="cuda", requires_grad=True)
    wt = torch.randn(64, device="cuda", requires_grad=True)
    gy = torch.randn(8, 64, device="cuda")
    tgt = torch.randint(0, 64, (8,), device="cuda")
    grad = torch.autograd.grad
    host_only.update(
        {
            "train_rms_norm_kernelkit": lambda: grad(K.rms_norm(rows, wt, 1e-6), (rows, wt), gy),
            "train_rms_norm_dispatcher": lambda: grad(kk.rms_norm(rows, wt, 1e-6)[0], (rows, wt), gy),
            "train_rms_norm_torch": lambda: grad(torch.nn.functional.rms_norm(rows, (64,), wt, 1e-6), (rows, wt), gy),
            "train_cross_entropy_kernelkit": lambda: grad(K.cross_entropy(rows, tgt), (rows,)),
            "train_cross_entropy_dispatcher": lambda: grad(kk.cross_entropy_reduced(rows, tgt)[0], (rows,)),
            "train_cross_entropy_torch": lambda: grad(torch.nn.functional.cross_entropy(rows, tgt), (rows,)),
            "train_swiglu_kernelkit": lambda: grad(K.swiglu(rows, gy), (rows,), gy),
            "train_swiglu_dispatcher": lambda: grad(kk.swiglu(rows, gy), (rows,), gy),
        }
    )
    # Inference calls on the same rows (no grad): the norms' *_inference ops, which allocate no stats, against the
    # recording op called without grad, and torch's own fused norms.
    xr, wr, br = rows.detach(), wt.detach(), torch.randn(64, device="cuda")
    host_only.update(
        {
            "infer_rms_norm_kernelkit": lambda: K.rms_norm(xr, wr, 1e-6),
            "infer_rms_norm_recording_op": lambda: norms._rms_norm(xr, wr, 1e-6),
            "infer_rms_norm_torch": lambda: torch.nn.functional.rms_norm(xr, (64,), wr, 1e-6),
            "infer_layer_norm_kernelkit": lambda: K.layer_norm(xr, wr, br, 1e-5),
            "infer_layer_norm_recording_op": lambda: norms._layer_norm(xr, wr, br, 1e-5),
            "infer_layer_norm_torch": lambda: torch.nn.functional.layer_norm(xr, (64,), wr, br, 1e-5),
        }
    )
    for k, f in host_only.items():
        res[f"host_only_{k}"] = host_only_us(f)
    width = max(map(len, res))
    for k, v in res.items():
        print(f"{k:<{width}}  {v:8.2f} us")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
