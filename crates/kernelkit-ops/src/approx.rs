//! Branch-free `f32` approximations of exp, the normal CDF and GELU, written so that LLVM
//! vectorizes the loops they are inlined into (libm's `expf`/`tanhf`/`erff` are opaque calls
//! and keep loops scalar). Conditionals are on already-computed values, so they become
//! blends; the float-to-int conversion is done with the 1.5*2^23 trick instead of `as`.
//!
//! GELU (tanh form) uses `0.5*(1+tanh(u)) = 1/(1+exp(-2u))`: it needs only `exp` and keeps
//! relative accuracy for negative inputs, where `1 + tanh(u)` cancels. GELU (erf form) uses
//! `Phi(x) = 0.5*erfc(-x/sqrt2)` evaluated as `exp(-x^2/2) * R(|x|)` in the tails for the same
//! reason.
//!
//! Measured accuracy, exhaustive over every f32 input of the range
//! (`tests::exhaustive_approximation_accuracy`; AVX2+FMA variant / portable variant; the f64
//! references use std's exp and libm's erfc). "mixed" is `|err| / max(|ref|, 1)`.
//! - `exp`: 1.05 / 1.02 ulp on [-87.3, 88.7] (all normal results).
//! - `Phi` (normal CDF, i.e. erf): 4.9 / 5.1 ulp *relative* on [-13, 13], which includes the
//!   lower tail where Phi = erfc/2 is tiny; within 1 ulp of 1 in absolute terms.
//! - `gelu_erf`: 5.5 / 5.8 ulp relative on [-13, 1e4] (every normal output).
//! - `gelu_tanh`: 1.5e-7 mixed on [-1e4, 1e4]; 18 ulp (1.1e-6) relative on [-3, 1e4]. Its
//!   relative error grows like |2u|*eps for negative inputs because `u` itself rounds.
//! - `gelu_erf_grad`: 1.4e-7 / 1.6e-7 mixed; `gelu_tanh_grad`: 2.1e-7 / 2.1e-7 mixed
//!   (both on [-1e4, 1e4]).
//!
//! Coefficients: minimax fits, `examples/fit_approx_coeffs.py`.

use crate::cpu::{madd, FmaMode};

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln2 split so that `k * LN2_HI` is exact for |k| < 2^15 (9 significant bits).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// exp(r) = 1 + r + r^2 * P(r) on |r| <= 0.35; minimax fit, 3.4e-9 absolute error.
const EXP_P: [f32; 5] = [
    0.5,
    0.166_665_14,
    0.041_666_187,
    0.008_369_59,
    0.001_395_170_5,
];

/// Phi(x) - 1/2 = x * P(x^2) on |x| <= 1; minimax fit, 7.1e-10 relative error.
const PHI_SMALL: [f32; 6] = [
    0.398_942_3,
    -0.066_490_36,
    0.009_973_323,
    -0.001_186_33,
    0.000_113_486_41,
    -0.000_007_654_22,
];

/// 1 - Phi(w) = exp(-w^2/2) * t * S(t), t = 1/(1+w/2), on 1 <= w <= 14.5;
/// minimax fit of the relative error, 2.7e-9.
const PHI_TAIL: [f32; 10] = [
    0.199_473_7,
    0.199_385_33,
    0.150_812_88,
    0.040_607_415,
    -0.021_258_982,
    -0.211_534_01,
    0.041_005_615,
    0.358_181_06,
    -0.379_488_05,
    0.123_389_475,
];

pub(crate) const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
/// sqrt(2/pi) and the cubic coefficient of the tanh-form GELU.
pub(crate) const SQRT_2_OVER_PI: f32 = 0.797_884_6;
pub(crate) const GELU_A: f32 = 0.044_715;

/// Horner evaluation, highest coefficient last in `c`.
#[inline(always)]
fn poly<F: FmaMode, const N: usize>(x: f32, c: &[f32; N]) -> f32 {
    let (mut acc, rest) = match c.split_last() {
        Some((&last, rest)) => (last, rest),
        None => return 0.0,
    };
    for &ci in rest.iter().rev() {
        acc = madd::<F, f32>(acc, x, ci);
    }
    acc
}

/// Clamps to `[lo, hi]`; NaN passes through (both comparisons are false).
#[inline(always)]
fn clamp_keep_nan(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x < lo { lo } else { x };
    if x > hi {
        hi
    } else {
        x
    }
}

/// `exp(a + b)`, where `b` (|b| <= ~0.1) carries low-order bits of the argument that `a + b`
/// would round away. The caller guarantees `a + b` in [-110, 89] (or NaN, which gives NaN);
/// subnormal results are produced below -87.3 and +inf above 88.72.
#[inline(always)]
fn exp_parts<F: FmaMode>(a: f32, b: f32) -> f32 {
    // x = k*ln2 + r, |r| <= ln2/2. `t - ROUND_MAGIC` is round(x*log2e) exactly and the low
    // bits of `t` hold the same integer.
    let t = madd::<F, f32>(a + b, LOG2E, ROUND_MAGIC);
    let kf = t - ROUND_MAGIC;
    let k = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    // a - k*LN2_HI is exact (k*LN2_HI is exact and close to a); b and the low part follow.
    let r = madd::<F, f32>(-kf, LN2_LO, madd::<F, f32>(-kf, LN2_HI, a) + b);

    let p = poly::<F, 5>(r, &EXP_P);
    let er = 1.0 + madd::<F, f32>(r * r, p, r);

    // Scale by 2^k in two steps so that k in [-159, 128] never leaves the exponent range of
    // the factors; the final product rounds to 0 / subnormal / inf correctly.
    let k1 = k >> 1;
    let k2 = k.wrapping_sub(k1);
    let s1 = f32::from_bits((k1.wrapping_add(127) as u32) << 23);
    let s2 = f32::from_bits((k2.wrapping_add(127) as u32) << 23);
    er * s1 * s2
}

/// `exp(x)` for any x: exactly 0 below -110 (true value < 2^-158), +inf above 89, NaN for NaN.
#[inline(always)]
pub(crate) fn exp<F: FmaMode>(x: f32) -> f32 {
    exp_parts::<F>(clamp_keep_nan(x, -110.0, 89.0), 0.0)
}

/// Standard normal CDF `Phi(v)` and `exp(-v^2/2)` (shared with the derivative).
#[inline(always)]
pub(crate) fn phi_and_gauss<F: FmaMode>(v: f32) -> (f32, f32) {
    let w = v.abs();

    // |v| < 1: odd polynomial around 1/2.
    let small = madd::<F, f32>(v, poly::<F, 6>(v * v, &PHI_SMALL), 0.5);

    // Tail: the upper tail Q(w) = exp(-w^2/2) * R(w). Beyond 14.5, Q underflows to 0.
    let wc = clamp_keep_nan(w, 0.0, 14.5);
    // w^2 = hi + lo with hi exact: w_hi keeps 12 significant bits, so w_hi^2 fits in 24.
    let w_hi = f32::from_bits(wc.to_bits() & 0xffff_f000);
    let hi = w_hi * w_hi;
    let lo = (wc - w_hi) * (wc + w_hi);
    // -hi/2 >= -105.2: in exp_parts' range.
    let gauss = exp_parts::<F>(-0.5 * hi, -0.5 * lo);
    let t = 1.0 / madd::<F, f32>(0.5, wc, 1.0);
    let q = gauss * (t * poly::<F, 10>(t, &PHI_TAIL));
    let tail = if v < 0.0 { q } else { 1.0 - q };

    (if w < 1.0 { small } else { tail }, gauss)
}

/// Exact (erf) GELU: `v * Phi(v)`.
#[inline(always)]
pub(crate) fn gelu_erf<F: FmaMode>(v: f32) -> f32 {
    v * phi_and_gauss::<F>(v).0
}

/// d/dv of the erf GELU: `Phi(v) + v * phi(v)`.
#[inline(always)]
pub(crate) fn gelu_erf_grad<F: FmaMode>(v: f32) -> f32 {
    let (cdf, gauss) = phi_and_gauss::<F>(v);
    madd::<F, f32>(v * FRAC_1_SQRT_2PI, gauss, cdf)
}

/// `-2u` for the tanh GELU, `u = sqrt(2/pi) * (v + a*v^3)`.
#[inline(always)]
fn minus_two_u<F: FmaMode>(v: f32, v2: f32) -> f32 {
    (-2.0 * SQRT_2_OVER_PI) * v * madd::<F, f32>(GELU_A, v2, 1.0)
}

/// tanh GELU: `0.5*v*(1+tanh(u)) = v / (1 + exp(-2u))`.
#[inline(always)]
pub(crate) fn gelu_tanh<F: FmaMode>(v: f32) -> f32 {
    let e = exp::<F>(minus_two_u::<F>(v, v * v));
    v / (1.0 + e)
}

/// d/dv of the tanh GELU. With `s = 1/(1+e)`, `e = exp(-2u)`:
/// `0.5*(1+t) = s` and `0.5*v*(1-t^2) = 2*v*e*s^2`, so the gradient is
/// `s + 2*v*u'(v)*(e*s)*s` — no cancellation in either tail.
#[inline(always)]
pub(crate) fn gelu_tanh_grad<F: FmaMode>(v: f32) -> f32 {
    // Beyond |v| = 20 the gradient is exactly 0 or 1 in f32; clamping keeps u'(v) finite.
    let v = clamp_keep_nan(v, -20.0, 20.0);
    let v2 = v * v;
    let z = minus_two_u::<F>(v, v2);
    let e = exp::<F>(z);
    let s = 1.0 / (1.0 + e);
    // e*s = e/(1+e): as written while e < 1 (accurate for small e), as 1 - s otherwise (no
    // inf*0 once e overflows).
    let es = if z > 0.0 { 1.0 - s } else { e * s };
    let du = SQRT_2_OVER_PI * madd::<F, f32>(3.0 * GELU_A, v2, 1.0);
    madd::<F, f32>((2.0 * v) * du, es * s, s)
}

/// `f64` GELU and derivatives, scalar with std/libm functions (f64 speed is not a goal).
pub(crate) mod wide {
    use std::f64::consts::{FRAC_1_SQRT_2, PI};

    const A: f64 = 0.044_715;

    fn sqrt_2_over_pi() -> f64 {
        (2.0 / PI).sqrt()
    }

    /// Normal CDF; `erfc` keeps relative accuracy in the lower tail.
    #[inline]
    pub(crate) fn phi(v: f64) -> f64 {
        0.5 * libm::erfc(-v * FRAC_1_SQRT_2)
    }

    #[inline]
    pub(crate) fn gauss_pdf(v: f64) -> f64 {
        (-0.5 * v * v).exp() / (2.0 * PI).sqrt()
    }

    #[inline]
    pub(crate) fn gelu_erf(v: f64) -> f64 {
        v * phi(v)
    }

    #[inline]
    pub(crate) fn gelu_erf_grad(v: f64) -> f64 {
        phi(v) + v * gauss_pdf(v)
    }

    #[inline]
    fn minus_two_u(v: f64) -> f64 {
        -2.0 * sqrt_2_over_pi() * v * (1.0 + A * v * v)
    }

    #[inline]
    pub(crate) fn gelu_tanh(v: f64) -> f64 {
        v / (1.0 + minus_two_u(v).exp())
    }

    #[inline]
    pub(crate) fn gelu_tanh_grad(v: f64) -> f64 {
        // Same rewrite as the f32 version; beyond |v| = 50 the result is exactly 0 or 1.
        let v = v.clamp(-50.0, 50.0); // NaN stays NaN
        let z = minus_two_u(v);
        let e = z.exp();
        let s = 1.0 / (1.0 + e);
        let es = if z > 0.0 { 1.0 - s } else { e * s };
        let du = sqrt_2_over_pi() * (1.0 + 3.0 * A * v * v);
        s + 2.0 * v * du * es * s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{Fused, Unfused};

    /// Error of `got` in units of the f32 spacing at `want` (normal range).
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want.abs().max(f32::MIN_POSITIVE as f64);
        let spacing = 2f64.powi(w.log2().floor() as i32 - 23);
        (got as f64 - want).abs() / spacing
    }

    /// `|got - want| / max(|want|, 1)`: relative above 1, absolute below (for functions whose
    /// zeros or tails make relative error meaningless).
    fn mixed(got: f32, want: f64) -> f64 {
        (got as f64 - want).abs() / want.abs().max(1.0)
    }

    /// Max of `metric(f(x), reference(x))` (and where) over f32 inputs in [lo, hi], visiting
    /// every `step`-th bit pattern of each sign (step 1 = exhaustive).
    fn max_err(
        f: impl Fn(f32) -> f32 + Sync,
        reference: impl Fn(f64) -> f64 + Sync,
        lo: f32,
        hi: f32,
        step: u32,
        metric: fn(f32, f64) -> f64,
    ) -> (f64, f32) {
        use rayon::prelude::*;
        let mut ranges = Vec::new();
        for (sign, from, to) in [(1.0f32, lo.max(0.0), hi), (-1.0, (-hi).max(0.0), -lo)] {
            if from <= to {
                // Split the bit range into pieces for rayon.
                let (b0, b1) = (from.to_bits(), to.to_bits());
                let piece = ((b1 - b0) / 64).max(step) / step * step;
                let mut s = b0;
                while s <= b1 {
                    let e = s.saturating_add(piece).min(b1.saturating_add(1));
                    ranges.push((sign, s, e));
                    s = e;
                }
            }
        }
        ranges
            .into_par_iter()
            .map(|(sign, from, to)| {
                let mut worst = (0.0f64, 0.0f32);
                for bits in (from..to).step_by(step as usize) {
                    let x = sign * f32::from_bits(bits);
                    let e = metric(f(x), reference(x as f64));
                    if e > worst.0 || e.is_nan() {
                        worst = (e, x);
                    }
                }
                worst
            })
            .reduce(
                || (0.0, 0.0),
                |a, b| if b.0 > a.0 || b.0.is_nan() { b } else { a },
            )
    }

    type Case = (
        &'static str,
        fn(f32) -> f32,
        fn(f64) -> f64,
        f32,
        f32,
        fn(f32, f64) -> f64,
        f64,
    );

    /// Every approximation, with the range and metric it is judged on and the bound the
    /// sampled (debug) test enforces: the exhaustive maxima (module docs) plus margin.
    #[rustfmt::skip]
    fn cases() -> Vec<Case> {
        vec![
            ("exp [Fused] ulp", exp::<Fused>, f64::exp, -87.3, 88.7, ulps, 1.5),
            ("exp [Unfused] ulp", exp::<Unfused>, f64::exp, -87.3, 88.7, ulps, 1.5),
            ("Phi [Fused] ulp", |x| phi_and_gauss::<Fused>(x).0, wide::phi, -13.0, 13.0, ulps, 5.5),
            ("Phi [Unfused] ulp", |x| phi_and_gauss::<Unfused>(x).0, wide::phi, -13.0, 13.0, ulps, 5.5),
            ("gelu_erf [Fused] ulp", gelu_erf::<Fused>, wide::gelu_erf, -13.0, 1e4, ulps, 6.0),
            ("gelu_erf [Unfused] ulp", gelu_erf::<Unfused>, wide::gelu_erf, -13.0, 1e4, ulps, 6.0),
            ("gelu_tanh [Fused] ulp on [-3, 1e4]", gelu_tanh::<Fused>, wide::gelu_tanh, -3.0, 1e4, ulps, 20.0),
            ("gelu_tanh [Unfused] ulp on [-3, 1e4]", gelu_tanh::<Unfused>, wide::gelu_tanh, -3.0, 1e4, ulps, 20.0),
            ("gelu_tanh [Fused] mixed", gelu_tanh::<Fused>, wide::gelu_tanh, -1e4, 1e4, mixed, 2e-7),
            ("gelu_tanh [Unfused] mixed", gelu_tanh::<Unfused>, wide::gelu_tanh, -1e4, 1e4, mixed, 2e-7),
            ("gelu_erf_grad [Fused] mixed", gelu_erf_grad::<Fused>, wide::gelu_erf_grad, -1e4, 1e4, mixed, 2e-7),
            ("gelu_erf_grad [Unfused] mixed", gelu_erf_grad::<Unfused>, wide::gelu_erf_grad, -1e4, 1e4, mixed, 2e-7),
            ("gelu_tanh_grad [Fused] mixed", gelu_tanh_grad::<Fused>, wide::gelu_tanh_grad, -1e4, 1e4, mixed, 2.5e-7),
            ("gelu_tanh_grad [Unfused] mixed", gelu_tanh_grad::<Unfused>, wide::gelu_tanh_grad, -1e4, 1e4, mixed, 2.5e-7),
        ]
    }

    #[test]
    fn approximation_accuracy_sampled() {
        for (name, f, reference, lo, hi, metric, bound) in cases() {
            let (e, at) = max_err(f, reference, lo, hi, STEP, metric);
            assert!(e <= bound, "{name}: {e:e} at x = {at:e} (bound {bound:e})");
        }
    }

    #[test]
    #[ignore = "exhaustive; run with --release -- --ignored --nocapture"]
    fn exhaustive_approximation_accuracy() {
        for (name, f, reference, lo, hi, metric, _) in cases() {
            let (e, at) = max_err(f, reference, lo, hi, 1, metric);
            println!("{name}: max {e:.4e} at x = {at:e}");
        }
    }

    // Debug-mode tests sample every 1001st f32; `exhaustive_*` (run with
    // `cargo test --release -- --ignored`) produced the numbers in the module docs.
    const STEP: u32 = 1001;

    #[test]
    fn exp_special_values() {
        for f in [exp::<Fused> as fn(f32) -> f32, exp::<Unfused>] {
            assert_eq!(f(0.0), 1.0);
            assert_eq!(f(-200.0), 0.0);
            assert_eq!(f(-f32::INFINITY), 0.0);
            assert_eq!(f(89.0), f32::INFINITY);
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!(f(f32::NAN).is_nan());
            // Subnormal results are right to within one subnormal step.
            for x in [-90.0f32, -100.0, -103.0] {
                let err = (f(x) as f64 - (x as f64).exp()).abs();
                assert!(err <= f32::from_bits(1) as f64, "{x}: {err:e}");
            }
        }
    }

    #[test]
    fn phi_absolute_accuracy() {
        // erf(z) = 2*Phi(z*sqrt2) - 1: absolute error stays within ~1 ulp of 1.
        for i in -20000..=20000 {
            let x = i as f32 * 1e-3;
            let want = wide::phi(x as f64);
            for got in [phi_and_gauss::<Fused>(x).0, phi_and_gauss::<Unfused>(x).0] {
                assert!(
                    (got as f64 - want).abs() <= 1.0 * f32::EPSILON as f64,
                    "{x}"
                );
            }
        }
    }

    #[test]
    fn phi_special_values() {
        for f in [
            phi_and_gauss::<Fused> as fn(f32) -> (f32, f32),
            phi_and_gauss::<Unfused>,
        ] {
            assert_eq!(f(0.0).0, 0.5);
            assert_eq!(f(-20.0).0, 0.0);
            assert_eq!(f(-f32::INFINITY).0, 0.0);
            assert_eq!(f(20.0).0, 1.0);
            assert_eq!(f(f32::INFINITY).0, 1.0);
            assert_eq!(f(1e30).1, 0.0);
            assert!(f(f32::NAN).0.is_nan());
        }
    }
}
