//! What several subcommands share: flags that name a graph, a cluster and a strategy, turned into
//! calls of the library's entry point (at the root of `tf_iaware`), and printing.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tf_iaware::cluster::ClusterSpec;
use tf_iaware::graph::analyze::Analyzed;
use tf_iaware::graph::Sidecar;
use tf_iaware::{Connection, Plan, PlanOptions, Step};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

/// Reads and analyses a GraphDef file.
pub fn load_graph(path: &Path) -> Result<Analyzed> {
    Ok(tf_iaware::load_graph(path)?)
}

/// Reads the sidecar (`--meta`, else next to the graph) and checks it against the graph.
pub fn load_sidecar(
    graph_path: &Path,
    meta: Option<&PathBuf>,
    analyzed: &Analyzed,
) -> Result<Sidecar> {
    Ok(tf_iaware::load_sidecar(
        graph_path,
        meta.map(PathBuf::as_path),
        analyzed,
    )?)
}

/// Connects to `--cluster`; an `emulated:SCENARIO` cluster is started first, from this binary's
/// `worker` subcommand, and lives as long as the connection.
pub fn connect(spec: &str) -> Result<Connection> {
    let parsed = ClusterSpec::parse(spec)?;
    if let ClusterSpec::Emulated(text) = &parsed {
        let scenario = Scenario::parse(text)?;
        let exe = std::env::current_exe().context("locating the tf-iaware binary")?;
        return Ok(EmulatedCluster::start(&scenario, &exe)?.into_connection()?);
    }
    Ok(Connection::open(&parsed)?)
}

/// The flags of every command that places a GraphDef.
#[derive(clap::Args)]
pub struct PlaceFlags {
    /// Cluster spec: local, local:cpu=N, tf-config[:PATH], emulated:SCENARIO, synthetic:workers=N:…
    /// (drawn for place and simulate only; docs/src/guide/cluster-specs.md).
    #[arg(long, default_value = "local")]
    pub cluster: String,
    /// Placement strategy (tf-default keeps the graph's devices and lets TensorFlow decide the
    /// rest).
    #[arg(long, default_value = "tf-default", value_parser = strategy_name)]
    pub strategy: String,
    /// Sidecar JSON (default: the graph's path with extension .json, if it exists): how to
    /// train the graph; predictions cover the step it trains (its `train` and `loss` ops and what
    /// they need), not initialisers.
    #[arg(long, value_name = "F.json")]
    pub meta: Option<PathBuf>,
    /// Op timings of earlier runs of this graph (`run --save-measurements`); the cost model uses
    /// them before the calibration and the analytic estimates. Repeatable.
    #[arg(long = "measurements", value_name = "M.json")]
    pub measurements: Vec<PathBuf>,
    /// heft, etf: keep a split over several devices only when it is predicted at least this
    /// share faster than everything on the fastest device (0–1; 0 keeps any faster split).
    #[arg(long, value_name = "SHARE", default_value_t = tf_iaware::placer::MIN_SPLIT_GAIN)]
    pub min_split_gain: f64,
}

/// A graph file placed on a connected cluster.
pub struct PlacedGraph {
    pub connection: Connection,
    pub plan: Plan,
}

impl PlaceFlags {
    /// Loads the GraphDef at `graph`, connects to `--cluster` and places the graph (predictions
    /// cover the step of its sidecar, if it has one; a dynamic batch at `batch` samples).
    pub fn load_and_place(&self, graph: &Path, batch: Option<usize>) -> Result<PlacedGraph> {
        let analyzed = load_graph(graph)?;
        let connection = connect(&self.cluster)?;
        let sidecar = self.step_sidecar(graph, &analyzed)?;
        let plan = self.place(&connection, analyzed, sidecar.as_ref(), batch)?;
        Ok(PlacedGraph { connection, plan })
    }

    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.cluster.starts_with("emulated:")
    }

    /// The sidecar of the graph at `graph_path` for predictions: `--meta`, else the file next
    /// to the graph if there is one, else `None` (predictions then cover every op).
    pub fn step_sidecar(&self, graph_path: &Path, analyzed: &Analyzed) -> Result<Option<Sidecar>> {
        let default = Sidecar::path_for(graph_path);
        if self.meta.is_none() && !default.exists() {
            return Ok(None);
        }
        load_sidecar(graph_path, self.meta.as_ref(), analyzed).map(Some)
    }

    /// Places `analyzed` on `connection` with `--strategy`, priced from `--measurements`, the
    /// calibration or analytic estimates, for the step `sidecar` trains (every op without one),
    /// a dynamic batch at `batch` samples.
    pub fn place(
        &self,
        connection: &Connection,
        analyzed: Analyzed,
        sidecar: Option<&Sidecar>,
        batch: Option<usize>,
    ) -> Result<Plan> {
        let mut options = PlanOptions::with_measurement_files(&self.measurements)?;
        options.place.min_split_gain = self.min_split_gain;
        options.batch = batch;
        let step = sidecar.map(Step::from_sidecar).unwrap_or_default();
        Ok(connection.place_with(analyzed, &step, &self.strategy, &options)?)
    }
}

/// A clap value parser for a strategy name: one of the library's tables (data-parallel
/// [`tf_iaware::parallel::DataParallelStrategy`], per-op [`tf_iaware::placer::OpPlacementStrategy`]);
/// a typo is a usage error that lists both.
pub fn strategy_name(s: &str) -> std::result::Result<String, String> {
    s.parse::<tf_iaware::sim::scale::Planner>()
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// A clap value parser for a count flag within `MIN..=MAX` (the bounds of
/// [`tf_iaware::runtime::limits`]), so that an absurd count is a usage error when the flags are parsed,
/// before any work: `#[arg(long, value_parser = common::count::<1, { limits::MAX_OPS }>)]`.
pub fn count<const MIN: usize, const MAX: usize>(s: &str) -> std::result::Result<usize, String> {
    let v: usize = s
        .parse()
        .map_err(|e| format!("`{s}` is not a count ({e}); it must be {MIN} to {MAX}"))?;
    if (MIN..=MAX).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: it must be {MIN} to {MAX}"))
    }
}

/// Writes `text` to the output file `path` atomically (a temporary file beside it, renamed over
/// it), never replacing a device, FIFO or folder at `path` ([`tf_iaware::data::io::write_atomic`]).
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    write_bytes(path, text.as_bytes())
}

/// [`write_file`] for bytes.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(tf_iaware::data::io::write_atomic(
        path,
        bytes,
        "output file",
    )?)
}

/// Checks every output path a command was given (flag name, path) before its work starts, so
/// that an unwritable path fails at once instead of after a training run; nothing at the paths
/// is touched ([`tf_iaware::data::io::check_output_path`]).
pub fn check_outputs<'a>(
    outputs: impl IntoIterator<Item = (&'a str, Option<&'a PathBuf>)>,
) -> Result<()> {
    for (flag, path) in outputs {
        if let Some(path) = path {
            tf_iaware::data::io::check_output_path(path, flag)?;
        }
    }
    Ok(())
}

/// Prints `value` as one pretty JSON document on stdout.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}
