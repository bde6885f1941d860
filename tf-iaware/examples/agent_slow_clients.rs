//! One client holds slow connections (opened, never sent a request, re-opened as soon as the
//! agent closes one) while another probes `/metrics`: prints the share of probes answered.
//!
//! `cargo run --release -p tf-iaware --example agent_slow_clients -- 600 200`
//! (slow connections held, probes).
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tf_iaware::cluster::monitor::{Agent, AgentConfig, StaticPage};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let held: usize = args.next().map_or(Ok(600), |a| a.parse())?;
    let probes: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let agent = Agent::serve(
        AgentConfig {
            listen: "127.0.0.1:0".parse()?,
            ..AgentConfig::default()
        },
        Arc::new(StaticPage("up 1\n".into())),
    )?;
    let addr = agent.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let slow = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Drop the ones the agent closed, open new ones up to `held`.
                open.retain(|s| {
                    let _ = s.set_nonblocking(true);
                    let mut b = [0u8; 1];
                    !matches!((&*s).read(&mut b), Ok(0))
                });
                while open.len() < held {
                    match TcpStream::connect(addr) {
                        Ok(s) => open.push(s),
                        Err(_) => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let mut answered = 0;
    let started = Instant::now();
    for _ in 0..probes {
        let ok = (|| -> std::io::Result<bool> {
            let mut s = TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
            let mut page = String::new();
            s.read_to_string(&mut page)?;
            Ok(page.ends_with("up 1\n"))
        })()
        .unwrap_or(false);
        answered += usize::from(ok);
        std::thread::sleep(Duration::from_millis(10));
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = slow.join();
    println!(
        "{answered} of {probes} probes answered ({:.1} %) in {seconds:.1} s while one client held up to {held} slow connections (cap {})",
        100.0 * answered as f64 / probes as f64,
        AgentConfig::default().max_connections
    );
    Ok(())
}
