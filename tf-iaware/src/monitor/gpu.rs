//! NVIDIA GPUs through NVML: raw readings in NVML's units ([`NvmlDeviceReading`]), the pure
//! mapping to [`GpuSnapshot`] ([`map_reading`]: mW → W, KiB/s → bytes/s), and
//! [`GpuSource`], the thin layer over `nvml-wrapper`.
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`); one handle is initialised on first use and
//! shared by every monitor in the process. Its absence is a normal state, reported once in the
//! log and in every snapshot as `GPU metrics unavailable: <reason>`. A call a device or driver
//! does not support leaves that field `None` and names it in [`GpuSnapshot::unsupported`].

use std::collections::HashMap;
use std::sync::OnceLock;

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::monitor::snapshot::{GpuSnapshot, Smoothed};

/// The NVML library NVML-wrapper loads.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// One NVML reading or why it is missing.
pub type Field<T> = std::result::Result<T, String>;

/// Framebuffer memory as NVML reports it, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmlMemory {
    /// Installed, bytes.
    pub total: u64,
    /// Allocated, bytes.
    pub used: u64,
    /// Unallocated, bytes.
    pub free: u64,
}

/// One device as read from NVML, in NVML's own units.
#[derive(Clone, Debug, PartialEq)]
pub struct NvmlDeviceReading {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: Field<String>,
    /// Product name.
    pub name: Field<String>,
    /// `/dev/nvidiaN` minor number.
    pub minor_number: Field<u32>,
    /// PCI bus id.
    pub pci_bus_id: Field<String>,
    /// (GPU, memory) utilisation over the driver's sample period, percent.
    pub utilization_percent: Field<(u32, u32)>,
    /// Framebuffer memory.
    pub memory: Field<NvmlMemory>,
    /// Current SM clock, MHz.
    pub sm_clock_mhz: Field<u32>,
    /// Maximum SM clock, MHz.
    pub sm_clock_max_mhz: Field<u32>,
    /// Power draw, mW.
    pub power_usage_mw: Field<u32>,
    /// Enforced power limit, mW.
    pub power_limit_mw: Field<u32>,
    /// GPU die temperature, °C.
    pub temperature_c: Field<u32>,
    /// PCIe transmit throughput, KiB/s.
    pub pcie_tx_kib_s: Field<u32>,
    /// PCIe receive throughput, KiB/s.
    pub pcie_rx_kib_s: Field<u32>,
    /// Processes with a compute context.
    pub compute_processes: Field<u32>,
    /// Per-process SM utilisation samples since the previous reading, as (pid, percent).
    pub process_sm_percent: Field<Vec<(u32, u32)>>,
}

/// Maps an NVML reading to a snapshot entry (utilisation as a single, unsmoothed reading).
///
/// `own_pid` is the observed process: its SM utilisation is the mean of its per-process
/// samples (0 when it has none: NVML only lists processes that used the GPU).
pub fn map_reading(r: &NvmlDeviceReading, own_pid: Option<u32>) -> GpuSnapshot {
    let mut unsupported = Vec::new();
    let mut ok = |field: &str, v: &Field<()>| {
        if let Err(e) = v {
            unsupported.push(format!("{field}: {e}"));
        }
    };
    fn unit<T>(f: &Field<T>) -> Field<()> {
        f.as_ref().map(|_| ()).map_err(Clone::clone)
    }
    ok("uuid", &unit(&r.uuid));
    ok("name", &unit(&r.name));
    ok("minor_number", &unit(&r.minor_number));
    ok("pci_bus_id", &unit(&r.pci_bus_id));
    ok("utilization", &unit(&r.utilization_percent));
    ok("memory", &unit(&r.memory));
    ok("sm_clock", &unit(&r.sm_clock_mhz));
    ok("sm_clock_max", &unit(&r.sm_clock_max_mhz));
    ok("power_usage", &unit(&r.power_usage_mw));
    ok("power_limit", &unit(&r.power_limit_mw));
    ok("temperature", &unit(&r.temperature_c));
    ok("pcie_tx", &unit(&r.pcie_tx_kib_s));
    ok("pcie_rx", &unit(&r.pcie_rx_kib_s));
    ok("compute_processes", &unit(&r.compute_processes));
    if own_pid.is_some() {
        ok("process_utilization", &unit(&r.process_sm_percent));
    }
    let own_utilisation_percent = match (&r.process_sm_percent, own_pid) {
        (Ok(samples), Some(pid)) => {
            let own: Vec<f64> = samples
                .iter()
                .filter(|(p, _)| *p == pid)
                .map(|(_, u)| f64::from(*u))
                .collect();
            Some(if own.is_empty() {
                0.0
            } else {
                own.iter().sum::<f64>() / own.len() as f64
            })
        }
        _ => None,
    };
    let memory = r.memory.as_ref().ok();
    GpuSnapshot {
        index: r.index,
        uuid: r.uuid.clone().unwrap_or_default(),
        name: r.name.clone().unwrap_or_default(),
        minor_number: r.minor_number.clone().ok(),
        pci_bus_id: r.pci_bus_id.clone().ok(),
        utilisation_percent: r
            .utilization_percent
            .as_ref()
            .ok()
            .map(|(gpu, _)| Smoothed::constant(f64::from(*gpu))),
        memory_utilisation_percent: r
            .utilization_percent
            .as_ref()
            .ok()
            .map(|(_, mem)| f64::from(*mem)),
        own_utilisation_percent,
        memory_total_bytes: memory.map(|m| m.total),
        memory_used_bytes: memory.map(|m| m.used),
        memory_free_bytes: memory.map(|m| m.free),
        sm_clock_mhz: r.sm_clock_mhz.as_ref().ok().map(|v| f64::from(*v)),
        sm_clock_max_mhz: r.sm_clock_max_mhz.as_ref().ok().map(|v| f64::from(*v)),
        power_watts: r
            .power_usage_mw
            .as_ref()
            .ok()
            .map(|mw| f64::from(*mw) / 1000.0),
        power_limit_watts: r
            .power_limit_mw
            .as_ref()
            .ok()
            .map(|mw| f64::from(*mw) / 1000.0),
        temperature_celsius: r.temperature_c.as_ref().ok().map(|c| f64::from(*c)),
        pcie_tx_bytes_per_sec: r
            .pcie_tx_kib_s
            .as_ref()
            .ok()
            .map(|k| f64::from(*k) * 1024.0),
        pcie_rx_bytes_per_sec: r
            .pcie_rx_kib_s
            .as_ref()
            .ok()
            .map(|k| f64::from(*k) * 1024.0),
        compute_processes: r.compute_processes.clone().ok(),
        unsupported,
    }
}

/// Share of a GPU available to the observed process, 0–1: one less the utilisation by others
/// (`utilisation − own`, percent).
pub fn gpu_share(utilisation_percent: f64, own_percent: Option<f64>) -> f64 {
    let others = (utilisation_percent - own_percent.unwrap_or(0.0)).max(0.0);
    (1.0 - others / 100.0).clamp(0.0, 1.0)
}

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
pub fn unavailable(e: &NvmlError) -> String {
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

/// Reads every GPU through the shared NVML handle. Keeps per-device state between readings
/// (devices, static properties, the last per-process sample timestamp).
#[derive(Default)]
pub struct GpuSource {
    devices: Vec<(u32, Device<'static>)>,
    last_sample_us: HashMap<u32, u64>,
    cached: HashMap<u32, StaticInfo>,
}

impl std::fmt::Debug for GpuSource {
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

impl GpuSource {
    /// A source with no state yet; NVML is initialised on the first [`GpuSource::read`].
    pub fn new() -> Self {
        GpuSource::default()
    }

    /// Reads every GPU.
    ///
    /// # Errors
    /// `GPU metrics unavailable: <reason>` if NVML is absent, lists no GPUs, or cannot count
    /// or open them.
    pub fn read(&mut self) -> Field<Vec<NvmlDeviceReading>> {
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

    /// Values recorded from `nvidia-smi -q` / NVML on an A100-SXM4-40GB under a training job.
    fn recorded_a100() -> NvmlDeviceReading {
        NvmlDeviceReading {
            index: 0,
            uuid: Ok("GPU-3a5b7c9d-1e2f-4a6b-8c0d-2e4f6a8b0c1d".into()),
            name: Ok("NVIDIA A100-SXM4-40GB".into()),
            minor_number: Ok(0),
            pci_bus_id: Ok("00000000:07:00.0".into()),
            utilization_percent: Ok((87, 41)),
            memory: Ok(NvmlMemory {
                total: 42_949_672_960,
                used: 31_675_383_808,
                free: 11_274_289_152,
            }),
            sm_clock_mhz: Ok(1410),
            sm_clock_max_mhz: Ok(1410),
            power_usage_mw: Ok(312_547),
            power_limit_mw: Ok(400_000),
            temperature_c: Ok(61),
            pcie_tx_kib_s: Ok(18_432),
            pcie_rx_kib_s: Ok(1_048_576),
            compute_processes: Ok(2),
            process_sm_percent: Ok(vec![(4242, 60), (4242, 64), (777, 20)]),
        }
    }

    #[test]
    fn nvml_units_are_converted() {
        let g = map_reading(&recorded_a100(), Some(4242));
        assert_eq!(g.name, "NVIDIA A100-SXM4-40GB");
        assert_eq!(g.power_watts, Some(312.547));
        assert_eq!(g.power_limit_watts, Some(400.0));
        assert_eq!(g.memory_free_bytes, Some(11_274_289_152));
        assert_eq!(g.utilisation_percent.unwrap().last, 87.0);
        assert_eq!(g.memory_utilisation_percent, Some(41.0));
        assert_eq!(g.own_utilisation_percent, Some(62.0));
        assert_eq!(g.pcie_rx_bytes_per_sec, Some(1_073_741_824.0));
        assert_eq!(g.sm_clock_mhz, Some(1410.0));
        assert_eq!(g.compute_processes, Some(2));
        assert!(g.unsupported.is_empty());
        // Others use 87 − 62 = 25 %: three quarters of the GPU are ours to use.
        assert!((gpu_share(87.0, g.own_utilisation_percent) - 0.75).abs() < 1e-12);
        // A process with no samples used none of it.
        assert_eq!(
            map_reading(&recorded_a100(), Some(1)).own_utilisation_percent,
            Some(0.0)
        );
    }

    #[test]
    fn unsupported_calls_are_named() {
        let mut r = recorded_a100();
        let ns = NvmlError::NotSupported.to_string();
        r.power_usage_mw = Err(ns.clone());
        r.pcie_tx_kib_s = Err(ns.clone());
        r.process_sm_percent = Err(ns);
        let g = map_reading(&r, Some(4242));
        assert_eq!(g.power_watts, None);
        assert_eq!(g.own_utilisation_percent, None);
        assert_eq!(g.unsupported.len(), 3, "{:?}", g.unsupported);
        assert!(g.unsupported[0].starts_with("power_usage: "));
    }

    #[test]
    fn gpu_share_bounds() {
        assert_eq!(gpu_share(0.0, None), 1.0);
        assert_eq!(gpu_share(100.0, None), 0.0);
        assert_eq!(gpu_share(30.0, Some(50.0)), 1.0);
    }

    #[test]
    fn init_errors_read_well() {
        assert_eq!(
            unavailable(&NvmlError::DriverNotLoaded),
            "GPU metrics unavailable: the NVIDIA driver is not loaded"
        );
    }
}
