//! kernelkit's CUDA layer: no Python, no build-time CUDA.
//!
//! - [`loader`] finds libcuda and libnvrtc at run time (env var, CUDA_HOME, system, pip wheels).
//! - [`nvrtc`] compiles CUDA C++ to CUBIN or PTX; [`ptx`] reads kernel parameter types.
//! - [`cache`] keeps compiles on disk; [`image`] keeps them in memory and loads them per device.
//! - [`driver`] wraps the driver API on PyTorch's primary contexts; [`launch`] packs and launches.

pub mod cache;
pub mod driver;
pub mod error;
pub mod image;
pub mod launch;
pub mod loader;
pub mod nvrtc;
pub mod ptx;

pub use error::{Error, Library, Result};
pub use image::{compile_cached, EntryPoint, Image};
pub use launch::{
    launch, launch_blocking, pack, set_launch_blocking, Arg, LaunchConfig, PORTABLE_CLUSTER_BLOCKS,
};
pub use nvrtc::{Arch, Output, Program};
pub use ptx::ParamKind;
