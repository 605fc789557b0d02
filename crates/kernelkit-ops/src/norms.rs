//! Row normalizations: RMSNorm (plain and fused with a residual add) and LayerNorm, forward
//! and backward.
//!
//! Inputs are `[rows, cols]` row-major with `cols = len(w)`. Every row is computed on its own
//! in the compute type (`f32` for 16-bit types) and rounded once on store; rows are split
//! into jobs of whole rows that depend only on `(rows, cols)`, so results never depend on the
//! thread count. Row sums use a fixed blocked/pairwise order (see [`sum_zip`]).
//!
//! The backward passes also reduce the weight (and bias) gradients over rows: each job sums
//! its own rows in row order into a per-job partial, and the partials are added in job order,
//! so `grad_w` / `grad_b` are bitwise reproducible for any pool size or scheduling.
//!
//! This module also holds the small row helpers shared with `softmax` and `activations`
//! ([`Float`], [`sum_zip`], [`rows_of`], ...).

use crate::element::{Element, Real};
use crate::{check_len, par, OpError, PAR_MIN_ELEMS};

/// Target elements per row job.
pub(crate) const JOB_ELEMS: usize = 64 * 1024;
/// Backward jobs hold at least this many rows so that the per-job weight-gradient partials
/// (one `cols`-long vector per job) stay a small fraction of the input even for wide rows.
const MIN_REDUCE_ROWS: usize = 8;
/// Row sums use 8 interleaved accumulators within blocks of this many elements; blocks are
/// combined pairwise.
const SUM_BLOCK: usize = 256;

// ---- shared helpers ------------------------------------------------------------------------

/// The math the row ops need beyond [`Real`], for both compute types.
///
/// `Real` is sealed to `f32`/`f64` and exposes exact conversions to and from `f64`, so these
/// are implemented once for every `Real`. Division and square root computed in `f64` and
/// rounded to `f32` are correctly rounded `f32` operations (53 >= 2*24 + 2), so they equal the
/// native `f32` ones; `ln` calls the `f32` function for `f32` (the size test is resolved at
/// compile time; the rows' exponentials are `Kernels::exp_sub`).
pub(crate) trait Float: Real {
    #[inline(always)]
    fn one() -> Self {
        Self::from_f64(1.0)
    }
    #[inline(always)]
    fn is_f32() -> bool {
        std::mem::size_of::<Self>() == 4
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        Self::from_f64(self.to_f64() / o.to_f64())
    }
    /// `1 / sqrt(self)`.
    #[inline(always)]
    fn rsqrt(self) -> Self {
        if Self::is_f32() {
            Self::from_f64((1.0 / (self.to_f64() as f32).sqrt()) as f64)
        } else {
            Self::from_f64(1.0 / self.to_f64().sqrt())
        }
    }
    #[inline(always)]
    fn ln(self) -> Self {
        if Self::is_f32() {
            Self::from_f64((self.to_f64() as f32).ln() as f64)
        } else {
            Self::from_f64(self.to_f64().ln())
        }
    }
    /// Larger of the two; a NaN `o` is skipped (callers propagate NaN through the arithmetic).
    #[inline(always)]
    fn max_of(self, o: Self) -> Self {
        if o > self {
            o
        } else {
            self
        }
    }
}

impl<C: Real> Float for C {}

/// Number of `cols`-long rows in `len` elements (`arg` names the tensor, `of` what `cols`
/// comes from). `cols == 0` only admits an empty input.
pub(crate) fn rows_of(
    op: &'static str,
    arg: &'static str,
    len: usize,
    of: &'static str,
    cols: usize,
) -> Result<usize, OpError> {
    let err = OpError::NotAMultiple {
        op,
        arg,
        len,
        of,
        divisor: cols,
    };
    match len.checked_rem(cols) {
        Some(0) => Ok(len / cols),
        Some(_) => Err(err),
        None if len == 0 => Ok(0),
        None => Err(err),
    }
}

/// Rows per job for row-local work.
pub(crate) fn rows_per_job(cols: usize) -> usize {
    (JOB_ELEMS / cols.max(1)).max(1)
}

/// `src` in the compute type: the slice itself for `f32`/`f64`, else widened into `buf`.
#[inline]
pub(crate) fn widen<'a, T: Element>(src: &'a [T], buf: &'a mut [T::Compute]) -> &'a [T::Compute] {
    match T::as_compute(src) {
        Some(s) => s,
        None => {
            let b = &mut buf[..src.len()];
            T::load(src, b);
            b
        }
    }
}

/// Runs `f` on `out` in the compute type: directly for `f32`/`f64`, else on `buf` and rounded
/// into `out` once.
#[inline]
pub(crate) fn emit<T: Element>(
    out: &mut [T],
    buf: &mut [T::Compute],
    f: impl FnOnce(&mut [T::Compute]),
) {
    match T::as_compute_mut(out) {
        Some(o) => f(o),
        None => {
            let b = &mut buf[..out.len()];
            f(b);
            T::store(b, out);
        }
    }
}

/// `sum_i f(a[i], b[i])` (equal lengths) in a fixed order: 8 interleaved accumulators within
/// blocks of [`SUM_BLOCK`], blocks combined pairwise. Deterministic, and its error grows like
/// `log(n)` rather than `n`.
#[inline]
pub(crate) fn sum_zip<C: Real>(a: &[C], b: &[C], f: impl Fn(C, C) -> C + Copy) -> C {
    let n = a.len().min(b.len());
    if n <= SUM_BLOCK {
        return block_sum(&a[..n], &b[..n], f);
    }
    let left = n.div_ceil(SUM_BLOCK) / 2 * SUM_BLOCK;
    sum_zip(&a[..left], &b[..left], f) + sum_zip(&a[left..n], &b[left..n], f)
}

#[inline(always)]
fn block_sum<C: Real>(a: &[C], b: &[C], f: impl Fn(C, C) -> C) -> C {
    let mut acc = [C::ZERO; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += f(x[l], y[l]);
        }
    }
    let mut tail = C::ZERO;
    for (&x, &y) in ar.iter().zip(br) {
        tail += f(x, y);
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}

/// `w` widened once per op.
fn widen_vec<T: Element>(w: &[T]) -> Vec<T::Compute> {
    let mut v = vec![<T::Compute as Real>::ZERO; w.len()];
    T::load(w, &mut v);
    v
}

/// `n` as the compute type (exact for any row width the ops see).
#[inline]
fn count<C: Real>(n: usize) -> C {
    C::from_f64(n as f64)
}

/// Adds the per-job partials (each `len` long) in job order. No partials give zeros.
fn reduce_partials<C: Real>(partials: Vec<Vec<C>>, len: usize) -> Vec<C> {
    let mut sums = vec![C::ZERO; len];
    for p in partials {
        for (s, v) in sums.iter_mut().zip(p) {
            *s += v;
        }
    }
    sums
}

// ---- RMSNorm -------------------------------------------------------------------------------

/// `rstd[r] = 1/sqrt(mean(x[r]^2) + eps)`, `y = (x * rstd) * w` (HF `LlamaRMSNorm`: normalize
/// in the compute type, then scale by the weight; rounded once).
pub fn rms_norm_fwd<T: Element>(
    x: &[T],
    w: &[T],
    y: &mut [T],
    rstd: &mut [T::Compute],
    cols: usize,
    eps: f64,
) -> Result<(), OpError> {
    const OP: &str = "rms_norm_fwd";
    check_len(OP, "w", w.len(), cols, "cols")?;
    let rows = rows_of(OP, "x", x.len(), "w", cols)?;
    check_len(OP, "y", y.len(), x.len(), "len(x)")?;
    check_len(OP, "rstd", rstd.len(), rows, "rows")?;
    rms_fwd_rows(None, x, w, y, None, rstd, cols, eps);
    Ok(())
}

/// `h = x + residual` (rounded to `T`, written to `new_residual`), then `y = rms_norm(h)` of
/// the rounded `h`, as an unfused model would compute it.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_fwd<T: Element>(
    x: &[T],
    residual: &[T],
    w: &[T],
    y: &mut [T],
    new_residual: &mut [T],
    rstd: &mut [T::Compute],
    cols: usize,
    eps: f64,
) -> Result<(), OpError> {
    const OP: &str = "add_rms_norm_fwd";
    check_len(OP, "w", w.len(), cols, "cols")?;
    let rows = rows_of(OP, "x", x.len(), "w", cols)?;
    check_len(OP, "residual", residual.len(), x.len(), "len(x)")?;
    check_len(OP, "y", y.len(), x.len(), "len(x)")?;
    check_len(OP, "new_residual", new_residual.len(), x.len(), "len(x)")?;
    check_len(OP, "rstd", rstd.len(), rows, "rows")?;
    rms_fwd_rows(Some(residual), x, w, y, Some(new_residual), rstd, cols, eps);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn rms_fwd_rows<T: Element>(
    residual: Option<&[T]>,
    x: &[T],
    w: &[T],
    y: &mut [T],
    new_residual: Option<&mut [T]>,
    rstd: &mut [T::Compute],
    cols: usize,
    eps: f64,
) {
    if rstd.is_empty() {
        return;
    }
    let wc = widen_vec(w);
    let eps = <T::Compute as Real>::from_f64(eps);
    let n: T::Compute = count(cols);
    let rpj = rows_per_job(cols);
    let zero = <T::Compute as Real>::ZERO;
    let mut nr_chunks: Vec<Option<&mut [T]>> = match new_residual {
        Some(nr) => nr.chunks_mut(rpj * cols).map(Some).collect(),
        None => (0..rstd.len().div_ceil(rpj)).map(|_| None).collect(),
    };
    let jobs: Vec<_> = y
        .chunks_mut(rpj * cols)
        .zip(rstd.chunks_mut(rpj))
        .zip(nr_chunks.drain(..))
        .enumerate()
        .collect();
    par::for_each(
        jobs,
        x.len() >= PAR_MIN_ELEMS,
        |(j, ((yj, rj), mut nrj))| {
            let (mut xb, mut ob) = (vec![zero; cols], vec![zero; cols]);
            let base = j * rpj * cols;
            for (r, (yr, rs)) in yj.chunks_mut(cols).zip(rj.iter_mut()).enumerate() {
                let at = base + r * cols;
                let xr = &x[at..at + cols];
                let xs: &[T::Compute] = match (residual, nrj.as_deref_mut()) {
                    (Some(res), Some(nr)) => {
                        // h = x + residual rounded to T; normalize what was stored.
                        let hr = &mut nr[r * cols..(r + 1) * cols];
                        let rr = &res[at..at + cols];
                        emit(hr, &mut ob, |h| {
                            for ((h, a), b) in h.iter_mut().zip(xr).zip(rr) {
                                *h = a.to_compute() + b.to_compute();
                            }
                        });
                        widen(hr, &mut xb)
                    }
                    _ => widen(xr, &mut xb),
                };
                let ss = sum_zip(xs, xs, |a, b| a * b);
                let rstd = (ss.div(n) + eps).rsqrt();
                *rs = rstd;
                emit(yr, &mut ob, |o| {
                    for ((o, &v), &wv) in o.iter_mut().zip(xs).zip(&wc) {
                        *o = v * rstd * wv;
                    }
                });
            }
        },
    );
}

/// `xhat = x*rstd`, `gxhat = gy*w`,
/// `gx = rstd*(gxhat - xhat*mean(gxhat*xhat))`, `gw[c] = sum_r gy*xhat` (fixed order).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_bwd<T: Element>(
    gy: &[T],
    x: &[T],
    w: &[T],
    rstd: &[T::Compute],
    gx: &mut [T],
    gw: &mut [T],
    cols: usize,
) -> Result<(), OpError> {
    const OP: &str = "rms_norm_bwd";
    check_len(OP, "w", w.len(), cols, "cols")?;
    let rows = rows_of(OP, "x", x.len(), "w", cols)?;
    check_len(OP, "gy", gy.len(), x.len(), "len(x)")?;
    check_len(OP, "rstd", rstd.len(), rows, "rows")?;
    check_len(OP, "gx", gx.len(), x.len(), "len(x)")?;
    check_len(OP, "gw", gw.len(), cols, "cols")?;
    rms_bwd_rows(gy, None, x, w, rstd, gx, gw, cols);
    Ok(())
}

/// Backward of [`add_rms_norm_fwd`]: `gh = rms_norm_bwd_x(gy; h) + g_new_residual` (both
/// `grad_x` and `grad_residual`), `gw` as in [`rms_norm_bwd`] with `h` as the input.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_bwd<T: Element>(
    gy: &[T],
    g_new_residual: &[T],
    h: &[T],
    w: &[T],
    rstd: &[T::Compute],
    gh: &mut [T],
    gw: &mut [T],
    cols: usize,
) -> Result<(), OpError> {
    const OP: &str = "add_rms_norm_bwd";
    check_len(OP, "w", w.len(), cols, "cols")?;
    let rows = rows_of(OP, "h", h.len(), "w", cols)?;
    check_len(OP, "gy", gy.len(), h.len(), "len(h)")?;
    check_len(
        OP,
        "g_new_residual",
        g_new_residual.len(),
        h.len(),
        "len(h)",
    )?;
    check_len(OP, "rstd", rstd.len(), rows, "rows")?;
    check_len(OP, "gh", gh.len(), h.len(), "len(h)")?;
    check_len(OP, "gw", gw.len(), cols, "cols")?;
    rms_bwd_rows(gy, Some(g_new_residual), h, w, rstd, gh, gw, cols);
    Ok(())
}

/// Rows per backward job (see [`MIN_REDUCE_ROWS`]).
fn bwd_rows_per_job(cols: usize) -> usize {
    (JOB_ELEMS / cols.max(1)).max(MIN_REDUCE_ROWS)
}

/// Backward jobs: `(job index, its rows of gx)`; none when there are no rows.
fn bwd_jobs<T>(gx: &mut [T], cols: usize) -> Vec<(usize, &mut [T])> {
    if gx.is_empty() || cols == 0 {
        return Vec::new();
    }
    gx.chunks_mut(bwd_rows_per_job(cols) * cols)
        .enumerate()
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn rms_bwd_rows<T: Element>(
    gy: &[T],
    extra: Option<&[T]>,
    x: &[T],
    w: &[T],
    rstd: &[T::Compute],
    gx: &mut [T],
    gw: &mut [T],
    cols: usize,
) {
    let wc = widen_vec(w);
    let n: T::Compute = count(cols);
    let rpj = bwd_rows_per_job(cols);
    let zero = <T::Compute as Real>::ZERO;
    let jobs = bwd_jobs(gx, cols);
    let partials = par::map(jobs, x.len() >= PAR_MIN_ELEMS, |(j, gxj)| {
        let (mut xb, mut gb, mut t, mut ob) = (
            vec![zero; cols],
            vec![zero; cols],
            vec![zero; cols],
            vec![zero; cols],
        );
        let mut acc = vec![zero; cols];
        for (r, gxr) in gxj.chunks_mut(cols).enumerate() {
            let row = j * rpj + r;
            let at = row * cols;
            let rs = rstd[row];
            let xs = widen(&x[at..at + cols], &mut xb);
            let gys = widen(&gy[at..at + cols], &mut gb);
            for ((t, &g), &wv) in t.iter_mut().zip(gys).zip(&wc) {
                *t = g * wv;
            }
            // mean(gxhat * xhat) = rstd * sum(gxhat * x) / cols
            let dot = sum_zip(&t, xs, |a, b| a * b);
            let m = rs * dot.div(n);
            let ex = extra.map(|e| &e[at..at + cols]);
            emit(gxr, &mut ob, |o| {
                for (c, o) in o.iter_mut().enumerate() {
                    let xhat = xs[c] * rs;
                    *o = rs * (t[c] - xhat * m);
                }
                if let Some(ex) = ex {
                    for (o, e) in o.iter_mut().zip(ex) {
                        *o += e.to_compute();
                    }
                }
            });
            for ((a, &g), &v) in acc.iter_mut().zip(gys).zip(xs) {
                *a += g * (v * rs);
            }
        }
        acc
    });
    T::store(&reduce_partials(partials, cols), gw);
}

// ---- LayerNorm -----------------------------------------------------------------------------

/// `mean[r]`, `rstd[r] = 1/sqrt(var + eps)` (biased variance, two-pass),
/// `y = (x - mean) * rstd * w + b`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_fwd<T: Element>(
    x: &[T],
    w: &[T],
    b: &[T],
    y: &mut [T],
    mean: &mut [T::Compute],
    rstd: &mut [T::Compute],
    cols: usize,
    eps: f64,
) -> Result<(), OpError> {
    const OP: &str = "layer_norm_fwd";
    check_len(OP, "w", w.len(), cols, "cols")?;
    check_len(OP, "b", b.len(), cols, "cols")?;
    let rows = rows_of(OP, "x", x.len(), "w", cols)?;
    check_len(OP, "y", y.len(), x.len(), "len(x)")?;
    check_len(OP, "mean", mean.len(), rows, "rows")?;
    check_len(OP, "rstd", rstd.len(), rows, "rows")?;
    if rows == 0 {
        return Ok(());
    }
    let (wc, bc) = (widen_vec(w), widen_vec(b));
    let eps = <T::Compute as Real>::from_f64(eps);
    let n: T::Compute = count(cols);
    let rpj = rows_per_job(cols);
    let zero = <T::Compute as Real>::ZERO;
    let jobs: Vec<_> = y
        .chunks_mut(rpj * cols)
        .zip(mean.chunks_mut(rpj).zip(rstd.chunks_mut(rpj)))
        .enumerate()
        .collect();
    par::for_each(jobs, x.len() >= PAR_MIN_ELEMS, |(j, (yj, (mj, rj)))| {
        let (mut xb, mut ob) = (vec![zero; cols], vec![zero; cols]);
        let rows = yj.chunks_mut(cols).zip(mj.iter_mut().zip(rj.iter_mut()));
        for (r, (yr, (ms, rs))) in rows.enumerate() {
            let at = (j * rpj + r) * cols;
            let xs = widen(&x[at..at + cols], &mut xb);
            let mu = sum_zip(xs, xs, |a, _| a).div(n);
            let var = sum_zip(xs, xs, |a, _| (a - mu) * (a - mu)).div(n);
            let rstd = (var + eps).rsqrt();
            *ms = mu;
            *rs = rstd;
            emit(yr, &mut ob, |o| {
                for (((o, &v), &wv), &bv) in o.iter_mut().zip(xs).zip(&wc).zip(&bc) {
                    *o = (v - mu) * rstd * wv + bv;
                }
            });
        }
    });
    Ok(())
}

/// `xhat = (x - mean)*rstd`, `g = gy*w`, `gx = rstd*(g - mean(g) - xhat*mean(g*xhat))`,
/// `gw[c] = sum_r gy*xhat`, `gb[c] = sum_r gy` (fixed order).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_bwd<T: Element>(
    gy: &[T],
    x: &[T],
    w: &[T],
    mean: &[T::Compute],
    rstd: &[T::Compute],
    gx: &mut [T],
    gw: &mut [T],
    gb: &mut [T],
    cols: usize,
) -> Result<(), OpError> {
    const OP: &str = "layer_norm_bwd";
    check_len(OP, "w", w.len(), cols, "cols")?;
    let rows = rows_of(OP, "x", x.len(), "w", cols)?;
    check_len(OP, "gy", gy.len(), x.len(), "len(x)")?;
    check_len(OP, "mean", mean.len(), rows, "rows")?;
    check_len(OP, "rstd", rstd.len(), rows, "rows")?;
    check_len(OP, "gx", gx.len(), x.len(), "len(x)")?;
    check_len(OP, "gw", gw.len(), cols, "cols")?;
    check_len(OP, "gb", gb.len(), cols, "cols")?;
    let wc = widen_vec(w);
    let n: T::Compute = count(cols);
    let rpj = bwd_rows_per_job(cols);
    let zero = <T::Compute as Real>::ZERO;
    let jobs = bwd_jobs(gx, cols);
    let partials = par::map(jobs, x.len() >= PAR_MIN_ELEMS, |(j, gxj)| {
        let (mut xb, mut gyb, mut xh, mut g, mut ob) = (
            vec![zero; cols],
            vec![zero; cols],
            vec![zero; cols],
            vec![zero; cols],
            vec![zero; cols],
        );
        // [gw partial | gb partial]
        let mut acc = vec![zero; 2 * cols];
        for (r, gxr) in gxj.chunks_mut(cols).enumerate() {
            let row = j * rpj + r;
            let at = row * cols;
            let (mu, rs) = (mean[row], rstd[row]);
            let xs = widen(&x[at..at + cols], &mut xb);
            let gys = widen(&gy[at..at + cols], &mut gyb);
            for (((xh, g), &v), (&gv, &wv)) in xh
                .iter_mut()
                .zip(g.iter_mut())
                .zip(xs)
                .zip(gys.iter().zip(&wc))
            {
                *xh = (v - mu) * rs;
                *g = gv * wv;
            }
            let m1 = sum_zip(&g, &g, |a, _| a).div(n);
            let m2 = sum_zip(&g, &xh, |a, b| a * b).div(n);
            emit(gxr, &mut ob, |o| {
                for ((o, &gv), &h) in o.iter_mut().zip(&g).zip(&xh) {
                    *o = rs * (gv - m1 - h * m2);
                }
            });
            let (aw, ab) = acc.split_at_mut(cols);
            for (((aw, ab), &gv), &h) in aw.iter_mut().zip(ab.iter_mut()).zip(gys).zip(&xh) {
                *aw += gv * h;
                *ab += gv;
            }
        }
        acc
    });
    let sums = reduce_partials(partials, 2 * cols);
    let (sw, sb) = sums.split_at(cols);
    T::store(sw, gw);
    T::store(sb, gb);
    Ok(())
}

/// Helpers shared by the row-op tests of `norms`, `softmax` and `activations`.
#[cfg(test)]
pub(crate) mod testing {
    use crate::testutil::Sample;
    use std::fmt::Display;

    /// Relative accuracy of a few operations (and a blocked sum) in the compute type.
    pub(crate) fn ceps<T: Sample>() -> f64 {
        if T::DTYPE == "float64" {
            1e-13
        } else {
            2e-6
        }
    }

    /// Machine epsilon of the compute type.
    pub(crate) fn eps_c<T: Sample>() -> f64 {
        if T::DTYPE == "float64" {
            f64::EPSILON
        } else {
            f32::EPSILON as f64
        }
    }

    /// `|got - want| <= tol`; NaN and infinities must match exactly.
    #[track_caller]
    pub(crate) fn check(got: f64, want: f64, tol: f64, ctx: impl Display) {
        if want.is_nan() {
            assert!(got.is_nan(), "{ctx}: got {got:e}, want NaN");
        } else if want.is_infinite() {
            assert_eq!(got, want, "{ctx}");
        } else {
            let err = (got - want).abs();
            assert!(
                err <= tol,
                "{ctx}: got {got:e}, want {want:e} (err {err:e}, tol {tol:e})"
            );
        }
    }

    /// Runs `f` on rayon pools of 1, 2, 3 and 8 threads.
    pub(crate) fn in_pools<R: Send>(f: impl Fn() -> R + Sync + Send) -> Vec<R> {
        [1, 2, 3, 8]
            .into_iter()
            .map(|k| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(k)
                    .build()
                    .unwrap()
                    .install(&f)
            })
            .collect()
    }

    /// Bit patterns, for exact comparisons.
    pub(crate) fn bits<T: Sample>(v: &[T]) -> Vec<u64> {
        v.iter().map(|x| x.to_f64_exact().to_bits()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::testutil::*;
    use half::{bf16, f16};

    const EPS: f64 = 1e-5;
    const SHAPES: [(usize, usize); 9] = [
        (0, 7),
        (0, 0),
        (1, 1),
        (37, 1),
        (5, 255),
        (3, 257),
        (2, 4097),
        (130, 255),
        (1, 262_144),
    ];

    fn f(v: &[impl Sample]) -> Vec<f64> {
        v.iter().map(|x| x.to_f64_exact()).collect()
    }

    /// f64 RMSNorm reference: (y, rstd).
    fn rms_ref(x: &[f64], w: &[f64], cols: usize) -> (Vec<f64>, Vec<f64>) {
        let (mut y, mut rs) = (vec![0.0; x.len()], vec![]);
        for (r, xr) in x.chunks(cols.max(1)).enumerate() {
            let ms = xr.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (ms + EPS).sqrt();
            rs.push(rstd);
            for c in 0..cols {
                y[r * cols + c] = xr[c] * rstd * w[c];
            }
        }
        (y, rs)
    }

    /// f64 RMSNorm backward: (gx, gw, per-element magnitude of gx's terms, gw magnitudes).
    fn rms_bwd_ref(
        gy: &[f64],
        x: &[f64],
        w: &[f64],
        cols: usize,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
        let (_, rs) = rms_ref(x, w, cols);
        let (mut gx, mut mag) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        let (mut gw, mut gwm) = (vec![0.0; cols], vec![0.0; cols]);
        for (r, &rstd) in rs.iter().enumerate() {
            let at = r * cols;
            let xhat: Vec<f64> = (0..cols).map(|c| x[at + c] * rstd).collect();
            let g: Vec<f64> = (0..cols).map(|c| gy[at + c] * w[c]).collect();
            let m = (0..cols).map(|c| g[c] * xhat[c]).sum::<f64>() / cols as f64;
            let ma = (0..cols).map(|c| (g[c] * xhat[c]).abs()).sum::<f64>() / cols as f64;
            for c in 0..cols {
                gx[at + c] = rstd * (g[c] - xhat[c] * m);
                mag[at + c] = rstd * (g[c].abs() + xhat[c].abs() * ma);
                gw[c] += gy[at + c] * xhat[c];
                gwm[c] += (gy[at + c] * xhat[c]).abs();
            }
        }
        (gx, gw, mag, gwm)
    }

    fn nan_vec<T: Sample>(n: usize) -> Vec<T> {
        vec![T::from_f64_round(f64::NAN); n]
    }

    fn check_rms<T: Sample>(rows: usize, cols: usize) {
        let n = rows * cols;
        let x: Vec<T> = random_vec(n, 1 + n as u64, 3.0);
        let res: Vec<T> = random_vec(n, 2 + n as u64, 3.0);
        let w: Vec<T> = random_vec(cols, 3, 2.0);
        let gy: Vec<T> = random_vec(n, 4, 1.0);
        let gnr: Vec<T> = random_vec(n, 5, 1.0);
        // 16-bit outputs may be subnormal: an absolute floor of a fraction of T::ATOL.
        let (ce, rt, at) = (ceps::<T>(), T::RTOL, T::ATOL * 0.1);
        let ctx = |what: &str, i: usize| format!("{what}<{}> {rows}x{cols} i={i}", T::DTYPE);

        for fused in [false, true] {
            let mut y = nan_vec::<T>(n);
            let mut rstd = vec![<T::Compute as Real>::from_f64(f64::NAN); rows];
            // The normalized input: x, or x + residual rounded to T.
            let h: Vec<T> = if fused {
                let mut nr = nan_vec::<T>(n);
                add_rms_norm_fwd(&x, &res, &w, &mut y, &mut nr, &mut rstd, cols, EPS).unwrap();
                for i in 0..n {
                    let want = T::from_compute(x[i].to_compute() + res[i].to_compute());
                    assert_eq!(nr[i].to_f64_exact(), want.to_f64_exact(), "{}", ctx("h", i));
                }
                nr
            } else {
                rms_norm_fwd(&x, &w, &mut y, &mut rstd, cols, EPS).unwrap();
                x.clone()
            };
            let (hf, wf, gyf) = (f(&h), f(&w), f(&gy));
            let (yr, rsr) = rms_ref(&hf, &wf, cols);
            for r in 0..rows {
                check(rstd[r].to_f64(), rsr[r], 4.0 * ce * rsr[r], ctx("rstd", r));
            }
            for i in 0..n {
                check(
                    y[i].to_f64_exact(),
                    yr[i],
                    at + rt * yr[i].abs() + 4.0 * ce * yr[i].abs(),
                    ctx("y", i),
                );
            }

            let (gxr, gwr, mag, gwm) = rms_bwd_ref(&gyf, &hf, &wf, cols);
            let mut gx = nan_vec::<T>(n);
            let mut gw = nan_vec::<T>(cols);
            if fused {
                add_rms_norm_bwd(&gy, &gnr, &h, &w, &rstd, &mut gx, &mut gw, cols).unwrap();
            } else {
                rms_norm_bwd(&gy, &h, &w, &rstd, &mut gx, &mut gw, cols).unwrap();
            }
            for i in 0..n {
                let extra = if fused { gnr[i].to_f64_exact() } else { 0.0 };
                let want = gxr[i] + extra;
                let tol = at + rt * want.abs() + 8.0 * ce * (mag[i] + extra.abs());
                check(gx[i].to_f64_exact(), want, tol, ctx("gx", i));
            }
            for c in 0..cols {
                let tol = at + rt * gwr[c].abs() + (8.0 * ce + rows as f64 * eps_c::<T>()) * gwm[c];
                check(gw[c].to_f64_exact(), gwr[c], tol, ctx("gw", c));
            }
        }
    }

    fn check_ln<T: Sample>(rows: usize, cols: usize) {
        let n = rows * cols;
        // An offset makes the mean matter (and tests the two-pass variance).
        let x: Vec<T> = random_vec::<T>(n, 7 + n as u64, 3.0)
            .into_iter()
            .map(|v| T::from_f64_round(v.to_f64_exact() + 5.0))
            .collect();
        let w: Vec<T> = random_vec(cols, 8, 2.0);
        let b: Vec<T> = random_vec(cols, 9, 1.0);
        let gy: Vec<T> = random_vec(n, 10, 1.0);
        // 16-bit outputs may be subnormal: an absolute floor of a fraction of T::ATOL.
        let (ce, rt, at) = (ceps::<T>(), T::RTOL, T::ATOL * 0.1);
        let ctx = |what: &str, i: usize| format!("{what}<{}> {rows}x{cols} i={i}", T::DTYPE);
        let (xf, wf, bf, gyf) = (f(&x), f(&w), f(&b), f(&gy));

        let mut y = nan_vec::<T>(n);
        let nanc = <T::Compute as Real>::from_f64(f64::NAN);
        let (mut mean, mut rstd) = (vec![nanc; rows], vec![nanc; rows]);
        layer_norm_fwd(&x, &w, &b, &mut y, &mut mean, &mut rstd, cols, EPS).unwrap();
        let mut gx = nan_vec::<T>(n);
        let (mut gw, mut gb) = (nan_vec::<T>(cols), nan_vec::<T>(cols));
        layer_norm_bwd(&gy, &x, &w, &mean, &rstd, &mut gx, &mut gw, &mut gb, cols).unwrap();

        let (mut gwr, mut gwm) = (vec![0.0; cols], vec![0.0; cols]);
        let (mut gbr, mut gbm) = (vec![0.0; cols], vec![0.0; cols]);
        for r in 0..rows {
            let xr = &xf[r * cols..(r + 1) * cols];
            let mu = xr.iter().sum::<f64>() / cols as f64;
            let var = xr.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / cols as f64;
            let rs = 1.0 / (var + EPS).sqrt();
            check(mean[r].to_f64(), mu, 4.0 * ce * mu.abs(), ctx("mean", r));
            check(rstd[r].to_f64(), rs, 8.0 * ce * rs, ctx("rstd", r));
            let xhat: Vec<f64> = xr.iter().map(|v| (v - mu) * rs).collect();
            let g: Vec<f64> = (0..cols).map(|c| gyf[r * cols + c] * wf[c]).collect();
            let m1 = g.iter().sum::<f64>() / cols as f64;
            let m2 = (0..cols).map(|c| g[c] * xhat[c]).sum::<f64>() / cols as f64;
            let ma = (0..cols).map(|c| (g[c] * xhat[c]).abs()).sum::<f64>() / cols as f64;
            let ga = g.iter().map(|v| v.abs()).sum::<f64>() / cols as f64;
            for c in 0..cols {
                let i = r * cols + c;
                // x - mean loses the offset's bits: scale the tolerance by |x| * rstd.
                let yw = xhat[c] * wf[c] + bf[c];
                let ymag = (xr[c].abs() * rs * wf[c]).abs() + bf[c].abs();
                check(
                    y[i].to_f64_exact(),
                    yw,
                    at + rt * yw.abs() + 8.0 * ce * ymag,
                    ctx("y", i),
                );
                let want = rs * (g[c] - m1 - xhat[c] * m2);
                let mag = rs * (g[c].abs() + ga + (xr[c].abs() * rs + xhat[c].abs()) * ma);
                check(
                    gx[i].to_f64_exact(),
                    want,
                    at + rt * want.abs() + 8.0 * ce * mag,
                    ctx("gx", i),
                );
                gwr[c] += gyf[i] * xhat[c];
                gwm[c] += (gyf[i] * xr[c] * rs).abs();
                gbr[c] += gyf[i];
                gbm[c] += gyf[i].abs();
            }
        }
        let acc = |c: usize, m: &[f64]| (8.0 * ce + rows as f64 * eps_c::<T>()) * m[c];
        for c in 0..cols {
            check(
                gw[c].to_f64_exact(),
                gwr[c],
                at + rt * gwr[c].abs() + acc(c, &gwm),
                ctx("gw", c),
            );
            check(
                gb[c].to_f64_exact(),
                gbr[c],
                at + rt * gbr[c].abs() + acc(c, &gbm),
                ctx("gb", c),
            );
        }
    }

    fn check_dtype<T: Sample>() {
        for (rows, cols) in SHAPES {
            check_rms::<T>(rows, cols);
            if cols < 100_000 {
                check_ln::<T>(rows, cols);
            }
        }
    }

    #[test]
    fn norms_f32() {
        check_dtype::<f32>();
    }

    #[test]
    fn norms_f64() {
        check_dtype::<f64>();
    }

    #[test]
    fn norms_f16() {
        check_dtype::<f16>();
    }

    #[test]
    fn norms_bf16() {
        check_dtype::<bf16>();
    }

    /// Central differences of `L = sum(y * gy)` in f64 against the backward passes.
    #[test]
    fn backward_matches_finite_differences() {
        let (rows, cols) = (3, 9);
        let n = rows * cols;
        let x: Vec<f64> = random_vec(n, 21, 2.0);
        let res: Vec<f64> = random_vec(n, 22, 2.0);
        let w: Vec<f64> = random_vec(cols, 23, 2.0);
        let b: Vec<f64> = random_vec(cols, 24, 1.0);
        let gy: Vec<f64> = random_vec(n, 25, 1.0);
        let gnr: Vec<f64> = random_vec(n, 26, 1.0);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
        // Loss of each op as a function of (x, residual, w, b).
        let rms = |x: &[f64], _: &[f64], w: &[f64], _: &[f64]| {
            let (mut y, mut rs) = (vec![0.0; n], vec![0.0; rows]);
            rms_norm_fwd(x, w, &mut y, &mut rs, cols, EPS).unwrap();
            dot(&y, &gy)
        };
        let add_rms = |x: &[f64], r: &[f64], w: &[f64], _: &[f64]| {
            let (mut y, mut h, mut rs) = (vec![0.0; n], vec![0.0; n], vec![0.0; rows]);
            add_rms_norm_fwd(x, r, w, &mut y, &mut h, &mut rs, cols, EPS).unwrap();
            dot(&y, &gy) + dot(&h, &gnr)
        };
        let ln = |x: &[f64], _: &[f64], w: &[f64], b: &[f64]| {
            let (mut y, mut m, mut rs) = (vec![0.0; n], vec![0.0; rows], vec![0.0; rows]);
            layer_norm_fwd(x, w, b, &mut y, &mut m, &mut rs, cols, EPS).unwrap();
            dot(&y, &gy)
        };
        type Loss<'a> = &'a dyn Fn(&[f64], &[f64], &[f64], &[f64]) -> f64;
        let numeric = |loss: Loss<'_>, arg: usize| {
            let mut ins = [x.clone(), res.clone(), w.clone(), b.clone()];
            let mut grad = vec![];
            for i in 0..ins[arg].len() {
                let v = ins[arg][i];
                let hstep = 1e-6 * v.abs().max(1.0);
                ins[arg][i] = v + hstep;
                let up = loss(&ins[0], &ins[1], &ins[2], &ins[3]);
                ins[arg][i] = v - hstep;
                let down = loss(&ins[0], &ins[1], &ins[2], &ins[3]);
                ins[arg][i] = v;
                grad.push((up - down) / (2.0 * hstep));
            }
            grad
        };
        let close = |got: &[f64], want: &[f64], what: &str| {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                    "{what} i={i}: {g} vs {w}"
                );
            }
        };

        let (mut y, mut rs) = (vec![0.0; n], vec![0.0; rows]);
        rms_norm_fwd(&x, &w, &mut y, &mut rs, cols, EPS).unwrap();
        let (mut gx, mut gw) = (vec![0.0; n], vec![0.0; cols]);
        rms_norm_bwd(&gy, &x, &w, &rs, &mut gx, &mut gw, cols).unwrap();
        close(&gx, &numeric(&rms, 0), "rms gx");
        close(&gw, &numeric(&rms, 2), "rms gw");

        let mut h = vec![0.0; n];
        add_rms_norm_fwd(&x, &res, &w, &mut y, &mut h, &mut rs, cols, EPS).unwrap();
        add_rms_norm_bwd(&gy, &gnr, &h, &w, &rs, &mut gx, &mut gw, cols).unwrap();
        close(&gx, &numeric(&add_rms, 0), "add_rms gx");
        close(&gx, &numeric(&add_rms, 1), "add_rms gresidual");
        close(&gw, &numeric(&add_rms, 2), "add_rms gw");

        let mut m = vec![0.0; rows];
        layer_norm_fwd(&x, &w, &b, &mut y, &mut m, &mut rs, cols, EPS).unwrap();
        let mut gb = vec![0.0; cols];
        layer_norm_bwd(&gy, &x, &w, &m, &rs, &mut gx, &mut gw, &mut gb, cols).unwrap();
        close(&gx, &numeric(&ln, 0), "ln gx");
        close(&gw, &numeric(&ln, 2), "ln gw");
        close(&gb, &numeric(&ln, 3), "ln gb");
    }

    fn determinism<T: Sample>() {
        // 2000 x 100: several backward jobs, above the parallel threshold.
        let (rows, cols) = (2000, 100);
        let n = rows * cols;
        let x: Vec<T> = random_vec(n, 31, 3.0);
        let w: Vec<T> = random_vec(cols, 32, 2.0);
        let b: Vec<T> = random_vec(cols, 33, 1.0);
        let gy: Vec<T> = random_vec(n, 34, 1.0);
        let runs = in_pools(|| {
            let zero = <T::Compute as Real>::ZERO;
            let (mut y, mut m, mut rs) = (x.clone(), vec![zero; rows], vec![zero; rows]);
            let (mut gx, mut gw, mut gb) = (x.clone(), w.clone(), w.clone());
            rms_norm_fwd(&x, &w, &mut y, &mut rs, cols, EPS).unwrap();
            rms_norm_bwd(&gy, &x, &w, &rs, &mut gx, &mut gw, cols).unwrap();
            let rms = (bits(&y), bits(&gx), bits(&gw));
            layer_norm_fwd(&x, &w, &b, &mut y, &mut m, &mut rs, cols, EPS).unwrap();
            layer_norm_bwd(&gy, &x, &w, &m, &rs, &mut gx, &mut gw, &mut gb, cols).unwrap();
            (rms, (bits(&y), bits(&gx), bits(&gw), bits(&gb)))
        });
        assert!(runs.iter().all(|r| *r == runs[0]), "{}", T::DTYPE);
    }

    #[test]
    fn weight_gradients_independent_of_thread_count() {
        determinism::<f32>();
        determinism::<f64>();
        determinism::<bf16>();
        determinism::<f16>();
    }

    #[test]
    fn empty_rows_give_zero_weight_gradients() {
        let w = [1.0f32; 3];
        let mut gw = [f32::NAN; 3];
        let mut gb = [f32::NAN; 3];
        rms_norm_bwd::<f32>(&[], &[], &w, &[], &mut [], &mut gw, 3).unwrap();
        assert_eq!(gw, [0.0; 3]);
        gw = [f32::NAN; 3];
        layer_norm_bwd::<f32>(&[], &[], &w, &[], &[], &mut [], &mut gw, &mut gb, 3).unwrap();
        assert_eq!((gw, gb), ([0.0; 3], [0.0; 3]));
    }

    #[test]
    fn bad_lengths_are_errors_and_write_nothing() {
        let x = [1.0f32; 6];
        let w = [1.0f32; 4];
        let mut y = [7.0f32; 6];
        let mut rs = [7.0f32; 2];
        let err = rms_norm_fwd(&x, &w, &mut y, &mut rs, 3, EPS).unwrap_err();
        assert!(
            matches!(err, OpError::LengthMismatch { arg: "w", .. }),
            "{err}"
        );
        let err = rms_norm_fwd(&x, &w[..3], &mut y, &mut rs[..1], 3, EPS).unwrap_err();
        assert!(
            matches!(err, OpError::LengthMismatch { arg: "rstd", .. }),
            "{err}"
        );
        let err = rms_norm_fwd(&x[..5], &w[..3], &mut y[..5], &mut rs, 3, EPS).unwrap_err();
        assert!(
            matches!(err, OpError::NotAMultiple { arg: "x", .. }),
            "{err}"
        );
        let err =
            layer_norm_fwd(&x, &w[..3], &w, &mut y, &mut rs.clone(), &mut rs, 3, EPS).unwrap_err();
        assert!(
            matches!(err, OpError::LengthMismatch { arg: "b", .. }),
            "{err}"
        );
        let mut gx = [7.0f32; 5];
        let mut gw = [7.0f32; 3];
        let err = add_rms_norm_bwd(&x, &x, &x, &w[..3], &rs, &mut gx, &mut gw, 3).unwrap_err();
        assert!(
            matches!(err, OpError::LengthMismatch { arg: "gh", .. }),
            "{err}"
        );
        assert_eq!((y, rs, gx, gw), ([7.0; 6], [7.0; 2], [7.0; 5], [7.0; 3]));
    }
}
