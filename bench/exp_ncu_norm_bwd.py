"""The 16-bit RMSNorm and LayerNorm backwards at 32768 x 8192, twice each, for ncu (the second pair is the one to read):

ncu --kernel-name regex:norm_bwd --launch-skip 2 --launch-count 2 python3 bench/exp_ncu_norm_bwd.py
"""

import torch

from kernelkit.ops import norms

rows, cols = 32768, 8192
dt = torch.bfloat16
x, g = (torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(2))
w, b = torch.randn(cols, device="cuda", dtype=dt), torch.randn(cols, device="cuda", dtype=dt)
_, rstd = norms._rms_norm(x, w, 1e-6)
_, mean, lrstd = norms._layer_norm(x, w, b, 1e-5)
for _ in range(2):
    norms.rms_norm_backward(g, x, w, rstd)
    norms.layer_norm_backward(g, x, w, mean, lrstd)
torch.cuda.synchronize()
