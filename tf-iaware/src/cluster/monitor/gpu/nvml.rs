//! The NVML source, through `nvml-wrapper` (the `gpu` feature).

use std::collections::HashMap;
use std::sync::OnceLock;

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use tf_iaware_core::monitor::gpu::{Field, NvmlDeviceReading, NvmlMemory};

/// The NVML library NVML-wrapper loads.
const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

static NVML: OnceLock<std::result::Result<Nvml, String>> = OnceLock::new();

/// The process-wide NVML handle, initialised on first call.
///
/// # Errors
/// `GPU metrics unavailable: <reason>` when NVML cannot be loaded or initialised; the reason
/// is logged once (at info level).
pub fn nvml() -> std::result::Result<&'static Nvml, String> {
    NVML.get_or_init(|| {
        Nvml::init().map_err(|e| {
            let reason = unavailable(&e);
            log::info!("{reason}");
            reason
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `GPU metrics unavailable: …` for an NVML initialisation error.
fn unavailable(e: &NvmlError) -> String {
    let why = match e {
        NvmlError::LibloadingError(e) => {
            format!("NVML library {NVML_LIBRARY} could not be loaded ({e})")
        }
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_string(),
        NvmlError::LibraryNotFound => format!("{NVML_LIBRARY} was not found"),
        other => format!("NVML initialisation failed: {other}"),
    };
    format!("GPU metrics unavailable: {why}")
}

/// The reader behind a [`GpuSource`](super::GpuSource): per-device state kept between readings
/// (devices, static properties, the last per-process sample timestamp).
#[derive(Default)]
pub(super) struct Reader {
    devices: Vec<(u32, Device<'static>)>,
    last_sample_us: HashMap<u32, u64>,
    cached: HashMap<u32, StaticInfo>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSource")
            .field("devices", &self.devices.len())
            .finish()
    }
}

#[derive(Clone, Debug)]
struct StaticInfo {
    uuid: Field<String>,
    name: Field<String>,
    minor_number: Field<u32>,
    pci_bus_id: Field<String>,
    sm_clock_max_mhz: Field<u32>,
}

fn field<T>(r: std::result::Result<T, NvmlError>) -> Field<T> {
    r.map_err(|e| e.to_string())
}

impl Reader {
    /// Reads every GPU ([`super::GpuSource::read`]).
    pub(super) fn read(&mut self) -> Field<Vec<NvmlDeviceReading>> {
        let nvml = nvml()?;
        if self.devices.is_empty() {
            let count = nvml
                .device_count()
                .map_err(|e| format!("GPU metrics unavailable: NVML could not count GPUs: {e}"))?;
            if count == 0 {
                return Err("GPU metrics unavailable: NVML lists no GPUs".to_string());
            }
            for index in 0..count {
                let device = nvml.device_by_index(index).map_err(|e| {
                    format!("GPU metrics unavailable: NVML could not open GPU {index}: {e}")
                })?;
                self.devices.push((index, device));
            }
        }
        let mut out = Vec::with_capacity(self.devices.len());
        for (index, d) in &self.devices {
            let info = self
                .cached
                .entry(*index)
                .or_insert_with(|| StaticInfo {
                    uuid: field(d.uuid()),
                    name: field(d.name()),
                    minor_number: field(d.minor_number()),
                    pci_bus_id: field(d.pci_info().map(|p| p.bus_id)),
                    sm_clock_max_mhz: field(d.max_clock_info(Clock::SM)),
                })
                .clone();
            let since = self.last_sample_us.get(index).copied();
            let process_sm_percent = field(d.process_utilization_stats(since)).map(|samples| {
                if let Some(t) = samples.iter().map(|s| s.timestamp).max() {
                    self.last_sample_us.insert(*index, t);
                }
                samples.iter().map(|s| (s.pid, s.sm_util)).collect()
            });
            out.push(NvmlDeviceReading {
                index: *index,
                uuid: info.uuid,
                name: info.name,
                minor_number: info.minor_number,
                pci_bus_id: info.pci_bus_id,
                utilization_percent: field(d.utilization_rates().map(|u| (u.gpu, u.memory))),
                memory: field(d.memory_info().map(|m| NvmlMemory {
                    total: m.total,
                    used: m.used,
                    free: m.free,
                })),
                sm_clock_mhz: field(d.clock_info(Clock::SM)),
                sm_clock_max_mhz: info.sm_clock_max_mhz,
                power_usage_mw: field(d.power_usage()),
                power_limit_mw: field(d.enforced_power_limit()),
                temperature_c: field(d.temperature(TemperatureSensor::Gpu)),
                pcie_tx_kib_s: field(d.pcie_throughput(PcieUtilCounter::Send)),
                pcie_rx_kib_s: field(d.pcie_throughput(PcieUtilCounter::Receive)),
                compute_processes: field(d.running_compute_processes_count()),
                process_sm_percent,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_errors_read_well() {
        assert_eq!(
            unavailable(&NvmlError::DriverNotLoaded),
            "GPU metrics unavailable: the NVIDIA driver is not loaded"
        );
    }
}
