//! The series table: every metric family of a [`Snapshot`] page declared once — name, type,
//! help text, unit conversion, labels and where the value lives in the snapshot — and the two
//! directions it drives: [`Series::write`] appends a family's samples to a page and
//! [`Series::read`] sets the snapshot fields from the same family of a parsed page.
//!
//! A row belongs to one entity ([`Of`]): the snapshot itself, its cgroup, or a family over a
//! collection (cores, network interfaces, GPUs, devices) whose members are told apart by a key
//! label (`cpu`, `device`, `gpu`). [`SERIES`] lists the rows in page order; reading walks it in
//! the same order, so a row may rely on the rows above it (a core's guest time on its mode
//! counters, the CPU limit's default on the core count).
//!
//! Reading rules: a series of the snapshot or its cgroup takes its family's first sample (all of
//! them for smoothed gauges, CPU modes and notes); a series over a collection takes every
//! sample with a key label in page order, a later sample of one member overwriting an earlier
//! one. Only rows marked [`Each::Adds`] bring members a page has not named before.

use crate::error::{Error, Result};
use crate::monitor::exposition::{Family, MetricType, Sample};
use crate::monitor::snapshot::{
    CgroupSnapshot, CoreSnapshot, CpuModeSeconds, DeviceAvailability, GpuSnapshot,
    NetworkInterface, Smoothed, Snapshot,
};

/// Metric whose presence marks a page as written by tf-iaware.
pub const INFO: &str = "tf_iaware_info";

/// Bytes per MiB (DCGM exporter reports framebuffer memory in MiB).
const MIB: f64 = 1024.0 * 1024.0;
/// Milliseconds per second (the snapshot keeps times in ms, the page in s).
const MS: f64 = 1000.0;
/// Field units per page unit when both are the same (bytes, counts).
const SAME: f64 = 1.0;
/// Label of a smoothed gauge's statistic, and its values in the order written.
const STAT: &str = "stat";
const STATS: [&str; 5] = ["last", "ewma", "mean", "min", "max"];
/// Label of a CPU time counter's mode.
const MODE: &str = "mode";

// ----- rows -----------------------------------------------------------------------------------

/// One metric family of the page.
pub(crate) struct Series {
    /// Metric name.
    pub name: &'static str,
    /// Type (`# TYPE`).
    pub kind: MetricType,
    /// Docstring (`# HELP`), ending with the unit of the values on the page.
    pub help: &'static str,
    /// The entity the family describes and its field there.
    pub of: Of,
}

/// The entity a [`Series`] describes, and the [`Field`] of it that the family carries.
pub(crate) enum Of {
    /// The snapshot itself.
    Host(Field<Snapshot>),
    /// The snapshot itself; when the page lacks the family, the function sets the field's
    /// default (which may depend on rows above, e.g. the core count on the per-core rows).
    HostOr(Field<Snapshot>, fn(&mut Snapshot)),
    /// The cgroup: written, and read, only when the snapshot has one.
    Cgroup(Field<CgroupSnapshot>),
    /// Every core (key label `cpu`).
    Cores(Each, Field<CoreSnapshot>),
    /// Every network interface (key label `device`).
    Interfaces(Each, Field<NetworkInterface>),
    /// Every GPU (key label `gpu`), with the labels written after the key.
    Gpus(Each, GpuLabels, Field<GpuSnapshot>),
    /// Every device's availability (key label `device`).
    Devices(Each, Field<DeviceAvailability>),
}

/// Whether a series over a collection may bring members the page has not named before.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Each {
    /// A sample for a new key adds a member (the series every exporter of the entity has).
    Adds,
    /// Samples for keys no earlier row brought are ignored.
    Fills,
}

/// Labels of a GPU's samples.
#[derive(Clone, Copy)]
pub(crate) enum GpuLabels {
    /// dcgm-exporter's: `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidiaN`), `modelName`,
    /// `Hostname`.
    Dcgm,
    /// `gpu` and `UUID`.
    Id,
    /// `gpu` only.
    Index,
}

/// Where a value of type `T` lives in entity `E`: `get` it (`None`: not known, so no sample),
/// `set` it from the page.
pub(crate) struct At<E, T> {
    get: fn(&E) -> Option<T>,
    set: fn(&mut E, T),
}

/// [`At`] a field of the entity: `at!(cpu.limit_cores)` for a field that is always there,
/// `at!(opt memory.total_bytes)` for an `Option`.
macro_rules! at {
    (opt $($f:ident).+) => {
        At { get: |e| e.$($f).+, set: |e, v| e.$($f).+ = Some(v) }
    };
    ($($f:ident).+) => {
        At { get: |e| Some(e.$($f).+), set: |e, v| e.$($f).+ = v }
    };
}

mod codec;
mod members;
mod table;

pub(crate) use table::{AGE, SERIES};

/// A field of entity `E` and how it appears on the page. Values are in the unit of the field
/// unless a conversion is named.
pub(crate) enum Field<E> {
    /// A number, as is.
    Number(At<E, f64>),
    /// A whole number of field units (bytes, ms, a count) written as `value / per`, `per` being
    /// field units per page unit ([`MS`] for ms → s, [`MIB`] for bytes → MiB, [`SAME`]). Read
    /// back rounded; a negative, non-finite or too large value is an error.
    Count(f64, At<E, u64>),
    /// A `u32` count (cores, processes), written as is; the text names it in errors.
    Small(&'static str, At<E, u32>),
    /// A smoothed gauge: one sample per statistic, labelled `stat` (`last`, `ewma`, `mean`,
    /// `min`, `max`). Read back needs `last`; a missing statistic equals it (a plain gauge of
    /// another exporter reads as a constant).
    Stats(At<E, Smoothed>),
    /// CPU time per mode, s: one sample per mode of the table that has a value, labelled
    /// `mode`. The setter gives the counters to fill (creating them if need be).
    Modes(
        &'static [Mode],
        fn(&E) -> Option<&CpuModeSeconds>,
        fn(&mut E) -> &mut CpuModeSeconds,
    ),
    /// A text (a reason) carried in the label named first, value 1.
    Text(&'static str, fn(&E) -> Option<&str>, fn(&mut E, String)),
    /// Texts carried in the label named first, one sample of value 1 each.
    Texts(
        &'static str,
        fn(&E) -> &[String],
        fn(&mut E) -> &mut Vec<String>,
    ),
    /// Written and read by hand (info series with several labels). Read gets the family's
    /// samples (never none).
    Custom(fn(&E, &mut Family), fn(&mut E, &[Sample]) -> Result<()>),
}

/// A CPU mode: its `mode` label and its counter in [`CpuModeSeconds`], s.
pub(crate) struct Mode(
    &'static str,
    fn(&CpuModeSeconds) -> Option<f64>,
    fn(&mut CpuModeSeconds, f64),
);

/// The modes of `/proc/stat` in its order; the first eight are node_exporter's
/// `node_cpu_seconds_total` modes, the last two (part of `user` and `nice`) its guest ones.
static MODES: [Mode; 10] = [
    Mode("user", |c| Some(c.user), |c, v| c.user = v),
    Mode("nice", |c| Some(c.nice), |c, v| c.nice = v),
    Mode("system", |c| Some(c.system), |c, v| c.system = v),
    Mode("idle", |c| Some(c.idle), |c, v| c.idle = v),
    Mode("iowait", |c| c.iowait, |c, v| c.iowait = Some(v)),
    Mode("irq", |c| c.irq, |c, v| c.irq = Some(v)),
    Mode("softirq", |c| c.softirq, |c, v| c.softirq = Some(v)),
    Mode("steal", |c| c.steal, |c, v| c.steal = Some(v)),
    Mode("guest", |c| c.guest, |c, v| c.guest = Some(v)),
    Mode(
        "guest_nice",
        |c| c.guest_nice,
        |c, v| c.guest_nice = Some(v),
    ),
];

/// node_exporter's modes of `node_cpu_seconds_total`.
static KERNEL_MODES: &[Mode] = MODES.split_at(8).0;

/// node_exporter's `node_cpu_guest_seconds_total` modes: guest time at normal and low priority.
static GUEST_MODES: [Mode; 2] = [
    Mode("user", |c| c.guest, |c, v| c.guest = Some(v)),
    Mode("nice", |c| c.guest_nice, |c, v| c.guest_nice = Some(v)),
];

const fn gauge(name: &'static str, help: &'static str, of: Of) -> Series {
    Series {
        name,
        kind: MetricType::Gauge,
        help,
        of,
    }
}

const fn counter(name: &'static str, help: &'static str, of: Of) -> Series {
    Series {
        name,
        kind: MetricType::Counter,
        help,
        of,
    }
}

// ----- values -------------------------------------------------------------------------------

/// An error about sample `x`: its line, and the series named in the reason.
fn bad(x: &Sample, reason: String) -> Error {
    Error::Exposition {
        line: x.line,
        reason: format!("`{}`: {reason}", x.name),
    }
}

/// A non-negative whole number (counts, bytes) from a sample value × `scale`.
fn count(x: &Sample, scale: f64) -> Result<u64> {
    let v = x.value * scale;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(bad(x, format!("{} is not a count", x.value)));
    }
    Ok(v.round() as u64)
}

fn label_u32(x: &Sample, label: &str) -> Result<Option<u32>> {
    match x.label(label) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| bad(x, format!("label {label}=\"{v}\" is not a number"))),
    }
}

/// A smoothed gauge from samples with a `stat` label (or one unlabelled reading).
fn smoothed_of<'a>(samples: impl Iterator<Item = &'a Sample>) -> Option<Smoothed> {
    let mut vals: [Option<f64>; 5] = [None; 5];
    for x in samples {
        let i = match x.label(STAT) {
            None => 0,
            Some(stat) => match STATS.iter().position(|s| *s == stat) {
                Some(i) => i,
                None => continue,
            },
        };
        vals[i] = Some(x.value);
    }
    let last = vals[0]?;
    Some(Smoothed {
        last,
        ewma: vals[1].unwrap_or(last),
        mean: vals[2].unwrap_or(last),
        min: vals[3].unwrap_or(last),
        max: vals[4].unwrap_or(last),
    })
}
