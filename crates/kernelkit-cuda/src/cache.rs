//! The on-disk compile cache.
//!
//! One file per compile, named by a hash of everything that affects the output. Writes go to a
//! temporary file that is renamed into place, so a reader sees a whole entry or none, racing
//! processes never block each other, and a killed writer leaves only a stray temp file. Each
//! entry carries a checksum; a corrupt or truncated one reads as a miss and is rewritten.

use crate::error::{Error, Result};
use crate::nvrtc::Compiled;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"KKCACHE1";

/// Where cached compiles live: `KERNELKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/kernelkit`, else `~/.cache/kernelkit`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KERNELKIT_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("kernelkit");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("kernelkit")
}

/// Builds a cache key from length-prefixed fields, so ("ab","c") and ("a","bc") differ.
#[derive(Clone, Default)]
pub struct KeyBuilder(Sha256);

impl KeyBuilder {
    pub fn new() -> Self {
        let mut k = KeyBuilder(Sha256::new());
        k.field(MAGIC);
        k
    }
    pub fn field(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        let b = bytes.as_ref();
        self.0.update((b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }
    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub struct DiskCache {
    pub dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: PathBuf) -> Self {
        DiskCache { dir }
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.kkc"))
    }

    /// A cached compile, or None on a miss or an unreadable or corrupt entry.
    pub fn get(&self, key: &str) -> Option<Compiled> {
        let bytes = std::fs::read(self.entry_path(key)).ok()?;
        decode(&bytes)
    }

    /// Store a compile atomically.
    pub fn put(&self, key: &str, c: &Compiled) -> Result<()> {
        let err = |path: &Path, e: std::io::Error| Error::Cache {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| err(&self.dir, e))?;
        let final_path = self.entry_path(key);
        let tmp = self.dir.join(format!(
            ".{key}.{}.{}.tmp",
            std::process::id(),
            unique_suffix()
        ));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&encode(c))?;
            f.sync_data()?;
            Ok(())
        };
        if let Err(e) = write().and_then(|_| std::fs::rename(&tmp, &final_path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(err(&final_path, e));
        }
        Ok(())
    }

    /// Total bytes and number of entries on disk.
    pub fn usage(&self) -> (u64, usize) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return (0, 0);
        };
        rd.filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "kkc"))
            .filter_map(|e| e.metadata().ok())
            .fold((0, 0), |(b, n), m| (b + m.len(), n + 1))
    }

    /// Remove every entry (and stray temp files). Returns how many files were removed.
    pub fn clear(&self) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        rd.filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.ends_with(".kkc") || n.ends_with(".tmp") || n.starts_with("nvrtc-")
            })
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count()
    }

    /// A small text file in the cache folder (used to memoize the NVRTC version).
    pub fn read_note(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name)).ok()
    }

    pub fn write_note(&self, name: &str, text: &str) {
        // Best effort: a lost note only costs loading NVRTC next time.
        let _ = std::fs::create_dir_all(&self.dir).and_then(|_| {
            let tmp = self.dir.join(format!(".{name}.{}.tmp", unique_suffix()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, self.dir.join(name))
        });
    }
}

fn unique_suffix() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    t ^ ((N.fetch_add(1, Ordering::Relaxed) as u128) << 64)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

fn encode(c: &Compiled) -> Vec<u8> {
    let mut payload = Vec::with_capacity(c.image.len() + c.ptx.len() + 256);
    put_bytes(&mut payload, &c.image);
    put_bytes(&mut payload, c.ptx.as_bytes());
    put_bytes(&mut payload, c.log.as_bytes());
    payload.extend_from_slice(&(c.lowered.len() as u64).to_le_bytes());
    for (expr, low) in &c.lowered {
        put_bytes(&mut payload, expr.as_bytes());
        put_bytes(&mut payload, low.as_bytes());
    }
    let mut out = Vec::with_capacity(payload.len() + 48);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(&payload));
    out.extend_from_slice(&payload);
    out
}

struct Reader<'a>(&'a [u8]);
impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

fn decode(bytes: &[u8]) -> Option<Compiled> {
    let mut r = Reader(bytes);
    if r.take(8)? != MAGIC {
        return None;
    }
    let len = usize::try_from(r.u64()?).ok()?;
    let sum = r.take(32)?;
    let payload = r.take(len)?;
    if !r.0.is_empty() || Sha256::digest(payload).as_slice() != sum {
        return None;
    }
    let mut p = Reader(payload);
    let image = p.bytes()?.to_vec();
    let ptx = p.string()?;
    let log = p.string()?;
    let n = p.u64()?;
    let mut lowered = Vec::new();
    for _ in 0..n {
        lowered.push((p.string()?, p.string()?));
    }
    Some(Compiled {
        image,
        ptx,
        lowered,
        log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Compiled {
        Compiled {
            image: (0..=255u8).cycle().take(5000).collect(),
            ptx: ".entry k()".into(),
            lowered: vec![("k<float>".into(), "_Z1kIfEvv".into())],
            log: String::new(),
        }
    }

    #[test]
    fn round_trip_and_miss() {
        let d = tempfile::tempdir().unwrap();
        let c = DiskCache::new(d.path().join("sub"));
        assert!(c.get("abc").is_none());
        c.put("abc", &sample()).unwrap();
        let got = c.get("abc").unwrap();
        assert_eq!(got.image, sample().image);
        assert_eq!(got.lowered, sample().lowered);
        assert_eq!(c.usage().1, 1);
    }

    #[test]
    fn corrupt_and_truncated_entries_read_as_misses() {
        let d = tempfile::tempdir().unwrap();
        let c = DiskCache::new(d.path().to_path_buf());
        c.put("k", &sample()).unwrap();
        let p = c.entry_path("k");
        let good = std::fs::read(&p).unwrap();
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        std::fs::write(&p, &flipped).unwrap();
        assert!(c.get("k").is_none(), "bit flip must be detected");
        std::fs::write(&p, &good[..good.len() - 7]).unwrap();
        assert!(c.get("k").is_none(), "truncation must be detected");
        std::fs::write(&p, b"").unwrap();
        assert!(c.get("k").is_none());
        c.put("k", &sample()).unwrap();
        assert!(c.get("k").is_some(), "rewriting repairs the entry");
    }

    #[test]
    fn keys_are_length_prefixed() {
        let mut a = KeyBuilder::new();
        a.field("ab").field("c");
        let mut b = KeyBuilder::new();
        b.field("a").field("bc");
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn concurrent_writers_leave_one_valid_entry() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let c = DiskCache::new(dir);
                    for _ in 0..20 {
                        c.put("race", &sample()).unwrap();
                        assert!(c.get("race").is_some());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = DiskCache::new(dir.clone());
        assert_eq!(c.get("race").unwrap().image, sample().image);
        let stray = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(stray, 0);
    }
}
