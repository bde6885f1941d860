//! Monitor benchmarks: sampler overhead at 1 Hz, one scrape of 100 local agents, agent
//! requests per second on loopback. Prints the figures; run with
//! `cargo bench --bench monitor` (`TF_IAWARE_BENCH_SAMPLER_SECS=5` for a quick run).
//!
//! Environment:
//! * `TF_IAWARE_BENCH_SAMPLER_SECS` — how long the 1 Hz sampler is measured (default 60 s);
//! * `TF_IAWARE_BENCH_AGENTS` — agents scraped at once (default 100);
//! * `TF_IAWARE_BENCH_REQUEST_SECS` — how long requests are fired at one agent (default 5 s).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tf_iaware::cluster::monitor::StaticPage;
use tf_iaware::cluster::monitor::{
    metrics, sample_once, Agent, AgentConfig, MetricsSource, Monitor, MonitorConfig, ScrapeOptions,
    Scraper, Target,
};

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("{name}={v} is not a whole number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

fn local_agent(source: Arc<dyn MetricsSource>) -> Agent {
    Agent::serve(
        AgentConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..AgentConfig::default()
        },
        source,
    )
    .expect("an agent on loopback")
}

fn sampler_overhead(secs: u64) {
    let monitor = Monitor::start(MonitorConfig::default()).expect("the monitor starts");
    let start_samples = monitor.samples();
    let cpu0 = monitor.sampler_cpu_time().unwrap_or_default();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let cpu = monitor.sampler_cpu_time().unwrap_or_default() - cpu0;
    let wall = t0.elapsed();
    let samples = monitor.samples() - start_samples;
    println!(
        "sampler at 1 Hz: {:.2} ms CPU over {:.1} s ({samples} readings, {:.0} µs each) = {:.4} % of one core (target < 0.5 %)",
        cpu.as_secs_f64() * 1e3,
        wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / samples.max(1) as f64,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
    );
}

fn scrape_agents(n: usize) {
    let snapshot = sample_once(
        &MonitorConfig {
            gpus: false,
            ..MonitorConfig::default()
        },
        Duration::from_millis(200),
    )
    .expect("a reading");
    let page = metrics::render(&snapshot);
    let agents: Vec<Agent> = (0..n)
        .map(|_| local_agent(Arc::new(StaticPage(page.clone()))))
        .collect();
    let targets = agents
        .iter()
        .map(|a| Target::new(&a.local_addr().to_string()))
        .collect();
    let mut scraper = Scraper::new(targets, ScrapeOptions::default()).expect("a scraper");
    let mut times = Vec::new();
    for round in 0..21 {
        let t = Instant::now();
        let reports = scraper.scrape();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let failed = reports.iter().filter(|r| r.error.is_some()).count();
        assert_eq!(
            failed,
            0,
            "{:?}",
            reports.iter().find_map(|r| r.error.as_ref())
        );
        if round > 0 {
            times.push(ms);
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "one scrape of {n} local agents ({} KiB page each): median {:.1} ms, min {:.1} ms, max {:.1} ms over {} scrapes (target < 200 ms)",
        page.len() / 1024,
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
        times.len()
    );
}

/// Reads one HTTP/1.1 response with a Content-Length body; false at end of stream.
fn read_response(r: &mut BufReader<TcpStream>, line: &mut String) -> bool {
    let mut length = None;
    let mut first = true;
    loop {
        line.clear();
        match r.read_line(line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        if first {
            if !line.starts_with("HTTP/1.1 200") {
                return false;
            }
            first = false;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let Some(n) = length else { return false };
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).is_ok()
}

fn requests_per_second(secs: u64) {
    let monitor = Arc::new(
        Monitor::start(MonitorConfig {
            gpus: false,
            ..MonitorConfig::default()
        })
        .expect("the monitor starts"),
    );
    let page_bytes = monitor.metrics_page().len();
    let agent = local_agent(monitor);
    let addr = agent.local_addr();
    for (clients, keep_alive) in [(4, true), (4, false)] {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
                std::thread::spawn(move || {
                    let request: &[u8] = if keep_alive {
                        b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n"
                    } else {
                        b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
                    };
                    let mut line = String::new();
                    let connect = || {
                        let s = TcpStream::connect(addr).expect("connect");
                        let _ = s.set_nodelay(true);
                        BufReader::new(s)
                    };
                    let mut conn = connect();
                    while !stop.load(Ordering::Relaxed) {
                        if !keep_alive {
                            conn = connect();
                        }
                        if conn.get_mut().write_all(request).is_err()
                            || !read_response(&mut conn, &mut line)
                        {
                            conn = connect();
                            continue;
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        let n = done.load(Ordering::Relaxed);
        println!(
            "agent on loopback, {clients} clients, {}: {:.0} requests/s ({page_bytes} B pages, {n} requests in {:.1} s; target ≥ 1000/s)",
            if keep_alive { "keep-alive" } else { "a new connection per request" },
            n as f64 / t0.elapsed().as_secs_f64(),
            t0.elapsed().as_secs_f64()
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters nothing here.
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("monitor benchmarks on {cores} logical CPUs");
    sampler_overhead(env_u64("TF_IAWARE_BENCH_SAMPLER_SECS", 60));
    scrape_agents(env_u64("TF_IAWARE_BENCH_AGENTS", 100) as usize);
    requests_per_second(env_u64("TF_IAWARE_BENCH_REQUEST_SECS", 5));
}
