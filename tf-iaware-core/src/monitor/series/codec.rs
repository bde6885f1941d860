//! The two directions the table drives: writing a row's samples from a snapshot and reading
//! them back into one.

use super::members::{Index, Key, Member};
use std::collections::BTreeMap;

use super::Each::{self, Adds};
use super::Field::{self, Count, Custom, Modes, Number, Small, Stats, Text, Texts};
use super::Of::{Cgroup, Cores, Devices, Gpus, Host, HostOr, Interfaces};
use super::{bad, count, smoothed_of, Mode, Series, MODE, SAME, STAT, STATS};
use crate::error::Result;
use crate::monitor::exposition::{Exposition, Family, Sample};
use crate::monitor::snapshot::Snapshot;

// ----- writing and reading ------------------------------------------------------------------

impl Series {
    /// Appends the family's samples for `s` to `f` (none where the snapshot has no value).
    pub(crate) fn write(&self, s: &Snapshot, f: &mut Family) {
        match &self.of {
            Host(field) | HostOr(field, _) => field.write(s, &[], f),
            Cgroup(field) => {
                if let Some(cg) = &s.cgroup {
                    field.write(cg, &[], f);
                }
            }
            Cores(_, field) => write_members(field, (), &s.cpu.cores, s, f),
            Interfaces(_, field) => write_members(field, (), &s.network, s, f),
            Gpus(_, style, field) => write_members(field, *style, &s.gpus, s, f),
            Devices(_, field) => write_members(field, (), &s.devices, s, f),
        }
    }

    /// Sets the fields of `s` that the family says something about.
    ///
    /// # Errors
    /// [`Error::Exposition`] naming the series and the line of a sample whose value or label
    /// cannot be what the series claims (a negative byte count, a `cpu` label that is not a
    /// number, a malformed CPU list).
    pub(crate) fn read(&self, page: &Exposition, s: &mut Snapshot) -> Result<()> {
        let samples = page.samples(self.name);
        match &self.of {
            Host(field) if !samples.is_empty() => field.read(s, samples)?,
            Host(_) => {}
            HostOr(field, _) if !samples.is_empty() => field.read(s, samples)?,
            HostOr(_, absent) => absent(s),
            Cgroup(field) => {
                if let (false, Some(cg)) = (samples.is_empty(), &mut s.cgroup) {
                    field.read(cg, samples)?;
                }
            }
            Cores(each, field) => read_members(field, *each, &mut s.cpu.cores, samples)?,
            Interfaces(each, field) => read_members(field, *each, &mut s.network, samples)?,
            Gpus(each, _, field) => read_members(field, *each, &mut s.gpus, samples)?,
            Devices(each, field) => read_members(field, *each, &mut s.devices, samples)?,
        }
        Ok(())
    }
}

/// Appends the samples of every member to `f`, in the members' order.
fn write_members<M: Member>(
    field: &Field<M>,
    style: M::Style,
    members: &[M],
    s: &Snapshot,
    f: &mut Family,
) {
    for m in members {
        let labels = m.labels(style, s);
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_ref())).collect();
        field.write(m, &labels, f);
    }
}

/// Sets the field of the members that `samples` name (adding members if `each` allows).
fn read_members<M: Member>(
    field: &Field<M>,
    each: Each,
    members: &mut Vec<M>,
    samples: &[Sample],
) -> Result<()> {
    let mut index = Index::new(members, each);
    if let Stats(at) = field {
        // The statistics of one member come in several samples: gather them by key first.
        let mut groups: Vec<(M::Key, Vec<&Sample>)> = Vec::new();
        let mut group_of: BTreeMap<M::Key, usize> = BTreeMap::new();
        for x in samples {
            let Some(key) = M::Key::of(x, M::KEY)? else {
                continue;
            };
            match group_of.get(&key) {
                Some(&g) => groups[g].1.push(x),
                None => {
                    group_of.insert(key.clone(), groups.len());
                    groups.push((key, vec![x]));
                }
            }
        }
        for (key, group) in groups {
            if let Some(v) = smoothed_of(group.into_iter()) {
                if let Some(m) = index.get(key) {
                    (at.set)(m, v);
                }
            }
        }
    } else {
        for x in samples {
            let Some(key) = M::Key::of(x, M::KEY)? else {
                continue;
            };
            if !field.applies(x) {
                continue;
            }
            let Some(m) = index.get(key) else {
                continue;
            };
            if each == Adds {
                m.identify(x);
            }
            field.read_sample(m, x)?;
        }
    }
    index.finish();
    Ok(())
}

impl<E> Field<E> {
    /// Appends the samples of `e`, labelled `labels` and then the field's own label, to `f`.
    fn write(&self, e: &E, labels: &[(&str, &str)], f: &mut Family) {
        let push = |f: &mut Family, own: Option<(&str, &str)>, v: Option<f64>| {
            if let Some(v) = v {
                let mut l = labels.to_vec();
                l.extend(own);
                f.push(&l, v);
            }
        };
        match self {
            Number(at) => push(f, None, (at.get)(e)),
            Count(per, at) => push(f, None, (at.get)(e).map(|v| v as f64 / per)),
            Small(_, at) => push(f, None, (at.get)(e).map(f64::from)),
            Stats(at) => {
                if let Some(v) = (at.get)(e) {
                    for (stat, v) in STATS.iter().zip([v.last, v.ewma, v.mean, v.min, v.max]) {
                        push(f, Some((STAT, stat)), Some(v));
                    }
                }
            }
            Modes(modes, get, _) => {
                if let Some(sec) = get(e) {
                    for Mode(mode, get, _) in *modes {
                        push(f, Some((MODE, mode)), get(sec));
                    }
                }
            }
            Text(label, get, _) => {
                if let Some(t) = get(e) {
                    push(f, Some((label, t)), Some(1.0));
                }
            }
            Texts(label, get, _) => {
                for t in get(e) {
                    push(f, Some((label, t)), Some(1.0));
                }
            }
            Custom(write, _) => write(e, f),
        }
    }

    /// Whether `x` has the label the field reads (its mode, its text).
    fn applies(&self, x: &Sample) -> bool {
        match self {
            Modes(..) => x.label(MODE).is_some(),
            Text(label, ..) | Texts(label, ..) => x.label(label).is_some(),
            _ => true,
        }
    }

    /// Sets the field of `e` from the family's `samples` (at least one): the first, or all of
    /// them where the field has several samples.
    fn read(&self, e: &mut E, samples: &[Sample]) -> Result<()> {
        match self {
            Stats(at) => {
                if let Some(v) = smoothed_of(samples.iter()) {
                    (at.set)(e, v);
                }
            }
            Modes(_, _, seconds) => {
                seconds(e);
                for x in samples {
                    self.read_sample(e, x)?;
                }
            }
            Texts(..) => {
                for x in samples {
                    self.read_sample(e, x)?;
                }
            }
            Custom(_, read) => read(e, samples)?,
            _ => {
                if let Some(x) = samples.first() {
                    self.read_sample(e, x)?;
                }
            }
        }
        Ok(())
    }

    /// Sets the field of `e` from one sample.
    fn read_sample(&self, e: &mut E, x: &Sample) -> Result<()> {
        match self {
            Number(at) => (at.set)(e, x.value),
            Count(per, at) => (at.set)(e, count(x, *per)?),
            Small(what, at) => {
                let n = u32::try_from(count(x, SAME)?)
                    .map_err(|_| bad(x, format!("{} is not {what}", x.value)))?;
                (at.set)(e, n);
            }
            Stats(at) => {
                if let Some(v) = smoothed_of(std::iter::once(x)) {
                    (at.set)(e, v);
                }
            }
            Modes(modes, _, seconds) => {
                let mode = x.label(MODE);
                if let Some(Mode(_, _, set)) = modes.iter().find(|m| Some(m.0) == mode) {
                    set(seconds(e), x.value);
                }
            }
            Text(label, _, set) => {
                if let Some(t) = x.label(label) {
                    set(e, t.to_string());
                }
            }
            Texts(label, _, texts) => {
                if let Some(t) = x.label(label) {
                    texts(e).push(t.to_string());
                }
            }
            Custom(_, read) => read(e, std::slice::from_ref(x))?,
        }
        Ok(())
    }
}
