//! compile(), Module and Kernel: the user-facing JIT objects.

use crate::errors::{to_py, IntoPy};
use crate::tensor::{self, torch};
use kernelkit_cuda::driver::{driver, DeviceAttr, FuncAttr, Function, Stream};
use kernelkit_cuda::{
    cache, compile_cached, launch, nvrtc, Arch, Arg, EntryPoint, Error, Image, LaunchConfig,
    Output, ParamKind, Program, PORTABLE_CLUSTER_BLOCKS,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyMemoryView, PyTuple};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Compiled>()?;
    m.add_class::<Module>()?;
    m.add_class::<Kernel>()?;
    m.add_function(wrap_pyfunction!(set_search_paths, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(driver_info, m)?)?;
    m.add_function(wrap_pyfunction!(device_info, m)?)?;
    m.add_function(wrap_pyfunction!(nvrtc_info, m)?)?;
    m.add_function(wrap_pyfunction!(cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(cache_usage, m)?)?;
    m.add_function(wrap_pyfunction!(clear_cache, m)?)?;
    m.add_function(wrap_pyfunction!(set_launch_blocking, m)?)?;
    m.add_function(wrap_pyfunction!(launch_blocking, m)?)?;
    Ok(())
}

/// Tell the loader which folders to search for the `nvidia` pip wheels (default: `sys.path`).
/// Only the first call counts.
#[pyfunction]
fn set_search_paths(paths: Vec<PathBuf>) {
    nvrtc::set_search_paths(kernelkit_cuda::loader::SearchPaths {
        python_paths: paths,
    });
}

/// NVRTC may live in the nvidia pip wheels that torch installed: search the running Python's path.
fn default_search_paths(py: Python<'_>) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let paths: Vec<PathBuf> = py
            .import("sys")
            .and_then(|s| s.getattr("path"))
            .and_then(|p| p.extract::<Vec<String>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .collect();
        set_search_paths(paths);
    });
}

/// The result of `kernelkit.compile`.
#[pyclass(frozen, module = "kernelkit._native")]
pub struct Compiled {
    img: Arc<Image>,
}

#[pymethods]
impl Compiled {
    /// CUBIN bytes, or PTX text (as bytes) when compiled with output="ptx".
    #[getter]
    fn image<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let data = &self.img.compiled.image;
        let end = match self.img.output {
            Output::Ptx => data.iter().position(|&b| b == 0).unwrap_or(data.len()),
            Output::Cubin => data.len(),
        };
        PyBytes::new(py, &data[..end])
    }
    #[getter]
    fn kind(&self) -> &'static str {
        self.img.output.as_str()
    }
    #[getter]
    fn arch(&self) -> String {
        self.img.arch.sm()
    }
    /// {name expression: lowered (mangled) name}
    #[getter]
    fn lowered_names(&self) -> HashMap<String, String> {
        self.img.compiled.lowered.iter().cloned().collect()
    }
    #[getter]
    fn ptx(&self) -> &str {
        &self.img.compiled.ptx
    }
    #[getter]
    fn log(&self) -> &str {
        &self.img.compiled.log
    }
    #[getter]
    fn cache_key(&self) -> &str {
        &self.img.key
    }
    /// True when this compile came from the disk cache rather than NVRTC.
    #[getter(from_disk_cache)]
    fn hit_disk_cache(&self) -> bool {
        self.img.from_disk
    }
    /// Kernel names found in the module.
    #[getter]
    fn kernels(&self) -> Vec<String> {
        self.img.entry_names()
    }
    fn __repr__(&self) -> String {
        format!(
            "<kernelkit.Compiled {} for {}, {} bytes, kernels {:?}>",
            self.img.output.as_str(),
            self.img.arch.sm(),
            self.img.compiled.image.len(),
            self.img.entry_names()
        )
    }
}

fn program(
    source: String,
    file_name: String,
    headers: Vec<(String, String)>,
    name_expressions: Vec<String>,
    options: Vec<String>,
    include_dirs: Vec<PathBuf>,
) -> Program {
    Program {
        source,
        file_name,
        headers,
        name_expressions,
        options,
        include_dirs,
    }
}

/// Compile CUDA C++ with NVRTC; needs no GPU. See kernelkit.compile for the documented wrapper.
#[pyfunction]
#[pyo3(signature = (source, arch, name_expressions, options, include_dirs, headers, file_name, output, use_cache))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    source: String,
    arch: &str,
    name_expressions: Vec<String>,
    options: Vec<String>,
    include_dirs: Vec<PathBuf>,
    headers: Vec<(String, String)>,
    file_name: String,
    output: &str,
    use_cache: bool,
) -> PyResult<Compiled> {
    default_search_paths(py);
    let arch = Arch::parse(arch).py_err()?;
    let output = Output::parse(output).py_err()?;
    let prog = program(
        source,
        file_name,
        headers,
        name_expressions,
        options,
        include_dirs,
    );
    let img = py
        .allow_threads(|| compile_cached(&prog, &arch, output, use_cache))
        .py_err()?;
    Ok(Compiled { img })
}

/// The compute capability of `device` as an Arch.
fn device_arch(device: i32) -> kernelkit_cuda::Result<Arch> {
    let (major, minor) = driver()?.compute_capability(device)?;
    Ok(Arch {
        major: major as u32,
        minor: minor as u32,
        suffix: String::new(),
    })
}

struct ModuleState {
    /// The module as created: its source and the name expressions it was given.
    program: Program,
    /// Per arch: the compile of `program`.
    images: HashMap<String, Arc<Image>>,
    /// Per (arch, name expression): template instantiations asked for later, each compiled on its own.
    /// A new one then costs one instantiation's compile, and its disk-cache key does not depend on
    /// which others this process used before (the shipped op modules add theirs one by one).
    instances: HashMap<(String, String), Arc<Image>>,
}

struct ModuleInner {
    name: String,
    use_cache: bool,
    state: Mutex<ModuleState>,
}

impl ModuleInner {
    fn image(&self, arch: &Arch) -> kernelkit_cuda::Result<Arc<Image>> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(img) = st.images.get(&arch.sm()) {
            return Ok(img.clone());
        }
        let img = compile_cached(&st.program, arch, Output::Cubin, self.use_cache)?;
        st.images.insert(arch.sm(), img.clone());
        Ok(img)
    }

    /// Find `name` in the image for `arch`; a template instantiation not compiled yet is compiled
    /// on its own (from the disk cache when it can be), without holding the module's lock.
    fn entry(&self, arch: &Arch, name: &str) -> kernelkit_cuda::Result<(Arc<Image>, EntryPoint)> {
        let img = self.image(arch)?;
        if let Some(e) = img.entry(name) {
            return Ok((img, e));
        }
        let not_found = |img: &Image, extra: String| Error::KernelNotFound {
            name: name.to_string(),
            module: self.name.clone(),
            available: format!("{:?}{extra}", img.entry_names()),
        };
        let key = (arch.sm(), name.to_string());
        let prog = {
            let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(inst) = st.instances.get(&key) {
                let e = inst
                    .entry(name)
                    .ok_or_else(|| not_found(&img, String::new()))?;
                return Ok((inst.clone(), e));
            }
            if st.program.name_expressions.iter().any(|n| n == name) {
                return Err(not_found(&img, String::new()));
            }
            let mut prog = st.program.clone();
            prog.name_expressions = vec![name.to_string()];
            prog
        };
        match compile_cached(&prog, arch, Output::Cubin, self.use_cache) {
            Ok(inst) => {
                let e = inst
                    .entry(name)
                    .ok_or_else(|| not_found(&img, String::new()))?;
                let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                st.instances.insert(key, inst.clone());
                Ok((inst, e))
            }
            Err(Error::Compile { log, .. }) => Err(not_found(
                &img,
                format!(". NVRTC could not resolve it as a name expression:\n{log}"),
            )),
            Err(e) => Err(e),
        }
    }
}

/// A compiled CUDA module. Create one with kernelkit.load_inline or kernelkit.load.
#[pyclass(frozen, module = "kernelkit._native")]
pub struct Module {
    inner: Arc<ModuleInner>,
}

#[pymethods]
impl Module {
    #[new]
    #[pyo3(signature = (name, source, file_name, headers, name_expressions, options, include_dirs, use_cache=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        source: String,
        file_name: String,
        headers: Vec<(String, String)>,
        name_expressions: Vec<String>,
        options: Vec<String>,
        include_dirs: Vec<PathBuf>,
        use_cache: bool,
    ) -> Self {
        Python::with_gil(default_search_paths);
        let program = program(
            source,
            file_name,
            headers,
            name_expressions,
            options,
            include_dirs,
        );
        Module {
            inner: Arc::new(ModuleInner {
                name,
                use_cache,
                state: Mutex::new(ModuleState {
                    program,
                    images: HashMap::new(),
                    instances: HashMap::new(),
                }),
            }),
        }
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Compile for `arch` ("sm_90"), or for `device`'s arch when arch is None. Returns the compile.
    #[pyo3(signature = (arch=None, device=0))]
    fn build(&self, py: Python<'_>, arch: Option<&str>, device: i32) -> PyResult<Compiled> {
        let arch = match arch {
            Some(a) => Arch::parse(a).py_err()?,
            None => device_arch(device).py_err()?,
        };
        let inner = self.inner.clone();
        let img = py.allow_threads(|| inner.image(&arch)).py_err()?;
        Ok(Compiled { img })
    }

    /// The kernel called `name`: a plain or extern "C" name, or a template instantiation like "scale<float>".
    fn kernel(&self, py: Python<'_>, name: String) -> PyResult<Kernel> {
        // Resolve eagerly where a GPU is present, so a wrong name fails here and not at launch.
        if let Ok(d) = driver() {
            if d.device_count > 0 && d.init_error.is_none() {
                let dev = torch(py)
                    .map(|t| t.current_device(py))
                    .transpose()?
                    .unwrap_or(0);
                let arch = device_arch(dev).py_err()?;
                let inner = self.inner.clone();
                let n = name.clone();
                py.allow_threads(|| inner.entry(&arch, &n)).py_err()?;
            }
        }
        Ok(Kernel::new(self.inner.clone(), name))
    }

    /// Kernel names in the module compiled for `arch`.
    fn kernel_names(&self, py: Python<'_>, arch: &str) -> PyResult<Vec<String>> {
        let arch = Arch::parse(arch).py_err()?;
        let inner = self.inner.clone();
        Ok(py
            .allow_threads(|| inner.image(&arch))
            .py_err()?
            .entry_names())
    }

    fn __repr__(&self) -> String {
        format!("<kernelkit.Module '{}'>", self.inner.name)
    }
}

/// A kernel resolved on one device.
struct Resolved {
    func: Function,
    params: Vec<ParamKind>,
    /// Dynamic shared memory the function is currently allowed.
    smem_allowed: AtomicU32,
    /// Whether the function has opted in to clusters beyond the portable size.
    large_clusters: AtomicBool,
}

const MAX_DEVICES: usize = 64;

/// A kernel of a Module. Launch it with `kernel.launch(grid, block, args)`.
#[pyclass(frozen, module = "kernelkit._native")]
pub struct Kernel {
    module: Arc<ModuleInner>,
    name: String,
    per_device: Box<[OnceLock<Resolved>]>,
}

impl Kernel {
    fn new(module: Arc<ModuleInner>, name: String) -> Self {
        Kernel {
            module,
            name,
            per_device: (0..MAX_DEVICES).map(|_| OnceLock::new()).collect(),
        }
    }

    fn resolve(&self, device: i32) -> kernelkit_cuda::Result<&Resolved> {
        let slot = usize::try_from(device)
            .ok()
            .and_then(|d| self.per_device.get(d))
            .ok_or_else(|| Error::NoDevice(device, "device index out of range".into()))?;
        if let Some(r) = slot.get() {
            return Ok(r);
        }
        let arch = device_arch(device)?;
        let (img, entry) = self.module.entry(&arch, &self.name)?;
        let func = img.function(device, &entry.lowered)?;
        let d = driver()?;
        let static_smem = d.function_attribute(func, FuncAttr::SharedSizeBytes)?;
        let r = Resolved {
            func,
            params: entry.params,
            smem_allowed: AtomicU32::new((48 * 1024 - static_smem.max(0)) as u32),
            large_clusters: AtomicBool::new(false),
        };
        Ok(slot.get_or_init(|| r))
    }

    /// Raise the function's dynamic shared-memory limit when a launch asks for more than 48 KB.
    fn allow_shared_mem(
        &self,
        device: i32,
        r: &Resolved,
        bytes: u32,
    ) -> kernelkit_cuda::Result<()> {
        if bytes <= r.smem_allowed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let d = driver()?;
        let optin = d.device_attribute(device, DeviceAttr::MaxSharedMemoryPerBlockOptin)?;
        let static_smem = d.function_attribute(r.func, FuncAttr::SharedSizeBytes)?;
        if bytes as i64 + static_smem as i64 > optin as i64 {
            return Err(Error::Argument(format!(
                "kernel '{}': shared_mem={bytes} bytes plus {static_smem} static exceeds the device's {optin}-byte limit",
                self.name
            )));
        }
        d.set_function_attribute(r.func, FuncAttr::MaxDynamicSharedSizeBytes, bytes as i32)?;
        r.smem_allowed.store(bytes, Ordering::Relaxed);
        Ok(())
    }
}

impl Resolved {
    /// Opt the function in to clusters of more than the portable 8 blocks when a launch or query
    /// asks for one (the driver refuses them otherwise).
    fn allow_cluster(&self, cluster: [u32; 3]) -> kernelkit_cuda::Result<()> {
        let blocks = cluster.iter().map(|&c| c as u64).product::<u64>();
        if blocks <= PORTABLE_CLUSTER_BLOCKS || self.large_clusters.load(Ordering::Relaxed) {
            return Ok(());
        }
        driver()?.set_function_attribute(self.func, FuncAttr::NonPortableClusterSizeAllowed, 1)?;
        self.large_clusters.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// The bytes of a by-value struct argument: only bytes, bytearray and memoryview qualify
/// (a tuple of small ints is not silently taken as bytes).
fn struct_bytes(a: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if a.is_instance_of::<PyBytes>() || a.is_instance_of::<PyByteArray>() {
        return a.extract().map(Some);
    }
    if a.is_instance_of::<PyMemoryView>() {
        return a
            .call_method0(intern!(a.py(), "tobytes"))?
            .extract()
            .map(Some);
    }
    Ok(None)
}

fn dims(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u32; 3]> {
    let err = || {
        PyValueError::new_err(format!(
            "{what}: expected a positive int or a tuple of 1 to 3 positive ints, got {obj}"
        ))
    };
    if let Ok(v) = obj.extract::<i64>() {
        let v = u32::try_from(v).map_err(|_| err())?;
        return Ok([v, 1, 1]);
    }
    let t: Vec<i64> = obj.extract().map_err(|_| err())?;
    if t.is_empty() || t.len() > 3 {
        return Err(err());
    }
    let mut out = [1u32; 3];
    for (o, v) in out.iter_mut().zip(t) {
        *o = u32::try_from(v).map_err(|_| err())?;
    }
    Ok(out)
}

#[pymethods]
impl Kernel {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Launch on PyTorch's current stream of the tensors' device.
    ///
    /// Tensors must be CUDA tensors on one device and contiguous; they are passed as device
    /// pointers. Python ints and floats are converted to the parameter's type, with range
    /// checks; bytes fill by-value struct parameters. `stream` may be a torch.cuda.Stream or a
    /// raw handle. Nothing synchronizes unless KERNELKIT_LAUNCH_BLOCKING=1. `dependent=True`
    /// lets the kernel start before the previous kernel on the stream ends (programmatic
    /// dependent launch, sm_90+); the kernel must execute `griddepcontrol.wait` before it reads
    /// that kernel's output. Where unsupported it is a plain launch. `cluster` groups blocks into
    /// thread-block clusters (sm_90+, at most 8 blocks; the grid a multiple of it).
    #[pyo3(signature = (grid, block, args, shared_mem=0, stream=None, dependent=false, cluster=None))]
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        shared_mem: u32,
        stream: Option<&Bound<'_, PyAny>>,
        dependent: bool,
        cluster: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let cfg_grid = dims(grid, "grid")?;
        let cluster = cluster.map(|c| dims(c, "cluster")).transpose()?;
        let cfg_block = dims(block, "block")?;
        let args = args.downcast::<PyTuple>().cloned().or_else(|_| {
            args.try_iter()
                .and_then(|it| it.collect::<PyResult<Vec<_>>>())
                .and_then(|v| PyTuple::new(py, v))
                .map_err(|_| {
                    PyTypeError::new_err("args: expected a tuple or list of launch arguments")
                })
        })?;
        let t = torch(py);
        let mut device: Option<(i32, usize)> = None;
        let mut values: Vec<Arg<'_>> = Vec::with_capacity(args.len());
        // Bytes arguments are borrowed from Python buffers kept alive by `args`.
        let mut held: Vec<Vec<u8>> = Vec::new();
        let mut struct_at: Vec<usize> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if t.is_some_and(|t| t.is_tensor(&a)) {
                let v = tensor::view(&a)?;
                if v.device < 0 {
                    return Err(PyValueError::new_err(format!(
                        "kernel '{}' argument {i}: expected a CUDA tensor, got a CPU tensor",
                        self.name
                    )));
                }
                if let Some((d, j)) = device {
                    if d != v.device {
                        return Err(PyValueError::new_err(format!(
                            "kernel '{}' argument {i}: tensor is on cuda:{} but argument {j} is on cuda:{d}; all tensors must share one device",
                            self.name, v.device
                        )));
                    }
                } else {
                    device = Some((v.device, i));
                }
                if !v.contiguous {
                    return Err(PyValueError::new_err(format!(
                        "kernel '{}' argument {i}: tensor is not contiguous; call .contiguous() first",
                        self.name
                    )));
                }
                values.push(Arg::Ptr(v.ptr));
            } else if a.is_instance_of::<PyBool>() {
                values.push(Arg::Int(a.extract::<bool>()? as i128));
            } else if a.is_instance_of::<PyInt>() {
                let v = match a.extract::<i64>() {
                    Ok(v) => v as i128,
                    Err(_) => a.extract::<u64>().map(|v| v as i128).map_err(|_| {
                        PyValueError::new_err(format!(
                            "kernel '{}' argument {i}: integer {a} does not fit in 64 bits",
                            self.name
                        ))
                    })?,
                };
                values.push(Arg::Int(v));
            } else if a.is_instance_of::<PyFloat>() {
                values.push(Arg::Float(a.extract()?));
            } else if let Some(b) = struct_bytes(&a)? {
                held.push(b);
                struct_at.push(i);
                values.push(Arg::Int(0)); // replaced below once `held` stops growing
            } else if let Ok(v) = a.extract::<i64>() {
                values.push(Arg::Int(v as i128)); // numpy integers and other __index__ types
            } else if let Ok(v) = a.extract::<f64>() {
                values.push(Arg::Float(v));
            } else {
                return Err(PyTypeError::new_err(format!(
                    "kernel '{}' argument {i}: cannot pass {} to a kernel (expected a torch.Tensor, int, float or bytes)",
                    self.name,
                    a.get_type().name()?
                )));
            }
        }
        for (k, &i) in struct_at.iter().enumerate() {
            values[i] = Arg::Bytes(&held[k]);
        }
        let device = match device {
            Some((d, _)) => d,
            None => t.map(|t| t.current_device(py)).transpose()?.unwrap_or(0),
        };
        let stream = match stream {
            None => match t {
                Some(t) => t.current_stream(py, device)?,
                None => 0,
            },
            Some(s) => match s.extract::<usize>() {
                Ok(h) => h,
                Err(_) => s
                    .getattr(intern!(py, "cuda_stream"))
                    .and_then(|h| h.extract::<usize>())
                    .map_err(|_| {
                        PyTypeError::new_err(
                            "stream: expected a torch.cuda.Stream or a raw stream handle (int)",
                        )
                    })?,
            },
        };
        let cfg = LaunchConfig {
            grid: cfg_grid,
            block: cfg_block,
            shared_mem,
            stream: Stream(stream),
            dependent,
            cluster: cluster.unwrap_or([1, 1, 1]),
        };
        cfg.validate(&self.name).py_err()?;
        let r = self.resolve(device).py_err()?;
        self.allow_shared_mem(device, r, shared_mem).py_err()?;
        r.allow_cluster(cfg.cluster).py_err()?;
        let packed = kernelkit_cuda::pack(&self.name, &r.params, &values).py_err()?;
        launch(device, r.func, &self.name, packed, &cfg).map_err(to_py)
    }

    /// Parameter types as kernelkit reads them from the PTX, on `device`'s arch.
    #[pyo3(signature = (device=0))]
    fn params(&self, device: i32) -> PyResult<Vec<String>> {
        let r = self.resolve(device).py_err()?;
        Ok(r.params.iter().map(|p| p.to_string()).collect())
    }

    /// Blocks of `block` threads (with `shared_mem` dynamic bytes) that fit on one SM of `device`:
    /// the input to a grid sized to fill the GPU once.
    #[pyo3(signature = (block, shared_mem=0, device=0))]
    fn occupancy(&self, block: u32, shared_mem: u32, device: i32) -> PyResult<i32> {
        let r = self.resolve(device).py_err()?;
        let block = i32::try_from(block)
            .map_err(|_| PyValueError::new_err(format!("block: {block} is too large")))?;
        self.allow_shared_mem(device, r, shared_mem).py_err()?;
        driver()
            .py_err()?
            .max_active_blocks(device, r.func, block, shared_mem as usize)
            .py_err()
    }

    /// Clusters of `cluster` blocks of `block` threads that can be resident on `device` at once: a
    /// grid of that many clusters fills the GPU once. 0 where there are no clusters (before sm_90).
    #[pyo3(signature = (block, cluster, shared_mem=0, device=0))]
    fn max_active_clusters(
        &self,
        block: &Bound<'_, PyAny>,
        cluster: &Bound<'_, PyAny>,
        shared_mem: u32,
        device: i32,
    ) -> PyResult<i32> {
        let block = dims(block, "block")?;
        let cluster = dims(cluster, "cluster")?;
        let r = self.resolve(device).py_err()?;
        self.allow_shared_mem(device, r, shared_mem).py_err()?;
        r.allow_cluster(cluster).py_err()?;
        driver()
            .py_err()?
            .max_active_clusters(device, r.func, block, cluster, shared_mem)
            .py_err()
    }

    /// Prefer `percent` of each SM's unified L1 and shared memory as shared memory when this kernel
    /// runs on `device`: 0 the most L1 that still runs it, 100 the most shared memory, -1 the
    /// driver's choice (the default). A hint the driver may override, which stays with the kernel
    /// until set again. Kernels that use little shared memory and read through L1 can run faster
    /// with more L1; a carveout too small for the blocks an SM would hold lowers their occupancy.
    ///
    ///     k.set_carveout(0)  # then k.carveout() == 0
    #[pyo3(signature = (percent, device=0))]
    fn set_carveout(&self, percent: i32, device: i32) -> PyResult<()> {
        if !(-1..=100).contains(&percent) {
            return Err(PyValueError::new_err(format!(
                "percent: expected -1 (the driver's choice) or 0 to 100, got {percent}"
            )));
        }
        let r = self.resolve(device).py_err()?;
        driver()
            .py_err()?
            .set_function_attribute(r.func, FuncAttr::PreferredSharedMemoryCarveout, percent)
            .py_err()
    }

    /// The L1/shared-memory split this kernel prefers on `device`, as set_carveout takes it (-1: the
    /// driver's choice).
    #[pyo3(signature = (device=0))]
    fn carveout(&self, device: i32) -> PyResult<i32> {
        let r = self.resolve(device).py_err()?;
        driver()
            .py_err()?
            .function_attribute(r.func, FuncAttr::PreferredSharedMemoryCarveout)
            .py_err()
    }

    /// Registers, static shared and local memory, max threads per block, on `device`.
    #[pyo3(signature = (device=0))]
    fn attributes<'py>(&self, py: Python<'py>, device: i32) -> PyResult<Bound<'py, PyDict>> {
        let r = self.resolve(device).py_err()?;
        let d = driver().py_err()?;
        let out = PyDict::new(py);
        for (k, a) in [
            ("num_regs", FuncAttr::NumRegs),
            ("shared_size_bytes", FuncAttr::SharedSizeBytes),
            ("local_size_bytes", FuncAttr::LocalSizeBytes),
            ("max_threads_per_block", FuncAttr::MaxThreadsPerBlock),
        ] {
            out.set_item(k, d.function_attribute(r.func, a).py_err()?)?;
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!(
            "<kernelkit.Kernel '{}' of module '{}'>",
            self.name, self.module.name
        )
    }
}

/// {path, version, device_count, init_error}; raises LibraryNotFoundError without a driver.
#[pyfunction]
fn driver_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = driver().py_err()?;
    let out = PyDict::new(py);
    out.set_item("path", d.path.display().to_string())?;
    out.set_item("version", d.version)?;
    out.set_item("device_count", d.device_count)?;
    out.set_item("init_error", d.init_error.as_ref().map(|e| e.to_string()))?;
    Ok(out)
}

/// Name, compute capability, SM count, memory (size, clock, bus width), L2 and shared-memory limit of one device.
#[pyfunction]
fn device_info(py: Python<'_>, device: i32) -> PyResult<Bound<'_, PyDict>> {
    let d = driver().py_err()?;
    let out = PyDict::new(py);
    out.set_item("name", d.device_name(device).py_err()?)?;
    out.set_item("compute_capability", d.compute_capability(device).py_err()?)?;
    for (k, a) in [
        ("multiprocessor_count", DeviceAttr::MultiprocessorCount),
        ("l2_cache_bytes", DeviceAttr::L2CacheSize),
        (
            "max_shared_memory_per_block_optin",
            DeviceAttr::MaxSharedMemoryPerBlockOptin,
        ),
        ("max_threads_per_block", DeviceAttr::MaxThreadsPerBlock),
        ("memory_clock_khz", DeviceAttr::MemoryClockRate),
        ("memory_bus_bits", DeviceAttr::GlobalMemoryBusWidth),
    ] {
        out.set_item(k, d.device_attribute(device, a).py_err()?)?;
    }
    out.set_item(
        "total_memory_bytes",
        d.device_total_memory(device).py_err()?,
    )?;
    Ok(out)
}

/// {path, version, include_dir, supported_archs}; raises LibraryNotFoundError without NVRTC.
#[pyfunction]
fn nvrtc_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    default_search_paths(py);
    let n = nvrtc::nvrtc().py_err()?;
    let out = PyDict::new(py);
    out.set_item("path", n.path.display().to_string())?;
    out.set_item("version", n.version_string())?;
    out.set_item(
        "include_dir",
        n.include_dir.as_ref().map(|p| p.display().to_string()),
    )?;
    out.set_item("supported_archs", n.supported_archs())?;
    Ok(out)
}

#[pyfunction]
fn cache_dir() -> PathBuf {
    cache::default_dir()
}

/// (bytes, entries) in the disk cache.
#[pyfunction]
fn cache_usage() -> (u64, usize) {
    cache::DiskCache::new(cache::default_dir()).usage()
}

/// Delete every cached compile; returns how many files were removed.
#[pyfunction]
fn clear_cache() -> usize {
    cache::DiskCache::new(cache::default_dir()).clear()
}

#[pyfunction]
fn set_launch_blocking(on: bool) {
    kernelkit_cuda::set_launch_blocking(on);
}

#[pyfunction]
fn launch_blocking() -> bool {
    kernelkit_cuda::launch_blocking()
}
