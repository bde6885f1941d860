//! Building a [`LinkTable`](super::LinkTable): each device's interned locality coordinates, the
//! devices of each machine, the explicit links by sender.

use std::collections::HashMap;

use super::{Explicit, NO_RACK};
use crate::cluster::link::Place;
use crate::cluster::model::Cluster;

fn intern<'a>(map: &mut HashMap<&'a str, u32>, key: &'a str) -> u32 {
    let next = map.len() as u32;
    *map.entry(key).or_insert(next)
}

/// Interned locality coordinates of every device of a cluster.
pub(super) struct Coordinates {
    pub(super) machine: Vec<u32>,
    /// [`NO_RACK`] when unknown.
    pub(super) rack: Vec<u32>,
    pub(super) process: Vec<u32>,
    pub(super) cpu: Vec<bool>,
    pub(super) n_machines: usize,
    pub(super) n_processes: usize,
}

impl Coordinates {
    /// Hashes each device's machine, rack and process once.
    pub(super) fn of(cluster: &Cluster) -> Self {
        let n = cluster.devices.len();
        let places: Vec<Place> = cluster.devices.iter().map(Place::of).collect();
        let mut machines: HashMap<&str, u32> = HashMap::new();
        let mut racks: HashMap<&str, u32> = HashMap::new();
        type ProcessKey<'a> = (&'a str, &'a (Option<String>, Option<u32>, Option<u32>));
        let mut processes: HashMap<ProcessKey, u32> = HashMap::new();
        let (mut machine, mut rack, mut process, mut cpu) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        // Processes of devices whose name does not parse: one each, numbered after the others
        // (renumbered below once their count is known).
        let mut lone = Vec::new();
        for (i, p) in places.iter().enumerate() {
            machine.push(intern(&mut machines, p.machine));
            rack.push(p.rack.map_or(NO_RACK, |r| intern(&mut racks, r)));
            cpu.push(p.cpu);
            match &p.task {
                Some(task) => {
                    let next = processes.len() as u32;
                    process.push(*processes.entry((p.host, task)).or_insert(next));
                }
                None => {
                    lone.push(i);
                    process.push(u32::MAX);
                }
            }
        }
        let named = processes.len() as u32;
        for (k, &i) in lone.iter().enumerate() {
            process[i] = named + k as u32;
        }
        Coordinates {
            machine,
            rack,
            process,
            cpu,
            n_machines: machines.len(),
            n_processes: named as usize + lone.len(),
        }
    }
}

/// Devices by machine (counting sort: ascending device order within a machine): the devices of
/// machine `m` are `devices[start[m]..start[m + 1]]`. Returns `(start, devices)`.
pub(super) fn by_machine(machine: &[u32], n_machines: usize) -> (Vec<u32>, Vec<u32>) {
    let mut machine_start = vec![0u32; n_machines + 1];
    for &m in machine {
        machine_start[m as usize + 1] += 1;
    }
    for m in 0..n_machines {
        machine_start[m + 1] += machine_start[m];
    }
    let mut fill = machine_start.clone();
    let mut machine_devices = vec![0u32; machine.len()];
    for (d, &m) in machine.iter().enumerate() {
        machine_devices[fill[m as usize] as usize] = d as u32;
        fill[m as usize] += 1;
    }
    (machine_start, machine_devices)
}

/// Explicit links by (sender, receiver), the last entry of a pair kept (a stable sort keeps the
/// cluster's order among entries of one pair): the links from device `d` are
/// `links[start[d]..start[d + 1]]`. Returns `(start, links)`.
pub(super) fn explicit_links(cluster: &Cluster) -> (Vec<u32>, Vec<Explicit>) {
    let n = cluster.devices.len();
    let index: HashMap<&str, u32> = cluster
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), i as u32))
        .collect();
    let mut pairs: Vec<(u32, Explicit)> = cluster
        .links
        .iter()
        .filter_map(|spec| {
            let (&a, &b) = (index.get(spec.from.as_str())?, index.get(spec.to.as_str())?);
            (a != b).then_some((
                a,
                Explicit {
                    to: b,
                    latency: spec.link.latency,
                    inv_bandwidth: 1.0 / spec.link.bandwidth,
                    link: spec.link,
                },
            ))
        })
        .collect();
    pairs.sort_by_key(|&(a, e)| (a, e.to));
    let mut explicit: Vec<Explicit> = Vec::with_capacity(pairs.len());
    let mut explicit_start = vec![0u32; n + 1];
    for (k, &(a, e)) in pairs.iter().enumerate() {
        let last_of_pair = pairs
            .get(k + 1)
            .is_none_or(|&(a2, e2)| (a2, e2.to) != (a, e.to));
        if last_of_pair {
            explicit.push(e);
            explicit_start[a as usize + 1] += 1;
        }
    }
    for d in 0..n {
        explicit_start[d + 1] += explicit_start[d];
    }
    (explicit_start, explicit)
}
