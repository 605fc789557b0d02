//! kernelkit's op library: the multi-threaded CPU implementations of the shipped ops.
//!
//! Every op is generic over [`Element`] (`f32`, `f64`, `half::f16`, `half::bf16`). 16-bit
//! types are widened to `f32`, computed in `f32` and rounded to nearest-even once on store;
//! `f64` computes in `f64`.
//!
//! The `f32` hot loops are written so that LLVM auto-vectorizes them, and are compiled twice:
//! once portable (SSE2 baseline, unfused multiply-adds) and once with AVX2+FMA, chosen at run
//! time (`cpu::Isa`). The binary therefore runs on any x86-64.
//!
//! Work is split with rayon into chunks of at least 64K elements; inputs below
//! [`PAR_MIN_ELEMS`] run on the calling thread.
//!
//! Callers (the PyO3 bindings) have already checked dtype and contiguity; the ops still check
//! every length up front and return [`OpError`] instead of panicking.

pub mod activations;
pub mod element;
pub mod elementwise;
pub mod gelu;
pub mod matmul;
pub mod norms;
pub mod softmax;

mod approx;
mod cpu;
mod kernels;
mod par;
#[cfg(test)]
mod testutil;

pub use element::Element;
pub use gelu::Approx;

use std::fmt;

/// Inputs with fewer elements than this run single-threaded: below it, rayon's fork/join
/// overhead costs more than the second core gains.
pub const PAR_MIN_ELEMS: usize = 32 * 1024;

/// Why an op refused its arguments. Nothing is written to the outputs when an error is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpError {
    /// Argument `arg` of `op` has `len` elements where `expected` were required;
    /// `rule` says where the expectation comes from (e.g. `"len(a)"`, `"m*k"`).
    LengthMismatch {
        op: &'static str,
        arg: &'static str,
        len: usize,
        expected: usize,
        rule: &'static str,
    },
    /// `x` of a bias op must be `[rows, cols]` with `cols = len(bias)`, but `len(x)` is not a
    /// multiple of `len(bias)` (or `bias` is empty while `x` is not).
    NotAMultiple {
        op: &'static str,
        arg: &'static str,
        len: usize,
        of: &'static str,
        divisor: usize,
    },
    /// A shape product (e.g. `m*k`) overflows `usize`.
    ShapeOverflow {
        op: &'static str,
        what: &'static str,
    },
    /// Element `row` of index argument `arg` holds `value`, outside `[0, bound)`.
    BadIndex {
        op: &'static str,
        arg: &'static str,
        row: usize,
        value: i64,
        bound: usize,
    },
    /// The caller passed data of a type this op has no implementation for.
    Unsupported(&'static str),
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::LengthMismatch {
                op,
                arg,
                len,
                expected,
                rule,
            } => write!(
                f,
                "{op}: argument `{arg}` has length {len}, expected {expected} (= {rule})"
            ),
            OpError::NotAMultiple {
                op,
                arg,
                len,
                of,
                divisor,
            } => write!(
                f,
                "{op}: length of `{arg}` ({len}) is not a multiple of the length of `{of}` ({divisor})"
            ),
            OpError::ShapeOverflow { op, what } => write!(f, "{op}: {what} overflows usize"),
            OpError::BadIndex {
                op,
                arg,
                row,
                value,
                bound,
            } => write!(
                f,
                "{op}: argument `{arg}` holds {value} at row {row}, outside [0, {bound})"
            ),
            OpError::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for OpError {}

/// Checks `len == expected`, naming the argument and the rule on failure.
pub(crate) fn check_len(
    op: &'static str,
    arg: &'static str,
    len: usize,
    expected: usize,
    rule: &'static str,
) -> Result<(), OpError> {
    if len == expected {
        Ok(())
    } else {
        Err(OpError::LengthMismatch {
            op,
            arg,
            len,
            expected,
            rule,
        })
    }
}
