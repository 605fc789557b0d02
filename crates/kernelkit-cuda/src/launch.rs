//! Packing arguments to a kernel's parameter types and launching it.

use crate::driver::{driver, Function, Stream, CUDA_SUCCESS};
use crate::error::{Error, Result};
use crate::ptx::ParamKind;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};

/// One launch argument, as the caller has it.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A device pointer (from a tensor).
    Ptr(u64),
    Int(i128),
    Float(f64),
    /// Raw bytes for a by-value struct parameter.
    Bytes(&'a [u8]),
}

impl Arg<'_> {
    fn describe(&self) -> String {
        match self {
            Arg::Ptr(_) => "a tensor".into(),
            Arg::Int(v) => format!("the integer {v}"),
            Arg::Float(v) => format!("the float {v}"),
            Arg::Bytes(b) => format!("{} bytes", b.len()),
        }
    }
}

/// Argument values laid out for cuLaunchKernel: one 8-byte slot per scalar, borrowed bytes for structs.
pub struct Packed<'a> {
    slots: Vec<u64>,
    bytes: Vec<Option<&'a [u8]>>,
}

impl Packed<'_> {
    /// The `void**` array the driver reads. Valid while `self` is alive and unmoved.
    fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots
            .iter_mut()
            .zip(&self.bytes)
            .map(|(s, b)| match b {
                Some(b) => b.as_ptr() as *mut c_void,
                None => s as *mut u64 as *mut c_void,
            })
            .collect()
    }
}

/// Check each argument against its parameter and convert it, naming the kernel and the
/// parameter in any error.
pub fn pack<'a>(kernel: &str, params: &[ParamKind], args: &[Arg<'a>]) -> Result<Packed<'a>> {
    if params.len() != args.len() {
        let sig: Vec<String> = params.iter().map(|p| p.to_string()).collect();
        return Err(Error::Argument(format!(
            "kernel '{kernel}' takes {} argument(s) ({}), got {}",
            params.len(),
            sig.join(", "),
            args.len()
        )));
    }
    let mut slots = Vec::with_capacity(args.len());
    let mut bytes = Vec::with_capacity(args.len());
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let bad = |why: &str| {
            Error::Argument(format!(
                "kernel '{kernel}' argument {i}: the parameter is a {p}, got {}{why}",
                a.describe()
            ))
        };
        let mut struct_bytes = None;
        let slot: u64 = match (*p, *a) {
            (ParamKind::Int(8), Arg::Ptr(v)) => v,
            (ParamKind::Int(n), Arg::Int(v)) => {
                let bits = n as u32 * 8;
                // PTX has no signedness: accept the signed and the unsigned range.
                let lo = -(1i128 << (bits - 1));
                let hi = (1i128 << bits) - 1;
                if v < lo || v > hi {
                    return Err(bad(&format!(", which does not fit in {bits} bits")));
                }
                (v as u128 & ((1u128 << bits) - 1)) as u64
            }
            (ParamKind::F32, Arg::Float(v)) => (v as f32).to_bits() as u64,
            (ParamKind::F32, Arg::Int(v)) => (v as f32).to_bits() as u64,
            (ParamKind::F64, Arg::Float(v)) => v.to_bits(),
            (ParamKind::F64, Arg::Int(v)) => (v as f64).to_bits(),
            (ParamKind::Bytes { size, .. }, Arg::Bytes(b)) => {
                if b.len() != size as usize {
                    return Err(bad(&format!(", expected exactly {size} bytes")));
                }
                struct_bytes = Some(b);
                0
            }
            (ParamKind::Int(_), Arg::Ptr(_)) => {
                return Err(bad(": a pointer needs a 64-bit parameter"))
            }
            _ => return Err(bad("")),
        };
        slots.push(slot);
        bytes.push(struct_bytes);
    }
    Ok(Packed { slots, bytes })
}

/// Grid, block, dynamic shared memory and stream of one launch.
#[derive(Clone, Copy, Debug)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: Stream,
    /// Programmatic dependent launch (see [`crate::driver::Driver::launch`]).
    pub dependent: bool,
    /// Blocks per thread-block cluster ([1, 1, 1]: no clusters; sm_90+ otherwise).
    pub cluster: [u32; 3],
}

impl LaunchConfig {
    pub fn validate(&self, kernel: &str) -> Result<()> {
        let [gx, gy, gz] = self.grid;
        let [bx, by, bz] = self.block;
        if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
            return Err(Error::Argument(format!(
                "kernel '{kernel}': grid {:?} and block {:?} must be at least 1 in every dimension",
                self.grid, self.block
            )));
        }
        if bx as u64 * by as u64 * bz as u64 > 1024 || bz > 64 {
            return Err(Error::Argument(format!(
                "kernel '{kernel}': block {:?} has more than 1024 threads (or z > 64)",
                self.block
            )));
        }
        let [cx, cy, cz] = self.cluster;
        if cx == 0 || cy == 0 || cz == 0 || cx as u64 * cy as u64 * cz as u64 > MAX_CLUSTER_BLOCKS {
            return Err(Error::Argument(format!(
                "kernel '{kernel}': cluster {:?} must be at least 1 in every dimension and hold at most \
                 {MAX_CLUSTER_BLOCKS} blocks",
                self.cluster
            )));
        }
        if gx % cx != 0 || gy % cy != 0 || gz % cz != 0 {
            return Err(Error::Argument(format!(
                "kernel '{kernel}': grid {:?} must be a multiple of the cluster {:?} in every dimension",
                self.grid, self.cluster
            )));
        }
        if gy > 65535 || gz > 65535 || gx > i32::MAX as u32 {
            return Err(Error::Argument(format!(
                "kernel '{kernel}': grid {:?} is too large (x < 2^31, y and z ≤ 65535)",
                self.grid
            )));
        }
        Ok(())
    }
}

/// The portable cluster size: larger clusters need the kernel's opt-in
/// ([`crate::driver::FuncAttr::NonPortableClusterSizeAllowed`]), which the launch sets.
pub const PORTABLE_CLUSTER_BLOCKS: u64 = 8;
/// The largest cluster Hopper runs (non-portable; the device may still find no room for one).
pub const MAX_CLUSTER_BLOCKS: u64 = 16;

static BLOCKING: AtomicU8 = AtomicU8::new(2);

/// Whether launches synchronize and check the stream (KERNELKIT_LAUNCH_BLOCKING=1), so that an
/// asynchronous fault is reported against the kernel that caused it.
pub fn launch_blocking() -> bool {
    match BLOCKING.load(Ordering::Relaxed) {
        2 => {
            let on = std::env::var("KERNELKIT_LAUNCH_BLOCKING").is_ok_and(|v| v == "1");
            BLOCKING.store(on as u8, Ordering::Relaxed);
            on
        }
        v => v == 1,
    }
}

pub fn set_launch_blocking(on: bool) {
    BLOCKING.store(on as u8, Ordering::Relaxed);
}

/// Launch `f` on `device`. Every driver result is checked and reported with the kernel's name.
pub fn launch(
    device: i32,
    f: Function,
    kernel: &str,
    mut packed: Packed<'_>,
    cfg: &LaunchConfig,
) -> Result<()> {
    let d = driver()?;
    let mut ptrs = packed.pointers();
    let context = |cfg: &LaunchConfig| {
        format!(
            " (device {device}, grid {:?}, block {:?}, shared memory {} bytes)",
            cfg.grid, cfg.block, cfg.shared_mem
        )
    };
    let fail = |code| {
        let (name, description) = d.error_text(code);
        Error::Launch {
            kernel: kernel.to_string(),
            code,
            name,
            description,
            context: context(cfg),
        }
    };
    // SAFETY: `ptrs` holds one pointer per parameter, each to a value of that parameter's size
    // (checked by `pack`); `packed` outlives the call; the driver copies the values at launch.
    let rc = unsafe {
        d.launch(
            device,
            f,
            cfg.grid,
            cfg.block,
            cfg.shared_mem,
            cfg.stream,
            ptrs.as_mut_ptr(),
            cfg.dependent,
            cfg.cluster,
        )?
    };
    if rc != CUDA_SUCCESS {
        return Err(fail(rc));
    }
    if launch_blocking() {
        let rc = d.synchronize_stream(device, cfg.stream)?;
        if rc != CUDA_SUCCESS {
            return Err(fail(rc));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: [ParamKind; 5] = [
        ParamKind::Int(8),
        ParamKind::F32,
        ParamKind::Int(4),
        ParamKind::F64,
        ParamKind::Bytes { size: 4, align: 4 },
    ];

    #[test]
    fn packs_each_kind_to_its_parameter() {
        let s = [1u8, 2, 3, 4];
        let p = pack(
            "k",
            &SIG,
            &[
                Arg::Ptr(0xdead_beef),
                Arg::Int(2),
                Arg::Int(-1),
                Arg::Float(0.5),
                Arg::Bytes(&s),
            ],
        )
        .unwrap();
        assert_eq!(p.slots[0], 0xdead_beef);
        assert_eq!(
            f32::from_bits(p.slots[1] as u32),
            2.0,
            "ints convert to float params by value"
        );
        assert_eq!(p.slots[2], 0xffff_ffff);
        assert_eq!(f64::from_bits(p.slots[3]), 0.5);
        assert_eq!(p.bytes[4], Some(&s[..]));
    }

    #[test]
    fn errors_name_the_kernel_and_the_argument() {
        let s = [0u8; 4];
        let e = pack("scale<float>", &SIG, &[Arg::Ptr(0)])
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("kernel 'scale<float>' takes 5 argument(s)"),
            "{e}"
        );
        assert!(e.contains("float"), "{e}");

        let args = [
            Arg::Ptr(0),
            Arg::Float(1.0),
            Arg::Int(1 << 40),
            Arg::Float(0.0),
            Arg::Bytes(&s),
        ];
        let e = pack("k", &SIG, &args).err().unwrap().to_string();
        assert!(
            e.contains("argument 2") && e.contains("does not fit in 32 bits"),
            "{e}"
        );

        let args = [
            Arg::Ptr(0),
            Arg::Float(1.0),
            Arg::Float(1.5),
            Arg::Float(0.0),
            Arg::Bytes(&s),
        ];
        let e = pack("k", &SIG, &args).err().unwrap().to_string();
        assert!(
            e.contains("argument 2: the parameter is a 32-bit integer, got the float 1.5"),
            "{e}"
        );

        let args = [
            Arg::Ptr(0),
            Arg::Float(1.0),
            Arg::Int(1),
            Arg::Float(0.0),
            Arg::Bytes(&s[..3]),
        ];
        let e = pack("k", &SIG, &args).err().unwrap().to_string();
        assert!(e.contains("expected exactly 4 bytes"), "{e}");
    }

    #[test]
    fn launch_config_is_checked_before_the_driver_sees_it() {
        let clustered = |grid, block, cluster| LaunchConfig {
            grid,
            block,
            shared_mem: 0,
            dependent: false,
            cluster,
            stream: crate::driver::Stream(0),
        };
        let cfg = |grid, block| clustered(grid, block, [1, 1, 1]);
        assert!(cfg([1, 1, 1], [256, 1, 1]).validate("k").is_ok());
        let e = cfg([0, 1, 1], [256, 1, 1])
            .validate("k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = cfg([1, 1, 1], [1025, 1, 1])
            .validate("k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 1024 threads"), "{e}");
        assert!(cfg([1, 70000, 1], [32, 1, 1]).validate("k").is_err());
        assert!(clustered([6, 4, 1], [512, 1, 1], [1, 4, 1])
            .validate("k")
            .is_ok());
        let e = clustered([6, 4, 1], [512, 1, 1], [1, 3, 1])
            .validate("k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of the cluster"), "{e}");
        assert!(clustered([16, 16, 1], [512, 1, 1], [1, 16, 1])
            .validate("k")
            .is_ok());
        let e = clustered([32, 32, 1], [512, 1, 1], [1, 32, 1])
            .validate("k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 16 blocks"), "{e}");
        assert!(clustered([1, 1, 1], [32, 1, 1], [0, 1, 1])
            .validate("k")
            .is_err());
    }
}
