//! Emulated-cluster scenarios: per-worker CPU quota, co-tenant load, link shaping and drift
//! events; the named scenarios and the inline grammar of `emulated:…`.

use serde::{Deserialize, Serialize};

use tf_iaware::{Error, Result};

/// Shaping of one worker's network link (applied by a user-space proxy in front of it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Bandwidth, megabits per second.
    pub mbit: f64,
    /// One-way delay added to every chunk, milliseconds.
    pub delay_ms: f64,
}

impl LinkSpec {
    /// The slowest link emulated, megabits per second (a chunk of 16 KiB then takes about 2 min).
    pub const MIN_MBIT: f64 = 0.001;
    /// The fastest link emulated, megabits per second (1 Tbit/s: faster than any real NIC).
    pub const MAX_MBIT: f64 = 1e6;
    /// The longest one-way delay emulated, milliseconds (one minute).
    pub const MAX_DELAY_MS: f64 = 60_000.0;

    /// A link of `mbit` megabits per second with `delay_ms` one-way delay, checked against the
    /// bounds above, so that the proxy's times are always representable.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the value and its bounds.
    pub fn new(mbit: f64, delay_ms: f64) -> Result<LinkSpec> {
        if !(Self::MIN_MBIT..=Self::MAX_MBIT).contains(&mbit) {
            return Err(Error::InvalidArgument {
                what: format!("link bandwidth {mbit} Mbit/s"),
                reason: format!(
                    "must be within {} to {} Mbit/s",
                    Self::MIN_MBIT,
                    Self::MAX_MBIT
                ),
            });
        }
        if !(0.0..=Self::MAX_DELAY_MS).contains(&delay_ms) {
            return Err(Error::InvalidArgument {
                what: format!("link delay {delay_ms} ms"),
                reason: format!("must be within 0 to {} ms", Self::MAX_DELAY_MS),
            });
        }
        Ok(LinkSpec { mbit, delay_ms })
    }
}

/// One emulated worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// CPU quota, cores (cgroup `cpu.cfs_quota_us / cpu.cfs_period_us`).
    pub cpu: f64,
    /// Share of that quota a co-tenant hog process burns, 0–1.
    pub busy: f64,
    /// Shaped link, if any.
    pub link: Option<LinkSpec>,
}

impl WorkerSpec {
    /// Cores left to TensorFlow: quota × (1 − busy).
    pub fn effective_cores(&self) -> f64 {
        self.cpu * (1.0 - self.busy)
    }
}

/// A change during a run: before step `at_step`, worker `worker`'s co-tenant load becomes `busy`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriftEvent {
    /// The step before which the load changes (0-based).
    pub at_step: usize,
    /// Index of the worker in [`Scenario::workers`].
    pub worker: usize,
    /// The worker's new [`WorkerSpec::busy`]: share of its quota the co-tenant burns, 0–1.
    pub busy: f64,
}

/// A whole emulated cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Name (what `--scenario` takes).
    pub name: String,
    /// One line for listings.
    pub description: String,
    /// The worker tasks, in order.
    pub workers: Vec<WorkerSpec>,
    /// Number of parameter-server tasks (unlimited CPU).
    pub ps: usize,
    /// Load changes during a run, by step.
    pub drift: Vec<DriftEvent>,
}

/// Names of the built-in scenarios.
pub const SCENARIOS: &[&str] = &["paper", "uniform", "busy", "mixed", "slow-net", "drift"];

fn w(cpu: f64, busy: f64) -> WorkerSpec {
    WorkerSpec {
        cpu,
        busy,
        link: None,
    }
}

/// Most workers an inline scenario may ask for: each is a TensorFlow process on this machine.
pub(crate) const MAX_WORKERS: usize = 64;

impl Scenario {
    /// A built-in scenario, or an inline description (see `Scenario::parse_inline`).
    ///
    /// # Errors
    /// [`Error::ClusterSpec`] naming the text and what is wrong.
    pub fn parse(text: &str) -> Result<Scenario> {
        let named = |name: &str,
                     description: &str,
                     workers: Vec<WorkerSpec>,
                     drift: Vec<DriftEvent>| Scenario {
            name: name.into(),
            description: description.into(),
            workers,
            ps: 1,
            drift,
        };
        Ok(match text {
            "paper" => named(
                "paper",
                "four workers of unequal capability and availability, as in IA-TF's evaluation: \
                 0.5 core idle; 0.3 core idle; 0.3 core half taken by a co-tenant; 0.3 core three quarters taken",
                vec![w(0.5, 0.0), w(0.3, 0.0), w(0.3, 0.5), w(0.3, 0.75)],
                vec![],
            ),
            "uniform" => named("uniform", "four equal, idle workers of 0.3 core", vec![w(0.3, 0.0); 4], vec![]),
            "busy" => named(
                "busy",
                "four 0.3-core workers, one of them 75 % taken by a co-tenant",
                vec![w(0.3, 0.0), w(0.3, 0.0), w(0.3, 0.0), w(0.3, 0.75)],
                vec![],
            ),
            "mixed" => named(
                "mixed",
                "unequal quotas (0.6, 0.4, 0.2, 0.1 core), all idle",
                vec![w(0.6, 0.0), w(0.4, 0.0), w(0.2, 0.0), w(0.1, 0.0)],
                vec![],
            ),
            "slow-net" => named(
                "slow-net",
                "four 0.3-core workers; worker 3 behind a 20 Mbit/s link with 5 ms delay",
                vec![
                    w(0.3, 0.0),
                    w(0.3, 0.0),
                    w(0.3, 0.0),
                    WorkerSpec { cpu: 0.3, busy: 0.0, link: Some(LinkSpec { mbit: 20.0, delay_ms: 5.0 }) },
                ],
                vec![],
            ),
            "drift" => named(
                "drift",
                "four 0.3-core workers; before step 6 a co-tenant takes 75 % of worker 0",
                vec![w(0.3, 0.0); 4],
                vec![DriftEvent { at_step: 6, worker: 0, busy: 0.75 }],
            ),
            inline => Self::parse_inline(inline)?,
        })
    }

    /// Parses `workers=C0,C1,…[:busy=B0,B1,…][:net=W@MBIT/DELAYms,…][:drift=STEP@W=BUSY,…][:ps=N]`:
    /// CPU quota per worker in cores, co-tenant share per worker (0–1), shaped links, drift events
    /// and the number of ps tasks. Example: `workers=1.0,0.5,0.5:busy=0,0,0.6`.
    ///
    /// # Errors
    /// [`Error::ClusterSpec`] naming the part that is wrong.
    pub(crate) fn parse_inline(text: &str) -> Result<Scenario> {
        let bad = |reason: String| bad_inline(text, reason);
        let mut workers: Vec<WorkerSpec> = Vec::new();
        let mut busy: Option<Vec<f64>> = None;
        let mut links: Vec<(usize, LinkSpec)> = Vec::new();
        let mut drift = Vec::new();
        let mut ps = 1usize;
        for part in text.split(':') {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                bad(format!(
                    "`{part}` is neither a scenario ({}) nor key=value",
                    SCENARIOS.join(", ")
                ))
            })?;
            match key {
                "workers" => workers.extend(inline_workers(text, value)?),
                "busy" => busy = Some(inline_busy(text, value)?),
                "net" => links.extend(inline_links(text, value)?),
                "drift" => drift.extend(inline_drift(text, value)?),
                "ps" => ps = inline_ps(text, value)?,
                other => {
                    return Err(bad(format!(
                        "unknown key `{other}` (workers, busy, net, drift, ps)"
                    )))
                }
            }
        }
        if workers.is_empty() {
            return Err(bad(
                "`workers=` with at least one CPU quota is required".into()
            ));
        }
        if workers.len() > MAX_WORKERS {
            return Err(bad(format!(
                "{} workers: an emulated cluster runs at most {MAX_WORKERS} (each is a local \
                 TensorFlow process; simulate larger clusters)",
                workers.len()
            )));
        }
        if let Some(b) = busy {
            if b.len() != workers.len() {
                return Err(bad(format!(
                    "busy lists {} shares for {} workers",
                    b.len(),
                    workers.len()
                )));
            }
            for (wk, b) in workers.iter_mut().zip(b) {
                wk.busy = b;
            }
        }
        for (idx, spec) in links {
            let n = workers.len();
            workers
                .get_mut(idx)
                .ok_or_else(|| bad(format!("link names worker {idx} of {n}")))?
                .link = Some(spec);
        }
        if let Some(d) = drift.iter().find(|d| d.worker >= workers.len()) {
            return Err(bad(format!(
                "drift names worker {} of {}",
                d.worker,
                workers.len()
            )));
        }
        Ok(Scenario {
            name: "inline".into(),
            description: text.into(),
            workers,
            ps,
            drift,
        })
    }

    /// Effective cores per worker right now.
    pub fn effective_cores(&self) -> Vec<f64> {
        self.workers
            .iter()
            .map(WorkerSpec::effective_cores)
            .collect()
    }
}

/// [`Error::ClusterSpec`] for the inline scenario `text`.
fn bad_inline(text: &str, reason: String) -> Error {
    Error::ClusterSpec {
        spec: format!("emulated:{text}"),
        reason,
    }
}

/// `s` as a finite number; else an error of the inline scenario `text` naming `what`.
fn inline_number(text: &str, s: &str, what: &str) -> Result<f64> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| bad_inline(text, format!("{what} `{s}` is not a number")))
}

/// `workers=C0,C1,…`: one idle worker per CPU quota, 0.01 to 256 cores.
fn inline_workers(text: &str, value: &str) -> Result<Vec<WorkerSpec>> {
    let mut workers = Vec::new();
    for c in value.split(',') {
        let cpu = inline_number(text, c, "CPU quota")?;
        if !(0.01..=256.0).contains(&cpu) {
            return Err(bad_inline(
                text,
                format!("CPU quota {cpu} must be within 0.01..=256 cores"),
            ));
        }
        workers.push(w(cpu, 0.0));
    }
    Ok(workers)
}

/// `busy=B0,B1,…`: each worker's co-tenant share, within [0, 1).
fn inline_busy(text: &str, value: &str) -> Result<Vec<f64>> {
    let v = value
        .split(',')
        .map(|b| inline_number(text, b, "busy share"))
        .collect::<Result<Vec<_>>>()?;
    if let Some(b) = v.iter().find(|b| !(0.0..1.0).contains(*b)) {
        return Err(bad_inline(
            text,
            format!("busy share {b} must be within [0, 1)"),
        ));
    }
    Ok(v)
}

/// `net=W@MBIT/DELAYms,…`: shaped links by worker index (the delay may be left out).
fn inline_links(text: &str, value: &str) -> Result<Vec<(usize, LinkSpec)>> {
    let bad = |reason: String| bad_inline(text, reason);
    let mut links = Vec::new();
    for l in value.split(',') {
        let (idx, rest) = l
            .split_once('@')
            .ok_or_else(|| bad(format!("link `{l}` is not W@MBIT/DELAYms")))?;
        let (mbit, delay) = rest.split_once('/').unwrap_or((rest, "0ms"));
        let delay = delay.strip_suffix("ms").unwrap_or(delay);
        let idx = idx
            .parse::<usize>()
            .map_err(|_| bad(format!("link worker `{idx}` is not an index")))?;
        let spec = LinkSpec::new(
            inline_number(text, mbit, "bandwidth")?,
            inline_number(text, delay, "delay")?,
        )
        .map_err(|e| bad(format!("link `{l}`: {e}")))?;
        links.push((idx, spec));
    }
    Ok(links)
}

/// `drift=STEP@W=BUSY,…`: before step STEP, worker W's co-tenant share becomes BUSY.
fn inline_drift(text: &str, value: &str) -> Result<Vec<DriftEvent>> {
    let bad = |reason: String| bad_inline(text, reason);
    let mut drift = Vec::new();
    for d in value.split(',') {
        let (step, rest) = d
            .split_once('@')
            .ok_or_else(|| bad(format!("drift `{d}` is not STEP@W=BUSY")))?;
        let (idx, b) = rest
            .split_once('=')
            .ok_or_else(|| bad(format!("drift `{d}` is not STEP@W=BUSY")))?;
        let at_step = step
            .parse()
            .map_err(|_| bad(format!("drift step `{step}` is not a number")))?;
        let worker = idx
            .parse()
            .map_err(|_| bad(format!("drift worker `{idx}` is not an index")))?;
        let busy = inline_number(text, b, "drift busy share")?;
        if !(0.0..1.0).contains(&busy) {
            return Err(bad(format!(
                "drift busy share {busy} must be within [0, 1)"
            )));
        }
        drift.push(DriftEvent {
            at_step,
            worker,
            busy,
        });
    }
    Ok(drift)
}

/// `ps=N`: 1 to 16 parameter servers.
fn inline_ps(text: &str, value: &str) -> Result<usize> {
    value
        .parse()
        .ok()
        .filter(|&n| (1..=16).contains(&n))
        .ok_or_else(|| bad_inline(text, format!("ps={value} must be 1..=16")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_scenarios_exist_and_are_sane() {
        for name in SCENARIOS {
            let s = Scenario::parse(name).unwrap();
            assert_eq!(s.name, *name);
            assert!(!s.workers.is_empty() && s.ps >= 1);
            // Leave room for the ps/master and the driver on a 2-core machine.
            assert!(
                s.workers.iter().map(|w| w.cpu).sum::<f64>() <= 1.4 + 1e-9,
                "{name} fits a 2-core machine"
            );
        }
        let paper = Scenario::parse("paper").unwrap();
        assert_eq!(paper.effective_cores(), vec![0.5, 0.3, 0.15, 0.075]);
        assert_eq!(Scenario::parse("drift").unwrap().drift.len(), 1);
        assert!(Scenario::parse("slow-net").unwrap().workers[3]
            .link
            .is_some());
    }

    #[test]
    fn inline_grammar() {
        let s = Scenario::parse("workers=1.0,0.5,0.5:busy=0,0,0.6:net=2@10/5ms:drift=4@1=0.5:ps=2")
            .unwrap();
        assert_eq!(s.workers.len(), 3);
        assert_eq!(s.workers[2].busy, 0.6);
        assert_eq!(
            s.workers[2].link,
            Some(LinkSpec {
                mbit: 10.0,
                delay_ms: 5.0
            })
        );
        assert_eq!(
            s.drift,
            vec![DriftEvent {
                at_step: 4,
                worker: 1,
                busy: 0.5
            }]
        );
        assert_eq!(s.ps, 2);
    }

    #[test]
    fn inline_errors_name_the_part() {
        for (text, needle) in [
            ("moon", "neither a scenario"),
            ("workers=", "not a number"),
            ("workers=0", "0.01..=256"),
            ("workers=1,1:busy=0.5", "1 shares for 2"),
            ("workers=1:busy=1.5", "[0, 1)"),
            ("workers=1:net=3@10", "worker 3 of 1"),
            ("workers=1:drift=2@5=0.1", "worker 5 of 1"),
            ("workers=1:ps=0", "ps=0"),
            ("busy=0.1", "`workers=`"),
            ("workers=1:color=red", "unknown key"),
        ] {
            let err = Scenario::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
