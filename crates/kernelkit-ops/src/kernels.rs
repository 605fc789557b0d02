//! Slice kernels in the compute types (`f32`, `f64`). All slices passed to one call have the
//! same length; the drivers in `elementwise`, `gelu` and `matmul` guarantee it.
//!
//! `f32` kernels are multiversioned (portable / AVX2+FMA, see `cpu::multiversion!`); `f64`
//! kernels are plain loops (f64 speed is not a goal, except for matmul's micro-kernel).

use crate::approx::{self, wide};
use crate::cpu::{madd, multiversion, FmaMode, Isa};
use crate::gelu::Approx;

/// The per-compute-type kernels (crate-private: reachable only through `Real`'s bound).
pub trait Kernels: Sized {
    /// Rows × columns of the matmul register tile (see `matmul`).
    const MR: usize;
    const NR: usize;

    fn add(isa: Isa, a: &[Self], b: &[Self], out: &mut [Self]);
    fn mul(isa: Isa, a: &[Self], b: &[Self], out: &mut [Self]);
    /// `a*b+c`, never fused (same result on every CPU, and bitwise torch's `a * b + c`).
    fn muladd(isa: Isa, a: &[Self], b: &[Self], c: &[Self], out: &mut [Self]);
    fn scale(isa: Isa, x: &mut [Self], s: Self);
    /// `out = exp((x - a) - b)`: softmax's and cross-entropy's exponentials (`f32`: the branch-free
    /// `approx::exp`, 1.05 ulp, which vectorizes where std's `expf` is a call per element).
    fn exp_sub(isa: Isa, x: &[Self], a: Self, b: Self, out: &mut [Self]);
    /// `out = 1 / (1 + exp(-x))` (SwiGLU's gate), 0 where `exp(-x)` overflows; `f32` as `exp_sub`.
    fn sigmoid(isa: Isa, x: &[Self], out: &mut [Self]);
    /// `out = gelu(x + bias)`.
    fn gelu_fwd(isa: Isa, approx: Approx, x: &[Self], bias: &[Self], out: &mut [Self]);
    /// `gx = go * gelu'(x + bias)` and `acc += gx`.
    #[allow(clippy::too_many_arguments)]
    fn gelu_bwd(
        isa: Isa,
        approx: Approx,
        go: &[Self],
        x: &[Self],
        bias: &[Self],
        gx: &mut [Self],
        acc: &mut [Self],
    );
    /// Matmul micro-kernel: `acc[i*NR + j] += sum_p a[p*MR + i] * b[p*NR + j]`, with `a` a
    /// packed `kc × MR` panel and `b` a packed `kc × NR` panel.
    fn gemm_micro(isa: Isa, a: &[Self], b: &[Self], acc: &mut [Self]);
    /// `dst.copy_from_slice(src)` with non-temporal (cache-bypassing) stores where `isa` has
    /// them, so large outputs are not read into cache before being overwritten. Callers must
    /// call [`Kernels::stream_fence`] before the data is handed to another thread.
    fn stream_store(isa: Isa, src: &[Self], dst: &mut [Self]);
    fn stream_fence(isa: Isa) {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx2Fma {
            // SAFETY: AVX2 was detected (see `Isa`).
            unsafe { sfence() }
        }
        let _ = isa;
    }
}

/// Outputs at least this large (bytes) are written with non-temporal stores: they exceed the
/// caches anyway, and skipping the read-for-ownership saves a fifth of muladd's traffic.
const STREAM_MIN_BYTES: usize = 16 << 20;

/// Whether an op writing `len` elements of `C` should stream its output.
pub(crate) fn use_streaming<C>(isa: Isa, len: usize) -> bool {
    isa == Isa::Avx2Fma && len.saturating_mul(std::mem::size_of::<C>()) >= STREAM_MIN_BYTES
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sfence() {
    std::arch::x86_64::_mm_sfence()
}

/// Non-temporal copy: unaligned head and tail copied normally, 32-byte-aligned body streamed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_copy_avx2<C: Copy>(src: &[C], dst: &mut [C]) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    let n = src.len().min(dst.len());
    let per_vec = 32 / std::mem::size_of::<C>().max(1);
    let head = dst.as_ptr().align_offset(32).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let mut i = head;
    while i + per_vec <= n {
        // SAFETY: i + per_vec <= n keeps both 32-byte accesses in bounds; dst + i is 32-byte
        // aligned (head aligned it and each step is 32 bytes).
        let v = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
        _mm256_stream_si256(dst.as_mut_ptr().add(i) as *mut __m256i, v);
        i += per_vec;
    }
    dst[i..n].copy_from_slice(&src[i..n]);
}

fn stream_copy<C: Copy>(isa: Isa, src: &[C], dst: &mut [C]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma {
        // SAFETY: AVX2 was detected (see `Isa`).
        return unsafe { stream_copy_avx2(src, dst) };
    }
    let _ = isa;
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
}

// ---- f32 -------------------------------------------------------------------------------

#[inline(always)]
fn add_f32_body<F: FmaMode>(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

#[inline(always)]
fn mul_f32_body<F: FmaMode>(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x * y;
    }
}

#[inline(always)]
fn muladd_f32_body<F: FmaMode>(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
    for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(c) {
        *o = x * y + z;
    }
}

#[inline(always)]
fn scale_f32_body<F: FmaMode>(x: &mut [f32], s: f32) {
    for v in x.iter_mut() {
        *v *= s;
    }
}

#[inline(always)]
fn exp_sub_f32_body<F: FmaMode>(x: &[f32], a: f32, b: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = approx::exp::<F>((v - a) - b);
    }
}

#[inline(always)]
fn sigmoid_f32_body<F: FmaMode>(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = 1.0 / (1.0 + approx::exp::<F>(-v));
    }
}

#[inline(always)]
fn gelu_fwd_f32_body<F: FmaMode>(approx: Approx, x: &[f32], bias: &[f32], out: &mut [f32]) {
    // One loop per form so that each is a straight-line, vectorizable body.
    match approx {
        Approx::Tanh => {
            for ((o, &v), &b) in out.iter_mut().zip(x).zip(bias) {
                *o = approx::gelu_tanh::<F>(v + b);
            }
        }
        Approx::None => {
            for ((o, &v), &b) in out.iter_mut().zip(x).zip(bias) {
                *o = approx::gelu_erf::<F>(v + b);
            }
        }
    }
}

#[inline(always)]
fn gelu_bwd_f32_body<F: FmaMode>(
    approx: Approx,
    go: &[f32],
    x: &[f32],
    bias: &[f32],
    gx: &mut [f32],
    acc: &mut [f32],
) {
    let it = gx
        .iter_mut()
        .zip(acc.iter_mut())
        .zip(go.iter().zip(x).zip(bias));
    match approx {
        Approx::Tanh => {
            for ((g, s), ((&go, &v), &b)) in it {
                let d = go * approx::gelu_tanh_grad::<F>(v + b);
                *g = d;
                *s += d;
            }
        }
        Approx::None => {
            for ((g, s), ((&go, &v), &b)) in it {
                let d = go * approx::gelu_erf_grad::<F>(v + b);
                *g = d;
                *s += d;
            }
        }
    }
}

/// f32 register tile: 6 rows × 16 columns = 12 AVX2 accumulators, the classic shape that
/// leaves registers for two B vectors and an A broadcast.
const MR_F32: usize = 6;
const NR_F32: usize = 16;
/// f64 register tile: 4 × 8 = 8 AVX2 accumulators.
const MR_F64: usize = 4;
const NR_F64: usize = 8;

/// Generic micro-kernel body. The tile is a local array that LLVM keeps in registers once the
/// `i`/`j` loops are unrolled; `j` vectorizes.
#[inline(always)]
fn gemm_micro_body<C: crate::element::Real, F: FmaMode, const MR: usize, const NR: usize>(
    a: &[C],
    b: &[C],
    acc: &mut [C],
) {
    let mut tile = [[C::ZERO; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (row, &ai) in tile.iter_mut().zip(ap) {
            for (t, &bj) in row.iter_mut().zip(bp) {
                *t = madd::<F, C>(ai, bj, *t);
            }
        }
    }
    for (dst, row) in acc.chunks_exact_mut(NR).zip(tile.iter()) {
        for (d, &t) in dst.iter_mut().zip(row) {
            *d += t;
        }
    }
}

#[inline(always)]
fn gemm_micro_f32_body<F: FmaMode>(a: &[f32], b: &[f32], acc: &mut [f32]) {
    gemm_micro_body::<f32, F, MR_F32, NR_F32>(a, b, acc)
}

#[inline(always)]
fn gemm_micro_f64_body<F: FmaMode>(a: &[f64], b: &[f64], acc: &mut [f64]) {
    gemm_micro_body::<f64, F, MR_F64, NR_F64>(a, b, acc)
}

multiversion!(fn add_f32(a: &[f32], b: &[f32], out: &mut [f32]) => add_f32_body);
multiversion!(fn mul_f32(a: &[f32], b: &[f32], out: &mut [f32]) => mul_f32_body);
multiversion!(fn muladd_f32(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) => muladd_f32_body);
multiversion!(fn scale_f32(x: &mut [f32], s: f32) => scale_f32_body);
multiversion!(fn exp_sub_f32(x: &[f32], a: f32, b: f32, out: &mut [f32]) => exp_sub_f32_body);
multiversion!(fn sigmoid_f32(x: &[f32], out: &mut [f32]) => sigmoid_f32_body);
multiversion!(fn gelu_fwd_f32(approx: Approx, x: &[f32], bias: &[f32], out: &mut [f32]) => gelu_fwd_f32_body);
multiversion!(
    #[allow(clippy::too_many_arguments)]
    fn gelu_bwd_f32(
        approx: Approx,
        go: &[f32],
        x: &[f32],
        bias: &[f32],
        gx: &mut [f32],
        acc: &mut [f32],
    ) => gelu_bwd_f32_body
);
multiversion!(fn gemm_micro_f32(a: &[f32], b: &[f32], acc: &mut [f32]) => gemm_micro_f32_body);
multiversion!(fn gemm_micro_f64(a: &[f64], b: &[f64], acc: &mut [f64]) => gemm_micro_f64_body);

impl Kernels for f32 {
    const MR: usize = MR_F32;
    const NR: usize = NR_F32;

    fn add(isa: Isa, a: &[f32], b: &[f32], out: &mut [f32]) {
        add_f32(isa, a, b, out)
    }
    fn mul(isa: Isa, a: &[f32], b: &[f32], out: &mut [f32]) {
        mul_f32(isa, a, b, out)
    }
    fn muladd(isa: Isa, a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
        muladd_f32(isa, a, b, c, out)
    }
    fn scale(isa: Isa, x: &mut [f32], s: f32) {
        scale_f32(isa, x, s)
    }
    fn exp_sub(isa: Isa, x: &[f32], a: f32, b: f32, out: &mut [f32]) {
        exp_sub_f32(isa, x, a, b, out)
    }
    fn sigmoid(isa: Isa, x: &[f32], out: &mut [f32]) {
        sigmoid_f32(isa, x, out)
    }
    fn gelu_fwd(isa: Isa, approx: Approx, x: &[f32], bias: &[f32], out: &mut [f32]) {
        gelu_fwd_f32(isa, approx, x, bias, out)
    }
    fn gelu_bwd(
        isa: Isa,
        approx: Approx,
        go: &[f32],
        x: &[f32],
        bias: &[f32],
        gx: &mut [f32],
        acc: &mut [f32],
    ) {
        gelu_bwd_f32(isa, approx, go, x, bias, gx, acc)
    }
    fn gemm_micro(isa: Isa, a: &[f32], b: &[f32], acc: &mut [f32]) {
        gemm_micro_f32(isa, a, b, acc)
    }
    fn stream_store(isa: Isa, src: &[f32], dst: &mut [f32]) {
        stream_copy(isa, src, dst)
    }
}

// ---- f64 -------------------------------------------------------------------------------

impl Kernels for f64 {
    const MR: usize = MR_F64;
    const NR: usize = NR_F64;

    fn add(_: Isa, a: &[f64], b: &[f64], out: &mut [f64]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y;
        }
    }
    fn mul(_: Isa, a: &[f64], b: &[f64], out: &mut [f64]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = x * y;
        }
    }
    fn muladd(_: Isa, a: &[f64], b: &[f64], c: &[f64], out: &mut [f64]) {
        for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(c) {
            *o = x * y + z;
        }
    }
    fn scale(_: Isa, x: &mut [f64], s: f64) {
        for v in x.iter_mut() {
            *v *= s;
        }
    }
    fn exp_sub(_: Isa, x: &[f64], a: f64, b: f64, out: &mut [f64]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = ((v - a) - b).exp();
        }
    }
    fn sigmoid(_: Isa, x: &[f64], out: &mut [f64]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = 1.0 / (1.0 + (-v).exp());
        }
    }
    fn gelu_fwd(_: Isa, approx: Approx, x: &[f64], bias: &[f64], out: &mut [f64]) {
        let f = match approx {
            Approx::Tanh => wide::gelu_tanh,
            Approx::None => wide::gelu_erf,
        };
        for ((o, &v), &b) in out.iter_mut().zip(x).zip(bias) {
            *o = f(v + b);
        }
    }
    fn gelu_bwd(
        _: Isa,
        approx: Approx,
        go: &[f64],
        x: &[f64],
        bias: &[f64],
        gx: &mut [f64],
        acc: &mut [f64],
    ) {
        let f = match approx {
            Approx::Tanh => wide::gelu_tanh_grad,
            Approx::None => wide::gelu_erf_grad,
        };
        let it = gx
            .iter_mut()
            .zip(acc.iter_mut())
            .zip(go.iter().zip(x).zip(bias));
        for ((g, s), ((&go, &v), &b)) in it {
            let d = go * f(v + b);
            *g = d;
            *s += d;
        }
    }
    fn gemm_micro(isa: Isa, a: &[f64], b: &[f64], acc: &mut [f64]) {
        gemm_micro_f64(isa, a, b, acc)
    }
    fn stream_store(isa: Isa, src: &[f64], dst: &mut [f64]) {
        stream_copy(isa, src, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copy_any_alignment_and_length() {
        let src: Vec<f32> = (0..300).map(|i| i as f32 * 0.5 - 7.0).collect();
        let src64: Vec<f64> = src.iter().map(|&v| v as f64).collect();
        for isa in Isa::available() {
            for off in 0..9 {
                for len in [0, 1, 7, 8, 9, 31, 64, 100, 291 - off] {
                    let mut dst = vec![f32::NAN; 300];
                    f32::stream_store(isa, &src[off..off + len], &mut dst[off..off + len]);
                    f32::stream_fence(isa);
                    assert_eq!(&dst[off..off + len], &src[off..off + len]);
                    assert!(dst[..off]
                        .iter()
                        .chain(&dst[off + len..])
                        .all(|v| v.is_nan()));

                    let mut dst = vec![0.0f64; 300];
                    f64::stream_store(isa, &src64[off..off + len], &mut dst[off..off + len]);
                    f64::stream_fence(isa);
                    assert_eq!(&dst[off..off + len], &src64[off..off + len]);
                }
            }
        }
    }

    /// Whether `got` (f32) is `want` (f64) within 2 units of f32 rounding: relative error at most
    /// 2 eps for normal results, absolute at most the smallest normal below it, infinity beyond
    /// f32's range, NaN for NaN.
    fn close_f32(got: f32, want: f64) -> bool {
        if want.is_nan() {
            got.is_nan()
        } else if want > f32::MAX as f64 {
            got == f32::INFINITY
        } else if want < f32::MIN_POSITIVE as f64 {
            (got as f64 - want).abs() <= f32::MIN_POSITIVE as f64
        } else {
            (got as f64 - want).abs() <= 2.0 * f32::EPSILON as f64 * want
        }
    }

    /// `exp_sub` and `sigmoid` on every instruction set, the special values included.
    #[test]
    fn exp_sub_and_sigmoid_every_isa() {
        let mut xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.0731).collect();
        xs.extend([
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -120.0,
            95.0,
            -0.0,
            0.0,
        ]);
        let (a, b) = (1.5f32, -0.25f32);
        for isa in Isa::available() {
            let mut out = vec![0.0f32; xs.len()];
            f32::exp_sub(isa, &xs, a, b, &mut out);
            for (&x, &got) in xs.iter().zip(&out) {
                let want = (((x - a) - b) as f64).exp();
                assert!(
                    close_f32(got, want),
                    "{isa:?} exp_sub({x}) = {got}, want {want}"
                );
            }
            f32::sigmoid(isa, &xs, &mut out);
            for (&x, &got) in xs.iter().zip(&out) {
                let want = 1.0 / (1.0 + (-(x as f64)).exp());
                assert!(
                    close_f32(got, want),
                    "{isa:?} sigmoid({x}) = {got}, want {want}"
                );
            }
        }
    }

    #[test]
    fn streaming_threshold() {
        let big = STREAM_MIN_BYTES / 4;
        assert!(!use_streaming::<f32>(Isa::Portable, big));
        if Isa::detect() == Isa::Avx2Fma {
            assert!(use_streaming::<f32>(Isa::Avx2Fma, big));
            assert!(!use_streaming::<f32>(Isa::Avx2Fma, big - 1));
            assert!(use_streaming::<f64>(Isa::Avx2Fma, big / 2));
        }
    }
}
