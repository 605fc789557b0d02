"""Every shipped CUDA source compiles to CUBIN with NVRTC, for each arch we target: no GPU needed."""

import re

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
    # float and bfloat16 cover both code paths; forward TAIL = false/true: rows held in registers, streamed.
    "norms.cu": [
        f"kk_{k}<{t}, {tail}>"
        for k in ("rms_norm_fwd", "add_rms_norm_fwd", "layer_norm_fwd")
        for t in ("float", "__nv_bfloat16")
        for tail in ("false", "true")
    ]
    + [f"kk_{k}<{t}>" for k in ("rms_norm_bwd", "layer_norm_bwd", "column_sum") for t in ("float", "__nv_bfloat16")]
    + ["kk_layer_norm_fwd<float, false, 4, 1>"],
    "softmax.cu": [
        f"kk_{k}<{t}>"
        for k in ("softmax_fwd", "softmax_bwd", "cross_entropy_fwd", "cross_entropy_bwd")
        for t in ("float", "__nv_bfloat16")
    ]
    + ["kk_softmax_fwd<float, 2>"],
    "activations.cu": [f"kk_swiglu_{d}<{t}>" for d in ("fwd", "bwd") for t in ("float", "__nv_bfloat16")]
    + [f"kk_rope<{t}, {b}>" for t in ("float", "__nv_bfloat16") for b in (0, 1)],
    "bench.cu": ["kk_hold_stream"],
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


@pytest.mark.parametrize("expr", ["kk_rope<float, 0>", "kk_rope<__nv_bfloat16, 1>"])
def test_rope_parameters_match_the_host_launch(expr):
    """kk_rope's parameters, as PTX declares them, are what python/kernelkit/ops/activations.py passes: six
    pointers (q, k, cos, sin, out_q, out_k), six 64-bit sizes, the int heads_inner and the by-value
    kk_act::RopeStrides, whose size is the host struct's."""
    from kernelkit.ops.activations import _ROPE_STRIDES

    c = kernelkit.compile(
        _native.op_source("activations.cu"),
        arch="sm_90",
        name_expressions=[expr],
        headers={"common.cuh": _native.op_source("common.cuh")},
        file_name="activations.cu",
    )
    entry = c.ptx.split(".entry", 1)[1].split(")", 1)[0]
    params = re.findall(r"\.param (\.align \d+ )?\.(\w+) \w+(\[(\d+)\])?", entry)
    kinds = [f"{t}[{n}]" if n else t for _, t, _, n in params]
    assert kinds == ["u64"] * 12 + ["u32", f"b8[{_ROPE_STRIDES.size}]"], kinds
