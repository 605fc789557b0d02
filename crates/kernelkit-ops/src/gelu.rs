//! Fused bias + GELU, forward and backward.
//!
//! `x` is `[rows, cols]` row-major with `cols = bias.len()`. The work is cut into jobs that
//! depend only on `(rows, cols)` (never on the thread count): up to 8K columns by
//! enough rows for ~256K elements. The backward pass sums each job's rows into a
//! per-job partial `grad_bias`, and the partials are added in job order, so `grad_bias` is
//! bitwise reproducible for any pool size or scheduling.

use crate::cpu::Isa;
use crate::element::{Element, Real};
use crate::elementwise::STAGE;
use crate::kernels::Kernels;
use crate::{check_len, par, OpError, PAR_MIN_ELEMS};

/// Which GELU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approx {
    /// Exact: `0.5*x*(1+erf(x/sqrt2))`.
    None,
    /// `0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715x^3)))`.
    Tanh,
}

/// Target elements per job.
const JOB_ELEMS: usize = 256 * 1024;
/// Rows wider than this are split into column blocks so that wide, short inputs still spread
/// over threads and per-job partial sums stay small.
const COL_BLOCK: usize = 8 * 1024;
/// The bias is tiled to at least this many elements so that narrow rows are processed many
/// rows per kernel call instead of one call per row.
const MIN_SEGMENT: usize = 1024;

/// `out = gelu(x + bias[col])`.
pub fn bias_gelu_fwd<T: Element>(
    x: &[T],
    bias: &[T],
    out: &mut [T],
    approx: Approx,
) -> Result<(), OpError> {
    const OP: &str = "bias_gelu_fwd";
    let rows = rows_of(OP, x.len(), bias.len())?;
    check_len(OP, "out", out.len(), x.len(), "len(x)")?;
    fwd_with(Isa::detect(), x, bias, out, approx, rows);
    Ok(())
}

/// `grad_x = grad_out * gelu'(x + bias[col])`; `grad_bias[col] = sum over rows of grad_x`,
/// accumulated in the compute type in a fixed order (deterministic).
pub fn bias_gelu_bwd<T: Element>(
    grad_out: &[T],
    x: &[T],
    bias: &[T],
    grad_x: &mut [T],
    grad_bias: &mut [T],
    approx: Approx,
) -> Result<(), OpError> {
    const OP: &str = "bias_gelu_bwd";
    let rows = rows_of(OP, x.len(), bias.len())?;
    check_len(OP, "grad_out", grad_out.len(), x.len(), "len(x)")?;
    check_len(OP, "grad_x", grad_x.len(), x.len(), "len(x)")?;
    check_len(OP, "grad_bias", grad_bias.len(), bias.len(), "len(bias)")?;
    bwd_with(
        Isa::detect(),
        grad_out,
        x,
        bias,
        grad_x,
        grad_bias,
        approx,
        rows,
    );
    Ok(())
}

/// Number of rows of `x`, which must be a whole number of `bias`-long rows.
fn rows_of(op: &'static str, x_len: usize, cols: usize) -> Result<usize, OpError> {
    let err = OpError::NotAMultiple {
        op,
        arg: "x",
        len: x_len,
        of: "bias",
        divisor: cols,
    };
    match x_len.checked_rem(cols) {
        Some(0) => Ok(x_len / cols),
        Some(_) => Err(err),
        // Empty bias: only an empty x is `[rows, 0]`.
        None if x_len == 0 => Ok(0),
        None => Err(err),
    }
}

/// One job: columns `[c0, c0 + width)` of a run of rows, as contiguous pieces of the output
/// (`(global start index, piece)`): a single piece of whole rows when rows are not split, one
/// piece per row otherwise.
struct Job<'a, T> {
    c0: usize,
    width: usize,
    pieces: Vec<(usize, &'a mut [T])>,
}

fn plan<T>(out: &mut [T], rows: usize, cols: usize) -> Vec<Job<'_, T>> {
    if rows == 0 || cols == 0 {
        return Vec::new();
    }
    if cols <= COL_BLOCK {
        let rows_per_job = (JOB_ELEMS / cols).max(1);
        return out
            .chunks_mut(rows_per_job * cols)
            .enumerate()
            .map(|(j, piece)| Job {
                c0: 0,
                width: cols,
                pieces: vec![(j * rows_per_job * cols, piece)],
            })
            .collect();
    }
    let rows_per_job = (JOB_ELEMS / COL_BLOCK).max(1);
    let blocks = cols.div_ceil(COL_BLOCK);
    let mut jobs: Vec<Job<'_, T>> = (0..rows.div_ceil(rows_per_job) * blocks)
        .map(|j| {
            let c0 = (j % blocks) * COL_BLOCK;
            Job {
                c0,
                width: COL_BLOCK.min(cols - c0),
                pieces: Vec::with_capacity(rows_per_job),
            }
        })
        .collect();
    for (r, row) in out.chunks_mut(cols).enumerate() {
        for (b, piece) in row.chunks_mut(COL_BLOCK).enumerate() {
            if let Some(job) = jobs.get_mut((r / rows_per_job) * blocks + b) {
                job.pieces.push((r * cols + b * COL_BLOCK, piece));
            }
        }
    }
    jobs
}

/// `bias` in the compute type, tiled to a whole number of rows of at least [`MIN_SEGMENT`].
fn tiled_bias<T: Element>(bias: &[T]) -> Vec<T::Compute> {
    let cols = bias.len();
    let copies = MIN_SEGMENT.div_ceil(cols.max(1)).max(1);
    let mut tiled = vec![<T::Compute as Real>::ZERO; cols * copies];
    for tile in tiled.chunks_mut(cols.max(1)) {
        T::load(bias, tile);
    }
    tiled
}

/// Splits the piece starting at column `col` into segments that each lie within the tiled
/// bias, calling `f(offset in piece, column, length)`.
fn for_each_segment(
    len: usize,
    mut col: usize,
    cols: usize,
    tiled_len: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let mut pos = 0;
    while pos < len {
        // col < cols <= tiled_len, so every segment is non-empty.
        let seg = (len - pos).min(tiled_len - col);
        f(pos, col, seg);
        pos += seg;
        col = (col + seg) % cols;
    }
}

pub(crate) fn fwd_with<T: Element>(
    isa: Isa,
    x: &[T],
    bias: &[T],
    out: &mut [T],
    approx: Approx,
    rows: usize,
) {
    let cols = bias.len();
    let tiled = tiled_bias(bias);
    let jobs = plan(out, rows, cols);
    par::for_each(jobs, x.len() >= PAR_MIN_ELEMS, |job| {
        for (start, piece) in job.pieces {
            let xs = &x[start..start + piece.len()];
            for_each_segment(
                piece.len(),
                start % cols,
                cols,
                tiled.len(),
                |pos, col, seg| {
                    fwd_segment(
                        isa,
                        approx,
                        &xs[pos..pos + seg],
                        &tiled[col..col + seg],
                        &mut piece[pos..pos + seg],
                    );
                },
            );
        }
    });
}

fn fwd_segment<T: Element>(isa: Isa, approx: Approx, x: &[T], bias: &[T::Compute], out: &mut [T]) {
    if let (Some(x), Some(o)) = (T::as_compute(x), T::as_compute_mut(out)) {
        return <T::Compute as Kernels>::gelu_fwd(isa, approx, x, bias, o);
    }
    let zero = <T::Compute as Real>::ZERO;
    let (mut xb, mut ob) = ([zero; STAGE], [zero; STAGE]);
    for (o, (x, b)) in out
        .chunks_mut(STAGE)
        .zip(x.chunks(STAGE).zip(bias.chunks(STAGE)))
    {
        let n = o.len();
        T::load(x, &mut xb[..n]);
        <T::Compute as Kernels>::gelu_fwd(isa, approx, &xb[..n], b, &mut ob[..n]);
        T::store(&ob[..n], o);
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn bwd_with<T: Element>(
    isa: Isa,
    grad_out: &[T],
    x: &[T],
    bias: &[T],
    grad_x: &mut [T],
    grad_bias: &mut [T],
    approx: Approx,
    rows: usize,
) {
    let cols = bias.len();
    let tiled = tiled_bias(bias);
    let zero = <T::Compute as Real>::ZERO;
    let jobs = plan(grad_x, rows, cols);
    let starts: Vec<(usize, usize)> = jobs.iter().map(|j| (j.c0, j.width)).collect();

    // Each job returns the column sums of its grad_x over its rows, in row order.
    let partials = par::map(jobs, x.len() >= PAR_MIN_ELEMS, |job| {
        // Whole-row jobs accumulate over the tiled bias (several rows per segment) and fold
        // the tiles afterwards; column-block jobs accumulate over their block only.
        let whole_rows = job.width == cols;
        let mut acc = vec![zero; if whole_rows { tiled.len() } else { job.width }];
        let base = if whole_rows { 0 } else { job.c0 };
        for (start, piece) in job.pieces {
            let go = &grad_out[start..start + piece.len()];
            let xs = &x[start..start + piece.len()];
            for_each_segment(
                piece.len(),
                start % cols,
                cols,
                tiled.len(),
                |pos, col, seg| {
                    bwd_segment(
                        isa,
                        approx,
                        &go[pos..pos + seg],
                        &xs[pos..pos + seg],
                        &tiled[col..col + seg],
                        &mut piece[pos..pos + seg],
                        &mut acc[col - base..col - base + seg],
                    );
                },
            );
        }
        if !whole_rows {
            return acc;
        }
        // Fold the tiles (rows r, r+copies, ... went to the same tile) in tile order.
        let mut partial = vec![zero; cols];
        for tile in acc.chunks(cols) {
            for (p, &v) in partial.iter_mut().zip(tile) {
                *p += v;
            }
        }
        partial
    });

    // Add the partials in job order (row blocks in row order for every column).
    let mut sums = vec![zero; cols];
    for ((c0, width), partial) in starts.into_iter().zip(partials) {
        for (s, v) in sums[c0..c0 + width].iter_mut().zip(partial) {
            *s += v;
        }
    }
    T::store(&sums, grad_bias);
}

fn bwd_segment<T: Element>(
    isa: Isa,
    approx: Approx,
    go: &[T],
    x: &[T],
    bias: &[T::Compute],
    gx: &mut [T],
    acc: &mut [T::Compute],
) {
    if let (Some(go), Some(x), Some(gx)) =
        (T::as_compute(go), T::as_compute(x), T::as_compute_mut(gx))
    {
        return <T::Compute as Kernels>::gelu_bwd(isa, approx, go, x, bias, gx, acc);
    }
    let zero = <T::Compute as Real>::ZERO;
    let (mut gob, mut xb, mut gxb) = ([zero; STAGE], [zero; STAGE], [zero; STAGE]);
    let blocks = gx.chunks_mut(STAGE).zip(acc.chunks_mut(STAGE)).zip(
        go.chunks(STAGE)
            .zip(x.chunks(STAGE))
            .zip(bias.chunks(STAGE)),
    );
    for ((gx, acc), ((go, x), b)) in blocks {
        let n = gx.len();
        T::load(go, &mut gob[..n]);
        T::load(x, &mut xb[..n]);
        <T::Compute as Kernels>::gelu_bwd(isa, approx, &gob[..n], &xb[..n], b, &mut gxb[..n], acc);
        T::store(&gxb[..n], gx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use half::{bf16, f16};
    use std::f64::consts::{FRAC_1_SQRT_2, PI};

    /// The brief's formulas, literally, in f64 (independent of the kernels' rewrites).
    fn ref_fwd(v: f64, approx: Approx) -> f64 {
        match approx {
            Approx::None => 0.5 * v * (1.0 + libm::erf(v * FRAC_1_SQRT_2)),
            Approx::Tanh => {
                let k = (2.0 / PI).sqrt();
                0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
            }
        }
    }

    fn ref_grad(v: f64, approx: Approx) -> f64 {
        match approx {
            Approx::None => {
                0.5 * (1.0 + libm::erf(v * FRAC_1_SQRT_2))
                    + v * (-0.5 * v * v).exp() / (2.0 * PI).sqrt()
            }
            Approx::Tanh => {
                let k = (2.0 / PI).sqrt();
                let t = (k * (v + 0.044715 * v * v * v)).tanh();
                0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)
            }
        }
    }

    /// The kernel's input for element `i`: x + bias summed in the compute type.
    fn v_of<T: Element>(x: &[T], bias: &[T], i: usize) -> f64 {
        (x[i].to_compute() + bias[i % bias.len()].to_compute()).to_f64()
    }

    /// The literal formulas lose relative accuracy for very negative inputs (1 + tanh cancels),
    /// so f64 gets an absolute floor scaled by the input.
    fn tolerances<T: Sample>(v: f64) -> (f64, f64) {
        (T::RTOL, T::ATOL * v.abs().max(1.0))
    }

    fn check_shape<T: Sample>(rows: usize, cols: usize, isas: &[Isa]) {
        let x: Vec<T> = random_vec(rows * cols, 11 + rows as u64, 5.0);
        let bias: Vec<T> = random_vec(cols, 12 + cols as u64, 1.0);
        let go: Vec<T> = random_vec(rows * cols, 13, 2.0);
        for &isa in isas {
            for approx in [Approx::None, Approx::Tanh] {
                let ctx = |what: &str, i: usize| {
                    format!(
                        "{what}<{}> {approx:?} {isa:?} {rows}x{cols} i={i}",
                        T::DTYPE
                    )
                };
                let mut out = vec![T::from_f64_round(f64::NAN); rows * cols];
                fwd_with(isa, &x, &bias, &mut out, approx, rows);
                for (i, &o) in out.iter().enumerate() {
                    let v = v_of(&x, &bias, i);
                    let (rtol, atol) = tolerances::<T>(v);
                    assert_close(
                        o.to_f64_exact(),
                        ref_fwd(v, approx),
                        rtol,
                        atol,
                        ctx("fwd", i),
                    );
                }

                let mut gx = vec![T::from_f64_round(f64::NAN); rows * cols];
                let mut gb = vec![T::from_f64_round(f64::NAN); cols];
                bwd_with(isa, &go, &x, &bias, &mut gx, &mut gb, approx, rows);
                // grad_bias: the per-element tolerances add up, plus sequential
                // accumulation error (at most ~rows * eps of the sum of magnitudes).
                let acc_eps = if T::DTYPE == "float64" {
                    f64::EPSILON
                } else {
                    f32::EPSILON as f64
                };
                let mut sums = vec![0.0f64; cols];
                let mut tols = vec![0.0f64; cols];
                for (i, &g) in gx.iter().enumerate() {
                    let v = v_of(&x, &bias, i);
                    let gof = go[i].to_f64_exact();
                    let want = gof * ref_grad(v, approx);
                    let (rtol, atol) = tolerances::<T>(v);
                    let atol = atol * gof.abs().max(1.0);
                    assert_close(g.to_f64_exact(), want, rtol, atol, ctx("bwd", i));
                    sums[i % cols] += want;
                    tols[i % cols] += (rtol + rows as f64 * acc_eps) * want.abs() + atol;
                }
                for c in 0..cols {
                    assert_close(
                        gb[c].to_f64_exact(),
                        sums[c],
                        T::RTOL,
                        tols[c],
                        ctx("grad_bias", c),
                    );
                }
            }
        }
    }

    fn check_dtype<T: Sample>() {
        let all = Isa::available();
        for (rows, cols) in [
            (0, 5),
            (0, 0),
            (1, 1),
            (7, 13),
            (1, 255),
            (3, 257),
            (255, 1),
            (40, 1000),
            (3, 20_000),
        ] {
            check_shape::<T>(rows, cols, &all);
        }
        // The large cases run once, on the ISA the public API picks.
        check_shape::<T>((1 << 20) + 3, 1, &[Isa::detect()]);
        check_shape::<T>(1, (1 << 20) + 3, &[Isa::detect()]);
    }

    #[test]
    fn gelu_f32() {
        check_dtype::<f32>();
    }

    #[test]
    fn gelu_f64() {
        check_dtype::<f64>();
    }

    #[test]
    fn gelu_f16() {
        check_dtype::<f16>();
    }

    #[test]
    fn gelu_bf16() {
        check_dtype::<bf16>();
    }

    #[test]
    fn empty_rows_zero_grad_bias() {
        let bias = [1.0f32, 2.0, 3.0];
        let mut gb = [f32::NAN; 3];
        bias_gelu_bwd::<f32>(&[], &[], &bias, &mut [], &mut gb, Approx::Tanh).unwrap();
        assert_eq!(gb, [0.0; 3]);
        bias_gelu_fwd::<f32>(&[], &bias, &mut [], Approx::None).unwrap();
        bias_gelu_fwd::<f32>(&[], &[], &mut [], Approx::None).unwrap();
        bias_gelu_bwd::<f32>(&[], &[], &[], &mut [], &mut [], Approx::None).unwrap();
    }

    #[test]
    fn special_values() {
        let x = [0.0f32, f32::NAN, f32::INFINITY, -30.0, 30.0, -1e30, 1e30];
        let bias = [0.0f32];
        for approx in [Approx::None, Approx::Tanh] {
            for isa in Isa::available() {
                let mut out = [0.0f32; 7];
                fwd_with(isa, &x, &bias, &mut out, approx, x.len());
                assert_eq!(out[0], 0.0);
                assert!(out[1].is_nan());
                assert_eq!(out[2], f32::INFINITY);
                assert_eq!(out[3], 0.0, "{approx:?}");
                assert_eq!(out[4], 30.0);
                assert_eq!(out[5], 0.0);
                assert_eq!(out[6], 1e30);

                let go = [1.0f32; 7];
                let mut gx = [0.0f32; 7];
                let mut gb = [0.0f32; 1];
                bwd_with(isa, &go, &x, &bias, &mut gx, &mut gb, approx, x.len());
                assert_eq!(gx[0], 0.5);
                assert!(gx[1].is_nan() && gb[0].is_nan());
                assert_eq!(gx[3], 0.0, "{approx:?}");
                assert_eq!(gx[4], 1.0);
                assert_eq!(gx[5], 0.0);
                assert_eq!(gx[6], 1.0);
            }
        }
    }

    #[test]
    fn grad_bias_is_deterministic() {
        let (rows, cols) = (1000, 700);
        let x: Vec<f32> = random_vec(rows * cols, 1, 4.0);
        let bias: Vec<f32> = random_vec(cols, 2, 1.0);
        let go: Vec<f32> = random_vec(rows * cols, 3, 1.0);
        let run = |threads: Option<usize>| {
            let mut gx = vec![0.0f32; rows * cols];
            let mut gb = vec![0.0f32; cols];
            let mut call =
                || bias_gelu_bwd(&go, &x, &bias, &mut gx, &mut gb, Approx::None).unwrap();
            match threads {
                None => call(),
                Some(n) => rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .unwrap()
                    .install(call),
            }
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            (bits(&gx), bits(&gb))
        };
        let first = run(None);
        assert_eq!(first, run(None));
        assert_eq!(first, run(Some(1)));
        assert_eq!(first, run(Some(3)));
        assert_eq!(first, run(Some(8)));

        // Also across the column-block layout (cols > COL_BLOCK).
        let (rows, cols) = (70, 9000);
        let x: Vec<f32> = random_vec(rows * cols, 4, 4.0);
        let bias: Vec<f32> = random_vec(cols, 5, 1.0);
        let go: Vec<f32> = random_vec(rows * cols, 6, 1.0);
        let gb_with = |n: usize| {
            let mut gx = vec![0.0f32; rows * cols];
            let mut gb = vec![0.0f32; cols];
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .unwrap()
                .install(|| bias_gelu_bwd(&go, &x, &bias, &mut gx, &mut gb, Approx::Tanh).unwrap());
            gb.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(gb_with(1), gb_with(2));
        assert_eq!(gb_with(1), gb_with(5));
    }

    #[test]
    fn length_errors_name_the_argument() {
        let x = [0.0f32; 6];
        let bias = [0.0f32; 4];
        let mut out = [0.0f32; 6];
        let err = bias_gelu_fwd(&x, &bias, &mut out, Approx::Tanh).unwrap_err();
        assert_eq!(
            err,
            OpError::NotAMultiple {
                op: "bias_gelu_fwd",
                arg: "x",
                len: 6,
                of: "bias",
                divisor: 4
            }
        );
        assert_eq!(
            err.to_string(),
            "bias_gelu_fwd: length of `x` (6) is not a multiple of the length of `bias` (4)"
        );
        let err = bias_gelu_fwd(&x, &[], &mut out, Approx::Tanh).unwrap_err();
        assert!(matches!(err, OpError::NotAMultiple { divisor: 0, .. }));

        let bias = [0.0f32; 3];
        let err = bias_gelu_fwd(&x, &bias, &mut out[..5], Approx::None).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                arg: "out",
                len: 5,
                expected: 6,
                ..
            }
        ));

        let go = [0.0f32; 6];
        let mut gx = [0.0f32; 6];
        let mut gb = [0.0f32; 3];
        let e = bias_gelu_bwd(&go[..5], &x, &bias, &mut gx, &mut gb, Approx::None).unwrap_err();
        assert!(matches!(
            e,
            OpError::LengthMismatch {
                op: "bias_gelu_bwd",
                arg: "grad_out",
                ..
            }
        ));
        let e = bias_gelu_bwd(&go, &x, &bias, &mut gx[..4], &mut gb, Approx::None).unwrap_err();
        assert!(matches!(e, OpError::LengthMismatch { arg: "grad_x", .. }));
        let e = bias_gelu_bwd(&go, &x, &bias, &mut gx, &mut gb[..2], Approx::None).unwrap_err();
        assert!(matches!(
            e,
            OpError::LengthMismatch {
                arg: "grad_bias",
                len: 2,
                expected: 3,
                ..
            }
        ));
        let e = bias_gelu_bwd(&go, &x[..5], &bias, &mut gx, &mut gb, Approx::None).unwrap_err();
        assert!(matches!(e, OpError::NotAMultiple { arg: "x", .. }));
    }
}
