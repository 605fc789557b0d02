//! The CUDA sources of the shipped ops (kernels/), embedded so the wheel needs no data files.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;

const SOURCES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../../kernels/common.cuh")),
    (
        "elementwise.cu",
        include_str!("../../../kernels/elementwise.cu"),
    ),
    ("gelu.cu", include_str!("../../../kernels/gelu.cu")),
    ("matmul.cu", include_str!("../../../kernels/matmul.cu")),
    ("norms.cu", include_str!("../../../kernels/norms.cu")),
    ("softmax.cu", include_str!("../../../kernels/softmax.cu")),
    (
        "activations.cu",
        include_str!("../../../kernels/activations.cu"),
    ),
    ("bench.cu", include_str!("../../../kernels/bench.cu")),
];

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(op_source, m)?)?;
    m.add_function(wrap_pyfunction!(op_source_names, m)?)?;
    Ok(())
}

/// The text of one file of kernels/, e.g. op_source("gelu.cu").
#[pyfunction]
fn op_source(name: &str) -> PyResult<&'static str> {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| PyKeyError::new_err(format!("no kernel source named {name:?}")))
}

#[pyfunction]
fn op_source_names() -> Vec<&'static str> {
    SOURCES.iter().map(|(n, _)| *n).collect()
}
