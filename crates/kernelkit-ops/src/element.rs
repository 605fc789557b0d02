//! Element types the ops accept, and the floating-point types they compute in.

use crate::cpu::{multiversion, FmaMode, Isa};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::fmt::Debug;
use std::ops::{Add, AddAssign, Mul, Sub};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A type the kernels compute in: `f32` or `f64` (sealed).
pub trait Real:
    Copy
    + Send
    + Sync
    + 'static
    + Debug
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + AddAssign
    + sealed::Sealed
    + crate::kernels::Kernels
{
    const ZERO: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// `self * b + c` with a single rounding. Only called from code compiled with FMA enabled.
    fn fused_mul_add(self, b: Self, c: Self) -> Self;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn fused_mul_add(self, b: Self, c: Self) -> Self {
        self.mul_add(b, c)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn fused_mul_add(self, b: Self, c: Self) -> Self {
        self.mul_add(b, c)
    }
}

/// An element type of the ops' tensors (sealed): `f32`, `f64`, `half::f16`, `half::bf16`.
pub trait Element: Copy + Send + Sync + 'static + Debug + sealed::Sealed {
    /// What the kernels compute in: `f64` for `f64`, `f32` for everything else.
    type Compute: Real;
    /// torch's name of the dtype (`"float32"`, ...), for messages.
    const DTYPE: &'static str;

    fn to_compute(self) -> Self::Compute;
    /// Rounds to nearest-even (16-bit types).
    fn from_compute(v: Self::Compute) -> Self;

    /// The slice itself when `Self` is its own compute type (no staging copy needed).
    #[doc(hidden)]
    fn as_compute(_s: &[Self]) -> Option<&[Self::Compute]> {
        None
    }
    /// Mutable counterpart of [`Element::as_compute`].
    #[doc(hidden)]
    fn as_compute_mut(_s: &mut [Self]) -> Option<&mut [Self::Compute]> {
        None
    }
    /// Widens `src` into `dst`. Both have the same length (callers slice them so).
    #[doc(hidden)]
    fn load(src: &[Self], dst: &mut [Self::Compute]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_compute();
        }
    }
    /// Rounds `src` into `dst`. Both have the same length (callers slice them so).
    #[doc(hidden)]
    fn store(src: &[Self::Compute], dst: &mut [Self]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = Self::from_compute(*s);
        }
    }
}

impl Element for f32 {
    type Compute = f32;
    const DTYPE: &'static str = "float32";
    #[inline(always)]
    fn to_compute(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_compute(v: f32) -> Self {
        v
    }
    fn as_compute(s: &[f32]) -> Option<&[f32]> {
        Some(s)
    }
    fn as_compute_mut(s: &mut [f32]) -> Option<&mut [f32]> {
        Some(s)
    }
}

impl Element for f64 {
    type Compute = f64;
    const DTYPE: &'static str = "float64";
    #[inline(always)]
    fn to_compute(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_compute(v: f64) -> Self {
        v
    }
    fn as_compute(s: &[f64]) -> Option<&[f64]> {
        Some(s)
    }
    fn as_compute_mut(s: &mut [f64]) -> Option<&mut [f64]> {
        Some(s)
    }
}

impl Element for f16 {
    type Compute = f32;
    const DTYPE: &'static str = "float16";
    #[inline(always)]
    fn to_compute(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_compute(v: f32) -> Self {
        f16::from_f32(v)
    }
    // half converts slices with F16C (run-time detected) 8 lanes at a time.
    fn load(src: &[Self], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        src[..n].convert_to_f32_slice(&mut dst[..n]);
    }
    fn store(src: &[f32], dst: &mut [Self]) {
        let n = src.len().min(dst.len());
        dst[..n].convert_from_f32_slice(&src[..n]);
    }
}

impl Element for bf16 {
    type Compute = f32;
    const DTYPE: &'static str = "bfloat16";
    #[inline(always)]
    fn to_compute(self) -> f32 {
        bf16_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn from_compute(v: f32) -> Self {
        bf16::from_bits(f32_to_bf16(v))
    }
    // Loops over the branch-free conversions below, which LLVM vectorizes, 8 lanes with AVX2
    // (half's own bf16 slice conversion is a scalar loop with a branch per element).
    fn load(src: &[Self], dst: &mut [f32]) {
        bf16_load(Isa::detect(), src, dst)
    }
    fn store(src: &[f32], dst: &mut [Self]) {
        bf16_store(Isa::detect(), src, dst)
    }
}

#[inline(always)]
fn bf16_load_body<F: FmaMode>(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = bf16_to_f32(s.to_bits());
    }
}

#[inline(always)]
fn bf16_store_body<F: FmaMode>(src: &[f32], dst: &mut [bf16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16::from_bits(f32_to_bf16(s));
    }
}

multiversion!(fn bf16_load(src: &[bf16], dst: &mut [f32]) => bf16_load_body);
multiversion!(fn bf16_store(src: &[f32], dst: &mut [bf16]) => bf16_store_body);

/// bf16 -> f32 is exact: the bf16 bits are the top half of the f32.
#[inline(always)]
fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 -> bf16, round to nearest-even; NaNs stay NaN (quieted), like `half::bf16::from_f32`.
#[inline(always)]
fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry out
    // of the mantissa correctly bumps the exponent (up to infinity).
    let rounded = (x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16) as u16;
    let nan = ((x >> 16) as u16) | 0x0040;
    if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_conversion_matches_half() {
        // Every bf16 widens exactly and comes back unchanged.
        for bits in 0..=u16::MAX {
            let h = bf16::from_bits(bits);
            let ours = <bf16 as Element>::to_compute(h);
            if h.is_nan() {
                // A plain shift, like torch's; half additionally quiets signaling NaNs.
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), h.to_f32().to_bits());
            }
            let back = <bf16 as Element>::from_compute(ours);
            assert_eq!(back.is_nan(), h.is_nan());
            if !h.is_nan() {
                assert_eq!(back.to_bits(), bits);
            }
        }
        // Rounding of f32 values (ties, carries, infinities, NaN) matches half's.
        let mut state = 0x1234_5678_u32;
        for i in 0..2_000_000u32 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            // Mix random patterns with exact ties (low 16 bits = 0x8000).
            let bits = if i % 4 == 0 {
                (state & 0xffff_0000) | 0x8000
            } else {
                state
            };
            let v = f32::from_bits(bits);
            let ours = <bf16 as Element>::from_compute(v);
            let theirs = bf16::from_f32(v);
            if v.is_nan() {
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{v:e} ({bits:#x})");
            }
        }
        for v in [f32::MAX, f32::INFINITY, -f32::INFINITY, 0.0, -0.0] {
            let ours = <bf16 as Element>::from_compute(v);
            assert_eq!(ours.to_bits(), bf16::from_f32(v).to_bits());
        }
    }

    /// The bf16 slice conversions give the element conversions' bits on every instruction set.
    #[test]
    fn bf16_slices_every_isa() {
        let bits: Vec<u16> = (0..=u16::MAX).collect();
        let src: Vec<bf16> = bits.iter().map(|&b| bf16::from_bits(b)).collect();
        let wide: Vec<f32> = (0..1 << 16)
            .map(|i| f32::from_bits((i as u32).wrapping_mul(0x9e37_79b9)))
            .collect();
        for isa in crate::cpu::Isa::available() {
            let mut dst = vec![0.0f32; src.len()];
            bf16_load(isa, &src, &mut dst);
            for (s, d) in src.iter().zip(&dst) {
                assert_eq!(
                    d.to_bits(),
                    <bf16 as Element>::to_compute(*s).to_bits(),
                    "{isa:?}"
                );
            }
            let mut back = vec![bf16::ZERO; wide.len()];
            bf16_store(isa, &wide, &mut back);
            for (w, b) in wide.iter().zip(&back) {
                let want = <bf16 as Element>::from_compute(*w);
                assert_eq!(b.to_bits(), want.to_bits(), "{isa:?} {w:e}");
            }
        }
    }

    #[test]
    fn slice_load_store_round_trip() {
        let src: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.37).collect();
        let mut h = vec![f16::ZERO; src.len()];
        f16::store(&src, &mut h);
        let mut back = vec![0.0f32; src.len()];
        f16::load(&h, &mut back);
        for ((s, h), b) in src.iter().zip(&h).zip(&back) {
            assert_eq!(h.to_bits(), f16::from_f32(*s).to_bits());
            assert_eq!(*b, h.to_f32());
        }
    }
}
