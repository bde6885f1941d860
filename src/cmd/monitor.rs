//! `tf-iaware monitor`: a live, refreshing terminal view of this host (per-core bars, memory,
//! cgroup, network, GPUs, per-device availability); `--once --json` prints one snapshot.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context, Result};
use tf_iaware::cluster::monitor::{sample_once, Monitor, MonitorConfig, Smoothed, Snapshot};

#[derive(clap::Args)]
pub struct MonitorArgs {
    /// Take one reading (two samples one interval apart) and exit.
    #[arg(long)]
    pub once: bool,
    /// Print JSON on stdout: one snapshot with --once, else one snapshot per line per interval.
    #[arg(long)]
    pub json: bool,
    /// Sampling interval, ms (10 ms to 1 hour).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub interval_ms: u64,
    /// Observe this process (its own CPU use and cgroup) instead of the monitor itself.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
    /// Do not load NVML (no GPU metrics).
    #[arg(long)]
    pub no_gpu: bool,
}

impl MonitorArgs {
    fn config(&self) -> MonitorConfig {
        MonitorConfig {
            interval: Duration::from_millis(self.interval_ms),
            pid: self.pid,
            gpus: !self.no_gpu,
            ..MonitorConfig::default()
        }
    }
}

pub fn run(args: &MonitorArgs) -> Result<()> {
    let config = args.config();
    if args.once {
        let snap = sample_once(&config, config.interval).context("reading the host")?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&snap)?)?;
        } else {
            out!("{}", view(&snap, terminal_width(), false))?;
        }
        return Ok(());
    }
    let monitor = Monitor::start(config).context("starting the monitor")?;
    let live = std::io::stdout().is_terminal() && !args.json;
    let mut last = 0;
    if live {
        out!("\x1b[H\x1b[2J")?;
    }
    loop {
        let snap = monitor.snapshot();
        if args.json {
            outln!("{}", serde_json::to_string(&snap)?)?;
        } else if live {
            let frame = view(&snap, terminal_width(), true);
            let mut text = String::from("\x1b[H");
            for line in frame.lines() {
                text.push_str(line);
                text.push_str("\x1b[K\n");
            }
            text.push_str("\x1b[J");
            out!("{text}")?;
        } else {
            outln!("{}", view(&snap, terminal_width(), false))?;
        }
        last = last.max(monitor.samples());
        monitor.wait_for_samples(last + 1, monitor.interval() * 3);
        last = monitor.samples();
    }
}

/// Columns of the terminal (`COLUMNS`, else the tty's size, else 100), at least 60.
fn terminal_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return usize::max(c, 60);
    }
    // SAFETY: TIOCGWINSZ only writes a `winsize` into the struct we pass.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::max(ws.ws_col as usize, 60)
    } else {
        100
    }
}

/// A bar `width` cells wide, `fraction` (0–1) of it filled; coloured by load when `colour`.
fn bar(fraction: Option<f64>, width: usize, colour: bool) -> String {
    let Some(f) = fraction.filter(|f| f.is_finite()) else {
        return format!("[{}]", "?".repeat(width));
    };
    let f = f.clamp(0.0, 1.0);
    let filled = ((f * width as f64).round() as usize).min(width);
    let body = format!("{}{}", "|".repeat(filled), " ".repeat(width - filled));
    if !colour {
        return format!("[{body}]");
    }
    let c = if f < 0.5 {
        "32"
    } else if f < 0.85 {
        "33"
    } else {
        "31"
    };
    format!("[\x1b[{c}m{body}\x1b[0m]")
}

fn pct(v: Option<f64>) -> String {
    v.map_or("   ?  ".into(), |v| format!("{:5.1}%", v * 100.0))
}

fn cores(v: Option<Smoothed>) -> String {
    v.map_or("?".into(), |v| format!("{:.2}", v.last))
}

fn bytes(b: Option<u64>) -> String {
    b.map_or("?".into(), |b| human(b as f64, ""))
}

fn human(v: f64, suffix: &str) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}{suffix}", UNITS[u])
}

/// One frame of the terminal view: a header, then CPU, memory, network, GPUs and devices.
fn view(s: &Snapshot, width: usize, colour: bool) -> String {
    let mut lines = vec![header_line(s), String::new()];
    cpu_lines(s, width, colour, &mut lines);
    lines.push(String::new());
    memory_lines(s, width, colour, &mut lines);
    lines.push(String::new());
    network_lines(s, &mut lines);
    lines.push(String::new());
    gpu_lines(s, colour, &mut lines);
    lines.push(String::new());
    device_lines(s, &mut lines);
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Width of the CPU and memory bars for a terminal `width` columns wide.
fn wide_bar(width: usize) -> usize {
    width.saturating_sub(40).clamp(10, 60)
}

/// Host, observed pid, interval, the reading's age and whether it is stale.
fn header_line(s: &Snapshot) -> String {
    let interval = s
        .interval_ms
        .map_or("?".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0));
    format!(
        "tf-iaware monitor: {}  pid {}  interval {interval}  reading {} ms old{}",
        s.host,
        s.pid.map_or("?".into(), |p| p.to_string()),
        s.age_ms,
        if s.stale {
            format!("  STALE: {}", s.stale_reason.as_deref().unwrap_or(""))
        } else {
            String::new()
        }
    )
}

/// The CPU bar and load, one bar per core, our share of the cores and the cgroup.
fn cpu_lines(s: &Snapshot, width: usize, colour: bool, lines: &mut Vec<String>) {
    let c = &s.cpu;
    let load = c.load.map_or(String::new(), |l| {
        format!("   load {:.2} {:.2} {:.2}", l.one, l.five, l.fifteen)
    });
    lines.push(format!(
        "CPU  {} {} of {} cores{load}",
        bar(c.utilisation.map(|u| u.last), wide_bar(width), colour),
        pct(c.utilisation.map(|u| u.last)),
        c.logical_cores
    ));
    let cell = 12 + 2 + 7 + 3;
    let per_row = ((width.saturating_sub(2)) / (cell + 12)).clamp(1, 8);
    let core_bar = (width.saturating_sub(2) / per_row)
        .saturating_sub(18)
        .clamp(5, 40);
    for row in c.cores.chunks(per_row) {
        let cells: Vec<String> = row
            .iter()
            .map(|core| {
                let u = core.utilisation.map(|u| u.last);
                format!(
                    "{:>5} {} {}",
                    format!("cpu{}", core.cpu),
                    bar(u, core_bar, colour),
                    pct(u)
                )
            })
            .collect();
        lines.push(format!("  {}", cells.join("  ")));
    }
    lines.push(format!(
        "  own {} cores   co-tenants {} cores   limit {:.2} cores   available {} cores (ewma {})",
        cores(c.own_cores),
        cores(c.cotenant_cores),
        c.limit_cores,
        cores(c.available_cores),
        c.available_cores
            .map_or("?".into(), |a| format!("{:.2}", a.ewma)),
    ));
    if let Some(a) = &c.allowed_cpus {
        if a.len() != c.cores.len() {
            lines.push(format!("  allowed CPUs {a:?}"));
        }
    }
    match (&s.cgroup, &s.cgroup_unavailable) {
        (Some(g), _) => {
            lines.push(format!(
            "  cgroup v{} {}   quota {}   usage {} cores   throttled {}/{} periods   mem limit {}",
            g.version,
            g.path,
            g.cpu_quota_cores
                .map_or("none".into(), |q| format!("{q:.2} cores")),
            cores(g.cpu_usage_cores),
            g.throttled_periods_total.map_or("?".into(), |v| v.to_string()),
            g.periods_total.map_or("?".into(), |v| v.to_string()),
            g.memory_limit_bytes.map_or("none".into(), |b| human(b as f64, "")),
        ))
        }
        (None, Some(why)) => lines.push(format!("  {why}")),
        (None, None) => {}
    }
}

/// The memory bar: used, total, available and available to us.
fn memory_lines(s: &Snapshot, width: usize, colour: bool, lines: &mut Vec<String>) {
    let m = &s.memory;
    let used = match (m.total_bytes, m.available_bytes) {
        (Some(t), Some(a)) if t > 0 => Some(t.saturating_sub(a) as f64 / t as f64),
        _ => None,
    };
    lines.push(format!(
        "MEM  {} {} used of {}   available {}   available to us {}",
        bar(used, wide_bar(width), colour),
        pct(used),
        bytes(m.total_bytes),
        bytes(m.available_bytes),
        bytes(m.available_to_us_bytes),
    ));
}

/// One line per network interface: receive and transmit rates.
fn network_lines(s: &Snapshot, lines: &mut Vec<String>) {
    lines.push("NET  interface           receive          transmit".into());
    for n in &s.network {
        let rate = |r: Option<f64>| r.map_or("?".into(), |r| human(r, "/s"));
        lines.push(format!(
            "     {:<16} {:>12} {:>17}",
            n.name,
            rate(n.rx_bytes_per_sec),
            rate(n.tx_bytes_per_sec)
        ));
    }
}

/// One line per GPU, or why there are none.
fn gpu_lines(s: &Snapshot, colour: bool, lines: &mut Vec<String>) {
    if s.gpus.is_empty() {
        lines.push(format!(
            "GPU  {}",
            s.gpus_unavailable.as_deref().unwrap_or("none")
        ));
    }
    for g in &s.gpus {
        let u = g.utilisation_percent.map(|u| u.last / 100.0);
        lines.push(format!(
            "GPU{} {} {} {}   mem {} / {}   {} MHz   {} W   {} C",
            g.index,
            g.name,
            bar(u, 20, colour),
            pct(u),
            bytes(g.memory_used_bytes),
            bytes(g.memory_total_bytes),
            g.sm_clock_mhz.map_or("?".into(), |v| format!("{v:.0}")),
            g.power_watts.map_or("?".into(), |v| format!("{v:.0}")),
            g.temperature_celsius
                .map_or("?".into(), |v| format!("{v:.0}")),
        ));
    }
}

/// Per device: the available compute share and free memory; then the snapshot's notes.
fn device_lines(s: &Snapshot, lines: &mut Vec<String>) {
    for d in &s.devices {
        lines.push(format!(
            "{:<7} available share {:.2} (ewma {:.2})   free memory {}",
            d.device,
            d.compute_share.last,
            d.compute_share.ewma,
            bytes(d.free_memory_bytes)
        ));
    }
    for n in &s.notes {
        lines.push(format!("note: {n}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_units() {
        assert_eq!(bar(Some(0.5), 4, false), "[||  ]");
        assert_eq!(bar(None, 2, false), "[??]");
        assert_eq!(bar(Some(7.0), 2, false), "[||]");
        assert_eq!(human(1536.0, "/s"), "1.5 KiB/s");
        assert_eq!(pct(Some(0.123)), " 12.3%");
    }

    #[test]
    fn view_of_an_empty_snapshot_does_not_panic() {
        let mut s = Snapshot::empty("local");
        s.gpus_unavailable = Some("GPU metrics unavailable: test".into());
        let v = view(&s, 80, true);
        assert!(v.contains("GPU metrics unavailable: test"));
    }
}
