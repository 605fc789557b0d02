//! Finding and opening the CUDA driver and NVRTC at run time.
//!
//! Nothing is linked at build time, so one binary works with any CUDA 12 or 13 install.
//! NVRTC search order: an explicit environment variable, CUDA_HOME / CUDA_PATH, the system
//! loader, then the `nvidia` pip wheels of the running Python (where torch puts NVRTC).
//! The driver: the environment variable, then the system loader.

use crate::error::{Error, Library as Lib, Result};
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

/// Where to look beyond the environment: the running Python's `sys.path` entries.
#[derive(Clone, Debug, Default)]
pub struct SearchPaths {
    pub python_paths: Vec<PathBuf>,
}

/// One place to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A file path.
    File(PathBuf),
    /// A bare soname, resolved by the system loader.
    Soname(&'static str),
}

impl Candidate {
    fn describe(&self) -> String {
        match self {
            Candidate::File(p) => p.display().to_string(),
            Candidate::Soname(s) => format!("{s} (system loader)"),
        }
    }
}

/// An opened library and where it came from.
pub struct Opened {
    pub lib: libloading::Library,
    /// The file the loader mapped, when it can be told.
    pub path: PathBuf,
}

const NVRTC_SONAMES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];
const DRIVER_SONAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// Library files in `dir` whose name starts with `stem` (e.g. `libnvrtc.so`), newest version first.
fn versioned_files(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(stem) && !n.contains("alt"))
        })
        .collect();
    // Longer names carry more version digits ("libnvrtc.so.13" before "libnvrtc.so").
    found.sort_by(|a, b| b.as_os_str().len().cmp(&a.as_os_str().len()).then(b.cmp(a)));
    found
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `nvidia/<pkg>/lib` folders of the pip wheels on the given Python paths.
pub fn pip_lib_dirs(paths: &SearchPaths) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for root in &paths.python_paths {
        // cu13 wheels put everything in nvidia/cu13; cu12 wheels use one folder per component.
        for pkg in ["cu13", "cuda_nvrtc", "cu12"] {
            let d = root.join("nvidia").join(pkg).join("lib");
            if d.is_dir() && !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// Every place to look for a library, in search order.
pub fn candidates(which: Lib, paths: &SearchPaths) -> Vec<Candidate> {
    let (var, stem, sonames) = match which {
        Lib::Nvrtc => ("KERNELKIT_NVRTC_PATH", "libnvrtc.so", NVRTC_SONAMES),
        Lib::Driver => ("KERNELKIT_CUDA_DRIVER_PATH", "libcuda.so", DRIVER_SONAMES),
    };
    let mut out = Vec::new();
    if let Some(p) = env_path(var) {
        if p.is_dir() {
            out.extend(versioned_files(&p, stem).into_iter().map(Candidate::File));
        } else {
            out.push(Candidate::File(p));
        }
    }
    // The driver is never taken from a toolkit: CUDA_HOME holds only a link-time stub and a
    // forward-compatibility libcuda that fails on a mismatched kernel module. The system
    // loader finds the one the kernel module belongs to (and that PyTorch already loaded).
    if which == Lib::Nvrtc {
        for home in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(h) = env_path(home) {
                for sub in ["lib64", "lib"] {
                    out.extend(
                        versioned_files(&h.join(sub), stem)
                            .into_iter()
                            .map(Candidate::File),
                    );
                }
            }
        }
    }
    out.extend(sonames.iter().map(|s| Candidate::Soname(s)));
    if which == Lib::Nvrtc {
        for d in pip_lib_dirs(paths) {
            out.extend(versioned_files(&d, stem).into_iter().map(Candidate::File));
        }
    }
    out
}

fn hint(which: Lib) -> &'static str {
    match which {
        Lib::Nvrtc => "pip install nvidia-cuda-nvrtc (torch's CUDA wheels bring it), or install a CUDA toolkit and set CUDA_HOME, or point KERNELKIT_NVRTC_PATH at libnvrtc.so",
        Lib::Driver => "install the NVIDIA driver (it provides libcuda.so.1), or point KERNELKIT_CUDA_DRIVER_PATH at it; on a machine without a GPU, kernelkit can still compile and run CPU ops",
    }
}

/// The file a symbol of an opened library lives in.
fn mapped_path(sym: *const c_void) -> Option<PathBuf> {
    // SAFETY: dladdr only reads loader tables; `info` is plain data it fills in.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(sym, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned();
        std::fs::canonicalize(&name)
            .ok()
            .or(Some(PathBuf::from(name)))
    }
}

/// Open the first candidate that loads and exports `probe_symbol`.
pub fn open(which: Lib, paths: &SearchPaths, probe_symbol: &[u8]) -> Result<Opened> {
    let mut searched = Vec::new();
    for cand in candidates(which, paths) {
        let name: std::ffi::OsString = match &cand {
            Candidate::File(p) => p.clone().into_os_string(),
            Candidate::Soname(s) => (*s).into(),
        };
        // SAFETY: loading a vendor library runs its initializers; these are the CUDA libraries we mean to use.
        let lib = match unsafe { libloading::Library::new(&name) } {
            Ok(lib) => lib,
            Err(e) => {
                searched.push(format!("{} ({})", cand.describe(), short(&e.to_string())));
                continue;
            }
        };
        // SAFETY: only the symbol's address is taken, it is not called here.
        let sym: Option<*const c_void> =
            unsafe { lib.get::<*const c_void>(probe_symbol).ok().map(|s| *s) };
        let Some(sym) = sym else {
            searched.push(format!("{} (not a {which})", cand.describe()));
            continue;
        };
        let path = mapped_path(sym).unwrap_or_else(|| PathBuf::from(&name));
        return Ok(Opened { lib, path });
    }
    if searched.is_empty() {
        searched.push("no candidate paths".into());
    }
    Err(Error::LibraryNotFound {
        library: which,
        searched,
        hint: hint(which).into(),
    })
}

fn short(msg: &str) -> String {
    // dlopen messages repeat the path; keep the reason.
    msg.rsplit(": ").next().unwrap_or(msg).trim().to_string()
}

/// Resolve one symbol to a function pointer of type `T`, or say which symbol is missing.
///
/// # Safety
/// `T` must be the exact C signature of the symbol.
pub unsafe fn symbol<T: Copy>(lib: &Opened, which: Lib, name: &str) -> Result<T> {
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    match lib.lib.get::<T>(&cname) {
        Ok(s) => Ok(*s),
        Err(_) => Err(Error::LibraryTooOld {
            library: which,
            path: lib.path.display().to_string(),
            symbol: name.to_string(),
            hint: match which {
                Lib::Nvrtc => "kernelkit needs NVRTC from CUDA 11.2 or later; upgrade the nvidia-cuda-nvrtc wheel or the CUDA toolkit".into(),
                Lib::Driver => "kernelkit needs an NVIDIA driver for CUDA 12.0 or later; upgrade the driver".into(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_var_comes_first_then_home_then_loader_then_pip() {
        let tmp = tempfile::tempdir().unwrap();
        let pip = tmp.path().join("site");
        std::fs::create_dir_all(pip.join("nvidia/cu13/lib")).unwrap();
        std::fs::write(pip.join("nvidia/cu13/lib/libnvrtc.so.13"), b"").unwrap();
        std::fs::write(pip.join("nvidia/cu13/lib/libnvrtc-builtins.so.13.2"), b"").unwrap();
        let paths = SearchPaths {
            python_paths: vec![pip.clone()],
        };
        let c = candidates(Lib::Nvrtc, &paths);
        let first_soname = c
            .iter()
            .position(|c| matches!(c, Candidate::Soname(_)))
            .unwrap();
        let pip_pos = c
            .iter()
            .position(|c| *c == Candidate::File(pip.join("nvidia/cu13/lib/libnvrtc.so.13")))
            .unwrap();
        assert!(first_soname < pip_pos, "{c:?}");
        assert!(
            !c.iter().any(
                |c| matches!(c, Candidate::File(p) if p.to_string_lossy().contains("builtins"))
            ),
            "the builtins library is not NVRTC: {c:?}"
        );
    }

    #[test]
    fn the_driver_never_comes_from_a_toolkit_folder() {
        let c = candidates(Lib::Driver, &SearchPaths::default());
        assert!(
            c.iter().all(|c| matches!(c, Candidate::Soname(_)))
                || std::env::var_os("KERNELKIT_CUDA_DRIVER_PATH").is_some(),
            "{c:?}"
        );
    }

    #[test]
    fn missing_library_names_where_it_looked_and_the_fix() {
        // No library exports this symbol, so every candidate is rejected.
        let err = open(
            Lib::Nvrtc,
            &SearchPaths::default(),
            b"kernelkit_no_such_symbol\0",
        )
        .err()
        .expect("nothing exports the probe symbol");
        let msg = err.to_string();
        assert!(
            msg.contains("NVRTC (libnvrtc) could not be loaded"),
            "{msg}"
        );
        assert!(msg.contains("libnvrtc.so.13 (system loader"), "{msg}");
        assert!(msg.contains("fix: pip install nvidia-cuda-nvrtc"), "{msg}");
    }
}
