//! A compiled program for one architecture, cached on disk and in memory, and loaded into
//! each device's context at most once.

use crate::cache::{self, DiskCache, KeyBuilder};
use crate::driver::{driver, Function, Module};
use crate::error::{Error, Result};
use crate::nvrtc::{self, Arch, Compiled, Output, Program};
use crate::ptx::{self, ParamKind};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// One compile result plus what is derived from it.
pub struct Image {
    pub key: String,
    pub arch: Arch,
    pub output: Output,
    pub compiled: Compiled,
    /// True when this process found the compile on disk instead of running NVRTC.
    pub from_disk: bool,
    entries: HashMap<String, Vec<ParamKind>>,
    modules: Mutex<Vec<(i32, Module)>>,
}

/// A kernel inside an image: its mangled name and parameter types.
#[derive(Clone, Debug)]
pub struct EntryPoint {
    pub name: String,
    pub lowered: String,
    pub params: Vec<ParamKind>,
}

impl Image {
    fn new(key: String, arch: Arch, output: Output, compiled: Compiled, from_disk: bool) -> Self {
        let entries = ptx::entry_params(&compiled.ptx);
        Image {
            key,
            arch,
            output,
            compiled,
            from_disk,
            entries,
            modules: Mutex::new(Vec::new()),
        }
    }

    /// Find a kernel by name expression ("scale<float>") or by its name in the PTX.
    pub fn entry(&self, name: &str) -> Option<EntryPoint> {
        let lowered = self
            .compiled
            .lowered
            .iter()
            .find(|(e, _)| e == name)
            .map(|(_, l)| l.clone())
            .or_else(|| self.entries.contains_key(name).then(|| name.to_string()))?;
        let params = self.entries.get(&lowered)?.clone();
        Some(EntryPoint {
            name: name.to_string(),
            lowered,
            params,
        })
    }

    /// Names a user can ask for: name expressions first, then extern "C" style entries.
    pub fn entry_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .compiled
            .lowered
            .iter()
            .map(|(e, _)| e.clone())
            .collect();
        let mut rest: Vec<String> = self
            .entries
            .keys()
            .filter(|k| !self.compiled.lowered.iter().any(|(_, l)| l == *k))
            .cloned()
            .collect();
        rest.sort();
        v.extend(rest);
        v
    }

    /// The kernel's handle on `device`, loading the module there on first use.
    pub fn function(&self, device: i32, lowered: &str) -> Result<Function> {
        let d = driver()?;
        let module = {
            let mut mods = self.modules.lock().unwrap_or_else(|p| p.into_inner());
            match mods.iter().find(|(dev, _)| *dev == device) {
                Some((_, m)) => *m,
                None => {
                    let m = d
                        .load_module(device, &self.compiled.image)
                        .map_err(|e| self.explain_load_failure(device, e))?;
                    mods.push((device, m));
                    m
                }
            }
        };
        d.get_function(module, lowered)
    }

    fn explain_load_failure(&self, device: i32, e: Error) -> Error {
        let Ok(d) = driver() else { return e };
        let Ok((maj, min)) = d.compute_capability(device) else {
            return e;
        };
        match (&e, self.output) {
            (Error::Driver { name, .. }, Output::Cubin)
                if name.contains("NO_BINARY") || name.contains("INVALID_IMAGE") =>
            {
                Error::Argument(format!(
                    "this module was compiled for {} but device {device} is sm_{maj}{min}; compile for the device's arch (the default) instead ({e})",
                    self.arch.sm()
                ))
            }
            (Error::Driver { name, .. }, Output::Ptx) if name.contains("UNSUPPORTED_PTX") => {
                Error::Argument(format!(
                    "the driver cannot load PTX from this NVRTC (it is newer than the driver); use output='cubin' ({e})"
                ))
            }
            _ => e,
        }
    }
}

fn memory() -> &'static Mutex<HashMap<String, Arc<Image>>> {
    static M: OnceLock<Mutex<HashMap<String, Arc<Image>>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// The NVRTC version for cache keys, without loading NVRTC when a note from an earlier
/// process still matches the library file (dlopen of libnvrtc alone costs ~10 ms).
fn nvrtc_version_for_key(disk: &DiskCache) -> Result<String> {
    static V: OnceLock<String> = OnceLock::new();
    if let Some(v) = V.get() {
        return Ok(v.clone());
    }
    let mut ctx = KeyBuilder::new();
    for var in [
        "KERNELKIT_NVRTC_PATH",
        "CUDA_HOME",
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
    ] {
        ctx.field(std::env::var_os(var).unwrap_or_default().as_encoded_bytes());
    }
    for p in &nvrtc::search_paths().python_paths {
        ctx.field(p.as_os_str().as_encoded_bytes());
    }
    let note = format!("nvrtc-{}.txt", &ctx.finish()[..16]);
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| format!("{}:{}", m.len(), mtime_nanos(&m)))
    };
    if let Some(text) = disk.read_note(&note) {
        let lines: Vec<&str> = text.lines().collect();
        if let [version, path, st] = lines[..] {
            if stamp(Path::new(path)).as_deref() == Some(st) {
                return Ok(V.get_or_init(|| version.to_string()).clone());
            }
        }
    }
    let n = nvrtc::nvrtc()?;
    let v = n.version_string();
    if let Some(st) = stamp(&n.path) {
        disk.write_note(&note, &format!("{v}\n{}\n{st}\n", n.path.display()));
    }
    Ok(V.get_or_init(|| v).clone())
}

/// Stat-only fingerprint of the headers under the include dirs, so editing a header recompiles.
/// A file's modification time in nanoseconds since the epoch (0 when unknown): part of cache keys.
fn mtime_nanos(m: &std::fs::Metadata) -> u128 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn include_fingerprint(k: &mut KeyBuilder, dirs: &[std::path::PathBuf]) {
    fn walk(k: &mut KeyBuilder, dir: &Path, depth: u32, budget: &mut u32) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut ents: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        ents.sort_by_key(|e| e.file_name());
        for e in ents {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let p = e.path();
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() && depth < 4 {
                walk(k, &p, depth + 1, budget);
            } else if m.is_file() {
                k.field(p.as_os_str().as_encoded_bytes())
                    .field(m.len().to_le_bytes())
                    .field(mtime_nanos(&m).to_le_bytes());
            }
        }
    }
    for d in dirs {
        let mut budget = 4096;
        k.field(d.as_os_str().as_encoded_bytes());
        walk(k, d, 0, &mut budget);
    }
}

/// The cache key of a compile: source, headers, name expressions, options, arch, output and NVRTC version.
pub fn cache_key(prog: &Program, arch: &Arch, output: Output, nvrtc_version: &str) -> String {
    let mut k = KeyBuilder::new();
    k.field(&prog.source).field(&prog.file_name);
    k.field((prog.headers.len() as u64).to_le_bytes());
    for (n, c) in &prog.headers {
        k.field(n).field(c);
    }
    let mut names = prog.name_expressions.clone();
    names.sort();
    names.dedup();
    k.field((names.len() as u64).to_le_bytes());
    for n in &names {
        k.field(n);
    }
    k.field((prog.options.len() as u64).to_le_bytes());
    for o in &prog.options {
        k.field(o);
    }
    include_fingerprint(&mut k, &prog.include_dirs);
    k.field(arch.sm())
        .field(output.as_str())
        .field(nvrtc_version);
    k.finish()
}

/// Compile `prog` for `arch`, reusing this process's copy, then the disk cache, then NVRTC.
pub fn compile_cached(
    prog: &Program,
    arch: &Arch,
    output: Output,
    use_disk: bool,
) -> Result<Arc<Image>> {
    let disk = DiskCache::new(cache::default_dir());
    let version = nvrtc_version_for_key(&disk)?;
    let key = cache_key(prog, arch, output, &version);
    if let Some(img) = memory().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(img.clone());
    }
    let found = if use_disk { disk.get(&key) } else { None };
    let (compiled, from_disk) = match found {
        // An entry missing a requested name expression is not the compile we asked for.
        Some(c)
            if prog
                .name_expressions
                .iter()
                .all(|n| c.lowered.iter().any(|(e, _)| e == n)) =>
        {
            (c, true)
        }
        _ => {
            let c = nvrtc::nvrtc()?.compile(prog, arch, output)?;
            if use_disk {
                // A read-only or full disk must not fail the compile; the next process recompiles.
                let _ = disk.put(&key, &c);
            }
            (c, false)
        }
    };
    let img = Arc::new(Image::new(
        key.clone(),
        arch.clone(),
        output,
        compiled,
        from_disk,
    ));
    memory()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, img.clone());
    Ok(img)
}
