//! In-process clusters (`local`, `local:cpu=N`): the devices TensorFlow creates in this process.

use tensorflow::{Graph, Session};

use super::model::{Cluster, Device};
use crate::config::SessionConfig;
use crate::error::Result;
use crate::graph::DeviceType;

/// Lists the devices a session with `config` sees, as a [`Cluster`].
///
/// CPU devices of one process share host memory, so their `memory_bytes` is `None` (no per-device
/// cap); other devices report what TensorFlow reports. A CPU device runs as many ops at once as
/// the session has inter-op threads (`config.inter_op_threads`, or the cores this process may use,
/// TensorFlow's default), and all of them share one compute pool of that many cores.
///
/// # Errors
/// [`Error::TensorFlow`] if the session cannot be created or listed.
pub(crate) fn discover(config: &SessionConfig) -> Result<Cluster> {
    crate::tf::ensure_supported_version()?;
    let graph = Graph::new();
    let session = Session::new(&config.session_options()?, &graph)
        .map_err(|e| crate::tf::status::error("creating a session", &e))?;
    let devices = session
        .device_list()
        .map_err(|e| crate::tf::status::error("listing devices", &e))?;
    let inter_op = match config.inter_op_threads {
        n if n > 0 => n as u32,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    };
    Ok(Cluster::new(
        devices
            .into_iter()
            .map(|d| {
                let ty = DeviceType::from(d.device_type);
                let cpu = ty == DeviceType::Cpu;
                let memory = (!cpu && d.memory_bytes > 0).then_some(d.memory_bytes as u64);
                let mut device = Device::nominal(&d.name, ty, memory, "localhost");
                if cpu {
                    device.concurrency = inter_op;
                }
                device
            })
            .collect(),
    ))
}
