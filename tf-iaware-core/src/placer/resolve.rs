//! From a [`Placement`] (a device id per op, or none) to the device of every op, as TensorFlow
//! would run it: placed ops on their device; ops without a device where TensorFlow's own placer
//! would put them (with their colocation group if a member is placed; else the requested device if
//! it matches; else the highest-priority device type with kernels — GPU before CPU — first
//! device). Also where device strings become ids ([`device`]).

use super::Placement;
use crate::cluster::{Cluster, Device, DeviceId};
use crate::error::{Error, Result};
use crate::graph::{DeviceName, GroupId, NodeId, OpGraph, OpNode};

/// `Ok` if `device`'s type has a kernel for `node`, else [`Error::NoKernel`] naming both.
pub fn check_kernel(node: &OpNode, device: &Device) -> Result<()> {
    if node.has_kernel_for(&device.device_type) {
        return Ok(());
    }
    Err(Error::NoKernel {
        op: node.name.clone(),
        op_type: node.op.clone(),
        device: device.name.clone(),
        available: node.kernel_list(", "),
    })
}

/// [`Error::SplitColocation`]: `op` of `group` on `device`, while `other_op` is on `other_device`.
pub fn split_colocation(
    group: &str,
    (op, device): (&str, &str),
    (other_op, other_device): (&str, &str),
) -> Error {
    Error::SplitColocation {
        group: group.into(),
        op: op.into(),
        device: device.into(),
        other: Box::new((other_op.into(), other_device.into())),
    }
}

/// Device TensorFlow's default placer gives colocation group `g`.
///
/// # Errors
/// [`Error::Infeasible`] if no device has kernels for all its members.
pub(crate) fn tf_default_device(
    graph: &OpGraph,
    cluster: &Cluster,
    g: GroupId,
) -> Result<DeviceId> {
    let group = graph.group(g);
    let has_kernels = |d: DeviceId| {
        let t = &cluster.devices[d].device_type;
        group
            .members
            .iter()
            .all(|&m| graph.node(m).has_kernel_for(t))
    };
    let mut candidates: Vec<DeviceId> = Vec::new();
    if let Some(spec) = group
        .requested_device
        .as_deref()
        .and_then(|s| DeviceName::parse(s).ok())
    {
        for (d, dev) in cluster.device_ids().zip(&cluster.devices) {
            if dev.parsed_name().is_ok_and(|full| spec.matches(&full)) && has_kernels(d) {
                candidates.push(d);
            }
        }
    }
    if candidates.is_empty() {
        // Soft placement: any device with kernels.
        candidates = cluster.device_ids().filter(|&d| has_kernels(d)).collect();
    }
    // The first candidate of the highest priority.
    candidates
        .into_iter()
        .map(|d| (cluster.devices[d].device_type.priority(), d))
        .reduce(|best, c| if c.0 > best.0 { c } else { best })
        .map(|(_, d)| d)
        .ok_or_else(|| Error::Infeasible {
            group: group.name.clone(),
            reason: format!(
                "no device of the cluster ({}) has kernels for all of its ops",
                cluster.device_list()
            ),
        })
}

/// Id of the one device of `cluster` that `spec` (a full or partial device string, asked for by
/// op `op`) names.
///
/// # Errors
/// [`Error::MalformedDevice`] if `spec` does not parse; [`Error::UnknownDevice`] naming `op` if
/// no device, or more than one, matches.
pub fn device(cluster: &Cluster, op: &str, spec: &str) -> Result<DeviceId> {
    DeviceName::parse(spec)?;
    match cluster.index_of(spec) {
        Some(d) => Ok(d),
        None => cluster.resolve(op, spec),
    }
}

/// Checks `placement` against `graph` and `cluster`: made for this graph, every device one of
/// the cluster, the device type has a kernel for every placed op, and no colocation group split.
/// Ops left to TensorFlow are not looked at.
///
/// # Errors
/// [`Error::InvalidArgument`] for a placement of another graph; [`Error::BadId`] for a device
/// the cluster does not have; [`Error::NoKernel`]; [`Error::SplitColocation`].
pub fn check(graph: &OpGraph, cluster: &Cluster, placement: &Placement) -> Result<()> {
    group_devices(graph, cluster, placement).map(|_| ())
}

/// The device of every colocation group that has a placed member (checked as [`check`] says).
fn group_devices(
    graph: &OpGraph,
    cluster: &Cluster,
    placement: &Placement,
) -> Result<Vec<Option<DeviceId>>> {
    if placement.ops() != graph.len() {
        return Err(Error::InvalidArgument {
            what: format!("placement `{}`", placement.strategy),
            reason: format!(
                "made for a graph of {} ops, but this graph has {}",
                placement.ops(),
                graph.len()
            ),
        });
    }
    let mut out = vec![None; graph.groups().len()];
    for (g, group) in graph.enumerate_groups() {
        let mut chosen: Option<(DeviceId, NodeId)> = None; // (device, member that fixed it)
        for &m in &group.members {
            let Some(d) = placement.device(m) else {
                continue;
            };
            let node = graph.node(m);
            let dev = cluster.devices.get(d.index()).ok_or(Error::BadId {
                kind: "device",
                id: d.index(),
                len: cluster.devices.len(),
            })?;
            check_kernel(node, dev)?;
            match chosen {
                None => chosen = Some((d, m)),
                Some((other, om)) if other != d => {
                    return Err(split_colocation(
                        &group.name,
                        (&node.name, &dev.name),
                        (&graph.node(om).name, &cluster.devices[other].name),
                    ));
                }
                Some(_) => {}
            }
        }
        out[g] = chosen.map(|(d, _)| d);
    }
    Ok(out)
}

/// The device of every op (by node id) when `placement` runs on `cluster`.
///
/// # Errors
/// The errors of [`check`]; [`Error::NoKernel`] for an unplaced op whose group is placed on a
/// device type without its kernel; [`Error::Infeasible`] for an unplaced group no device can run.
pub fn assignment(
    graph: &OpGraph,
    cluster: &Cluster,
    placement: &Placement,
) -> Result<Vec<DeviceId>> {
    let chosen = group_devices(graph, cluster, placement)?;
    // Every node is in one group, so every slot is written below.
    let mut out = vec![DeviceId::new(0); graph.len()];
    for (g, group) in graph.enumerate_groups() {
        let d = match chosen[g] {
            Some(d) => {
                // Unplaced members follow the group; they need kernels there too.
                for &m in &group.members {
                    check_kernel(graph.node(m), &cluster.devices[d])?;
                }
                d
            }
            None => tf_default_device(graph, cluster, g)?,
        };
        for &m in &group.members {
            out[m] = d;
        }
    }
    Ok(out)
}
