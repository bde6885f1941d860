//! The data-parallel strategies as one closed type, named, parsed and described by one table.
//!
//! Two questions decide a data-parallel strategy: how each worker's share of the global batch is
//! sized ([`Shares`]) and how the replicas' gradients reach the variables ([`Updates`]).
//! TensorFlow's own recipes size shares equally; the infra-aware ones size them from a
//! calibration at the live availability.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How a data-parallel strategy trains: which shares, which updates.
///
/// Names (`Display`/`FromStr`, one table): `replica-setter`, `sync-backup` (one backup worker)
/// or `sync-backup:K`, `async-ps`, `infra-aware`, `infra-aware-async`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DataParallelStrategy {
    /// TensorFlow's stock synchronous recipe (`replica_device_setter`, in-graph replication):
    /// equal shares, one barrier per step.
    ReplicaSetter,
    /// `SyncReplicasOptimizer` with backup workers: equal shares, each step aggregates the
    /// first N − `backups` gradients and drops the rest.
    SyncBackup {
        /// Gradients each step does without (k ≥ 1).
        backups: usize,
    },
    /// TF2 `ParameterServerStrategy` semantics: equal shares, every worker steps and updates on
    /// its own, no barrier.
    AsyncPs,
    /// Synchronous, shares from capability × availability (calibrated), re-sized from measured
    /// replica times while training (LB-BSP feedback).
    InfraAware,
    /// The infra-aware shares, trained asynchronously where a short probe shows asynchrony
    /// reads clearly more samples per second, synchronously otherwise.
    InfraAwareAsync,
}

/// How a strategy sizes each worker's share of the global batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shares {
    /// The same share for every worker (TensorFlow's recipes).
    Equal,
    /// Shares from each worker's calibrated throughput at its live availability.
    Calibrated,
}

/// How the replicas' gradients reach the variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Updates {
    /// One synchronous step over every replica, gradients combined in-graph.
    Sync,
    /// Each step takes the first N − `backups` gradients.
    Backup {
        /// Gradients each step does without.
        backups: usize,
    },
    /// Every worker steps and updates on its own.
    Async,
    /// A synchronous and an asynchronous probe window decide (see
    /// [`DataParallelStrategy::InfraAwareAsync`]).
    Adaptive,
}

/// One row of the strategy table.
struct Row {
    name: &'static str,
    strategy: DataParallelStrategy,
    help: &'static str,
}

/// Every data-parallel strategy: name, value, help. TensorFlow's stock recipes first.
const TABLE: &[Row] = &[
    Row {
        name: "replica-setter",
        strategy: DataParallelStrategy::ReplicaSetter,
        help: "stock TensorFlow: synchronous, equal shares",
    },
    Row {
        name: "async-ps",
        strategy: DataParallelStrategy::AsyncPs,
        help: "stock TensorFlow ParameterServerStrategy: asynchronous, equal shares",
    },
    Row {
        name: "sync-backup",
        strategy: DataParallelStrategy::SyncBackup { backups: 1 },
        help: "stock SyncReplicasOptimizer: equal shares, each step drops the slowest k \
               gradients (`sync-backup:K`, default 1)",
    },
    Row {
        name: "infra-aware",
        strategy: DataParallelStrategy::InfraAware,
        help: "synchronous, shares from calibrated capability × live availability, re-sized \
               from measured step times",
    },
    Row {
        name: "infra-aware-async",
        strategy: DataParallelStrategy::InfraAwareAsync,
        help: "infra-aware shares, asynchronous where that measurably pays",
    },
];

impl DataParallelStrategy {
    /// Every strategy (with `sync-backup`'s default of one backup worker), stock ones first.
    pub fn all() -> impl Iterator<Item = DataParallelStrategy> {
        TABLE.iter().map(|r| r.strategy)
    }

    /// The known names, comma-separated (for messages and help).
    pub fn known() -> String {
        TABLE.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
    }

    /// One line per strategy, `name: help` (for `--help`).
    pub fn help() -> String {
        TABLE
            .iter()
            .map(|r| format!("{}: {}", r.name, r.help))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The table's name of this strategy (without `sync-backup`'s `:K`).
    pub fn name(self) -> &'static str {
        TABLE
            .iter()
            .find(|r| std::mem::discriminant(&r.strategy) == std::mem::discriminant(&self))
            .map_or("?", |r| r.name)
    }

    /// How it sizes shares.
    pub fn shares(self) -> Shares {
        match self {
            Self::ReplicaSetter | Self::SyncBackup { .. } | Self::AsyncPs => Shares::Equal,
            Self::InfraAware | Self::InfraAwareAsync => Shares::Calibrated,
        }
    }

    /// How its gradients reach the variables.
    pub fn updates(self) -> Updates {
        match self {
            Self::ReplicaSetter | Self::InfraAware => Updates::Sync,
            Self::SyncBackup { backups } => Updates::Backup { backups },
            Self::AsyncPs => Updates::Async,
            Self::InfraAwareAsync => Updates::Adaptive,
        }
    }

    /// Whether it is one of TensorFlow's own recipes (the contenders a user would pick instead).
    pub fn is_stock(self) -> bool {
        self.shares() == Shares::Equal
    }
}

impl fmt::Display for DataParallelStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SyncBackup { backups } if *backups != 1 => write!(f, "sync-backup:{backups}"),
            s => f.write_str(s.name()),
        }
    }
}

impl FromStr for DataParallelStrategy {
    type Err = Error;

    /// Parses a name of the table; `sync-backup:K` sets K ≥ 1 backup workers.
    ///
    /// # Errors
    /// [`Error::UnknownStrategy`] listing the known names; [`Error::InvalidArgument`] for a
    /// `sync-backup:K` whose K is not a positive integer.
    fn from_str(s: &str) -> Result<Self> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let row = TABLE
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| Error::UnknownStrategy {
                name: s.into(),
                known: Self::known(),
            })?;
        match (row.strategy, arg) {
            (strategy, None) => Ok(strategy),
            (Self::SyncBackup { .. }, Some(k)) => match k.parse::<usize>() {
                Ok(backups) if (1..=1024).contains(&backups) => Ok(Self::SyncBackup { backups }),
                _ => Err(Error::InvalidArgument {
                    what: format!("strategy `{s}`"),
                    reason: format!("backup workers `{k}` is not an integer in 1..=1024"),
                }),
            },
            (_, Some(_)) => Err(Error::InvalidArgument {
                what: format!("strategy `{s}`"),
                reason: format!("`{name}` takes no `:` argument"),
            }),
        }
    }
}

impl TryFrom<String> for DataParallelStrategy {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<DataParallelStrategy> for String {
    fn from(s: DataParallelStrategy) -> String {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for s in DataParallelStrategy::all() {
            assert_eq!(s.to_string().parse::<DataParallelStrategy>().unwrap(), s);
        }
        let k3: DataParallelStrategy = "sync-backup:3".parse().unwrap();
        assert_eq!(k3, DataParallelStrategy::SyncBackup { backups: 3 });
        assert_eq!(k3.to_string(), "sync-backup:3");
        assert_eq!(k3.updates(), Updates::Backup { backups: 3 });
        let json = serde_json::to_string(&k3).unwrap();
        assert_eq!(json, "\"sync-backup:3\"");
        assert_eq!(
            serde_json::from_str::<DataParallelStrategy>(&json).unwrap(),
            k3
        );
    }

    #[test]
    fn a_typo_lists_the_known_names() {
        let e = "infra-awar".parse::<DataParallelStrategy>().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("infra-awar") && msg.contains("async-ps"),
            "{msg}"
        );
        for bad in ["sync-backup:0", "sync-backup:x", "async-ps:2", ""] {
            assert!(bad.parse::<DataParallelStrategy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shares_and_updates_follow_the_recipe() {
        use DataParallelStrategy as S;
        assert!(S::ReplicaSetter.is_stock() && S::AsyncPs.is_stock());
        assert!(!S::InfraAware.is_stock() && !S::InfraAwareAsync.is_stock());
        assert_eq!(S::AsyncPs.updates(), Updates::Async);
        assert_eq!(S::InfraAwareAsync.updates(), Updates::Adaptive);
        assert_eq!(S::InfraAware.shares(), Shares::Calibrated);
        assert_eq!(S::all().count(), 5);
        assert!(S::help().lines().count() == 5);
    }
}
