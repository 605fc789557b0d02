//! CPU implementations of the shipped ops: torch CPU tensors in, kernelkit-ops kernels over
//! their memory, with the GIL released. Python has already broadcast and made inputs contiguous;
//! everything is checked again here because a wrong pointer or length would be memory-unsafe.

use crate::tensor::{torch, DType};
use half::{bf16, f16};
use kernelkit_ops::{
    activations, elementwise, gelu, matmul, norms, softmax, Approx, Element, OpError,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cpu_add, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_mul, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_muladd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_scale_, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_bias_gelu_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_bias_gelu_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_rms_norm_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_rms_norm_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_add_rms_norm_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_add_rms_norm_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_layer_norm_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_layer_norm_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_softmax_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_softmax_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_cross_entropy_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_cross_entropy_sum, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_cross_entropy_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_swiglu_fwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_swiglu_bwd, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_rope, m)?)?;
    Ok(())
}

/// A contiguous CPU tensor's memory.
#[derive(Clone, Copy)]
struct Buf {
    ptr: usize,
    len: usize,
    dtype: DType,
}

impl Buf {
    fn bytes(&self) -> std::ops::Range<usize> {
        let size = match self.dtype {
            DType::F64 | DType::I64 => 8,
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        };
        self.ptr..self.ptr + self.len * size
    }
    /// # Safety
    /// The tensor behind `self` must be alive, of type T, and not written during the borrow.
    unsafe fn slice<'a, T>(&self) -> &'a [T] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr as *const T, self.len)
    }
    /// # Safety
    /// As `slice`, and nothing else may read or write the memory during the borrow.
    unsafe fn slice_mut<'a, T>(&self) -> &'a mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        advise_huge_pages(self.bytes());
        std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len)
    }
}

/// Ask for transparent huge pages on a large output before it is first written. A fresh output of
/// torch's CPU allocator is fresh mmap'ed memory: its first touch costs one page fault per 4 KiB,
/// which on this project's 2-core machines took longer than the op itself (about 20 ms for
/// 64 MiB). Only the 2 MiB-aligned interior is advised; the call is a hint and cannot fail the op.
fn advise_huge_pages(bytes: std::ops::Range<usize>) {
    const HUGE: usize = 2 << 20;
    if bytes.len() < 4 * HUGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = bytes.start.next_multiple_of(HUGE);
        let end = bytes.end / HUGE * HUGE;
        if end > start {
            // SAFETY: madvise only changes how the kernel backs pages this tensor already owns.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
}

fn buf(op: &str, name: &str, t: &Bound<'_, PyAny>) -> PyResult<Buf> {
    let py = t.py();
    let torch = torch(py).ok_or_else(|| PyTypeError::new_err("torch is not importable"))?;
    if !torch.is_tensor(t) {
        return Err(PyTypeError::new_err(format!(
            "{op}: argument '{name}' must be a tensor"
        )));
    }
    let bad = |why: &str| PyValueError::new_err(format!("{op}: argument '{name}' {why}"));
    let dtype = torch.dtype(t)?.ok_or_else(|| {
        bad("has an unsupported dtype (float32, float64, float16, bfloat16; int64 for targets)")
    })?;
    if t.call_method0(intern!(py, "get_device"))?
        .extract::<i64>()?
        != -1
        || t.getattr(intern!(py, "is_meta"))?.extract::<bool>()?
    {
        return Err(bad("must be a CPU tensor"));
    }
    if !t
        .call_method0(intern!(py, "is_contiguous"))?
        .extract::<bool>()?
    {
        return Err(bad("must be contiguous"));
    }
    Ok(Buf {
        ptr: t.call_method0(intern!(py, "data_ptr"))?.extract()?,
        len: t.call_method0(intern!(py, "numel"))?.extract()?,
        dtype,
    })
}

/// Role of a tensor in a call: data of the op's dtype, statistics in its compute type, or int64 targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Data,
    Stat,
    Index,
}

/// The buffers of one call, checked: data tensors share one dtype, statistics are float32 (float64
/// for float64 data), targets int64; the last `outputs` entries are written and overlap nothing else.
fn typed<const N: usize>(
    op: &str,
    named: [(&str, &Bound<'_, PyAny>, Role); N],
    outputs: usize,
) -> PyResult<[Buf; N]> {
    let mut out = [Buf {
        ptr: 0,
        len: 0,
        dtype: DType::F32,
    }; N];
    for (i, (name, t, _)) in named.iter().enumerate() {
        out[i] = buf(op, name, t)?;
    }
    let data = named
        .iter()
        .position(|(_, _, r)| *r == Role::Data)
        .map(|i| out[i].dtype)
        .unwrap_or(DType::F32);
    let stat = if data == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    for (i, (name, _, role)) in named.iter().enumerate() {
        let want = match role {
            Role::Data => data,
            Role::Stat => stat,
            Role::Index => DType::I64,
        };
        if out[i].dtype != want {
            return Err(PyValueError::new_err(format!(
                "{op}: argument '{name}' has dtype {}, expected {}",
                out[i].dtype.name(),
                want.name()
            )));
        }
    }
    for o in N - outputs..N {
        for i in 0..N {
            let (a, b) = (out[o].bytes(), out[i].bytes());
            if i != o && out[o].len > 0 && out[i].len > 0 && a.start < b.end && b.start < a.end {
                return Err(PyValueError::new_err(format!(
                    "{op}: output '{}' overlaps argument '{}'",
                    named[o].0, named[i].0
                )));
            }
        }
    }
    Ok(out)
}

use Role::{Data as D, Index as I, Stat as S};

type C<T> = <T as Element>::Compute;

fn op_err(e: OpError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Run `$body` with `$T` bound to the element type of `$dtype`.
macro_rules! dispatch {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            DType::I64 => Err(OpError::Unsupported("int64 data")),
        }
    };
}

#[pyfunction]
fn cpu_add(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [a, b, o] = typed(
        "kernelkit::add",
        [("a", a, D), ("b", b, D), ("out", out, D)],
        1,
    )?;
    // SAFETY: checked above: live contiguous CPU tensors of one dtype, the output overlapping nothing.
    py.allow_threads(|| dispatch!(a.dtype, T => unsafe { elementwise::add::<T>(a.slice(), b.slice(), o.slice_mut()) }))
        .map_err(op_err)
}

#[pyfunction]
fn cpu_mul(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [a, b, o] = typed(
        "kernelkit::mul",
        [("a", a, D), ("b", b, D), ("out", out, D)],
        1,
    )?;
    // SAFETY: as in cpu_add.
    py.allow_threads(|| dispatch!(a.dtype, T => unsafe { elementwise::mul::<T>(a.slice(), b.slice(), o.slice_mut()) }))
        .map_err(op_err)
}

#[pyfunction]
fn cpu_muladd(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    c: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [a, b, c, o] = typed(
        "kernelkit::muladd",
        [("a", a, D), ("b", b, D), ("c", c, D), ("out", out, D)],
        1,
    )?;
    // SAFETY: as in cpu_add.
    py.allow_threads(|| {
        dispatch!(a.dtype, T => unsafe { elementwise::muladd::<T>(a.slice(), b.slice(), c.slice(), o.slice_mut()) })
    })
    .map_err(op_err)
}

#[pyfunction]
fn cpu_scale_(py: Python<'_>, x: &Bound<'_, PyAny>, s: f64) -> PyResult<()> {
    let [x] = typed("kernelkit::scale_", [("x", x, D)], 0)?;
    // SAFETY: a live contiguous CPU tensor, written only here while the call lasts.
    py.allow_threads(
        || dispatch!(x.dtype, T => unsafe { elementwise::scale_::<T>(x.slice_mut(), s) }),
    )
    .map_err(op_err)
}

fn approx(tanh: bool) -> Approx {
    if tanh {
        Approx::Tanh
    } else {
        Approx::None
    }
}

#[pyfunction]
fn cpu_bias_gelu_fwd(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    bias: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    tanh: bool,
) -> PyResult<()> {
    let [x, b, o] = typed(
        "kernelkit::bias_gelu",
        [("x", x, D), ("bias", bias, D), ("out", out, D)],
        1,
    )?;
    // SAFETY: as in cpu_add.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe { gelu::bias_gelu_fwd::<T>(x.slice(), b.slice(), o.slice_mut(), approx(tanh)) })
    })
    .map_err(op_err)
}

#[pyfunction]
fn cpu_bias_gelu_bwd(
    py: Python<'_>,
    grad: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    bias: &Bound<'_, PyAny>,
    grad_x: &Bound<'_, PyAny>,
    grad_bias: &Bound<'_, PyAny>,
    tanh: bool,
) -> PyResult<()> {
    let [g, x, b, gx, gb] = typed(
        "kernelkit::bias_gelu_backward",
        [
            ("grad", grad, D),
            ("x", x, D),
            ("bias", bias, D),
            ("grad_x", grad_x, D),
            ("grad_bias", grad_bias, D),
        ],
        2,
    )?;
    // SAFETY: as in cpu_add; the two outputs overlap nothing (checked).
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            gelu::bias_gelu_bwd::<T>(g.slice(), x.slice(), b.slice(), gx.slice_mut(), gb.slice_mut(), approx(tanh))
        })
    })
    .map_err(op_err)
}

#[pyfunction]
fn cpu_matmul(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let shape = |t: &Bound<'_, PyAny>| -> PyResult<Vec<usize>> {
        t.getattr(intern!(py, "shape"))?.extract()
    };
    let (sa, sb) = (shape(a)?, shape(b)?);
    let (m, k, n) = match (&sa[..], &sb[..]) {
        ([m, k], [k2, n]) if k == k2 => (*m, *k, *n),
        _ => {
            return Err(PyValueError::new_err(format!(
                "kernelkit::matmul: expected a (M, K) and b (K, N), got {sa:?} and {sb:?}"
            )))
        }
    };
    let [a, b, o] = typed(
        "kernelkit::matmul",
        [("a", a, D), ("b", b, D), ("out", out, D)],
        1,
    )?;
    // SAFETY: as in cpu_add; matmul checks the lengths against m, k, n.
    py.allow_threads(|| dispatch!(a.dtype, T => unsafe { matmul::matmul::<T>(a.slice(), b.slice(), o.slice_mut(), m, k, n) }))
        .map_err(op_err)
}

#[pyfunction]
fn cpu_rms_norm_fwd(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    rstd: &Bound<'_, PyAny>,
    eps: f64,
) -> PyResult<()> {
    let [x, w, y, r] = typed(
        "kernelkit::rms_norm",
        [
            ("x", x, D),
            ("weight", w, D),
            ("y", y, D),
            ("rstd", rstd, S),
        ],
        2,
    )?;
    // SAFETY: live contiguous CPU tensors of the checked dtypes; outputs overlap nothing.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            norms::rms_norm_fwd::<T>(x.slice(), w.slice(), y.slice_mut(), r.slice_mut::<C<T>>(), w.len, eps)
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_rms_norm_bwd(
    py: Python<'_>,
    gy: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    rstd: &Bound<'_, PyAny>,
    gx: &Bound<'_, PyAny>,
    gw: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [gy, x, w, r, gx, gw] = typed(
        "kernelkit::rms_norm_backward",
        [
            ("grad", gy, D),
            ("x", x, D),
            ("weight", w, D),
            ("rstd", rstd, S),
            ("grad_x", gx, D),
            ("grad_weight", gw, D),
        ],
        2,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            norms::rms_norm_bwd::<T>(gy.slice(), x.slice(), w.slice(), r.slice::<C<T>>(), gx.slice_mut(), gw.slice_mut(), w.len)
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_add_rms_norm_fwd(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    residual: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    new_residual: &Bound<'_, PyAny>,
    rstd: &Bound<'_, PyAny>,
    eps: f64,
) -> PyResult<()> {
    let [x, res, w, y, h, r] = typed(
        "kernelkit::add_rms_norm",
        [
            ("x", x, D),
            ("residual", residual, D),
            ("weight", w, D),
            ("y", y, D),
            ("new_residual", new_residual, D),
            ("rstd", rstd, S),
        ],
        3,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            norms::add_rms_norm_fwd::<T>(x.slice(), res.slice(), w.slice(), y.slice_mut(), h.slice_mut(), r.slice_mut::<C<T>>(), w.len, eps)
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_add_rms_norm_bwd(
    py: Python<'_>,
    gy: &Bound<'_, PyAny>,
    g_res: &Bound<'_, PyAny>,
    h: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    rstd: &Bound<'_, PyAny>,
    gh: &Bound<'_, PyAny>,
    gw: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [gy, gr, h, w, r, gh, gw] = typed(
        "kernelkit::add_rms_norm_backward",
        [
            ("grad", gy, D),
            ("grad_residual", g_res, D),
            ("new_residual", h, D),
            ("weight", w, D),
            ("rstd", rstd, S),
            ("grad_x", gh, D),
            ("grad_weight", gw, D),
        ],
        2,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(h.dtype, T => unsafe {
            norms::add_rms_norm_bwd::<T>(gy.slice(), gr.slice(), h.slice(), w.slice(), r.slice::<C<T>>(), gh.slice_mut(), gw.slice_mut(), w.len)
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_layer_norm_fwd(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    mean: &Bound<'_, PyAny>,
    rstd: &Bound<'_, PyAny>,
    eps: f64,
) -> PyResult<()> {
    let [x, w, b, y, m, r] = typed(
        "kernelkit::layer_norm",
        [
            ("x", x, D),
            ("weight", w, D),
            ("bias", b, D),
            ("y", y, D),
            ("mean", mean, S),
            ("rstd", rstd, S),
        ],
        3,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            norms::layer_norm_fwd::<T>(x.slice(), w.slice(), b.slice(), y.slice_mut(), m.slice_mut::<C<T>>(), r.slice_mut::<C<T>>(), w.len, eps)
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_layer_norm_bwd(
    py: Python<'_>,
    gy: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    mean: &Bound<'_, PyAny>,
    rstd: &Bound<'_, PyAny>,
    gx: &Bound<'_, PyAny>,
    gw: &Bound<'_, PyAny>,
    gb: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [gy, x, w, m, r, gx, gw, gb] = typed(
        "kernelkit::layer_norm_backward",
        [
            ("grad", gy, D),
            ("x", x, D),
            ("weight", w, D),
            ("mean", mean, S),
            ("rstd", rstd, S),
            ("grad_x", gx, D),
            ("grad_weight", gw, D),
            ("grad_bias", gb, D),
        ],
        3,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            norms::layer_norm_bwd::<T>(
                gy.slice(), x.slice(), w.slice(), m.slice::<C<T>>(), r.slice::<C<T>>(),
                gx.slice_mut(), gw.slice_mut(), gb.slice_mut(), w.len,
            )
        })
    })
    .map_err(op_err)
}

#[pyfunction]
fn cpu_softmax_fwd(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    cols: usize,
) -> PyResult<()> {
    let [x, y] = typed("kernelkit::softmax", [("x", x, D), ("y", y, D)], 1)?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| dispatch!(x.dtype, T => unsafe { softmax::softmax_fwd::<T>(x.slice(), y.slice_mut(), cols) }))
        .map_err(op_err)
}

#[pyfunction]
fn cpu_softmax_bwd(
    py: Python<'_>,
    gy: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    gx: &Bound<'_, PyAny>,
    cols: usize,
) -> PyResult<()> {
    let [gy, y, gx] = typed(
        "kernelkit::softmax_backward",
        [("grad", gy, D), ("y", y, D), ("grad_x", gx, D)],
        1,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(y.dtype, T => unsafe { softmax::softmax_bwd::<T>(gy.slice(), y.slice(), gx.slice_mut(), cols) })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_cross_entropy_fwd(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    loss: &Bound<'_, PyAny>,
    stats: &Bound<'_, PyAny>,
    cols: usize,
    ignore_index: i64,
    label_smoothing: f64,
) -> PyResult<()> {
    let [x, t, l, s] = typed(
        "kernelkit::cross_entropy",
        [
            ("logits", logits, D),
            ("target", target, I),
            ("loss", loss, S),
            ("stats", stats, S),
        ],
        2,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd; targets are int64.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            softmax::cross_entropy_fwd::<T>(x.slice(), t.slice::<i64>(), l.slice_mut::<C<T>>(), s.slice_mut::<C<T>>(), cols, ignore_index, label_smoothing)
        })
    })
    .map_err(op_err)
}

/// The reduced loss's forward: writes `stats`, returns (the row losses' sum, the rows not ignored).
#[pyfunction]
fn cpu_cross_entropy_sum(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    stats: &Bound<'_, PyAny>,
    cols: usize,
    ignore_index: i64,
    label_smoothing: f64,
) -> PyResult<(f64, usize)> {
    let [x, t, s] = typed(
        "kernelkit::cross_entropy_reduced",
        [
            ("logits", logits, D),
            ("target", target, I),
            ("stats", stats, S),
        ],
        1,
    )?;
    // SAFETY: as in cpu_cross_entropy_fwd.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            softmax::cross_entropy_sum::<T>(x.slice(), t.slice::<i64>(), s.slice_mut::<C<T>>(), cols, ignore_index, label_smoothing)
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_cross_entropy_bwd(
    py: Python<'_>,
    logits: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    stats: &Bound<'_, PyAny>,
    row_scale: &Bound<'_, PyAny>,
    grad: &Bound<'_, PyAny>,
    cols: usize,
    ignore_index: i64,
    label_smoothing: f64,
) -> PyResult<()> {
    let [x, t, s, rs, g] = typed(
        "kernelkit::cross_entropy_backward",
        [
            ("logits", logits, D),
            ("target", target, I),
            ("stats", stats, S),
            ("row_scale", row_scale, S),
            ("grad", grad, D),
        ],
        1,
    )?;
    // SAFETY: as in cpu_cross_entropy_fwd.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            softmax::cross_entropy_bwd::<T>(
                x.slice(), t.slice::<i64>(), s.slice::<C<T>>(), rs.slice::<C<T>>(), g.slice_mut(), cols, ignore_index, label_smoothing,
            )
        })
    })
    .map_err(op_err)
}

#[pyfunction]
fn cpu_swiglu_fwd(
    py: Python<'_>,
    gate: &Bound<'_, PyAny>,
    up: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [g, u, o] = typed(
        "kernelkit::swiglu",
        [("gate", gate, D), ("up", up, D), ("out", out, D)],
        1,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| dispatch!(g.dtype, T => unsafe { activations::swiglu_fwd::<T>(g.slice(), u.slice(), o.slice_mut()) }))
        .map_err(op_err)
}

#[pyfunction]
fn cpu_swiglu_bwd(
    py: Python<'_>,
    grad: &Bound<'_, PyAny>,
    gate: &Bound<'_, PyAny>,
    up: &Bound<'_, PyAny>,
    g_gate: &Bound<'_, PyAny>,
    g_up: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let [gr, g, u, gg, gu] = typed(
        "kernelkit::swiglu_backward",
        [
            ("grad", grad, D),
            ("gate", gate, D),
            ("up", up, D),
            ("grad_gate", g_gate, D),
            ("grad_up", g_up, D),
        ],
        2,
    )?;
    // SAFETY: as in cpu_rms_norm_fwd.
    py.allow_threads(|| {
        dispatch!(g.dtype, T => unsafe {
            activations::swiglu_bwd::<T>(gr.slice(), g.slice(), u.slice(), gg.slice_mut(), gu.slice_mut())
        })
    })
    .map_err(op_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_rope(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    cos: &Bound<'_, PyAny>,
    sin: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    shape: (usize, usize, usize, usize),
    cos_batch_stride: usize,
    backward: bool,
) -> PyResult<()> {
    let [x, c, s, o] = typed(
        "kernelkit::rope",
        [
            ("x", x, D),
            ("cos", cos, D),
            ("sin", sin, D),
            ("out", out, D),
        ],
        1,
    )?;
    let (b, h, sq, d) = shape;
    // SAFETY: as in cpu_rms_norm_fwd; rope checks every length against the shape.
    py.allow_threads(|| {
        dispatch!(x.dtype, T => unsafe {
            activations::rope::<T>(x.slice(), c.slice(), s.slice(), o.slice_mut(), b, h, sq, d, cos_batch_stride, backward)
        })
    })
    .map_err(op_err)
}
