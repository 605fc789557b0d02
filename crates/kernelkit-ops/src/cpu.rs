//! Run-time choice of the instruction set for the hot loops, and the multiversioning macro.

use crate::element::Real;

/// Instruction set a kernel is run with (`pub` only so that the sealed `Kernels` trait can
/// name it; the module is private).
///
/// `Avx2Fma` must only be obtained from [`Isa::detect`] (or [`Isa::available`]), which checks
/// the CPU: the `unsafe` calls into `#[target_feature]` functions rely on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Baseline x86-64 / any target: SSE2 vectors, unfused multiply-add.
    Portable,
    /// AVX2 + FMA (x86-64 only).
    Avx2Fma,
}

impl Isa {
    /// The best instruction set this CPU supports. `is_x86_feature_detected!` caches its answer,
    /// so this is a couple of loads; ops call it once per invocation, never per element.
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2Fma;
            }
        }
        Isa::Portable
    }

    /// Every instruction set usable on this CPU (tests run each of them).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        if Isa::detect() == Isa::Avx2Fma {
            v.push(Isa::Avx2Fma);
        }
        v
    }
}

/// Whether polynomial / dot-product steps `a*b+c` are fused. Fused only where the target has
/// FMA: without it `mul_add` becomes a libm call, which is slow and blocks vectorization.
pub(crate) trait FmaMode {
    const FUSED: bool;
}

/// `a*b+c` with one rounding (`vfmadd`); used in the AVX2+FMA variants.
pub(crate) struct Fused;
/// `a*b+c` with two roundings; used in the portable variants.
pub(crate) struct Unfused;

impl FmaMode for Fused {
    const FUSED: bool = true;
}
impl FmaMode for Unfused {
    const FUSED: bool = false;
}

/// `a*b+c`, fused or not according to `F` (resolved at compile time).
#[inline(always)]
pub(crate) fn madd<F: FmaMode, C: Real>(a: C, b: C, c: C) -> C {
    if F::FUSED {
        a.fused_mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Defines `fn NAME(isa: Isa, args...)` that runs `BODY::<Fused>(args...)` compiled with
/// AVX2+FMA enabled when `isa` is `Avx2Fma`, and `BODY::<Unfused>(args...)` (baseline target)
/// otherwise. `BODY` must be `#[inline(always)]` so that it is compiled inside the
/// `#[target_feature]` function and vectorized with its features.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:ident) => {
        $(#[$meta])*
        #[inline]
        $vis fn $name(isa: $crate::cpu::Isa, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2_fma($($arg: $ty),*) {
                    $body::<$crate::cpu::Fused>($($arg),*)
                }
                if isa == $crate::cpu::Isa::Avx2Fma {
                    // SAFETY: `Isa::Avx2Fma` is only produced by `Isa::detect`, after the CPU
                    // reported both AVX2 and FMA.
                    unsafe { avx2_fma($($arg),*) };
                    return;
                }
            }
            let _ = isa;
            $body::<$crate::cpu::Unfused>($($arg),*)
        }
    };
}
pub(crate) use multiversion;
