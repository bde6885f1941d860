//! The emulated-cluster set-up the end-to-end tests share: one lock that keeps them to one
//! cluster at a time, a started cluster with its devices, session configuration, workers and ps,
//! and a library connection to one.

use std::sync::{Mutex, MutexGuard};

use tf_iaware::cluster::Cluster;
use tf_iaware::runtime::data_parallel::worker_and_ps_devices;
use tf_iaware::runtime::SessionConfig;
use tf_iaware::Connection;
use tf_iaware_emulate::{EmulatedCluster, Scenario};

/// Cluster tests start several TensorFlow processes each: one at a time on a 2-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Holds the one-cluster-at-a-time lock until dropped (a test that panicked leaves it usable).
pub fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// An emulated cluster of `scenario` (`workers=0.5,0.5:ps=2`, …), connected.
pub struct Fixture {
    /// The cluster: its processes live as long as this does.
    pub cluster: EmulatedCluster,
    /// Its devices, as the session sees them.
    pub devices: Cluster,
    /// How sessions reach it.
    pub config: SessionConfig,
    /// Worker devices, in task order.
    pub workers: Vec<String>,
    /// ps devices, in task order.
    pub ps: Vec<String>,
}

impl Fixture {
    /// Starts the cluster `scenario` describes and connects to it.
    pub fn start(scenario: &str) -> Fixture {
        let scenario = Scenario::parse(scenario).unwrap();
        let cluster = EmulatedCluster::start(&scenario, &super::exe()).unwrap();
        let (devices, config) = cluster.connect().unwrap();
        let (workers, ps) = worker_and_ps_devices(&devices).unwrap();
        Fixture {
            cluster,
            devices,
            config,
            workers,
            ps,
        }
    }

    /// With deadlines for blocking calls and for each run, ms (short ones notice a lost task
    /// sooner).
    pub fn deadlines(mut self, operation_ms: i64, run_ms: i64) -> Fixture {
        self.config.operation_timeout_ms = operation_ms;
        self.config.run_timeout_ms = run_ms;
        self
    }
}

/// A library connection to a started emulated cluster of `scenario`.
pub fn connection(scenario: &str) -> Connection {
    let scenario = Scenario::parse(scenario).unwrap();
    EmulatedCluster::start(&scenario, &super::exe())
        .unwrap()
        .into_connection()
        .unwrap()
}
