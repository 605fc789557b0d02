//! Element-wise ops over equal-length slices.
//!
//! Work is split into 64K-element jobs for rayon (single-threaded below
//! [`crate::PAR_MIN_ELEMS`]). `f32`/`f64` slices go straight to the vectorized kernels; 16-bit
//! slices are widened in 1024-element blocks on the stack, computed in `f32` and rounded
//! once on store. With AVX2, `f32`/`f64` outputs of 16 MiB or more are written with
//! non-temporal stores (no read-for-ownership: ~20% less traffic for `muladd`).

use crate::cpu::Isa;
use crate::element::{Element, Real};
use crate::kernels::{use_streaming, Kernels};
use crate::{check_len, par, OpError, PAR_MIN_ELEMS};
use std::ops::Range;

/// Elements per rayon job: large enough to amortize scheduling, small enough to balance.
const CHUNK: usize = 64 * 1024;
/// Elements per staging block for 16-bit types (4 KiB of f32 per operand, stays in L1).
pub(crate) const STAGE: usize = 1024;

type Binary<C> = fn(Isa, &[C], &[C], &mut [C]);
type Ternary<C> = fn(Isa, &[C], &[C], &[C], &mut [C]);

/// `out = a + b`.
pub fn add<T: Element>(a: &[T], b: &[T], out: &mut [T]) -> Result<(), OpError> {
    check_binary("add", a, b, out)?;
    binary(Isa::detect(), a, b, out, <T::Compute as Kernels>::add);
    Ok(())
}

/// `out = a * b`.
pub fn mul<T: Element>(a: &[T], b: &[T], out: &mut [T]) -> Result<(), OpError> {
    check_binary("mul", a, b, out)?;
    binary(Isa::detect(), a, b, out, <T::Compute as Kernels>::mul);
    Ok(())
}

/// `out = a * b + c`, computed in the compute type without fusing (16-bit types: the product
/// of two widened 16-bit values is exact in f32, so `a*b+c` is rounded once in f32, then once
/// to the output type). For `f32` the result is bitwise torch's `a * b + c`.
pub fn muladd<T: Element>(a: &[T], b: &[T], c: &[T], out: &mut [T]) -> Result<(), OpError> {
    check_len("muladd", "b", b.len(), a.len(), "len(a)")?;
    check_len("muladd", "c", c.len(), a.len(), "len(a)")?;
    check_len("muladd", "out", out.len(), a.len(), "len(a)")?;
    ternary(Isa::detect(), a, b, c, out, <T::Compute as Kernels>::muladd);
    Ok(())
}

/// `x *= s` in place, with `s` converted to the compute type first.
pub fn scale_<T: Element>(x: &mut [T], s: f64) -> Result<(), OpError> {
    scale_with(Isa::detect(), x, s);
    Ok(())
}

fn check_binary<T>(op: &'static str, a: &[T], b: &[T], out: &[T]) -> Result<(), OpError> {
    check_len(op, "b", b.len(), a.len(), "len(a)")?;
    check_len(op, "out", out.len(), a.len(), "len(a)")
}

/// Runs `k` over matching chunks (lengths already checked equal).
pub(crate) fn binary<T: Element>(isa: Isa, a: &[T], b: &[T], out: &mut [T], k: Binary<T::Compute>) {
    let parallel = out.len() >= PAR_MIN_ELEMS;
    let stream = use_streaming::<T::Compute>(isa, out.len());
    let jobs: Vec<_> = out
        .chunks_mut(CHUNK)
        .zip(a.chunks(CHUNK).zip(b.chunks(CHUNK)))
        .collect();
    par::for_each(jobs, parallel, |(o, (a, b))| {
        if let (Some(a), Some(b), Some(o)) =
            (T::as_compute(a), T::as_compute(b), T::as_compute_mut(o))
        {
            if stream {
                return streamed(isa, o, |r, ob| k(isa, &a[r.clone()], &b[r], ob));
            }
            return k(isa, a, b, o);
        }
        let zero = <T::Compute as Real>::ZERO;
        let (mut ab, mut bb, mut ob) = ([zero; STAGE], [zero; STAGE], [zero; STAGE]);
        for (o, (a, b)) in o
            .chunks_mut(STAGE)
            .zip(a.chunks(STAGE).zip(b.chunks(STAGE)))
        {
            let n = o.len();
            T::load(a, &mut ab[..n]);
            T::load(b, &mut bb[..n]);
            k(isa, &ab[..n], &bb[..n], &mut ob[..n]);
            T::store(&ob[..n], o);
        }
    });
}

pub(crate) fn ternary<T: Element>(
    isa: Isa,
    a: &[T],
    b: &[T],
    c: &[T],
    out: &mut [T],
    k: Ternary<T::Compute>,
) {
    let parallel = out.len() >= PAR_MIN_ELEMS;
    let stream = use_streaming::<T::Compute>(isa, out.len());
    let jobs: Vec<_> = out
        .chunks_mut(CHUNK)
        .zip(a.chunks(CHUNK).zip(b.chunks(CHUNK).zip(c.chunks(CHUNK))))
        .collect();
    par::for_each(jobs, parallel, |(o, (a, (b, c)))| {
        if let (Some(a), Some(b), Some(c), Some(o)) = (
            T::as_compute(a),
            T::as_compute(b),
            T::as_compute(c),
            T::as_compute_mut(o),
        ) {
            if stream {
                let f = |r: Range<usize>, ob: &mut [T::Compute]| {
                    k(isa, &a[r.clone()], &b[r.clone()], &c[r], ob)
                };
                return streamed(isa, o, f);
            }
            return k(isa, a, b, c, o);
        }
        let zero = <T::Compute as Real>::ZERO;
        let (mut ab, mut bb, mut cb, mut ob) =
            ([zero; STAGE], [zero; STAGE], [zero; STAGE], [zero; STAGE]);
        let blocks = o
            .chunks_mut(STAGE)
            .zip(a.chunks(STAGE).zip(b.chunks(STAGE).zip(c.chunks(STAGE))));
        for (o, (a, (b, c))) in blocks {
            let n = o.len();
            T::load(a, &mut ab[..n]);
            T::load(b, &mut bb[..n]);
            T::load(c, &mut cb[..n]);
            k(isa, &ab[..n], &bb[..n], &cb[..n], &mut ob[..n]);
            T::store(&ob[..n], o);
        }
    });
}

/// Computes `out` block by block into an L1-resident buffer (`f(range, buffer)`) and streams
/// each block out with non-temporal stores (see `Kernels::stream_store`).
pub(crate) fn streamed<C: Real>(
    isa: Isa,
    out: &mut [C],
    mut f: impl FnMut(Range<usize>, &mut [C]),
) {
    let mut buf = [C::ZERO; STAGE];
    for (i, o) in out.chunks_mut(STAGE).enumerate() {
        let n = o.len();
        f(i * STAGE..i * STAGE + n, &mut buf[..n]);
        C::stream_store(isa, &buf[..n], o);
    }
    C::stream_fence(isa);
}

pub(crate) fn scale_with<T: Element>(isa: Isa, x: &mut [T], s: f64) {
    let s = <T::Compute as Real>::from_f64(s);
    let parallel = x.len() >= PAR_MIN_ELEMS;
    let jobs: Vec<_> = x.chunks_mut(CHUNK).collect();
    par::for_each(jobs, parallel, |x| {
        if let Some(x) = T::as_compute_mut(x) {
            return <T::Compute as Kernels>::scale(isa, x, s);
        }
        let mut buf = [<T::Compute as Real>::ZERO; STAGE];
        for x in x.chunks_mut(STAGE) {
            let n = x.len();
            T::load(x, &mut buf[..n]);
            <T::Compute as Kernels>::scale(isa, &mut buf[..n], s);
            T::store(&buf[..n], x);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use half::{bf16, f16};

    const LENS: [usize; 7] = [0, 1, 7, 255, 257, 40_000, (1 << 20) + 3];

    /// Runs `op` on every ISA this CPU has (the public entry point only uses the best one).
    fn check_op<T: Element + Sample>(name: &str) {
        for &n in &LENS {
            let a: Vec<T> = random_vec(n, 1, 4.0);
            let b: Vec<T> = random_vec(n, 2, 4.0);
            let c: Vec<T> = random_vec(n, 3, 4.0);
            for isa in Isa::available() {
                let mut out = vec![T::from_f64_round(f64::NAN); n];
                match name {
                    "add" => binary(isa, &a, &b, &mut out, <T::Compute as Kernels>::add),
                    "mul" => binary(isa, &a, &b, &mut out, <T::Compute as Kernels>::mul),
                    "muladd" => ternary(isa, &a, &b, &c, &mut out, <T::Compute as Kernels>::muladd),
                    "scale_" => {
                        out.copy_from_slice(&a);
                        scale_with(isa, &mut out, 0.3);
                    }
                    _ => unreachable!(),
                }
                for i in 0..n {
                    let (x, y, z) = (a[i].to_compute(), b[i].to_compute(), c[i].to_compute());
                    // Bit-exact against the same arithmetic done one element at a time in
                    // the compute type (IEEE; no fusing).
                    let want = T::from_compute(match name {
                        "add" => x + y,
                        "mul" => x * y,
                        "muladd" => x * y + z,
                        _ => x * <T::Compute as Real>::from_f64(0.3),
                    });
                    assert_eq!(
                        out[i].to_f64_exact().to_bits(),
                        want.to_f64_exact().to_bits(),
                        "{name}<{}> {isa:?} n={n} i={i}",
                        T::DTYPE
                    );
                    // And close to the exact f64 result.
                    let (xf, yf, zf) = (
                        a[i].to_f64_exact(),
                        b[i].to_f64_exact(),
                        c[i].to_f64_exact(),
                    );
                    let exact = match name {
                        "add" => xf + yf,
                        "mul" => xf * yf,
                        "muladd" => xf * yf + zf,
                        _ => xf * 0.3,
                    };
                    let tol = T::RTOL * (xf.abs() * yf.abs() + zf.abs() + xf.abs() + yf.abs());
                    assert!(
                        (out[i].to_f64_exact() - exact).abs() <= tol,
                        "{name}<{}> i={i}",
                        T::DTYPE
                    );
                }
            }
        }
    }

    #[test]
    fn add_all_dtypes() {
        check_op::<f32>("add");
        check_op::<f64>("add");
        check_op::<f16>("add");
        check_op::<bf16>("add");
    }

    #[test]
    fn mul_all_dtypes() {
        check_op::<f32>("mul");
        check_op::<f64>("mul");
        check_op::<f16>("mul");
        check_op::<bf16>("mul");
    }

    #[test]
    fn muladd_all_dtypes() {
        check_op::<f32>("muladd");
        check_op::<f64>("muladd");
        check_op::<f16>("muladd");
        check_op::<bf16>("muladd");
    }

    #[test]
    fn scale_all_dtypes() {
        check_op::<f32>("scale_");
        check_op::<f64>("scale_");
        check_op::<f16>("scale_");
        check_op::<bf16>("scale_");
    }

    #[test]
    fn large_outputs_stream_and_stay_exact() {
        // Above the streaming threshold (16 MiB of output) with a ragged tail; slicing from
        // offset 1 also misaligns the output for the non-temporal stores.
        let n = (4 << 20) + 5;
        let a: Vec<f32> = random_vec(n + 1, 7, 3.0);
        let b: Vec<f32> = random_vec(n + 1, 8, 3.0);
        let c: Vec<f32> = random_vec(n + 1, 9, 3.0);
        let mut out = vec![f32::NAN; n + 1];
        muladd(&a[1..], &b[1..], &c[1..], &mut out[1..]).unwrap();
        assert!(out[0].is_nan());
        assert!((1..=n).all(|i| out[i].to_bits() == (a[i] * b[i] + c[i]).to_bits()));
        add(&a[1..], &b[1..], &mut out[1..]).unwrap();
        assert!((1..=n).all(|i| out[i].to_bits() == (a[i] + b[i]).to_bits()));
        mul(&a[..n], &b[..n], &mut out[..n]).unwrap();
        assert!((0..n).all(|i| out[i].to_bits() == (a[i] * b[i]).to_bits()));
    }

    #[test]
    fn f32_add_mul_are_exact_ieee() {
        // f32 products/sums of f32 inputs computed in f64 then rounded once equal the f32 op.
        let n = 100_003;
        let a: Vec<f32> = random_vec(n, 5, 100.0);
        let b: Vec<f32> = random_vec(n, 6, 1e-3);
        let mut s = vec![0.0f32; n];
        let mut p = vec![0.0f32; n];
        add(&a, &b, &mut s).unwrap();
        mul(&a, &b, &mut p).unwrap();
        for i in 0..n {
            assert_eq!(s[i], (a[i] as f64 + b[i] as f64) as f32);
            assert_eq!(p[i], (a[i] as f64 * b[i] as f64) as f32);
        }
    }

    #[test]
    fn public_entry_points_and_special_values() {
        let a = [1.0f32, f32::INFINITY, f32::NAN, -0.0];
        let b = [2.0f32, -f32::INFINITY, 1.0, 0.0];
        let c = [0.5f32, 1.0, 1.0, -0.0];
        let mut out = [0.0f32; 4];
        add(&a, &b, &mut out).unwrap();
        assert_eq!(out[0], 3.0);
        assert!(out[1].is_nan() && out[2].is_nan());
        assert_eq!(out[3].to_bits(), 0.0f32.to_bits());
        muladd(&a, &b, &c, &mut out).unwrap();
        assert_eq!(out[0], 2.5);
        assert_eq!(out[1], f32::NEG_INFINITY);
        let mut x = [2.0f32, -3.0];
        scale_(&mut x, -0.5).unwrap();
        assert_eq!(x, [-1.0, 1.5]);
        let mut e: [f32; 0] = [];
        scale_(&mut e, 2.0).unwrap();
        add::<f32>(&[], &[], &mut []).unwrap();
    }

    #[test]
    fn length_mismatch_names_the_argument() {
        let a = [1.0f32; 4];
        let short = [1.0f32; 3];
        let mut out = [0.0f32; 4];
        let mut out_short = [0.0f32; 3];

        let err = add(&a, &short, &mut out).unwrap_err();
        assert_eq!(
            err,
            OpError::LengthMismatch {
                op: "add",
                arg: "b",
                len: 3,
                expected: 4,
                rule: "len(a)"
            }
        );
        assert_eq!(
            err.to_string(),
            "add: argument `b` has length 3, expected 4 (= len(a))"
        );

        let err = mul(&a, &a, &mut out_short).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                op: "mul",
                arg: "out",
                len: 3,
                ..
            }
        ));

        let err = muladd(&a, &a, &short, &mut out).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                op: "muladd",
                arg: "c",
                ..
            }
        ));
        let err = muladd(&a, &short, &a, &mut out).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                op: "muladd",
                arg: "b",
                ..
            }
        ));
        let err = muladd(&a, &a, &a, &mut out_short).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                op: "muladd",
                arg: "out",
                ..
            }
        ));
        // Nothing was written on error.
        assert_eq!(out, [0.0; 4]);
        let _: &dyn std::error::Error = &err;
    }
}
