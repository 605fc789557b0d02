//! The CUDA driver API, resolved at run time.
//!
//! kernelkit borrows PyTorch's world: it retains each device's primary context (the one the
//! CUDA runtime, and so PyTorch, uses), launches on stream handles it is given, and never
//! creates or destroys a context or a stream. Nothing here synchronizes unless asked to.

use crate::error::{Error, Library, Result};
use crate::loader::{self, Opened, SearchPaths};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;

/// Device attributes kernelkit reads (values from cuda.h's CUdevice_attribute).
#[derive(Clone, Copy, Debug)]
#[repr(i32)]
pub enum DeviceAttr {
    MaxThreadsPerBlock = 1,
    MultiprocessorCount = 16,
    /// Peak memory clock in kHz.
    MemoryClockRate = 36,
    GlobalMemoryBusWidth = 37,
    L2CacheSize = 38,
    ComputeCapabilityMajor = 75,
    ComputeCapabilityMinor = 76,
    MaxSharedMemoryPerBlockOptin = 97,
}

/// Function attributes (CUfunction_attribute).
#[derive(Clone, Copy, Debug)]
#[repr(i32)]
pub enum FuncAttr {
    MaxThreadsPerBlock = 0,
    SharedSizeBytes = 1,
    LocalSizeBytes = 3,
    NumRegs = 4,
    MaxDynamicSharedSizeBytes = 8,
    /// The share of each SM's unified L1 and shared memory to give shared memory, in percent (0: the most
    /// L1 that still runs the function, 100: the most shared memory, -1: the driver's choice). A hint.
    PreferredSharedMemoryCarveout = 9,
    /// Set to 1 before a launch (or occupancy query) with more blocks per cluster than the portable 8.
    NonPortableClusterSizeAllowed = 14,
}

type FnInit = unsafe extern "C" fn(c_uint) -> CuResult;
type FnDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CuResult;
type FnDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> CuResult;
type FnDeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
type FnDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
type FnDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult;
type FnDeviceTotalMem = unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult;
type FnPrimaryCtxRetain = unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult;
type FnCtxGetCurrent = unsafe extern "C" fn(*mut CuContext) -> CuResult;
type FnCtxPushCurrent = unsafe extern "C" fn(CuContext) -> CuResult;
type FnCtxPopCurrent = unsafe extern "C" fn(*mut CuContext) -> CuResult;
type FnModuleLoadData = unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult;
type FnModuleGetFunction =
    unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
type FnLaunchKernel = unsafe extern "C" fn(
    CuFunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CuStream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type FnLaunchKernelEx = unsafe extern "C" fn(
    *const LaunchConfigEx,
    CuFunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type FnStreamSynchronize = unsafe extern "C" fn(CuStream) -> CuResult;
type FnThreadExchangeStreamCaptureMode = unsafe extern "C" fn(*mut c_int) -> CuResult;

/// `CU_STREAM_CAPTURE_MODE_RELAXED`: the calling thread may make "potentially unsafe" calls while a
/// stream captures.
const STREAM_CAPTURE_MODE_RELAXED: c_int = 2;

/// `CUlaunchAttribute` (cuda.h, CUDA 12): an id, padding to 8 bytes, and a 64-byte value union.
#[repr(C)]
pub(crate) struct LaunchAttribute {
    id: c_uint,
    pad: [u8; 4],
    value: [u8; 64],
}

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`: the kernel may start before the previous
/// kernel on its stream has finished; it waits for it with `griddepcontrol.wait` (sm_90+).
const LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: c_uint = 6;

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`: blocks per thread-block cluster in x, y, z (sm_90+).
const LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_uint = 4;

impl LaunchAttribute {
    fn new(id: c_uint, words: &[u32]) -> Self {
        let mut value = [0u8; 64];
        for (chunk, w) in value.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        LaunchAttribute {
            id,
            pad: [0; 4],
            value,
        }
    }
}

/// `CUlaunchConfig` (cuda.h, CUDA 12).
#[repr(C)]
pub(crate) struct LaunchConfigEx {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem: c_uint,
    stream: CuStream,
    attrs: *mut LaunchAttribute,
    num_attrs: c_uint,
}

impl LaunchConfigEx {
    /// A config reading `attrs`, which must outlive every use of it.
    fn new(
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: CuStream,
        attrs: &mut [LaunchAttribute],
    ) -> Self {
        LaunchConfigEx {
            grid,
            block,
            shared_mem,
            stream,
            attrs: attrs.as_mut_ptr(),
            num_attrs: attrs.len() as c_uint,
        }
    }
}
type FnGetErrorText = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
type FnFuncGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CuFunction) -> CuResult;
type FnFuncSetAttribute = unsafe extern "C" fn(CuFunction, c_int, c_int) -> CuResult;
type FnOccupancyMaxActiveBlocks =
    unsafe extern "C" fn(*mut c_int, CuFunction, c_int, usize) -> CuResult;
type FnOccupancyMaxActiveClusters =
    unsafe extern "C" fn(*mut c_int, CuFunction, *const LaunchConfigEx) -> CuResult;

struct Fns {
    driver_get_version: FnDriverGetVersion,
    device_get_count: FnDeviceGetCount,
    device_get: FnDeviceGet,
    device_get_name: FnDeviceGetName,
    device_get_attribute: FnDeviceGetAttribute,
    device_total_mem: FnDeviceTotalMem,
    primary_ctx_retain: FnPrimaryCtxRetain,
    ctx_get_current: FnCtxGetCurrent,
    ctx_push_current: FnCtxPushCurrent,
    ctx_pop_current: FnCtxPopCurrent,
    module_load_data: FnModuleLoadData,
    module_get_function: FnModuleGetFunction,
    launch_kernel: FnLaunchKernel,
    // CUDA 12.0+ drivers; without it, dependent launches fall back to plain ones and cluster
    // launches are refused.
    launch_kernel_ex: Option<FnLaunchKernelEx>,
    occupancy_max_active_clusters: Option<FnOccupancyMaxActiveClusters>,
    stream_synchronize: FnStreamSynchronize,
    exchange_capture_mode: FnThreadExchangeStreamCaptureMode,
    get_error_name: FnGetErrorText,
    get_error_string: FnGetErrorText,
    func_get_attribute: FnFuncGetAttribute,
    func_set_attribute: FnFuncSetAttribute,
    occupancy_max_active_blocks: FnOccupancyMaxActiveBlocks,
}

/// A kernel handle inside a loaded module. Handles are plain values the driver owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function(CuFunction);
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// A module loaded into one context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Module(CuModule);
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// A borrowed stream handle (PyTorch's `cudaStream_t` as an integer; 0 is the legacy default stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream(pub usize);

/// A retained primary context. Raw pointers are safe to share: the driver's handles are thread-safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context(pub CuContext);
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

/// The loaded CUDA driver. One per process, see [`driver`].
pub struct Driver {
    _lib: Opened,
    f: Fns,
    /// The file the driver was loaded from.
    pub path: PathBuf,
    /// e.g. 13000 for CUDA 13.0.
    pub version: i32,
    /// Set when cuInit failed (e.g. no GPU): the driver is there but has no device to use.
    pub init_error: Option<Error>,
    pub device_count: i32,
    contexts: Box<[OnceLock<Context>]>,
    /// Per device: whether it is sm_90+ (programmatic dependent launches, clusters);
    /// asked once, as launches are the hot path.
    sm90: Box<[OnceLock<bool>]>,
}

// SAFETY: the table holds function pointers and a library handle; the driver API is thread-safe.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();

/// The process's driver, loaded on first use. An error here is sticky: it says why CUDA cannot be used.
pub fn driver() -> Result<&'static Driver> {
    DRIVER
        .get_or_init(|| Driver::load(&SearchPaths::default()))
        .as_ref()
        .map_err(Clone::clone)
}

impl Driver {
    fn load(paths: &SearchPaths) -> Result<Driver> {
        let lib = loader::open(Library::Driver, paths, b"cuInit\0")?;
        // SAFETY: each signature below is the one in cuda.h for that symbol.
        let (init, f): (FnInit, Fns) = unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    loader::symbol(&lib, Library::Driver, $name)?
                };
            }
            (
                sym!("cuInit"),
                Fns {
                    driver_get_version: sym!("cuDriverGetVersion"),
                    device_get_count: sym!("cuDeviceGetCount"),
                    device_get: sym!("cuDeviceGet"),
                    device_get_name: sym!("cuDeviceGetName"),
                    device_get_attribute: sym!("cuDeviceGetAttribute"),
                    device_total_mem: sym!("cuDeviceTotalMem_v2"),
                    primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
                    ctx_get_current: sym!("cuCtxGetCurrent"),
                    ctx_push_current: sym!("cuCtxPushCurrent_v2"),
                    ctx_pop_current: sym!("cuCtxPopCurrent_v2"),
                    module_load_data: sym!("cuModuleLoadData"),
                    module_get_function: sym!("cuModuleGetFunction"),
                    launch_kernel: sym!("cuLaunchKernel"),
                    launch_kernel_ex: loader::symbol(&lib, Library::Driver, "cuLaunchKernelEx")
                        .ok(),
                    occupancy_max_active_clusters: loader::symbol(
                        &lib,
                        Library::Driver,
                        "cuOccupancyMaxActiveClusters",
                    )
                    .ok(),
                    stream_synchronize: sym!("cuStreamSynchronize"),
                    exchange_capture_mode: sym!("cuThreadExchangeStreamCaptureMode"),
                    get_error_name: sym!("cuGetErrorName"),
                    get_error_string: sym!("cuGetErrorString"),
                    func_get_attribute: sym!("cuFuncGetAttribute"),
                    func_set_attribute: sym!("cuFuncSetAttribute"),
                    occupancy_max_active_blocks: sym!(
                        "cuOccupancyMaxActiveBlocksPerMultiprocessor"
                    ),
                },
            )
        };
        let path = lib.path.clone();
        let mut d = Driver {
            _lib: lib,
            f,
            path,
            version: 0,
            init_error: None,
            device_count: 0,
            contexts: Box::new([]),
            sm90: Box::new([]),
        };
        let mut version = 0;
        // SAFETY: plain out-parameter calls into the driver.
        unsafe {
            d.check("cuDriverGetVersion", (d.f.driver_get_version)(&mut version))?;
            d.version = version;
            if let Err(e) = d.check("cuInit", init(0)) {
                d.init_error = Some(e);
                return Ok(d);
            }
            let mut n = 0;
            d.check("cuDeviceGetCount", (d.f.device_get_count)(&mut n))?;
            d.device_count = n;
        }
        d.contexts = (0..d.device_count).map(|_| OnceLock::new()).collect();
        d.sm90 = (0..d.device_count).map(|_| OnceLock::new()).collect();
        Ok(d)
    }

    /// "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered".
    pub fn error_text(&self, code: CuResult) -> (String, String) {
        let text = |f: FnGetErrorText| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the driver returns a static string or leaves p null.
            unsafe {
                if f(code, &mut p) == CUDA_SUCCESS && !p.is_null() {
                    Some(CStr::from_ptr(p).to_string_lossy().into_owned())
                } else {
                    None
                }
            }
        };
        (
            text(self.f.get_error_name).unwrap_or_else(|| format!("CUDA error {code}")),
            text(self.f.get_error_string).unwrap_or_else(|| "unknown error".into()),
        )
    }

    pub fn check(&self, call: &'static str, code: CuResult) -> Result<()> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        let (name, description) = self.error_text(code);
        Err(Error::Driver {
            call,
            code,
            name,
            description,
        })
    }

    fn usable(&self, device: i32) -> Result<()> {
        if let Some(e) = &self.init_error {
            return Err(e.clone());
        }
        if device < 0 || device >= self.device_count {
            return Err(Error::NoDevice(
                device,
                format!("this machine has {} CUDA device(s)", self.device_count),
            ));
        }
        Ok(())
    }

    /// The device's primary context, retained once per process and never released.
    pub fn context(&self, device: i32) -> Result<Context> {
        self.usable(device)?;
        let slot = &self.contexts[device as usize];
        if let Some(c) = slot.get() {
            return Ok(*c);
        }
        let mut dev = 0;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out-parameter calls; retaining the primary context shares PyTorch's.
        unsafe {
            self.check("cuDeviceGet", (self.f.device_get)(&mut dev, device))?;
            self.check(
                "cuDevicePrimaryCtxRetain",
                (self.f.primary_ctx_retain)(&mut ctx, dev),
            )?;
        }
        // Another thread may have won the race; the extra retain is harmless (never released).
        Ok(*slot.get_or_init(|| Context(ctx)))
    }

    /// Run `f` with `device`'s primary context current, restoring the caller's afterwards.
    /// When it is already current (the usual case under PyTorch) this costs one query.
    pub fn with_context<R>(&self, device: i32, f: impl FnOnce() -> R) -> Result<R> {
        let ctx = self.context(device)?;
        let mut cur = std::ptr::null_mut();
        // SAFETY: querying and pushing/popping the calling thread's context stack.
        unsafe {
            self.check("cuCtxGetCurrent", (self.f.ctx_get_current)(&mut cur))?;
            if cur == ctx.0 {
                return Ok(f());
            }
            self.check("cuCtxPushCurrent", (self.f.ctx_push_current)(ctx.0))?;
            let r = f();
            let mut popped = std::ptr::null_mut();
            self.check("cuCtxPopCurrent", (self.f.ctx_pop_current)(&mut popped))?;
            Ok(r)
        }
    }

    pub fn device_attribute(&self, device: i32, attr: DeviceAttr) -> Result<i32> {
        self.usable(device)?;
        let mut v = 0;
        // SAFETY: out-parameter call.
        unsafe {
            self.check(
                "cuDeviceGetAttribute",
                (self.f.device_get_attribute)(&mut v, attr as c_int, device),
            )?;
        }
        Ok(v)
    }

    pub fn device_name(&self, device: i32) -> Result<String> {
        self.usable(device)?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes a NUL-terminated name into the buffer.
        unsafe {
            self.check(
                "cuDeviceGetName",
                (self.f.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, device),
            )?;
            Ok(CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
        }
    }

    pub fn device_total_memory(&self, device: i32) -> Result<usize> {
        self.usable(device)?;
        let mut bytes = 0usize;
        // SAFETY: out-parameter call.
        unsafe {
            self.check(
                "cuDeviceTotalMem",
                (self.f.device_total_mem)(&mut bytes, device),
            )?;
        }
        Ok(bytes)
    }

    /// (major, minor) compute capability.
    pub fn compute_capability(&self, device: i32) -> Result<(i32, i32)> {
        Ok((
            self.device_attribute(device, DeviceAttr::ComputeCapabilityMajor)?,
            self.device_attribute(device, DeviceAttr::ComputeCapabilityMinor)?,
        ))
    }

    /// Run `f` with the calling thread's stream capture mode relaxed, then restore it. A capture in
    /// the global or thread-local mode (torch.cuda.graph's default) refuses "potentially unsafe"
    /// calls such as loading a module, which a kernel's first call inside a capture makes; PyTorch's
    /// allocator relaxes the mode the same way around its own allocations.
    fn relaxed_capture<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut mode = STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: swaps the calling thread's capture mode with `mode`.
        let swapped = unsafe { (self.f.exchange_capture_mode)(&mut mode) } == CUDA_SUCCESS;
        let r = f();
        if swapped {
            // SAFETY: as above; puts the caller's mode back.
            unsafe { (self.f.exchange_capture_mode)(&mut mode) };
        }
        r
    }

    /// Load a CUBIN (or NUL-terminated PTX) image into `device`'s primary context.
    pub fn load_module(&self, device: i32, image: &[u8]) -> Result<Module> {
        let mut module = std::ptr::null_mut();
        self.with_context(device, || {
            // SAFETY: image is a complete CUBIN/PTX buffer that outlives the call.
            self.check(
                "cuModuleLoadData",
                self.relaxed_capture(|| unsafe {
                    (self.f.module_load_data)(&mut module, image.as_ptr().cast())
                }),
            )
        })??;
        Ok(Module(module))
    }

    pub fn get_function(&self, module: Module, name: &str) -> Result<Function> {
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        let mut f = std::ptr::null_mut();
        // SAFETY: module is a live handle from load_module; cname is NUL-terminated.
        self.check(
            "cuModuleGetFunction",
            self.relaxed_capture(|| unsafe {
                (self.f.module_get_function)(&mut f, module.0, cname.as_ptr().cast())
            }),
        )?;
        Ok(Function(f))
    }

    pub fn function_attribute(&self, f: Function, attr: FuncAttr) -> Result<i32> {
        let mut v = 0;
        // SAFETY: out-parameter call on a live function handle.
        self.check("cuFuncGetAttribute", unsafe {
            (self.f.func_get_attribute)(&mut v, attr as c_int, f.0)
        })?;
        Ok(v)
    }

    pub fn set_function_attribute(&self, f: Function, attr: FuncAttr, value: i32) -> Result<()> {
        // SAFETY: plain call on a live function handle.
        self.check(
            "cuFuncSetAttribute",
            self.relaxed_capture(|| unsafe {
                (self.f.func_set_attribute)(f.0, attr as c_int, value)
            }),
        )
    }

    /// How many blocks of `block_size` threads (and `shared_mem` dynamic bytes) fit on one SM.
    pub fn max_active_blocks(
        &self,
        device: i32,
        f: Function,
        block_size: i32,
        shared_mem: usize,
    ) -> Result<i32> {
        let mut n = 0;
        // SAFETY: out-parameter call on a live function handle of `device`'s context.
        let rc = self.with_context(device, || unsafe {
            (self.f.occupancy_max_active_blocks)(&mut n, f.0, block_size, shared_mem)
        })?;
        self.check("cuOccupancyMaxActiveBlocksPerMultiprocessor", rc)?;
        Ok(n)
    }

    /// Whether `device` is sm_90+: dependent launches run programmatically, clusters exist.
    fn sm90(&self, device: i32) -> Result<bool> {
        self.usable(device)?;
        let slot = &self.sm90[device as usize];
        if let Some(&on) = slot.get() {
            return Ok(on);
        }
        let on = self.compute_capability(device)?.0 >= 9;
        Ok(*slot.get_or_init(|| on))
    }

    /// Enqueue a kernel. Returns the raw driver code so the caller can name the kernel in errors.
    ///
    /// # Safety
    /// `params` must point to one valid pointer per kernel parameter, each to a value of the
    /// parameter's size; `f` must belong to `device`'s context; `stream` must be a live stream
    /// of that context (or null for the legacy default stream).
    /// `dependent`: launch with programmatic stream serialization where the driver and the device
    /// (sm_90+) support it, so that the kernel is scheduled before the previous kernel on the
    /// stream finishes; the kernel must then `griddepcontrol.wait` before it reads that kernel's
    /// output. Elsewhere it is a plain launch, in which `griddepcontrol.wait` returns at once.
    /// `cluster`: blocks per thread-block cluster; anything but [1, 1, 1] needs sm_90+ and a
    /// CUDA 12 driver, and is refused with an error elsewhere.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        device: i32,
        f: Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: Stream,
        params: *mut *mut c_void,
        dependent: bool,
        cluster: [u32; 3],
    ) -> Result<CuResult> {
        let clustered = cluster != [1, 1, 1];
        // cuLaunchKernelEx only where an attribute asks for it and the device has them (sm_90+).
        let launch_ex = match self.f.launch_kernel_ex {
            Some(l) if (clustered || dependent) && self.sm90(device)? => Some(l),
            _ => None,
        };
        if let Some(launch_ex) = launch_ex {
            let mut attrs = [
                LaunchAttribute::new(LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &cluster),
                LaunchAttribute::new(LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, &[1]),
            ];
            let used = match (clustered, dependent) {
                (true, true) => &mut attrs[..],
                (true, false) => &mut attrs[..1],
                _ => &mut attrs[1..],
            };
            let cfg = LaunchConfigEx::new(grid, block, shared_mem, stream.0 as CuStream, used);
            return self.with_context(device, || {
                launch_ex(&cfg, f.0, params, std::ptr::null_mut())
            });
        }
        if clustered {
            return Err(Error::Argument(format!(
                "thread-block clusters ({cluster:?}) need an sm_90+ GPU and a CUDA 12+ driver; \
                 device {device} or the driver ({}) has none",
                self.version
            )));
        }
        self.with_context(device, || {
            (self.f.launch_kernel)(
                f.0,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem,
                stream.0 as CuStream,
                params,
                std::ptr::null_mut(),
            )
        })
    }

    /// How many clusters of `cluster` blocks (each `block` threads, `shared_mem` dynamic bytes) can
    /// be resident on `device` at once; 0 where clusters are unsupported (before sm_90, or drivers
    /// before CUDA 12).
    pub fn max_active_clusters(
        &self,
        device: i32,
        f: Function,
        block: [u32; 3],
        cluster: [u32; 3],
        shared_mem: u32,
    ) -> Result<i32> {
        let Some(query) = self.f.occupancy_max_active_clusters else {
            return Ok(0);
        };
        if !self.sm90(device)? {
            return Ok(0);
        }
        let mut attr = [LaunchAttribute::new(
            LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            &cluster,
        )];
        let cfg = LaunchConfigEx::new(cluster, block, shared_mem, std::ptr::null_mut(), &mut attr);
        let mut n = 0;
        // SAFETY: out-parameter call on a live function handle of `device`'s context; `cfg` and
        // the attribute it points to outlive the call.
        let rc = self.with_context(device, || unsafe { query(&mut n, f.0, &cfg) })?;
        self.check("cuOccupancyMaxActiveClusters", rc)?;
        Ok(n)
    }

    /// Wait for a stream; only used when the user asks for blocking launches.
    pub fn synchronize_stream(&self, device: i32, stream: Stream) -> Result<CuResult> {
        // SAFETY: the stream handle came from the caller for this device.
        self.with_context(device, || unsafe {
            (self.f.stream_synchronize)(stream.0 as CuStream)
        })
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// The structs cuLaunchKernelEx reads must match cuda.h (CUDA 12) byte for byte.
    #[test]
    fn launch_ex_structs_match_cuda_h() {
        assert_eq!(std::mem::size_of::<LaunchAttribute>(), 72);
        assert_eq!(std::mem::size_of::<LaunchConfigEx>(), 56);
        assert_eq!(std::mem::offset_of!(LaunchConfigEx, stream), 32);
        assert_eq!(std::mem::offset_of!(LaunchConfigEx, attrs), 40);
        assert_eq!(std::mem::offset_of!(LaunchConfigEx, num_attrs), 48);
        assert_eq!(std::mem::offset_of!(LaunchAttribute, value), 8);
    }
}
