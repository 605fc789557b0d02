"""Every shipped CUDA source compiles to CUBIN with NVRTC, for each arch we target: no GPU needed."""

import pytest

import kernelkit
from kernelkit import _native

TYPES = ["float", "double", "__half", "__nv_bfloat16"]
INSTANTIATIONS = {
    "elementwise.cu": [f"kk_{op}<{t}>" for op in ("add", "mul", "muladd", "scale_") for t in TYPES]
    + [f"kk_{op}_strided<{t}>" for op in ("add", "mul", "muladd") for t in TYPES],
    "gelu.cu": [f"kk_bias_gelu_{d}<{t}, {a}>" for d in ("fwd", "bwd") for t in TYPES for a in (0, 1)]
    + [f"kk_column_sum<{t}>" for t in TYPES],
    # Compiling all four matmul instantiations takes seconds per arch; float covers the shared code.
    "matmul.cu": ["kk_matmul<float>"],
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", sorted(INSTANTIATIONS))
def test_shipped_source_compiles(source, arch):
    assert source in _native.op_source_names()
    c = kernelkit.compile(
        _native.op_source(source),
        arch=arch,
        name_expressions=INSTANTIATIONS[source],
        headers={"common.cuh": _native.op_source("common.cuh")},
        file_name=source,
    )
    assert c.image[:4] == b"\x7fELF"
    assert set(c.lowered_names) == set(INSTANTIATIONS[source])
