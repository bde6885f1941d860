//! Collections on a page: members (cores, network interfaces, GPUs, devices) told apart by a key
//! label, and an index that finds or adds a member by that key while reading.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::label_u32;
use super::Each::{self, Adds};
use super::GpuLabels;
use crate::error::Result;
use crate::monitor::exposition::Sample;
use crate::monitor::snapshot::{
    CoreSnapshot, CpuModeSeconds, DeviceAvailability, DeviceKind, GpuSnapshot, NetworkInterface,
    Smoothed, Snapshot,
};

// ----- collections --------------------------------------------------------------------------

pub(super) type Labels<'a> = Vec<(&'static str, Cow<'a, str>)>;

/// A key label's value: a number (`cpu`, `gpu`) or a name (`device`).
pub(super) trait Key: Ord + Clone + Sized {
    fn of(x: &Sample, label: &str) -> Result<Option<Self>>;
}

impl Key for u32 {
    fn of(x: &Sample, label: &str) -> Result<Option<Self>> {
        label_u32(x, label)
    }
}

impl Key for String {
    fn of(x: &Sample, label: &str) -> Result<Option<Self>> {
        Ok(x.label(label).map(str::to_string))
    }
}

/// A member of a collection the page describes series by series.
pub(super) trait Member: Sized {
    /// The key label.
    const KEY: &'static str;
    /// Whether members are kept in key order (else in the order the page first names them).
    const SORTED: bool;
    type Key: Key;
    /// What a row says about the labels to write after the key.
    type Style: Copy;

    fn key(&self) -> &Self::Key;
    /// A member known by its key only.
    fn new(key: Self::Key) -> Self;
    /// The key label and what `style` adds.
    fn labels<'a>(&'a self, style: Self::Style, s: &'a Snapshot) -> Labels<'a>;
    /// Takes what a sample of an [`Each::Adds`] row says about the member beyond its key.
    fn identify(&mut self, _x: &Sample) {}
}

impl Member for CoreSnapshot {
    const KEY: &'static str = "cpu";
    const SORTED: bool = true;
    type Key = u32;
    type Style = ();

    fn key(&self) -> &u32 {
        &self.cpu
    }
    fn new(cpu: u32) -> Self {
        CoreSnapshot {
            cpu,
            utilisation: None,
            seconds: CpuModeSeconds::default(),
        }
    }
    fn labels<'a>(&'a self, (): (), _: &'a Snapshot) -> Labels<'a> {
        vec![(Self::KEY, self.cpu.to_string().into())]
    }
}

impl Member for NetworkInterface {
    const KEY: &'static str = "device";
    const SORTED: bool = true;
    type Key = String;
    type Style = ();

    fn key(&self) -> &String {
        &self.name
    }
    fn new(name: String) -> Self {
        NetworkInterface {
            name,
            rx_bytes_total: 0,
            tx_bytes_total: 0,
            rx_bytes_per_sec: None,
            tx_bytes_per_sec: None,
        }
    }
    fn labels<'a>(&'a self, (): (), _: &'a Snapshot) -> Labels<'a> {
        vec![(Self::KEY, self.name.as_str().into())]
    }
}

impl Member for GpuSnapshot {
    const KEY: &'static str = "gpu";
    const SORTED: bool = true;
    type Key = u32;
    type Style = GpuLabels;

    fn key(&self) -> &u32 {
        &self.index
    }
    fn new(index: u32) -> Self {
        GpuSnapshot {
            index,
            ..GpuSnapshot::default()
        }
    }
    fn labels<'a>(&'a self, style: GpuLabels, s: &'a Snapshot) -> Labels<'a> {
        let mut l = vec![(Self::KEY, self.index.to_string().into())];
        match style {
            GpuLabels::Index => {}
            GpuLabels::Id => l.push(("UUID", self.uuid.as_str().into())),
            GpuLabels::Dcgm => l.extend([
                ("UUID", self.uuid.as_str().into()),
                (
                    "pci_bus_id",
                    self.pci_bus_id.as_deref().unwrap_or("").into(),
                ),
                (
                    "device",
                    self.minor_number
                        .map(|m| format!("nvidia{m}"))
                        .unwrap_or_default()
                        .into(),
                ),
                ("modelName", self.name.as_str().into()),
                ("Hostname", s.host.as_str().into()),
            ]),
        }
        l
    }
    /// dcgm-exporter's identity labels, from the first sample that has a `UUID`.
    fn identify(&mut self, x: &Sample) {
        if self.uuid.is_empty() {
            self.uuid = x.label("UUID").unwrap_or_default().to_string();
            self.name = x.label("modelName").unwrap_or_default().to_string();
            self.pci_bus_id = x
                .label("pci_bus_id")
                .filter(|v| !v.is_empty())
                .map(str::to_string);
            self.minor_number = x
                .label("device")
                .and_then(|d| d.strip_prefix("nvidia"))
                .and_then(|m| m.parse().ok());
        }
    }
}

impl Member for DeviceAvailability {
    const KEY: &'static str = "device";
    const SORTED: bool = false;
    type Key = String;
    type Style = ();

    fn key(&self) -> &String {
        &self.device
    }
    /// Capacity 1 until the page says otherwise; age 0 until the reading's age is read.
    fn new(device: String) -> Self {
        DeviceAvailability {
            kind: if device.starts_with("GPU") {
                DeviceKind::Gpu
            } else {
                DeviceKind::Cpu
            },
            device,
            capacity: 1.0,
            compute_share: Smoothed::constant(0.0),
            free_memory_bytes: None,
            age_ms: 0,
        }
    }
    fn labels<'a>(&'a self, (): (), _: &'a Snapshot) -> Labels<'a> {
        vec![(Self::KEY, self.device.as_str().into())]
    }
}

/// The members of a collection while one row is read, found by key in O(log n).
pub(super) struct Index<'a, M: Member> {
    members: &'a mut Vec<M>,
    at: BTreeMap<M::Key, usize>,
    each: Each,
    added: bool,
}

impl<'a, M: Member> Index<'a, M> {
    pub(super) fn new(members: &'a mut Vec<M>, each: Each) -> Self {
        let at = (members.iter().enumerate())
            .map(|(i, m)| (m.key().clone(), i))
            .collect();
        Index {
            members,
            at,
            each,
            added: false,
        }
    }

    /// The member with `key`: found, added (if the row [`Each::Adds`]), or none.
    pub(super) fn get(&mut self, key: M::Key) -> Option<&mut M> {
        let i = match self.at.get(&key) {
            Some(&i) => i,
            None if self.each == Adds => {
                let i = self.members.len();
                self.at.insert(key.clone(), i);
                self.members.push(M::new(key));
                self.added = true;
                i
            }
            None => return None,
        };
        self.members.get_mut(i)
    }

    /// Puts members added by the row in their place: key order, or the order of arrival.
    pub(super) fn finish(self) {
        if self.added && M::SORTED {
            self.members.sort_by(|a, b| a.key().cmp(b.key()));
        }
    }
}
