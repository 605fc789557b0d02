//! kernelkit._native: thin PyO3 bindings over kernelkit-cuda and kernelkit-ops.
//!
//! Only conversions live here: Python objects to Rust values, Rust errors to Python exceptions.

mod cpu;
mod errors;
mod jit;
mod sources;
mod tensor;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    jit::register(m)?;
    cpu::register(m)?;
    sources::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
