"""float32 norm forwards of 262144-column rows, one of them far from zero mean (x + 100), on the GPU and on the Rust
CPU kernels in float32, each against the CPU kernels in float64: which side errs where
tests/test_llm_cuda_vs_cpu.py::test_widest_rows_over_many_clusters compares them."""

import torch

from kernelkit.ops import norms

rows, cols = 24, 262144
cases = {
    "rms_norm": lambda x, r, w, b: norms._rms_norm(x, w, 1e-6)[0],
    "add_rms_norm": lambda x, r, w, b: norms._add_rms_norm(x, r, w, 1e-6)[0],
    "layer_norm": lambda x, r, w, b: norms._layer_norm(x, w, b, 1e-5)[0],
}
worst = {}
for seed in range(8):
    torch.manual_seed(seed)
    x, r = (torch.randn(rows, cols, dtype=torch.float64) for _ in range(2))
    w, b = torch.randn(cols, dtype=torch.float64), torch.randn(cols, dtype=torch.float64)
    x[1] += 100
    f32 = [t.float() for t in (x, r, w, b)]
    for name, fn in cases.items():
        ref = fn(*(t.double() for t in f32))  # the float32 inputs, computed in float64
        gpu = fn(*(t.cuda() for t in f32)).cpu().double()
        cpu = fn(*f32).double()
        for side, out in (("gpu", gpu), ("cpu", cpu)):
            err = (out - ref).abs()
            row1, rest = err[1].max().item(), torch.cat([err[:1], err[2:]]).max().item()
            key = (name, side)
            worst[key] = max(worst.get(key, (0, 0)), (row1, rest))
for (name, side), (row1, rest) in sorted(worst.items()):
    print(f"{name:13s} {side}: max |error| against float64, far row {row1:.2e}, other rows {rest:.2e}")
