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

// The reader behind [`GpuSource`]: NVML's, or a stand-in whose every reading says the feature is
// off. Both have the same private shape (`Reader::default`, `read`), so the public API below is
// written and documented once for both builds.
#[cfg(not(feature = "gpu"))]
use disabled as backend;
#[cfg(feature = "gpu")]
mod nvml;
#[cfg(feature = "gpu")]
use nvml as backend;
#[cfg(feature = "gpu")]
pub use nvml::nvml;

#[cfg(not(feature = "gpu"))]
mod disabled {
    use super::{Field, NvmlDeviceReading};

    /// Why no GPU is read in this build.
    const NOT_COMPILED: &str =
        "GPU metrics not compiled in: build tf-iaware with the `gpu` feature";

    /// The reader of a build without the `gpu` feature: every reading says so.
    #[derive(Debug, Default)]
    pub(super) struct Reader;

    impl Reader {
        /// Always `Err(NOT_COMPILED)` in this build.
        pub(super) fn read(&mut self) -> Field<Vec<NvmlDeviceReading>> {
            Err(NOT_COMPILED.to_string())
        }
    }
}

/// Reads every GPU through the shared NVML handle, keeping per-device state between readings.
#[derive(Debug, Default)]
pub struct GpuSource(backend::Reader);

impl GpuSource {
    /// A source with no state yet; NVML is initialised on the first [`GpuSource::read`].
    pub fn new() -> Self {
        GpuSource::default()
    }

    /// Reads every GPU.
    ///
    /// # Errors
    /// `GPU metrics unavailable: <reason>` if NVML is absent, lists no GPUs, or cannot count
    /// or open them; `GPU metrics not compiled in: …` in a build without the `gpu` feature.
    pub fn read(&mut self) -> Field<Vec<NvmlDeviceReading>> {
        self.0.read()
    }
}
