//! Test helpers: deterministic random inputs, exact conversions and tolerance checks.

use crate::element::Element;
use half::{bf16, f16};

/// Per-dtype test tolerances and exact conversions to/from f64.
pub(crate) trait Sample: Element {
    /// Relative tolerance: a few roundings to this type.
    const RTOL: f64;
    /// Absolute tolerance floor for results near zero (in units of the values' scale).
    const ATOL: f64;
    fn from_f64_round(v: f64) -> Self;
    fn to_f64_exact(self) -> f64;
}

impl Sample for f32 {
    const RTOL: f64 = 1e-6;
    const ATOL: f64 = 2e-7;
    fn from_f64_round(v: f64) -> Self {
        v as f32
    }
    fn to_f64_exact(self) -> f64 {
        self as f64
    }
}

impl Sample for f64 {
    const RTOL: f64 = 1e-13;
    const ATOL: f64 = 1e-14;
    fn from_f64_round(v: f64) -> Self {
        v
    }
    fn to_f64_exact(self) -> f64 {
        self
    }
}

impl Sample for f16 {
    const RTOL: f64 = 1e-3;
    const ATOL: f64 = 1e-6;
    fn from_f64_round(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64_exact(self) -> f64 {
        self.to_f64()
    }
}

impl Sample for bf16 {
    const RTOL: f64 = 8e-3;
    const ATOL: f64 = 1e-6;
    fn from_f64_round(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f64_exact(self) -> f64 {
        self.to_f64()
    }
}

/// xorshift64*: uniform in [0, 1).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` values uniform in [-scale, scale), rounded to `T`.
pub(crate) fn random_vec<T: Sample>(n: usize, seed: u64, scale: f64) -> Vec<T> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| T::from_f64_round((2.0 * rng.next_f64() - 1.0) * scale))
        .collect()
}

/// Asserts `|got - want| <= rtol*|want| + atol` (NaNs must match).
#[track_caller]
pub(crate) fn assert_close(got: f64, want: f64, rtol: f64, atol: f64, ctx: impl std::fmt::Display) {
    if want.is_nan() {
        assert!(got.is_nan(), "{ctx}: got {got:e}, want NaN");
        return;
    }
    let err = (got - want).abs();
    assert!(
        err <= rtol * want.abs() + atol,
        "{ctx}: got {got:e}, want {want:e} (err {err:e}, rtol {rtol:e}, atol {atol:e})"
    );
}
