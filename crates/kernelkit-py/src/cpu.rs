//! CPU implementations of kernelkit's ops, called on CPU tensors. Filled in with the ops crate.

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
