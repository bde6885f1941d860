//! NVIDIA GPUs through NVML, the pure half: raw readings in NVML's units ([`NvmlDeviceReading`])
//! and the mapping to [`GpuSnapshot`] ([`map_reading`]: mW → W, KiB/s → bytes/s). `GpuSource`
//! in `tf-iaware`, the thin layer over `nvml-wrapper`, takes the readings.
//!
//! A call a device or driver does not support leaves that field `None` and names it in
//! [`GpuSnapshot::unsupported`].

use crate::monitor::snapshot::{GpuSnapshot, Smoothed};

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
pub(crate) fn gpu_share(utilisation_percent: f64, own_percent: Option<f64>) -> f64 {
    let others = (utilisation_percent - own_percent.unwrap_or(0.0)).max(0.0);
    (1.0 - others / 100.0).clamp(0.0, 1.0)
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
        // What nvml-wrapper says for NVML_ERROR_NOT_SUPPORTED.
        let ns = "the requested operation is not available on the target device".to_string();
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
}
