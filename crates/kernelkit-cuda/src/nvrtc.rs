//! NVRTC, resolved at run time: CUDA C++ source to CUBIN (or PTX) in-process, in milliseconds.

use crate::error::{Error, Library, Result};
use crate::loader::{self, Opened, SearchPaths};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

type Prog = *mut c_void;
type NvResult = c_int;

/// A GPU architecture, e.g. sm_90 or sm_90a.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Arch {
    pub major: u32,
    pub minor: u32,
    /// "" or an arch-specific suffix such as "a".
    pub suffix: String,
}

impl Arch {
    /// Parse "sm_90", "sm_90a", "compute_90", "90" or "9.0".
    pub fn parse(s: &str) -> Result<Arch> {
        let bad = || {
            Error::Argument(format!(
                "arch: expected a GPU architecture like 'sm_90', 'sm_90a' or '9.0', got '{s}'"
            ))
        };
        let t = s.trim();
        let t = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))
            .unwrap_or(t);
        let (num, suffix) = match t.find(|c: char| c.is_ascii_alphabetic()) {
            Some(i) => (&t[..i], &t[i..]),
            None => (t, ""),
        };
        let (major, minor) = if let Some((a, b)) = num.split_once('.') {
            (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)
        } else {
            let n: u32 = num.parse().map_err(|_| bad())?;
            (n / 10, n % 10)
        };
        if major == 0 || minor > 9 || !suffix.chars().all(|c| c.is_ascii_lowercase()) {
            return Err(bad());
        }
        Ok(Arch {
            major,
            minor,
            suffix: suffix.to_string(),
        })
    }

    /// "sm_90a"
    pub fn sm(&self) -> String {
        format!("sm_{}{}{}", self.major, self.minor, self.suffix)
    }

    /// "compute_90a"
    pub fn compute(&self) -> String {
        format!("compute_{}{}{}", self.major, self.minor, self.suffix)
    }

    /// The number NVRTC lists in its supported archs, e.g. 90.
    pub fn number(&self) -> i32 {
        (self.major * 10 + self.minor) as i32
    }
}

/// What a compile produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Machine code for exactly one arch: loads on any driver, even one older than NVRTC.
    Cubin,
    /// Portable PTX: the driver must be at least as new as NVRTC to load it.
    Ptx,
}

impl Output {
    pub fn parse(s: &str) -> Result<Output> {
        match s {
            "cubin" => Ok(Output::Cubin),
            "ptx" => Ok(Output::Ptx),
            _ => Err(Error::Argument(format!(
                "output: expected 'cubin' or 'ptx', got '{s}'"
            ))),
        }
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Output::Cubin => "cubin",
            Output::Ptx => "ptx",
        }
    }
}

/// Everything that goes into one NVRTC compile.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub source: String,
    /// The name errors are reported against, e.g. "my_kernels.cu".
    pub file_name: String,
    /// In-memory headers: (include name, contents).
    pub headers: Vec<(String, String)>,
    /// Template instantiations to emit, e.g. "scale<float>".
    pub name_expressions: Vec<String>,
    pub options: Vec<String>,
    pub include_dirs: Vec<PathBuf>,
}

/// What NVRTC gave back.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// CUBIN bytes, or PTX text (NUL-terminated, ready for cuModuleLoadData).
    pub image: Vec<u8>,
    /// The PTX, when NVRTC kept it; kernel parameter types are read from it.
    pub ptx: String,
    /// (name expression, lowered/mangled name).
    pub lowered: Vec<(String, String)>,
    pub log: String,
}

type FnVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvResult;
type FnCreate = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> NvResult;
type FnDestroy = unsafe extern "C" fn(*mut Prog) -> NvResult;
type FnCompile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> NvResult;
type FnSize = unsafe extern "C" fn(Prog, *mut usize) -> NvResult;
type FnGet = unsafe extern "C" fn(Prog, *mut c_char) -> NvResult;
type FnAddName = unsafe extern "C" fn(Prog, *const c_char) -> NvResult;
type FnLowered = unsafe extern "C" fn(Prog, *const c_char, *mut *const c_char) -> NvResult;
type FnErrorString = unsafe extern "C" fn(NvResult) -> *const c_char;
type FnNumArchs = unsafe extern "C" fn(*mut c_int) -> NvResult;
type FnArchs = unsafe extern "C" fn(*mut c_int) -> NvResult;

struct Fns {
    create: FnCreate,
    destroy: FnDestroy,
    compile: FnCompile,
    log_size: FnSize,
    log: FnGet,
    ptx_size: FnSize,
    ptx: FnGet,
    cubin_size: FnSize,
    cubin: FnGet,
    add_name: FnAddName,
    lowered: FnLowered,
    error_string: FnErrorString,
    num_archs: Option<FnNumArchs>,
    archs: Option<FnArchs>,
}

/// The loaded NVRTC library. One per process, see [`nvrtc`].
pub struct Nvrtc {
    _lib: Opened,
    f: Fns,
    pub path: PathBuf,
    /// (major, minor), e.g. (13, 0).
    pub version: (i32, i32),
    /// Folder with cuda_fp16.h and cuda_bf16.h, passed to every compile.
    pub include_dir: Option<PathBuf>,
}

// SAFETY: function pointers and a library handle; NVRTC is thread-safe across programs.
unsafe impl Send for Nvrtc {}
unsafe impl Sync for Nvrtc {}

static SEARCH: OnceLock<SearchPaths> = OnceLock::new();
static NVRTC: OnceLock<Result<Nvrtc>> = OnceLock::new();

/// Tell the loader where the running Python keeps its packages. Only the first call counts.
pub fn set_search_paths(paths: SearchPaths) {
    let _ = SEARCH.set(paths);
}

pub fn search_paths() -> SearchPaths {
    SEARCH.get().cloned().unwrap_or_default()
}

/// The process's NVRTC, loaded on first use.
pub fn nvrtc() -> Result<&'static Nvrtc> {
    NVRTC
        .get_or_init(|| Nvrtc::load(&search_paths()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The folder holding cuda_fp16.h that belongs with the NVRTC at `nvrtc_path`.
pub fn find_cuda_include(nvrtc_path: &Path) -> Option<PathBuf> {
    let mut cands = Vec::new();
    if let Some(lib_dir) = nvrtc_path.parent() {
        cands.push(lib_dir.join("../include"));
        // cu12 pip wheels: nvidia/cuda_nvrtc/lib next to nvidia/cuda_runtime/include.
        cands.push(lib_dir.join("../../cuda_runtime/include"));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var) {
            cands.push(PathBuf::from(h).join("include"));
        }
    }
    cands.push(PathBuf::from("/usr/local/cuda/include"));
    cands
        .into_iter()
        .find(|d| d.join("cuda_fp16.h").is_file())
        .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
}

impl Nvrtc {
    fn load(paths: &SearchPaths) -> Result<Nvrtc> {
        let lib = loader::open(Library::Nvrtc, paths, b"nvrtcVersion\0")?;
        // SAFETY: each signature is the one in nvrtc.h.
        let (version_fn, f) = unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    loader::symbol(&lib, Library::Nvrtc, $name)?
                };
            }
            let version_fn: FnVersion = sym!("nvrtcVersion");
            let f = Fns {
                create: sym!("nvrtcCreateProgram"),
                destroy: sym!("nvrtcDestroyProgram"),
                compile: sym!("nvrtcCompileProgram"),
                log_size: sym!("nvrtcGetProgramLogSize"),
                log: sym!("nvrtcGetProgramLog"),
                ptx_size: sym!("nvrtcGetPTXSize"),
                ptx: sym!("nvrtcGetPTX"),
                cubin_size: sym!("nvrtcGetCUBINSize"),
                cubin: sym!("nvrtcGetCUBIN"),
                add_name: sym!("nvrtcAddNameExpression"),
                lowered: sym!("nvrtcGetLoweredName"),
                error_string: sym!("nvrtcGetErrorString"),
                num_archs: loader::symbol(&lib, Library::Nvrtc, "nvrtcGetNumSupportedArchs").ok(),
                archs: loader::symbol(&lib, Library::Nvrtc, "nvrtcGetSupportedArchs").ok(),
            };
            (version_fn, f)
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: out-parameter call.
        let rc = unsafe { version_fn(&mut major, &mut minor) };
        let path = lib.path.clone();
        let include_dir = find_cuda_include(&path);
        let n = Nvrtc {
            _lib: lib,
            f,
            path,
            version: (major, minor),
            include_dir,
        };
        n.check("nvrtcVersion", rc)?;
        Ok(n)
    }

    fn check(&self, call: &'static str, rc: NvResult) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: NVRTC returns a static string for any code.
        let msg = unsafe {
            let p = (self.f.error_string)(rc);
            if p.is_null() {
                format!("NVRTC error {rc}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(Error::Nvrtc { call, message: msg })
    }

    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version.0, self.version.1)
    }

    /// Architectures this NVRTC can target, e.g. [75, 80, 86, 89, 90, ...].
    pub fn supported_archs(&self) -> Vec<i32> {
        let (Some(num), Some(get)) = (self.f.num_archs, self.f.archs) else {
            return Vec::new();
        };
        let mut n = 0;
        // SAFETY: out-parameter calls; the vector is sized to what NVRTC reports.
        unsafe {
            if num(&mut n) != 0 || n <= 0 {
                return Vec::new();
            }
            let mut v = vec![0; n as usize];
            if get(v.as_mut_ptr()) != 0 {
                return Vec::new();
            }
            v
        }
    }

    /// Compile a program for `arch`. Never touches a GPU.
    pub fn compile(&self, prog: &Program, arch: &Arch, output: Output) -> Result<Compiled> {
        let cstr = |s: &str, what: &str| {
            CString::new(s).map_err(|_| Error::Argument(format!("{what} contains a NUL byte")))
        };
        let src = cstr(&prog.source, "source")?;
        let file = cstr(&prog.file_name, "file name")?;
        let hdr_src: Vec<CString> = prog
            .headers
            .iter()
            .map(|(_, c)| cstr(c, "header"))
            .collect::<Result<_>>()?;
        let hdr_names: Vec<CString> = prog
            .headers
            .iter()
            .map(|(n, _)| cstr(n, "header name"))
            .collect::<Result<_>>()?;
        let hdr_src_p: Vec<*const c_char> = hdr_src.iter().map(|c| c.as_ptr()).collect();
        let hdr_names_p: Vec<*const c_char> = hdr_names.iter().map(|c| c.as_ptr()).collect();

        let target = match output {
            Output::Cubin => arch.sm(),
            Output::Ptx => arch.compute(),
        };
        let mut opts = vec![format!("--gpu-architecture={target}")];
        if !prog.options.iter().any(|o| o.starts_with("-std")) {
            opts.push("-std=c++17".into());
        }
        for d in &prog.include_dirs {
            opts.push(format!("-I{}", d.display()));
        }
        if let Some(d) = &self.include_dir {
            opts.push(format!("-I{}", d.display()));
        }
        opts.extend(prog.options.iter().cloned());
        let opts_c: Vec<CString> = opts
            .iter()
            .map(|o| cstr(o, "option"))
            .collect::<Result<_>>()?;
        let opts_p: Vec<*const c_char> = opts_c.iter().map(|c| c.as_ptr()).collect();
        let names_c: Vec<CString> = prog
            .name_expressions
            .iter()
            .map(|n| cstr(n, "name expression"))
            .collect::<Result<_>>()?;

        let mut p: Prog = std::ptr::null_mut();
        // SAFETY: all pointers reference CStrings that live until the program is destroyed below.
        unsafe {
            self.check(
                "nvrtcCreateProgram",
                (self.f.create)(
                    &mut p,
                    src.as_ptr(),
                    file.as_ptr(),
                    hdr_src_p.len() as c_int,
                    hdr_src_p.as_ptr(),
                    hdr_names_p.as_ptr(),
                ),
            )?;
        }
        let guard = ProgGuard(p, self.f.destroy);
        let result = (|| -> Result<Compiled> {
            // SAFETY: `p` is a live program; the buffers are sized by NVRTC's own size queries.
            unsafe {
                for n in &names_c {
                    self.check("nvrtcAddNameExpression", (self.f.add_name)(p, n.as_ptr()))?;
                }
                let rc = (self.f.compile)(p, opts_p.len() as c_int, opts_p.as_ptr());
                let log = self
                    .read(p, self.f.log_size, self.f.log)
                    .unwrap_or_default();
                let log = String::from_utf8_lossy(trim_nul(&log)).into_owned();
                if rc != 0 {
                    return Err(Error::Compile {
                        file: prog.file_name.clone(),
                        log: if log.trim().is_empty() {
                            format!(
                                "(NVRTC returned error {rc} with an empty log; options: {opts:?})"
                            )
                        } else {
                            log
                        },
                    });
                }
                let ptx = self
                    .read(p, self.f.ptx_size, self.f.ptx)
                    .map(|b| String::from_utf8_lossy(trim_nul(&b)).into_owned())
                    .unwrap_or_default();
                let image = match output {
                    Output::Cubin => self.read(p, self.f.cubin_size, self.f.cubin)?,
                    Output::Ptx => {
                        let mut b = ptx.clone().into_bytes();
                        b.push(0);
                        b
                    }
                };
                let mut lowered = Vec::with_capacity(names_c.len());
                for (expr, c) in prog.name_expressions.iter().zip(&names_c) {
                    let mut out: *const c_char = std::ptr::null();
                    self.check(
                        "nvrtcGetLoweredName",
                        (self.f.lowered)(p, c.as_ptr(), &mut out),
                    )?;
                    lowered.push((
                        expr.clone(),
                        CStr::from_ptr(out).to_string_lossy().into_owned(),
                    ));
                }
                Ok(Compiled {
                    image,
                    ptx,
                    lowered,
                    log,
                })
            }
        })();
        drop(guard);
        result
    }

    unsafe fn read(&self, p: Prog, size: FnSize, get: FnGet) -> Result<Vec<u8>> {
        let mut n = 0usize;
        self.check("nvrtcGet*Size", size(p, &mut n))?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            self.check("nvrtcGet*", get(p, buf.as_mut_ptr().cast()))?;
        }
        Ok(buf)
    }
}

fn trim_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

struct ProgGuard(Prog, FnDestroy);
impl Drop for ProgGuard {
    fn drop(&mut self) {
        // SAFETY: destroys the program created above exactly once.
        unsafe {
            (self.1)(&mut self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_parsing_accepts_the_usual_spellings() {
        for s in ["sm_90", "compute_90", "90", "9.0"] {
            let a = Arch::parse(s).unwrap();
            assert_eq!((a.major, a.minor, a.suffix.as_str()), (9, 0, ""), "{s}");
        }
        let a = Arch::parse("sm_90a").unwrap();
        assert_eq!(a.sm(), "sm_90a");
        assert_eq!(a.compute(), "compute_90a");
        assert_eq!(Arch::parse("sm_120").unwrap().number(), 120);
        for bad in ["", "sm_", "gpu", "sm_9x0", "0"] {
            let e = Arch::parse(bad).unwrap_err().to_string();
            assert!(e.contains("arch: expected"), "{bad}: {e}");
        }
    }
}
