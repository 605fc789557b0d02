"""Session 38's new kernel paths on small inputs, for compute-sanitizer (memcheck, racecheck): the flat cross-entropy
backward, the held cross-entropy (a block and a cluster per row) and float32 add_rms_norm's backward copying the
residual's gradient with cp.async, over several rows per chunk.

    compute-sanitizer --tool racecheck python3 bench/exp_sanitize_s38.py
"""

import torch

import kernelkit.ops as K
from kernelkit.ops import norms
from kernelkit.ops.softmax import _cross_entropy, cross_entropy_backward

torch.manual_seed(0)
for dtype, cols in ((torch.float32, 8196), (torch.bfloat16, 16392), (torch.float32, 4096), (torch.bfloat16, 65536)):
    x = torch.randn(9, cols, device="cuda", dtype=dtype)
    t = torch.randint(0, cols, (9,), device="cuda")
    t[3] = -100
    _, stats = _cross_entropy(x, t, -100, 0.1)
    g = cross_entropy_backward(x, t, stats, torch.rand(9, device="cuda"), -100, 0.1, None)
    assert torch.isfinite(g).all()
    xg = x.clone().requires_grad_()
    K.cross_entropy(xg, t).backward()  # the held kernel (a block or a cluster per row)
for cols in (4096, 8192):
    x, r, gy = (torch.randn(700, cols, device="cuda") for _ in range(3))
    w = torch.randn(cols, device="cuda")
    _, h, rstd = norms._add_rms_norm(x, r, w, 1e-6)
    gh, gw = norms.add_rms_norm_backward(gy, r, h, w, rstd)
    assert torch.isfinite(gh).all() and torch.isfinite(gw).all()
torch.cuda.synchronize()
print("ok")
