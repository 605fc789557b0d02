//! Rust errors become Python exceptions of kernelkit's own hierarchy.

use kernelkit_cuda::Error;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    kernelkit,
    KernelkitError,
    PyRuntimeError,
    "Base class of kernelkit's errors."
);
create_exception!(
    kernelkit,
    CompileError,
    KernelkitError,
    "NVRTC rejected the source; the message carries its log."
);
create_exception!(
    kernelkit,
    CudaError,
    KernelkitError,
    "A CUDA driver call failed."
);
create_exception!(
    kernelkit,
    LaunchError,
    CudaError,
    "A kernel launch, or the kernel itself, failed."
);
create_exception!(
    kernelkit,
    LibraryNotFoundError,
    KernelkitError,
    "The CUDA driver or NVRTC could not be loaded."
);
create_exception!(
    kernelkit,
    KernelNotFoundError,
    KernelkitError,
    "A module has no kernel of that name."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("KernelkitError", py.get_type::<KernelkitError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add("LaunchError", py.get_type::<LaunchError>())?;
    m.add(
        "LibraryNotFoundError",
        py.get_type::<LibraryNotFoundError>(),
    )?;
    m.add("KernelNotFoundError", py.get_type::<KernelNotFoundError>())?;
    Ok(())
}

pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::LibraryNotFound { .. } | Error::LibraryTooOld { .. } => {
            LibraryNotFoundError::new_err(msg)
        }
        Error::Compile { .. } | Error::Nvrtc { .. } => CompileError::new_err(msg),
        Error::Launch { .. } => LaunchError::new_err(msg),
        Error::Driver { .. } | Error::NoDevice(..) => CudaError::new_err(msg),
        Error::KernelNotFound { .. } => KernelNotFoundError::new_err(msg),
        Error::Argument(_) => PyValueError::new_err(msg),
        Error::Cache { .. } => KernelkitError::new_err(msg),
    }
}

/// `?`-friendly conversion for kernelkit-cuda results.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for kernelkit_cuda::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
