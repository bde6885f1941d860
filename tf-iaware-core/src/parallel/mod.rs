//! Synchronous data-parallel training with parameter servers: the plan (which workers take which
//! share of the global batch, which ps holds which variable) and the strategies that make it —
//! TensorFlow's stock `replica-setter` recipe and `infra-aware` — and the noise-robust rules that
//! decide when measured throughputs justify different shares ([`noise`]).

pub mod checkpoint;
mod live;
pub(crate) mod network;
pub mod noise;
pub(crate) mod plan;
mod planner;
pub mod replicate;
mod strategy;
pub mod updates;

pub use live::{live_capacities, plan_live, ps_capacities, ReplicaMemory};

pub use network::{PsNetwork, Sharding, VarInfo};
pub use plan::{
    infra_aware, infra_aware_networked, lower_bound_ms, replica_setter, sync_lower_bound_ms,
    DataParallelPlan, InfraAwareOptions, Replica, WorkerCapacity,
};
pub use planner::{
    check_backups, nominal_capacities, DataParallelPlanner, Feedback, ProbeSize, MAX_PROBE_BATCH,
    RESIZE_EVERY,
};
pub use strategy::{DataParallelStrategy, Shares, Updates};
