"""The norm forwards that trail torch.compile at the copy bandwidth on an H200 (h200-2026-11-28-s50/ties-norms.log:
layer_norm float32 32768 x 4096 0.9951, rms_norm float32 32768 x 8192 0.9986), kernelkit's and torch.compile's of
`kernelkit bench`'s references, each called twice after a warm-up, for ncu (the last call of each is the one to read):

ncu --kernel-name regex:'kk_|triton' --metrics <list> python3 bench/exp_ncu_norm_fwd.py
"""

import torch
import torch.nn.functional as F

import kernelkit.ops as ops
from kernelkit.bench import _rms_norm_reference


def _layer_norm_reference(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


CELLS = (
    (4096, lambda x, w, b: ops.layer_norm(x, w, b, 1e-5), torch.compile(_layer_norm_reference)),
    (8192, lambda x, w, b: ops.rms_norm(x, w, 1e-6), torch.compile(lambda x, w, b: _rms_norm_reference(x, w, 1e-6))),
)

for cols, ours, theirs in CELLS:
    torch.manual_seed(0)
    args = (torch.randn(32768, cols, device="cuda"), torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda"))
    theirs(*args)  # compiles
    for _ in range(2):
        ours(*args)
        theirs(*args)
    torch.cuda.synchronize()
