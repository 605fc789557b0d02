//! One error type for the whole crate. Every variant renders as a message a user can act on.

use std::fmt;

/// Which run-time library an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    Driver,
    Nvrtc,
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Library::Driver => "the CUDA driver (libcuda)",
            Library::Nvrtc => "NVRTC (libnvrtc)",
        })
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    #[error("{library} could not be loaded.\n  looked in: {}\n  fix: {hint}", searched.join("; "))]
    LibraryNotFound {
        library: Library,
        searched: Vec<String>,
        hint: String,
    },
    #[error("{library} at {path} is too old: it lacks {symbol}.\n  fix: {hint}")]
    LibraryTooOld {
        library: Library,
        path: String,
        symbol: String,
        hint: String,
    },
    #[error("CUDA driver call {call} failed with {name}: {description}")]
    Driver {
        call: &'static str,
        code: i32,
        name: String,
        description: String,
    },
    #[error("kernel '{kernel}' failed with {name}: {description}{context}")]
    Launch {
        kernel: String,
        code: i32,
        name: String,
        description: String,
        context: String,
    },
    #[error("NVRTC could not compile {file}:\n{log}")]
    Compile { file: String, log: String },
    #[error("NVRTC call {call} failed: {message}")]
    Nvrtc { call: &'static str, message: String },
    #[error("{0}")]
    Argument(String),
    #[error("kernel '{name}' is not in module '{module}'. Kernels found: {available}")]
    KernelNotFound {
        name: String,
        module: String,
        available: String,
    },
    #[error("kernelkit cache at {path}: {message}")]
    Cache { path: String, message: String },
    #[error("no CUDA device {0}: {1}")]
    NoDevice(i32, String),
}

pub type Result<T> = std::result::Result<T, Error>;
