//! The per-op placement strategies as one closed type, named, parsed and described by one table
//! (the CLI's `--strategy` and the library's `place` read the same one).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Etf, Heft, InfraAware, PlaceOptions, Random, RoundRobin, SingleFastest, Strategy};
use super::{TfDefault, ERROR_SPLIT_GAIN, ERROR_THRESHOLD};
use crate::error::{Error, Result};

/// A per-op placement strategy (which device runs each op of one graph).
///
/// Names (`Display`/`FromStr`, one table): `tf-default`, `round-robin`, `random`,
/// `single-fastest`, `infra-aware`, `etf`, `heft`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum OpPlacementStrategy {
    /// No devices: TensorFlow's placer decides.
    TfDefault,
    /// Colocation groups dealt over the devices in turn.
    RoundRobin,
    /// Each group on a random device with room (seeded by [`PlaceOptions::seed`]).
    Random,
    /// Everything on the device that runs the graph fastest alone.
    SingleFastest,
    /// IA-TF: capable, available devices, proportional slices while it pays off (devices below
    /// [`PlaceOptions::infra_threshold`] of the best left out).
    InfraAware,
    /// m-ETF list scheduling (earliest start first, memory-aware).
    Etf,
    /// HEFT (upward rank, insertion-based earliest finish).
    Heft,
}

/// One row of the strategy table.
struct Row {
    name: &'static str,
    strategy: OpPlacementStrategy,
    help: &'static str,
}

/// Every per-op strategy: name, value, help.
const TABLE: &[Row] = &[
    Row {
        name: "tf-default",
        strategy: OpPlacementStrategy::TfDefault,
        help: "no devices: TensorFlow's placer decides",
    },
    Row {
        name: "round-robin",
        strategy: OpPlacementStrategy::RoundRobin,
        help: "colocation groups dealt over the devices",
    },
    Row {
        name: "random",
        strategy: OpPlacementStrategy::Random,
        help: "each group on a random device with room (seeded)",
    },
    Row {
        name: "single-fastest",
        strategy: OpPlacementStrategy::SingleFastest,
        help: "everything on the device that runs the graph fastest alone",
    },
    Row {
        name: "infra-aware",
        strategy: OpPlacementStrategy::InfraAware,
        help: "IA-TF: capable, available devices, proportional slices while it pays off",
    },
    Row {
        name: "etf",
        strategy: OpPlacementStrategy::Etf,
        help: "m-ETF list scheduling (earliest start first, memory-aware)",
    },
    Row {
        name: "heft",
        strategy: OpPlacementStrategy::Heft,
        help: "HEFT (upward rank, insertion-based earliest finish)",
    },
];

impl OpPlacementStrategy {
    /// Every strategy, in the table's order.
    pub fn all() -> impl Iterator<Item = OpPlacementStrategy> {
        TABLE.iter().map(|r| r.strategy)
    }

    /// Every strategy's name, in the table's order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        TABLE.iter().map(|r| r.name)
    }

    /// The known names, comma-separated (for messages and help).
    pub fn known() -> String {
        Self::names().collect::<Vec<_>>().join(", ")
    }

    /// One line per strategy, `name: help` (for `--help`).
    pub fn help() -> String {
        TABLE
            .iter()
            .map(|r| format!("{}: {}", r.name, r.help))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The table's name of this strategy.
    pub fn name(self) -> &'static str {
        TABLE
            .iter()
            .find(|r| r.strategy == self)
            .map_or("?", |r| r.name)
    }

    /// The strategy, with `options`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an `infra_threshold` outside 0–1 or a `min_split_gain`
    /// outside 0–1 (1 excluded: no split could be kept).
    pub fn build(self, options: &PlaceOptions) -> Result<Box<dyn Strategy>> {
        if !(0.0..=1.0).contains(&options.infra_threshold) {
            return Err(Error::InvalidArgument {
                what: ERROR_THRESHOLD.into(),
                reason: format!("{} is not within 0–1", options.infra_threshold),
            });
        }
        if !(0.0..1.0).contains(&options.min_split_gain) {
            return Err(Error::InvalidArgument {
                what: ERROR_SPLIT_GAIN.into(),
                reason: format!(
                    "{} is not within 0–1 (1 excluded: no split could be kept)",
                    options.min_split_gain
                ),
            });
        }
        let min_split_gain = options.min_split_gain;
        Ok(match self {
            Self::TfDefault => Box::new(TfDefault),
            Self::RoundRobin => Box::new(RoundRobin),
            Self::Random => Box::new(Random { seed: options.seed }),
            Self::SingleFastest => Box::new(SingleFastest),
            Self::InfraAware => Box::new(InfraAware {
                threshold: options.infra_threshold,
                min_split_gain,
            }),
            Self::Etf => Box::new(Etf { min_split_gain }),
            Self::Heft => Box::new(Heft { min_split_gain }),
        })
    }
}

impl fmt::Display for OpPlacementStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpPlacementStrategy {
    type Err = Error;

    /// Parses a name of the table.
    ///
    /// # Errors
    /// [`Error::UnknownStrategy`] listing the known names.
    fn from_str(s: &str) -> Result<Self> {
        TABLE
            .iter()
            .find(|r| r.name == s)
            .map(|r| r.strategy)
            .ok_or_else(|| Error::UnknownStrategy {
                name: s.into(),
                known: Self::known(),
            })
    }
}

impl TryFrom<String> for OpPlacementStrategy {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<OpPlacementStrategy> for String {
    fn from(s: OpPlacementStrategy) -> String {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_builds_its_strategy() {
        for s in OpPlacementStrategy::all() {
            assert_eq!(s.to_string().parse::<OpPlacementStrategy>().unwrap(), s);
            let built = s.build(&PlaceOptions::default()).unwrap();
            assert_eq!(built.name(), s.name());
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
        }
        assert_eq!(OpPlacementStrategy::all().count(), 7);
        assert_eq!(OpPlacementStrategy::help().lines().count(), 7);
    }

    #[test]
    fn a_typo_lists_the_known_names() {
        let msg = "hefty"
            .parse::<OpPlacementStrategy>()
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("hefty") && msg.contains("round-robin"),
            "{msg}"
        );
        assert!(serde_json::from_str::<OpPlacementStrategy>("\"etff\"").is_err());
    }
}
