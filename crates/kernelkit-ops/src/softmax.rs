//! Row softmax and softmax cross-entropy, forward and backward.
//!
//! Inputs are `[rows, cols]` row-major. Each row is computed on its own in the compute type
//! (`f32` for 16-bit types) with the shared row helpers of `norms` (fixed summation order),
//! over row jobs that depend only on `(rows, cols)`: results do not depend on the thread
//! count.

use crate::cpu::Isa;
use crate::element::{Element, Real};
use crate::kernels::Kernels;
use crate::norms::{emit, rows_of, rows_per_job, sum_zip, widen, Float};
use crate::{check_len, par, OpError, PAR_MIN_ELEMS};

/// Row maximum; NaNs are skipped (they reach the result through the arithmetic instead).
/// Eight running maxima, so that the loop vectorizes (one serial chain of compares took 60% of
/// the bf16 forward); the maximum is exact in any order, up to the sign of a zero maximum,
/// which changes `x - m` only in the sign of a zero, and no exponential.
#[inline]
fn row_max<C: Real>(xs: &[C]) -> C {
    let ninf = C::from_f64(f64::NEG_INFINITY);
    let mut lanes = [ninf; 8];
    let chunks = xs.chunks_exact(8);
    let mut m = ninf;
    for &v in chunks.remainder() {
        m = m.max_of(v);
    }
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max_of(v);
        }
    }
    lanes.iter().fold(m, |m, &l| m.max_of(l))
}

/// `y = exp(x - max) / sum(exp(x - max))` per row. A row of all `-inf` (or one holding
/// `+inf` or NaN) gives NaN, like torch.
pub fn softmax_fwd<T: Element>(x: &[T], y: &mut [T], cols: usize) -> Result<(), OpError> {
    const OP: &str = "softmax_fwd";
    rows_of(OP, "x", x.len(), "cols", cols)?;
    check_len(OP, "y", y.len(), x.len(), "len(x)")?;
    if x.is_empty() {
        return Ok(());
    }
    let rpj = rows_per_job(cols);
    let zero = <T::Compute as Real>::ZERO;
    let isa = Isa::detect();
    let jobs: Vec<_> = y.chunks_mut(rpj * cols).enumerate().collect();
    par::for_each(jobs, x.len() >= PAR_MIN_ELEMS, |(j, yj)| {
        let (mut xb, mut ob) = (vec![zero; cols], vec![zero; cols]);
        for (r, yr) in yj.chunks_mut(cols).enumerate() {
            let at = (j * rpj + r) * cols;
            let xs = widen(&x[at..at + cols], &mut xb);
            let m = row_max(xs);
            emit(yr, &mut ob, |o| {
                <T::Compute as Kernels>::exp_sub(isa, xs, m, zero, o);
                let inv = <T::Compute as Float>::one().div(sum_zip(o, o, |a, _| a));
                <T::Compute as Kernels>::scale(isa, o, inv);
            });
        }
    });
    Ok(())
}

/// `gx = y * (gy - sum(gy * y))` per row.
pub fn softmax_bwd<T: Element>(
    gy: &[T],
    y: &[T],
    gx: &mut [T],
    cols: usize,
) -> Result<(), OpError> {
    const OP: &str = "softmax_bwd";
    rows_of(OP, "y", y.len(), "cols", cols)?;
    check_len(OP, "gy", gy.len(), y.len(), "len(y)")?;
    check_len(OP, "gx", gx.len(), y.len(), "len(y)")?;
    if y.is_empty() {
        return Ok(());
    }
    let rpj = rows_per_job(cols);
    let zero = <T::Compute as Real>::ZERO;
    let jobs: Vec<_> = gx.chunks_mut(rpj * cols).enumerate().collect();
    par::for_each(jobs, y.len() >= PAR_MIN_ELEMS, |(j, gxj)| {
        let (mut yb, mut gb, mut ob) = (vec![zero; cols], vec![zero; cols], vec![zero; cols]);
        for (r, gxr) in gxj.chunks_mut(cols).enumerate() {
            let at = (j * rpj + r) * cols;
            let ys = widen(&y[at..at + cols], &mut yb);
            let gys = widen(&gy[at..at + cols], &mut gb);
            let dot = sum_zip(gys, ys, |a, b| a * b);
            emit(gxr, &mut ob, |o| {
                for ((o, &g), &p) in o.iter_mut().zip(gys).zip(ys) {
                    *o = p * (g - dot);
                }
            });
        }
    });
    Ok(())
}

/// The error for a class index outside `[0, cols)` that is not `ignore_index`.
///
/// `OpError` has no variant for a bad index yet, so this reuses `LengthMismatch` with
/// `arg = "target"`, `len` = the offending row and `expected` = `cols`; `rule` says so.
fn bad_target(op: &'static str, row: usize, value: i64, cols: usize) -> OpError {
    OpError::BadIndex {
        op,
        arg: "target",
        row,
        value,
        bound: cols,
    }
}

/// Checks every target up front (nothing is written on error).
fn check_targets(
    op: &'static str,
    target: &[i64],
    cols: usize,
    ignore_index: i64,
) -> Result<(), OpError> {
    for (row, &t) in target.iter().enumerate() {
        if t != ignore_index && !(t >= 0 && (t as u64) < cols as u64) {
            return Err(bad_target(op, row, t, cols));
        }
    }
    Ok(())
}

/// `logsumexp` of a row in two parts, `(m, log(sum(exp(x - m))))`, torch-style: the shift `m`
/// is the row max, or 0 when the max is `-inf` (a row of all `-inf` gives `(0, -inf)`). A row
/// holding `+inf` gives NaN, as torch's cross-entropy does (`inf - inf`), and so does the CUDA
/// kernel. The parts stay apart because with logits of ~1e30 tied at the max, their sum rounds
/// to `m` and loses the O(1) part that the loss and the gradient need.
/// `ex` is scratch for the row's exponentials.
#[inline]
fn logsumexp_parts<C: Real>(isa: Isa, xs: &[C], ex: &mut [C]) -> (C, C) {
    let m = row_max(xs);
    let shift = if m == C::from_f64(f64::NEG_INFINITY) {
        C::ZERO
    } else {
        m
    };
    let ex = &mut ex[..xs.len()];
    C::exp_sub(isa, xs, shift, C::ZERO, ex);
    (shift, sum_zip(ex, ex, |a, _| a).ln())
}

/// Per row: `stats[2r..2r+2] = (m, ls_m)` with `logsumexp(row) = m + ls_m` (see
/// [`logsumexp_parts`]); `loss = 0` when `target == ignore_index` (`stats` are still written);
/// else `loss = (1-ls)*(lse - x[t]) + ls*mean(lse - x)` (torch's label smoothing, `ls/cols`
/// spread uniformly), each `lse - v` formed as `ls_m - (v - m)`. Terms with a zero coefficient
/// are skipped, so `-inf` logits never produce `0 * inf`. Targets outside `[0, cols)` other
/// than `ignore_index` are an error naming `target` and the row (see [`bad_target`]).
#[allow(clippy::too_many_arguments)]
pub fn cross_entropy_fwd<T: Element>(
    logits: &[T],
    target: &[i64],
    loss: &mut [T::Compute],
    stats: &mut [T::Compute],
    cols: usize,
    ignore_index: i64,
    label_smoothing: f64,
) -> Result<(), OpError> {
    const OP: &str = "cross_entropy_fwd";
    let rows = rows_of(OP, "logits", logits.len(), "cols", cols)?;
    check_len(OP, "target", target.len(), rows, "rows")?;
    check_len(OP, "loss", loss.len(), rows, "rows")?;
    check_len(OP, "stats", stats.len(), 2 * rows, "2 * rows")?;
    check_targets(OP, target, cols, ignore_index)?;
    if rows == 0 {
        return Ok(());
    }
    let ls = <T::Compute as Real>::from_f64(label_smoothing);
    let keep = <T::Compute as Real>::from_f64(1.0 - label_smoothing);
    let zero = <T::Compute as Real>::ZERO;
    let n = <T::Compute as Real>::from_f64(cols as f64);
    let rpj = rows_per_job(cols);
    let isa = Isa::detect();
    let jobs: Vec<_> = loss
        .chunks_mut(rpj)
        .zip(stats.chunks_mut(2 * rpj))
        .enumerate()
        .collect();
    par::for_each(jobs, logits.len() >= PAR_MIN_ELEMS, |(j, (lj, sj))| {
        let (mut xb, mut eb) = (vec![zero; cols], vec![zero; cols]);
        for (r, (lo, so)) in lj.iter_mut().zip(sj.chunks_mut(2)).enumerate() {
            let row = j * rpj + r;
            let at = row * cols;
            let xs = widen(&logits[at..at + cols], &mut xb);
            let (m, ls_m) = logsumexp_parts(isa, xs, &mut eb);
            so[0] = m;
            so[1] = ls_m;
            let t = target[row];
            let mut l = zero;
            if t != ignore_index {
                if keep != zero {
                    l += keep * (ls_m - (xs[t as usize] - m));
                }
                if ls != zero {
                    l += ls * (ls_m + sum_zip(xs, xs, |a, _| m - a).div(n));
                }
            }
            *lo = l;
        }
    });
    Ok(())
}

/// [`cross_entropy_fwd`] reduced: writes `stats` as it does, and returns the row losses' sum in
/// `f64` (in row order) and the count of rows whose target is not `ignore_index`, from which the
/// caller forms the mean or the sum (one call where torch ops on the row losses cost more than
/// the rows at small sizes).
pub fn cross_entropy_sum<T: Element>(
    logits: &[T],
    target: &[i64],
    stats: &mut [T::Compute],
    cols: usize,
    ignore_index: i64,
    label_smoothing: f64,
) -> Result<(f64, usize), OpError> {
    let mut loss = vec![<T::Compute as Real>::ZERO; target.len()];
    cross_entropy_fwd(
        logits,
        target,
        &mut loss,
        stats,
        cols,
        ignore_index,
        label_smoothing,
    )?;
    let total = loss.iter().map(|&l| l.to_f64()).sum();
    let counted = target.iter().filter(|&&t| t != ignore_index).count();
    Ok((total, counted))
}

/// `grad = scale * (softmax(x) - ((1-ls)*onehot(t) + ls/cols))` with
/// `softmax = exp((x - m) - ls_m)` recomputed from the forward's `stats` (`(m, ls_m)` per row);
/// `scale = row_scale[r]` (or `row_scale[0]` when it has length 1). Ignored rows get 0.
#[allow(clippy::too_many_arguments)]
pub fn cross_entropy_bwd<T: Element>(
    logits: &[T],
    target: &[i64],
    stats: &[T::Compute],
    row_scale: &[T::Compute],
    grad: &mut [T],
    cols: usize,
    ignore_index: i64,
    label_smoothing: f64,
) -> Result<(), OpError> {
    const OP: &str = "cross_entropy_bwd";
    let rows = rows_of(OP, "logits", logits.len(), "cols", cols)?;
    check_len(OP, "target", target.len(), rows, "rows")?;
    check_len(OP, "stats", stats.len(), 2 * rows, "2 * rows")?;
    if row_scale.len() != 1 {
        check_len(OP, "row_scale", row_scale.len(), rows, "rows (or 1)")?;
    }
    check_len(OP, "grad", grad.len(), logits.len(), "len(logits)")?;
    check_targets(OP, target, cols, ignore_index)?;
    if rows == 0 {
        return Ok(());
    }
    let keep = <T::Compute as Real>::from_f64(1.0 - label_smoothing);
    let spread = <T::Compute as Real>::from_f64(label_smoothing / cols as f64);
    let zero = <T::Compute as Real>::ZERO;
    let rpj = rows_per_job(cols);
    let isa = Isa::detect();
    let jobs: Vec<_> = grad.chunks_mut(rpj * cols).enumerate().collect();
    par::for_each(jobs, logits.len() >= PAR_MIN_ELEMS, |(j, gj)| {
        let (mut xb, mut ob) = (vec![zero; cols], vec![zero; cols]);
        for (r, gr) in gj.chunks_mut(cols).enumerate() {
            let row = j * rpj + r;
            let at = row * cols;
            let t = target[row];
            if t == ignore_index {
                emit(gr, &mut ob, |o| o.fill(zero));
                continue;
            }
            let scale = row_scale[if row_scale.len() == 1 { 0 } else { row }];
            let (m, ls_m) = (stats[2 * row], stats[2 * row + 1]);
            let xs = widen(&logits[at..at + cols], &mut xb);
            emit(gr, &mut ob, |o| {
                <T::Compute as Kernels>::exp_sub(isa, xs, m, ls_m, o);
                let t = t as usize;
                let pt = o[t];
                for o in o.iter_mut() {
                    *o = scale * (*o - spread);
                }
                o[t] = scale * (pt - (keep + spread));
            });
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::norms::testing::*;
    use crate::testutil::*;
    use half::{bf16, f16};

    const NEG_INF: f64 = f64::NEG_INFINITY;

    /// Random logits with some `-inf` entries, one row of all `-inf` (when rows > 2) and,
    /// when `big`, large magnitudes.
    fn logits<T: Sample>(rows: usize, cols: usize, big: bool) -> Vec<T> {
        let scale = if big { 3e4 } else { 8.0 };
        let mut v: Vec<T> = random_vec(rows * cols, 41 + cols as u64, scale);
        for (i, x) in v.iter_mut().enumerate() {
            if (i % 7 == 3 && cols > 1) || (rows > 2 && i / cols == 2) {
                *x = T::from_f64_round(NEG_INF);
            }
        }
        v
    }

    fn ref_lse(x: &[f64]) -> f64 {
        let m = x.iter().cloned().fold(NEG_INF, f64::max);
        if m == NEG_INF {
            return NEG_INF;
        }
        m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
    }

    fn check_softmax<T: Sample>(rows: usize, cols: usize, big: bool) {
        let n = rows * cols;
        let x: Vec<T> = logits(rows, cols, big);
        let gy: Vec<T> = random_vec(n, 43, 1.0);
        let (ce, ec) = (ceps::<T>(), eps_c::<T>());
        let ctx = |w: &str, i: usize| format!("{w}<{}> {rows}x{cols} big={big} i={i}", T::DTYPE);
        let mut y = vec![T::from_f64_round(f64::NAN); n];
        softmax_fwd(&x, &mut y, cols).unwrap();
        let mut gx = vec![T::from_f64_round(f64::NAN); n];
        softmax_bwd(&gy, &y, &mut gx, cols).unwrap();
        for r in 0..rows {
            let at = r * cols;
            let xr: Vec<f64> = x[at..at + cols].iter().map(|v| v.to_f64_exact()).collect();
            let m = xr.iter().cloned().fold(NEG_INF, f64::max);
            let s = ref_lse(&xr);
            // Backward reference from the rounded y actually produced (torch's contract).
            let yf: Vec<f64> = y[at..at + cols].iter().map(|v| v.to_f64_exact()).collect();
            let gyf: Vec<f64> = gy[at..at + cols].iter().map(|v| v.to_f64_exact()).collect();
            let dot: f64 = yf.iter().zip(&gyf).map(|(a, b)| a * b).sum();
            let dmag: f64 = yf.iter().zip(&gyf).map(|(a, b)| (a * b).abs()).sum();
            for c in 0..cols {
                let want = if m == NEG_INF {
                    f64::NAN
                } else {
                    (xr[c] - s).exp()
                };
                // exp's argument x - max carries |x - max| * eps of rounding.
                // The f64 reference's own x - lse rounds at |x| + |max|.
                let rtol = T::RTOL
                    + 4.0 * ce
                    + 2.0 * ec * (xr[c] - m).abs().min(1e3)
                    + 4.0 * f64::EPSILON * (xr[c].abs() + m.abs()).min(1e6);
                let got = y[at + c].to_f64_exact();
                check(
                    got,
                    want,
                    rtol * want.abs() + T::ATOL * 0.1,
                    ctx("y", at + c),
                );
                let want = yf[c] * (gyf[c] - dot);
                let tol = T::RTOL * want.abs() + 4.0 * ce * yf[c].abs() * (gyf[c].abs() + dmag);
                check(
                    gx[at + c].to_f64_exact(),
                    want,
                    tol + T::ATOL * 0.1,
                    ctx("gx", at + c),
                );
            }
        }
    }

    fn check_ce<T: Sample>(rows: usize, cols: usize, big: bool, ls: f64, all_ignored: bool) {
        let n = rows * cols;
        let x: Vec<T> = logits(rows, cols, big);
        const IGN: i64 = -100;
        let target: Vec<i64> = (0..rows)
            .map(|r| {
                if all_ignored || r % 5 == 4 {
                    IGN
                } else {
                    ((r * 7919 + 3) % cols) as i64
                }
            })
            .collect();
        let scale: Vec<T::Compute> = (0..rows)
            .map(|r| <T::Compute as Real>::from_f64(0.5 + r as f64 * 0.25))
            .collect();
        let (ce, ec) = (ceps::<T>(), eps_c::<T>());
        let ctx =
            |w: &str, i: usize| format!("{w}<{}> {rows}x{cols} big={big} ls={ls} i={i}", T::DTYPE);
        let nanc = <T::Compute as Real>::from_f64(f64::NAN);
        let (mut loss, mut stats) = (vec![nanc; rows], vec![nanc; 2 * rows]);
        cross_entropy_fwd(&x, &target, &mut loss, &mut stats, cols, IGN, ls).unwrap();
        let mut grad = vec![T::from_f64_round(f64::NAN); n];
        cross_entropy_bwd(&x, &target, &stats, &scale, &mut grad, cols, IGN, ls).unwrap();
        // Broadcast scale gives the same as a per-row vector of that value.
        let mut grad1 = vec![T::from_f64_round(f64::NAN); n];
        let s0 = [<T::Compute as Real>::from_f64(0.5)];
        cross_entropy_bwd(&x, &target, &stats, &s0, &mut grad1, cols, IGN, ls).unwrap();
        for r in 0..rows {
            let at = r * cols;
            let xr: Vec<f64> = x[at..at + cols].iter().map(|v| v.to_f64_exact()).collect();
            let xmax = xr.iter().fold(
                0.0f64,
                |a, v| if v.is_finite() { a.max(v.abs()) } else { a },
            );
            let s = ref_lse(&xr);
            let tol_abs = 8.0 * ce * (s.abs() + xmax) + 1e-30;
            let lse = stats[2 * r].to_f64() + stats[2 * r + 1].to_f64();
            check(lse, s, tol_abs, ctx("lse", r));
            let t = target[r];
            let want = if t == IGN {
                0.0
            } else {
                let mut l = 0.0;
                if ls != 1.0 {
                    l += (1.0 - ls) * (s - xr[t as usize]);
                }
                if ls != 0.0 {
                    l += ls * xr.iter().map(|v| s - v).sum::<f64>() / cols as f64;
                }
                l
            };
            check(loss[r].to_f64(), want, tol_abs, ctx("loss", r));
            if t == IGN {
                let g = grad[at..at + cols].iter().chain(&grad1[at..at + cols]);
                assert!(
                    g.clone().all(|v| v.to_f64_exact() == 0.0),
                    "{}",
                    ctx("ignored", r)
                );
                continue;
            }
            for c in 0..cols {
                let sc = scale[r].to_f64();
                let p = (xr[c] - s).exp();
                let onehot = if c as i64 == t { 1.0 - ls } else { 0.0 };
                let want = sc * (p - (onehot + ls / cols as f64));
                // exp(x - lse) with lse off by its tolerance.
                let ptol = p * (tol_abs + 2.0 * ec * (xr[c] - s).abs().min(1e3) + 4.0 * ce);
                let tol = T::RTOL * want.abs() + sc * (ptol + 4.0 * ce) + T::ATOL * 0.1;
                check(grad[at + c].to_f64_exact(), want, tol, ctx("grad", at + c));
                let want1 = want / sc * 0.5;
                let tol1 = T::RTOL * want1.abs() + 0.5 * (ptol + 4.0 * ce) + T::ATOL * 0.1;
                check(
                    grad1[at + c].to_f64_exact(),
                    want1,
                    tol1,
                    ctx("grad1", at + c),
                );
            }
        }
    }

    /// The eight-lane row max equals the serial one (NaN skipped, -inf for none) at every
    /// length around the lanes and their remainder.
    #[test]
    fn row_max_matches_serial() {
        let serial = |xs: &[f32]| xs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max_of(v));
        for n in 0..40 {
            let base: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.5)
                .collect();
            let mut cases = vec![base.clone(), vec![f32::NEG_INFINITY; n]];
            for at in [0, n / 2, n.saturating_sub(1)] {
                if n > 0 {
                    let mut v = base.clone();
                    v[at] = f32::NAN;
                    cases.push(v);
                    let mut v = base.clone();
                    v[at] = 1e30;
                    cases.push(v);
                }
            }
            for xs in &cases {
                let (got, want) = (row_max(xs), serial(xs));
                assert!(
                    got == want && !got.is_nan(),
                    "n={n} {xs:?}: {got} != {want}"
                );
            }
        }
    }

    fn check_dtype<T: Sample>() {
        for (rows, cols) in [
            (0, 5),
            (0, 0),
            (4, 1),
            (9, 255),
            (6, 257),
            (3, 4097),
            (90, 255),
        ] {
            for big in [false, true] {
                check_softmax::<T>(rows, cols, big);
                if cols > 0 {
                    for ls in [0.0, 0.1] {
                        check_ce::<T>(rows, cols, big, ls, false);
                    }
                    check_ce::<T>(rows, cols, big, 0.1, true);
                }
            }
        }
        check_softmax::<T>(1, 262_144, false);
    }

    #[test]
    fn softmax_and_ce_f32() {
        check_dtype::<f32>();
    }

    #[test]
    fn softmax_and_ce_f64() {
        check_dtype::<f64>();
    }

    #[test]
    fn softmax_and_ce_f16() {
        check_dtype::<f16>();
    }

    #[test]
    fn softmax_and_ce_bf16() {
        check_dtype::<bf16>();
    }

    #[test]
    fn extreme_rows() {
        let inf = f32::INFINITY;
        // All -inf: NaN (torch); huge finite values: no NaN, no overflow.
        let x = [-inf, -inf, -inf, f32::MAX, -f32::MAX, 0.0, 1e30, 1e30, -inf];
        let mut y = [0.0f32; 9];
        softmax_fwd(&x, &mut y, 3).unwrap();
        assert!(y[..3].iter().all(|v| v.is_nan()));
        assert_eq!(&y[3..], &[1.0, 0.0, 0.0, 0.5, 0.5, 0.0]);
        let (mut loss, mut st) = ([0.0f32; 3], [0.0f32; 6]);
        cross_entropy_fwd(&x, &[0, 0, 1], &mut loss, &mut st, 3, -1, 0.0).unwrap();
        assert_eq!((st[0], st[1]), (0.0, -inf));
        assert!(loss[0].is_nan());
        assert_eq!((st[2], st[3], loss[1]), (f32::MAX, 0.0, 0.0));
        // Tied 1e30: the loss keeps log(2), which 1e30 + log(2) would round away.
        assert_eq!((st[4], loss[2]), (1e30, 2.0f32.ln()));
        // Ignored all -inf row: loss 0, stats still written.
        cross_entropy_fwd(&x, &[-1, -1, -1], &mut loss, &mut st, 3, -1, 0.1).unwrap();
        assert_eq!((loss, st[0], st[1]), ([0.0; 3], 0.0, -inf));
    }

    /// Analytic backward formulas against central differences, in f64.
    #[test]
    fn backward_matches_finite_differences() {
        let (rows, cols) = (3, 7);
        let n = rows * cols;
        let x: Vec<f64> = random_vec(n, 51, 3.0);
        let gy: Vec<f64> = random_vec(n, 52, 1.0);
        let target = [2i64, -100, 6];
        let scale = [1.5f64, 2.0, 0.5];
        for ls in [0.0, 0.1] {
            let sm_loss = |x: &[f64]| {
                let mut y = vec![0.0; n];
                softmax_fwd(x, &mut y, cols).unwrap();
                y.iter().zip(&gy).map(|(a, b)| a * b).sum::<f64>()
            };
            let ce_loss = |x: &[f64]| {
                let (mut l, mut s) = (vec![0.0; rows], vec![0.0; 2 * rows]);
                cross_entropy_fwd(x, &target, &mut l, &mut s, cols, -100, ls).unwrap();
                l.iter().zip(&scale).map(|(a, b)| a * b).sum::<f64>()
            };
            let mut y = vec![0.0; n];
            softmax_fwd(&x, &mut y, cols).unwrap();
            let mut gx = vec![0.0; n];
            softmax_bwd(&gy, &y, &mut gx, cols).unwrap();
            let (mut l, mut s) = (vec![0.0; rows], vec![0.0; 2 * rows]);
            cross_entropy_fwd(&x, &target, &mut l, &mut s, cols, -100, ls).unwrap();
            let mut gce = vec![0.0; n];
            cross_entropy_bwd(&x, &target, &s, &scale, &mut gce, cols, -100, ls).unwrap();
            for i in 0..n {
                let mut xp = x.clone();
                let h = 1e-6;
                xp[i] = x[i] + h;
                let (a, c) = (sm_loss(&xp), ce_loss(&xp));
                xp[i] = x[i] - h;
                let (b, d) = (sm_loss(&xp), ce_loss(&xp));
                assert!((gx[i] - (a - b) / (2.0 * h)).abs() < 1e-7, "softmax i={i}");
                assert!(
                    (gce[i] - (c - d) / (2.0 * h)).abs() < 1e-7,
                    "ce ls={ls} i={i}"
                );
            }
        }
    }

    #[test]
    fn cross_entropy_sum_is_the_row_losses_sum_and_count() {
        let (rows, cols) = (5, 7);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37) % 11) as f32 - 5.0)
            .collect();
        let target = [3i64, -100, 0, 6, -100];
        for ls in [0.0, 0.1] {
            let (mut loss, mut stats) = (vec![0f32; rows], vec![0f32; 2 * rows]);
            cross_entropy_fwd(&x, &target, &mut loss, &mut stats, cols, -100, ls).unwrap();
            let mut stats_sum = vec![7f32; 2 * rows];
            let (total, counted) =
                cross_entropy_sum(&x, &target, &mut stats_sum, cols, -100, ls).unwrap();
            assert_eq!(stats_sum, stats);
            assert_eq!(total, loss.iter().map(|&l| l as f64).sum::<f64>());
            assert!(total > 0.0);
            assert_eq!(counted, 3);
        }
        let mut stats = vec![7f32; 2 * rows];
        let bad = [3i64, -100, 0, 7, -100];
        let err = cross_entropy_sum(&x, &bad, &mut stats, cols, -100, 0.0).unwrap_err();
        assert!(matches!(err, OpError::BadIndex { row: 3, .. }), "{err}");
        assert_eq!(stats, vec![7f32; 2 * rows], "nothing written on error");
    }

    #[test]
    fn bad_targets_and_lengths() {
        let x = [0.5f32; 6];
        let (mut loss, mut lse) = ([7.0f32; 2], [7.0f32; 4]);
        for bad in [3i64, -1, i64::MAX, i64::MIN] {
            let err =
                cross_entropy_fwd(&x, &[0, bad], &mut loss, &mut lse, 3, -100, 0.0).unwrap_err();
            assert!(
                matches!(
                    err,
                    OpError::BadIndex {
                        arg: "target",
                        row: 1,
                        bound: 3,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.to_string().contains("target"));
            let mut g = [7.0f32; 6];
            let err =
                cross_entropy_bwd(&x, &[bad, 0], &lse, &[1.0], &mut g, 3, -100, 0.0).unwrap_err();
            assert!(matches!(
                err,
                OpError::BadIndex {
                    arg: "target",
                    row: 0,
                    ..
                }
            ));
            assert_eq!(g, [7.0; 6]);
        }
        assert_eq!((loss, lse), ([7.0; 2], [7.0; 4]));
        let err =
            cross_entropy_fwd(&x, &[0, 0], &mut loss, &mut lse[..2], 3, -100, 0.0).unwrap_err();
        assert!(
            matches!(err, OpError::LengthMismatch { arg: "stats", .. }),
            "{err}"
        );
        let mut g = [0.0f32; 6];
        let err =
            cross_entropy_bwd(&x, &[0, 0], &lse, &[1.0; 3], &mut g, 3, -100, 0.0).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                arg: "row_scale",
                ..
            }
        ));
        let err = softmax_fwd(&x, &mut g[..5], 3).unwrap_err();
        assert!(matches!(err, OpError::LengthMismatch { arg: "y", .. }));
        let err = softmax_fwd(&x[..5], &mut g[..5], 3).unwrap_err();
        assert!(matches!(err, OpError::NotAMultiple { arg: "x", .. }));
        // rows = 0 accepts a broadcast scale.
        cross_entropy_bwd::<f32>(&[], &[], &[], &[1.0], &mut [], 3, -100, 0.0).unwrap();
    }

    #[test]
    fn independent_of_thread_count() {
        let (rows, cols) = (600, 100);
        let x: Vec<bf16> = logits(rows, cols, false);
        let target: Vec<i64> = (0..rows as i64).map(|r| r % 100).collect();
        let runs = in_pools(|| {
            let mut y = x.clone();
            softmax_fwd(&x, &mut y, cols).unwrap();
            let (mut l, mut s) = (vec![0.0f32; rows], vec![0.0f32; 2 * rows]);
            cross_entropy_fwd(&x, &target, &mut l, &mut s, cols, -100, 0.1).unwrap();
            let mut g = x.clone();
            cross_entropy_bwd(&x, &target, &s, &[0.5], &mut g, cols, -100, 0.1).unwrap();
            (bits(&y), bits(&l), bits(&g))
        });
        assert!(runs.iter().all(|r| *r == runs[0]));
    }
}
