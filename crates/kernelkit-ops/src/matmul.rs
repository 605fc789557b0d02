//! Row-major matmul `out[m,n] = A[m,k] @ B[k,n]`, accumulated in the compute type.
//!
//! GotoBLAS-style blocking: B is packed once (converted to the compute type) into panels of
//! `NR` columns; each job owns a block of rows of `out` and, per `NC`-wide column block and
//! `KC`-deep slice of k, packs its rows of A into `MR`-row panels and runs the `MR × NR`
//! register-tile micro-kernel (`Kernels::gemm_micro`). A `KC × NR` B panel (16 KiB for f32)
//! stays in L1 while the job's packed A block (`MC × KC`, 96 KiB) streams from L2. Partial sums
//! live in a per-job accumulator in the compute type, so 16-bit outputs are rounded once.
//!
//! Jobs are row blocks (at most `MC` rows, fewer when `m` is small so both cores get work).
//! Each output element is summed over k in the same order whatever the blocking, so results
//! do not depend on the thread count.

use crate::cpu::Isa;
use crate::element::{Element, Real};
use crate::kernels::Kernels;
use crate::{check_len, par, OpError};

/// Depth of one packed slice of k.
const KC: usize = 256;
/// Max rows per job (a multiple of every `MR`: 6 for f32, 4 for f64).
const MC: usize = 96;
/// Columns per accumulator block (a multiple of every `NR`: 16 for f32, 8 for f64).
const NC: usize = 256;
/// Below this many multiply-adds the product runs on the calling thread.
const PAR_MIN_MACS: usize = 64 * 64 * 64;

/// `out = a @ b` with `a` `[m, k]`, `b` `[k, n]`, `out` `[m, n]`, all row-major.
pub fn matmul<T: Element>(
    a: &[T],
    b: &[T],
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
) -> Result<(), OpError> {
    const OP: &str = "matmul";
    let product = |x: usize, y: usize, what| {
        x.checked_mul(y)
            .ok_or(OpError::ShapeOverflow { op: OP, what })
    };
    let (mk, kn, mn) = (
        product(m, k, "m*k")?,
        product(k, n, "k*n")?,
        product(m, n, "m*n")?,
    );
    check_len(OP, "a", a.len(), mk, "m*k")?;
    check_len(OP, "b", b.len(), kn, "k*n")?;
    check_len(OP, "out", out.len(), mn, "m*n")?;
    matmul_with(Isa::detect(), a, b, out, m, k, n);
    Ok(())
}

pub(crate) fn matmul_with<T: Element>(
    isa: Isa,
    a: &[T],
    b: &[T],
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
) {
    let zero = <T::Compute as Real>::ZERO;
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(T::from_compute(zero));
        return;
    }
    let (mr, nr) = (<T::Compute as Kernels>::MR, <T::Compute as Kernels>::NR);
    let parallel = m.saturating_mul(n).saturating_mul(k) >= PAR_MIN_MACS;

    // B -> panels of nr columns, each k rows of nr values; the padding columns stay zero.
    let mut packed_b = vec![zero; n.div_ceil(nr) * k * nr];
    let jobs: Vec<_> = packed_b.chunks_mut(k * nr).enumerate().collect();
    par::for_each(jobs, parallel, |(p, panel)| {
        let c0 = p * nr;
        let width = nr.min(n - c0);
        for (dst, src_row) in panel.chunks_mut(nr).zip(b.chunks(n)) {
            for (d, s) in dst.iter_mut().zip(&src_row[c0..c0 + width]) {
                *d = s.to_compute();
            }
        }
    });

    // Enough row blocks for ~2 jobs per thread when m is small.
    let threads = rayon::current_num_threads().max(1);
    let mc = if parallel {
        MC.min(m.div_ceil(2 * threads).div_ceil(mr) * mr)
    } else {
        MC
    };
    let jobs: Vec<_> = out.chunks_mut(mc * n).enumerate().collect();
    let packed_b = &packed_b;
    par::for_each(jobs, parallel, |(blk, rows_out)| {
        row_block(isa, &a[blk * mc * k..], packed_b, rows_out, k, n)
    });
}

/// Computes `out` (a block of whole rows) from the matching rows of `a` (starting at `a[0]`).
fn row_block<T: Element>(
    isa: Isa,
    a: &[T],
    packed_b: &[T::Compute],
    out: &mut [T],
    k: usize,
    n: usize,
) {
    let zero = <T::Compute as Real>::ZERO;
    let (mr, nr) = (<T::Compute as Kernels>::MR, <T::Compute as Kernels>::NR);
    let rows = out.len() / n;
    let a_panels = rows.div_ceil(mr);
    let b_panels = n.div_ceil(nr);
    let panels_per_block = NC / nr;
    let tile = mr * nr;

    let mut packed_a = vec![zero; a_panels * mr * KC.min(k)];
    let mut acc = vec![zero; a_panels * panels_per_block * tile];

    for jc in (0..b_panels).step_by(panels_per_block) {
        let block_panels = panels_per_block.min(b_panels - jc);
        acc.fill(zero);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            // A rows -> panels of mr rows, stored k-major (kc × mr); padding rows are zero.
            for (ir, panel) in packed_a.chunks_mut(kc * mr).take(a_panels).enumerate() {
                for i in 0..mr {
                    let row = ir * mr + i;
                    let src = a
                        .get(row * k + pc..row * k + pc + kc)
                        .filter(|_| row < rows);
                    for (kk, d) in panel.iter_mut().skip(i).step_by(mr).enumerate() {
                        *d = src.map_or(zero, |s| s[kk].to_compute());
                    }
                }
            }
            for jp in 0..block_panels {
                let b_off = (jc + jp) * k * nr + pc * nr;
                let b_panel = &packed_b[b_off..b_off + kc * nr];
                for (ir, a_panel) in packed_a.chunks(kc * mr).take(a_panels).enumerate() {
                    let t0 = (ir * panels_per_block + jp) * tile;
                    <T::Compute as Kernels>::gemm_micro(
                        isa,
                        a_panel,
                        b_panel,
                        &mut acc[t0..t0 + tile],
                    );
                }
            }
        }
        // Round the finished tiles into `out` (dropping padding rows/columns).
        for (row, out_row) in out.chunks_mut(n).enumerate() {
            let (ir, i) = (row / mr, row % mr);
            for jp in 0..block_panels {
                let c0 = (jc + jp) * nr;
                let width = nr.min(n - c0);
                let t0 = (ir * panels_per_block + jp) * tile + i * nr;
                T::store(&acc[t0..t0 + width], &mut out_row[c0..c0 + width]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use half::{bf16, f16};

    fn check<T: Sample>(m: usize, k: usize, n: usize) {
        let a: Vec<T> = random_vec(m * k, 21, 2.0);
        let b: Vec<T> = random_vec(k * n, 22, 2.0);
        let acc_eps = if T::DTYPE == "float64" {
            f64::EPSILON
        } else {
            f32::EPSILON as f64
        };
        for isa in Isa::available() {
            let mut out = vec![T::from_f64_round(f64::NAN); m * n];
            matmul_with(isa, &a, &b, &mut out, m, k, n);
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut mag) = (0.0f64, 0.0f64);
                    for p in 0..k {
                        let prod = a[i * k + p].to_f64_exact() * b[p * n + j].to_f64_exact();
                        want += prod;
                        mag += prod.abs();
                    }
                    let tol = T::RTOL * want.abs() + 2.0 * k as f64 * acc_eps * mag + T::ATOL;
                    let ctx = format!("matmul<{}> {isa:?} {m}x{k}x{n} [{i},{j}]", T::DTYPE);
                    assert_close(out[i * n + j].to_f64_exact(), want, 0.0, tol, ctx);
                }
            }
        }
    }

    fn check_dtype<T: Sample>() {
        for (m, k, n) in [
            (0, 3, 4),
            (3, 0, 4),
            (3, 4, 0),
            (1, 1, 1),
            (7, 13, 5),
            (129, 65, 33),
            (2, 300, 17),
            (70, 520, 300),
        ] {
            check::<T>(m, k, n);
        }
    }

    #[test]
    fn matmul_f32() {
        check_dtype::<f32>();
    }

    #[test]
    fn matmul_f64() {
        check_dtype::<f64>();
    }

    #[test]
    fn matmul_f16() {
        check_dtype::<f16>();
    }

    #[test]
    fn matmul_bf16() {
        check_dtype::<bf16>();
    }

    #[test]
    fn k_zero_gives_zeros() {
        let mut out = [f32::NAN; 6];
        matmul::<f32>(&[], &[], &mut out, 2, 0, 3).unwrap();
        assert_eq!(out, [0.0; 6]);
    }

    #[test]
    fn small_exact_product() {
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2x3
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0]; // 3x2
        let mut out = [0.0f32; 4];
        matmul(&a, &b, &mut out, 2, 3, 2).unwrap();
        assert_eq!(out, [58.0, 64.0, 139.0, 154.0]);
    }

    #[test]
    fn result_independent_of_thread_count() {
        let (m, k, n) = (150, 300, 70);
        let a: Vec<f32> = random_vec(m * k, 1, 1.0);
        let b: Vec<f32> = random_vec(k * n, 2, 1.0);
        let run = |threads: usize| {
            let mut out = vec![0.0f32; m * n];
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| matmul(&a, &b, &mut out, m, k, n).unwrap());
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(2));
        assert_eq!(run(1), run(7));
    }

    #[test]
    fn shape_errors_name_the_argument() {
        let a = [0.0f32; 6];
        let b = [0.0f32; 12];
        let mut out = [0.0f32; 8];
        // (2,3,4) is valid: 6, 12, 8.
        matmul(&a, &b, &mut out, 2, 3, 4).unwrap();

        let err = matmul(&a[..5], &b, &mut out, 2, 3, 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "matmul: argument `a` has length 5, expected 6 (= m*k)"
        );
        let err = matmul(&a, &b[..11], &mut out, 2, 3, 4).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                arg: "b",
                expected: 12,
                ..
            }
        ));
        let err = matmul(&a, &b, &mut out[..7], 2, 3, 4).unwrap_err();
        assert!(matches!(
            err,
            OpError::LengthMismatch {
                arg: "out",
                expected: 8,
                rule: "m*n",
                ..
            }
        ));
        let err = matmul::<f32>(&[], &[], &mut [], usize::MAX, 2, 0).unwrap_err();
        assert_eq!(
            err,
            OpError::ShapeOverflow {
                op: "matmul",
                what: "m*k"
            }
        );
    }
}
