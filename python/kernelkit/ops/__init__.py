"""kernelkit's op library, registered as torch.ops.kernelkit.* and callable from here.

>>> import kernelkit.ops as K
>>> y = K.bias_gelu(x, bias)
>>> z = K.muladd(a, b, c)
"""

from kernelkit.ops.elementwise import add, mul, muladd, scale_
from kernelkit.ops.gelu import bias_gelu, bias_gelu_backward
from kernelkit.ops.matmul import matmul

__all__ = ["add", "bias_gelu", "bias_gelu_backward", "matmul", "mul", "muladd", "scale_"]
