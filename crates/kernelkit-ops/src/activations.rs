//! SwiGLU and rotary position embeddings (RoPE), forward and backward.
//!
//! Element-wise in the compute type (`f32` for 16-bit types), rounded once on store. Work
//! is split into jobs that depend only on the shapes, so results do not depend on the thread
//! count.

use crate::cpu::Isa;
use crate::element::{Element, Real};
use crate::kernels::Kernels;
use crate::norms::{emit, widen, Float, JOB_ELEMS};
use crate::{check_len, par, OpError, PAR_MIN_ELEMS};

/// `out = silu(gate) * up`.
pub fn swiglu_fwd<T: Element>(gate: &[T], up: &[T], out: &mut [T]) -> Result<(), OpError> {
    const OP: &str = "swiglu_fwd";
    check_len(OP, "up", up.len(), gate.len(), "len(gate)")?;
    check_len(OP, "out", out.len(), gate.len(), "len(gate)")?;
    let zero = <T::Compute as Real>::ZERO;
    let isa = Isa::detect();
    let jobs: Vec<_> = out.chunks_mut(JOB_ELEMS).enumerate().collect();
    par::for_each(jobs, gate.len() >= PAR_MIN_ELEMS, |(j, oj)| {
        let n = oj.len();
        let at = j * JOB_ELEMS;
        let (mut gb, mut ub, mut ob) = (vec![zero; n], vec![zero; n], vec![zero; n]);
        let gs = widen(&gate[at..at + n], &mut gb);
        let us = widen(&up[at..at + n], &mut ub);
        emit(oj, &mut ob, |o| {
            // silu(g) = g * sigmoid(g): -0 where exp(-g) overflows
            <T::Compute as Kernels>::sigmoid(isa, gs, o);
            for ((o, &g), &u) in o.iter_mut().zip(gs).zip(us) {
                *o = g * *o * u;
            }
        });
    });
    Ok(())
}

/// `g_gate = grad * up * silu'(gate)` with `silu'(g) = s * (1 + g * (1 - s))`,
/// `s = sigmoid(g)`; `g_up = grad * silu(gate)`.
pub fn swiglu_bwd<T: Element>(
    grad: &[T],
    gate: &[T],
    up: &[T],
    g_gate: &mut [T],
    g_up: &mut [T],
) -> Result<(), OpError> {
    const OP: &str = "swiglu_bwd";
    check_len(OP, "grad", grad.len(), gate.len(), "len(gate)")?;
    check_len(OP, "up", up.len(), gate.len(), "len(gate)")?;
    check_len(OP, "g_gate", g_gate.len(), gate.len(), "len(gate)")?;
    check_len(OP, "g_up", g_up.len(), gate.len(), "len(gate)")?;
    let zero = <T::Compute as Real>::ZERO;
    let one = <T::Compute as Float>::one();
    let isa = Isa::detect();
    let jobs: Vec<_> = g_gate
        .chunks_mut(JOB_ELEMS)
        .zip(g_up.chunks_mut(JOB_ELEMS))
        .enumerate()
        .collect();
    par::for_each(jobs, gate.len() >= PAR_MIN_ELEMS, |(j, (ggj, guj))| {
        let n = ggj.len();
        let at = j * JOB_ELEMS;
        let mut bufs = [(); 5].map(|_| vec![zero; n]);
        let [db, gb, ub, ob, sb] = &mut bufs;
        let ds = widen(&grad[at..at + n], db);
        let gs = widen(&gate[at..at + n], gb);
        let us = widen(&up[at..at + n], ub);
        // sigmoid(gate), then silu(gate) = gate * sigmoid(gate), kept for g_up.
        <T::Compute as Kernels>::sigmoid(isa, gs, sb);
        emit(ggj, ob, |o| {
            for (((o, sl), &d), (&u, &g)) in o
                .iter_mut()
                .zip(sb.iter_mut())
                .zip(ds)
                .zip(us.iter().zip(gs))
            {
                let s = *sl;
                *o = d * u * (s * (one + g * (one - s)));
                *sl = g * s;
            }
        });
        emit(guj, ob, |o| {
            for ((o, &d), &silu) in o.iter_mut().zip(ds).zip(sb.iter()) {
                *o = d * silu;
            }
        });
    });
    Ok(())
}

/// Rotary embedding (HF `apply_rotary_pos_emb`). `x`, `out`: `[batch, heads, seq, dim]`
/// contiguous; `cos`/`sin` element `(b, s, d)` at `b*cos_batch_stride + s*dim + d`
/// (`cos_batch_stride = 0` broadcasts one `[seq, dim]` table over the batch), and must be
/// exactly `(batch-1)*cos_batch_stride + seq*dim` long (not checked when `batch == 0`).
///
/// Forward: `out = x*cos + rotate_half(x)*sin`, `rotate_half(x) = cat(-x[h:], x[:h])`,
/// `h = dim/2`. Backward (`backward = true`, `x` is the output gradient):
/// `gx = g*cos + rotate_half^T(g*sin)`, `rotate_half^T(v) = cat(v[h:], -v[:h])`.
/// `dim` must be even.
#[allow(clippy::too_many_arguments)]
pub fn rope<T: Element>(
    x: &[T],
    cos: &[T],
    sin: &[T],
    out: &mut [T],
    batch: usize,
    heads: usize,
    seq: usize,
    dim: usize,
    cos_batch_stride: usize,
    backward: bool,
) -> Result<(), OpError> {
    const OP: &str = "rope";
    let overflow = |what| OpError::ShapeOverflow { op: OP, what };
    if dim & 1 != 0 {
        return Err(OpError::NotAMultiple {
            op: OP,
            arg: "dim",
            len: dim,
            of: "a rotation pair",
            divisor: 2,
        });
    }
    let sd = seq
        .checked_mul(dim)
        .ok_or(overflow("batch*heads*seq*dim"))?;
    let total = batch
        .checked_mul(heads)
        .and_then(|bh| bh.checked_mul(sd))
        .ok_or(overflow("batch*heads*seq*dim"))?;
    check_len(OP, "x", x.len(), total, "batch*heads*seq*dim")?;
    check_len(OP, "out", out.len(), total, "batch*heads*seq*dim")?;
    if batch > 0 {
        const RULE: &str = "(batch-1)*cos_batch_stride + seq*dim";
        let need = (batch - 1)
            .checked_mul(cos_batch_stride)
            .and_then(|v| v.checked_add(sd))
            .ok_or(overflow(RULE))?;
        check_len(OP, "cos", cos.len(), need, RULE)?;
        check_len(OP, "sin", sin.len(), need, RULE)?;
    }
    if total == 0 {
        return Ok(());
    }
    let half = dim / 2;
    let zero = <T::Compute as Real>::ZERO;
    // Jobs of whole `dim`-long rows; row i is (b, h, s) with i = (b*heads + h)*seq + s.
    let rpj = (JOB_ELEMS / dim).max(1);
    let jobs: Vec<_> = out.chunks_mut(rpj * dim).enumerate().collect();
    par::for_each(jobs, total >= PAR_MIN_ELEMS, |(j, oj)| {
        let mut bufs = [(); 4].map(|_| vec![zero; dim]);
        let [xb, cb, sb, ob] = &mut bufs;
        for (r, orow) in oj.chunks_mut(dim).enumerate() {
            let i = j * rpj + r;
            let (s, b) = (i % seq, i / (seq * heads));
            let at = i * dim;
            let t = b * cos_batch_stride + s * dim;
            let xs = widen(&x[at..at + dim], xb);
            let cs = widen(&cos[t..t + dim], cb);
            let ss = widen(&sin[t..t + dim], sb);
            emit(orow, ob, |o| {
                let (o1, o2) = o.split_at_mut(half);
                let (x1, x2) = xs.split_at(half);
                let (c1, c2) = cs.split_at(half);
                let (s1, s2) = ss.split_at(half);
                if backward {
                    // gx[d] = g[d]cos[d] + g[d+h]sin[d+h];  gx[d+h] = g[d+h]cos[d+h] - g[d]sin[d]
                    for d in 0..half {
                        o1[d] = x1[d] * c1[d] + x2[d] * s2[d];
                        o2[d] = x2[d] * c2[d] - x1[d] * s1[d];
                    }
                } else {
                    // out[d] = x[d]cos[d] - x[d+h]sin[d];  out[d+h] = x[d+h]cos[d+h] + x[d]sin[d+h]
                    for d in 0..half {
                        o1[d] = x1[d] * c1[d] - x2[d] * s1[d];
                        o2[d] = x2[d] * c2[d] + x1[d] * s2[d];
                    }
                }
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

    fn check_swiglu<T: Sample>(n: usize) {
        let g: Vec<T> = random_vec(n, 61, 12.0);
        let u: Vec<T> = random_vec(n, 62, 3.0);
        let d: Vec<T> = random_vec(n, 63, 1.0);
        let nan = T::from_f64_round(f64::NAN);
        let (mut o, mut gg, mut gu) = (vec![nan; n], vec![nan; n], vec![nan; n]);
        swiglu_fwd(&g, &u, &mut o).unwrap();
        swiglu_bwd(&d, &g, &u, &mut gg, &mut gu).unwrap();
        let (ce, at) = (ceps::<T>(), T::ATOL * 0.1);
        for i in 0..n {
            let (gf, uf, df) = (
                g[i].to_f64_exact(),
                u[i].to_f64_exact(),
                d[i].to_f64_exact(),
            );
            let s = 1.0 / (1.0 + (-gf).exp());
            let ctx = format!("<{}> n={n} i={i} g={gf}", T::DTYPE);
            let want = gf * s * uf;
            check(
                o[i].to_f64_exact(),
                want,
                at + (T::RTOL + 4.0 * ce) * want.abs(),
                &ctx,
            );
            let want = df * gf * s;
            check(
                gu[i].to_f64_exact(),
                want,
                at + (T::RTOL + 4.0 * ce) * want.abs(),
                &ctx,
            );
            let dsilu = s * (1.0 + gf * (1.0 - s));
            let want = df * uf * dsilu;
            let mag = (df * uf).abs() * (s + (gf * s * (1.0 - s)).abs());
            check(
                gg[i].to_f64_exact(),
                want,
                at + T::RTOL * want.abs() + 8.0 * ce * mag,
                &ctx,
            );
        }
    }

    fn rope_ref(x: &[f64], cos: &[f64], sin: &[f64], shape: [usize; 5], bwd: bool) -> Vec<f64> {
        let [b_, h_, s_, d_, stride] = shape;
        let half = d_ / 2;
        let mut out = vec![0.0; x.len()];
        for b in 0..b_ {
            for h in 0..h_ {
                for s in 0..s_ {
                    let at = ((b * h_ + h) * s_ + s) * d_;
                    let t = b * stride + s * d_;
                    for d in 0..d_ {
                        let v = x[at + d];
                        out[at + d] += v * cos[t + d];
                        // rotate_half(x)[d] = d < half ? -x[d+half] : x[d-half]; as a matrix
                        // R[d][e], forward adds R x * sin, backward adds R^T (g * sin).
                        let (e, sign) = if d < half {
                            (d + half, -1.0)
                        } else {
                            (d - half, 1.0)
                        };
                        if bwd {
                            out[at + e] += sign * v * sin[t + d];
                        } else {
                            out[at + d] += sign * x[at + e] * sin[t + d];
                        }
                    }
                }
            }
        }
        out
    }

    fn check_rope<T: Sample>(batch: usize, heads: usize, seq: usize, dim: usize, bcast: bool) {
        let n = batch * heads * seq * dim;
        let stride = if bcast { 0 } else { seq * dim };
        let tl = if batch == 0 {
            0
        } else {
            (batch - 1) * stride + seq * dim
        };
        let x: Vec<T> = random_vec(n, 71, 3.0);
        let cos: Vec<T> = random_vec(tl, 72, 1.0);
        let sin: Vec<T> = random_vec(tl, 73, 1.0);
        let f = |v: &[T]| v.iter().map(|x| x.to_f64_exact()).collect::<Vec<_>>();
        for bwd in [false, true] {
            let mut out = vec![T::from_f64_round(f64::NAN); n];
            rope(
                &x, &cos, &sin, &mut out, batch, heads, seq, dim, stride, bwd,
            )
            .unwrap();
            let want = rope_ref(
                &f(&x),
                &f(&cos),
                &f(&sin),
                [batch, heads, seq, dim, stride],
                bwd,
            );
            let mag = rope_ref(
                &f(&x).iter().map(|v| v.abs()).collect::<Vec<_>>(),
                &f(&cos).iter().map(|v| v.abs()).collect::<Vec<_>>(),
                &f(&sin).iter().map(|v| v.abs()).collect::<Vec<_>>(),
                [batch, heads, seq, dim, stride],
                false,
            );
            for i in 0..n {
                // |R| entries are all +1 in `mag` except the sign; use a symmetric bound.
                let tol = T::RTOL * want[i].abs() + 4.0 * ceps::<T>() * 6.0 * mag[i].abs().max(1.0);
                let ctx = format!(
                    "rope<{}> bwd={bwd} {batch}x{heads}x{seq}x{dim} i={i}",
                    T::DTYPE
                );
                check(out[i].to_f64_exact(), want[i], tol + T::ATOL * 0.1, ctx);
            }
        }
    }

    fn check_dtype<T: Sample>() {
        for n in [0, 1, 255, 257, 4097, 70_000] {
            check_swiglu::<T>(n);
        }
        for (b, h, s, d) in [
            (0, 2, 3, 4),
            (1, 1, 1, 2),
            (2, 3, 5, 8),
            (2, 2, 3, 64),
            (1, 2, 9, 256),
        ] {
            check_rope::<T>(b, h, s, d, false);
            check_rope::<T>(b, h, s, d, true);
        }
    }

    #[test]
    fn activations_f32() {
        check_dtype::<f32>();
    }

    #[test]
    fn activations_f64() {
        check_dtype::<f64>();
    }

    #[test]
    fn activations_f16() {
        check_dtype::<f16>();
    }

    #[test]
    fn activations_bf16() {
        check_dtype::<bf16>();
    }

    /// The backward is the transpose of the forward: <R x, g> == <x, R^T g>.
    #[test]
    fn rope_backward_is_adjoint() {
        let (b, h, s, d) = (2, 3, 4, 6);
        let n = b * h * s * d;
        let x: Vec<f64> = random_vec(n, 81, 1.0);
        let g: Vec<f64> = random_vec(n, 82, 1.0);
        let cos: Vec<f64> = random_vec(b * s * d, 83, 1.0);
        let sin: Vec<f64> = random_vec(b * s * d, 84, 1.0);
        let (mut y, mut gx) = (vec![0.0; n], vec![0.0; n]);
        rope(&x, &cos, &sin, &mut y, b, h, s, d, s * d, false).unwrap();
        rope(&g, &cos, &sin, &mut gx, b, h, s, d, s * d, true).unwrap();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
        assert!((dot(&y, &g) - dot(&x, &gx)).abs() < 1e-12);
    }

    #[test]
    fn swiglu_backward_matches_finite_differences() {
        let g: Vec<f64> = random_vec(50, 91, 6.0);
        let u: Vec<f64> = random_vec(50, 92, 2.0);
        let d: Vec<f64> = random_vec(50, 93, 1.0);
        let (mut gg, mut gu) = (vec![0.0; 50], vec![0.0; 50]);
        swiglu_bwd(&d, &g, &u, &mut gg, &mut gu).unwrap();
        for i in 0..50 {
            let f = |gv: f64, uv: f64| {
                let mut o = [0.0];
                swiglu_fwd(&[gv], &[uv], &mut o).unwrap();
                o[0] * d[i]
            };
            let h = 1e-6;
            let ng = (f(g[i] + h, u[i]) - f(g[i] - h, u[i])) / (2.0 * h);
            let nu = (f(g[i], u[i] + h) - f(g[i], u[i] - h)) / (2.0 * h);
            assert!(
                (gg[i] - ng).abs() < 1e-7 && (gu[i] - nu).abs() < 1e-7,
                "i={i}"
            );
        }
    }

    #[test]
    fn errors() {
        let x = [1.0f32; 12];
        let mut o = [7.0f32; 12];
        let err = rope(&x, &x[..3], &x[..3], &mut o, 1, 1, 4, 3, 0, false).unwrap_err();
        assert!(matches!(err, OpError::NotAMultiple { arg: "dim", .. }));
        let err = rope(&x, &x[..6], &x[..8], &mut o, 1, 2, 2, 2, 0, false).unwrap_err();
        assert!(matches!(err, OpError::LengthMismatch { arg: "x", .. }));
        let err = rope(&x, &x[..4], &x[..5], &mut o, 1, 3, 2, 2, 0, false).unwrap_err();
        assert!(matches!(err, OpError::LengthMismatch { arg: "sin", .. }));
        let err = rope(&x, &x, &x, &mut o, usize::MAX, 3, 2, 2, 0, false).unwrap_err();
        assert!(matches!(err, OpError::ShapeOverflow { .. }));
        let err = swiglu_fwd(&x, &x[..3], &mut o).unwrap_err();
        assert!(matches!(err, OpError::LengthMismatch { arg: "up", .. }));
        assert_eq!(o, [7.0; 12]);
        // Extreme gates: no NaN.
        let g = [-1e4f32, 1e4, -88.0, 100.0];
        let mut out = [0.0f32; 4];
        swiglu_fwd(&g, &[1.0; 4], &mut out).unwrap();
        assert!(out.iter().all(|v| !v.is_nan()));
        let (mut gg, mut gu) = ([0.0f32; 4], [0.0f32; 4]);
        swiglu_bwd(&[1.0; 4], &g, &[1.0; 4], &mut gg, &mut gu).unwrap();
        assert!(gg.iter().chain(&gu).all(|v| !v.is_nan()));
    }
}
