//! CPU implementations of the shipped ops: torch CPU tensors in, kernelkit-ops kernels over
//! their memory, with the GIL released. Python has already broadcast and made inputs contiguous;
//! everything is checked again here because a wrong pointer or length would be memory-unsafe.

use crate::tensor::{torch, DType};
use half::{bf16, f16};
use kernelkit_ops::{elementwise, gelu, matmul, Approx, OpError};
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
            DType::F64 => 8,
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
        std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len)
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
    let dtype = torch
        .dtype(t)?
        .ok_or_else(|| bad("has an unsupported dtype (float32, float64, float16, bfloat16)"))?;
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

/// Inputs and outputs of one call: one dtype, and no output overlapping any other buffer.
fn bufs<const N: usize>(
    op: &str,
    named: [(&str, &Bound<'_, PyAny>); N],
    outputs: usize,
) -> PyResult<[Buf; N]> {
    let mut out = [Buf {
        ptr: 0,
        len: 0,
        dtype: DType::F32,
    }; N];
    for (i, (name, t)) in named.iter().enumerate() {
        out[i] = buf(op, name, t)?;
        if out[i].dtype != out[0].dtype {
            return Err(PyValueError::new_err(format!(
                "{op}: argument '{name}' has dtype {} but '{}' has {}",
                out[i].dtype.name(),
                named[0].0,
                out[0].dtype.name()
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
    let [a, b, o] = bufs("kernelkit::add", [("a", a), ("b", b), ("out", out)], 1)?;
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
    let [a, b, o] = bufs("kernelkit::mul", [("a", a), ("b", b), ("out", out)], 1)?;
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
    let [a, b, c, o] = bufs(
        "kernelkit::muladd",
        [("a", a), ("b", b), ("c", c), ("out", out)],
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
    let [x] = bufs("kernelkit::scale_", [("x", x)], 0)?;
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
    let [x, b, o] = bufs(
        "kernelkit::bias_gelu",
        [("x", x), ("bias", bias), ("out", out)],
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
    let [g, x, b, gx, gb] = bufs(
        "kernelkit::bias_gelu_backward",
        [
            ("grad", grad),
            ("x", x),
            ("bias", bias),
            ("grad_x", grad_x),
            ("grad_bias", grad_bias),
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
    let [a, b, o] = bufs("kernelkit::matmul", [("a", a), ("b", b), ("out", out)], 1)?;
    // SAFETY: as in cpu_add; matmul checks the lengths against m, k, n.
    py.allow_threads(|| dispatch!(a.dtype, T => unsafe { matmul::matmul::<T>(a.slice(), b.slice(), o.slice_mut(), m, k, n) }))
        .map_err(op_err)
}
