//! Reading torch tensors from Rust without linking libtorch: a few cached attribute calls.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;

/// Element types the ops support.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I64,
}

impl DType {
    pub fn name(&self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
        }
    }
}

/// torch objects looked up once per process.
pub struct Torch {
    pub tensor_type: Py<PyType>,
    /// torch._C._cuda_getCurrentRawStream(device) -> int: PyTorch's current stream, cheaply.
    current_stream: Option<PyObject>,
    current_device: Option<PyObject>,
    dtypes: Vec<(PyObject, DType)>,
}

static TORCH: GILOnceCell<Option<Torch>> = GILOnceCell::new();

/// torch, if it can be imported. kernelkit's compiler works without it.
pub fn torch(py: Python<'_>) -> Option<&Torch> {
    TORCH
        .get_or_init(py, || {
            let t = py.import("torch").ok()?;
            let c = t.getattr("_C").ok()?;
            let dt = |n: &str| t.getattr(n).ok().map(|o| o.unbind());
            let dtypes = [
                ("float32", DType::F32),
                ("float64", DType::F64),
                ("float16", DType::F16),
                ("bfloat16", DType::BF16),
                ("int64", DType::I64),
            ]
            .into_iter()
            .filter_map(|(n, d)| Some((dt(n)?, d)))
            .collect();
            Some(Torch {
                tensor_type: t
                    .getattr("Tensor")
                    .ok()?
                    .downcast_into::<PyType>()
                    .ok()?
                    .unbind(),
                current_stream: c
                    .getattr("_cuda_getCurrentRawStream")
                    .ok()
                    .map(|f| f.unbind()),
                current_device: t
                    .getattr("cuda")
                    .and_then(|m| m.getattr("current_device"))
                    .ok()
                    .map(|f| f.unbind()),
                dtypes,
            })
        })
        .as_ref()
}

impl Torch {
    pub fn is_tensor(&self, obj: &Bound<'_, PyAny>) -> bool {
        obj.is_instance(self.tensor_type.bind(obj.py()))
            .unwrap_or(false)
    }

    /// PyTorch's current stream on `device`, as a raw handle.
    pub fn current_stream(&self, py: Python<'_>, device: i32) -> PyResult<usize> {
        match &self.current_stream {
            Some(f) => f.call1(py, (device,))?.extract(py),
            None => Ok(0),
        }
    }

    pub fn current_device(&self, py: Python<'_>) -> PyResult<i32> {
        match &self.current_device {
            Some(f) => f.call0(py)?.extract(py),
            None => Ok(0),
        }
    }

    pub fn dtype(&self, t: &Bound<'_, PyAny>) -> PyResult<Option<DType>> {
        let d = t.getattr(intern!(t.py(), "dtype"))?;
        Ok(self
            .dtypes
            .iter()
            .find(|(o, _)| o.bind(t.py()).is(&d))
            .map(|(_, k)| *k))
    }
}

/// Device index (-1 for CPU), contiguity and data pointer of a tensor.
pub struct TensorView {
    pub device: i32,
    pub contiguous: bool,
    pub ptr: u64,
}

pub fn view(t: &Bound<'_, PyAny>) -> PyResult<TensorView> {
    let py = t.py();
    Ok(TensorView {
        device: t.call_method0(intern!(py, "get_device"))?.extract()?,
        contiguous: t.call_method0(intern!(py, "is_contiguous"))?.extract()?,
        ptr: t.call_method0(intern!(py, "data_ptr"))?.extract()?,
    })
}
