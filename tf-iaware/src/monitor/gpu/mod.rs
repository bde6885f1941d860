//! [`GpuSource`]: NVIDIA GPUs read through NVML (`nvml-wrapper`); the readings' types and their
//! pure mapping to snapshots are [`tf_iaware_core::monitor::gpu`]'s, re-exported here.
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`); one handle is initialised on first use and
//! shared by every monitor in the process. Its absence is a normal state, reported once in the
//! log and in every snapshot as `GPU metrics unavailable: <reason>`.
//!
//! Needs the `gpu` feature (on by default: `nvml-wrapper`); without it every reading is
//! `GPU metrics not compiled in: …` and CPU monitoring works as usual.

pub use tf_iaware_core::monitor::gpu::*;

#[cfg(feature = "gpu")]
mod nvml;
#[cfg(feature = "gpu")]
pub use nvml::{nvml, unavailable, GpuSource, NVML_LIBRARY};

#[cfg(not(feature = "gpu"))]
mod disabled {
    use super::{Field, NvmlDeviceReading};

    /// Why no GPU is read in this build.
    pub const NOT_COMPILED: &str =
        "GPU metrics not compiled in: build tf-iaware with the `gpu` feature";

    /// The GPU source of a build without the `gpu` feature: every reading says so.
    #[derive(Debug, Default)]
    pub struct GpuSource;

    impl GpuSource {
        /// A source that reads nothing.
        pub fn new() -> Self {
            GpuSource
        }

        /// Always `Err(NOT_COMPILED)` in this build.
        ///
        /// # Errors
        /// [`NOT_COMPILED`].
        pub fn read(&mut self) -> Field<Vec<NvmlDeviceReading>> {
            Err(NOT_COMPILED.to_string())
        }
    }
}
#[cfg(not(feature = "gpu"))]
pub use disabled::{GpuSource, NOT_COMPILED};
