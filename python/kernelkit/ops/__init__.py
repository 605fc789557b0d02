"""kernelkit's op library, registered as torch.ops.kernelkit.* and callable from here.

>>> import kernelkit.ops as K
>>> y = K.bias_gelu(x, bias)
>>> z = K.muladd(a, b, c)
"""

from kernelkit.ops.activations import rope, swiglu, swiglu_backward
from kernelkit.ops.elementwise import add, mul, muladd, scale_
from kernelkit.ops.gelu import bias_gelu, bias_gelu_backward
from kernelkit.ops.matmul import matmul
from kernelkit.ops.norms import add_rms_norm, layer_norm, rms_norm
from kernelkit.ops.softmax import cross_entropy, softmax

__all__ = [
    "add",
    "add_rms_norm",
    "bias_gelu",
    "bias_gelu_backward",
    "cross_entropy",
    "layer_norm",
    "matmul",
    "mul",
    "muladd",
    "rms_norm",
    "rope",
    "scale_",
    "softmax",
    "swiglu",
    "swiglu_backward",
]
