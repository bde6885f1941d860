//! A user-space link shaper (tc netem does not exist here): a TCP proxy that forwards every
//! connection to a target with added one-way delay and limited bandwidth, in both directions.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::scenario::LinkSpec;
use tf_iaware::{Error, Result};

/// Largest chunk forwarded at once, bytes.
const CHUNK: usize = 16 * 1024;

/// A running proxy; stops accepting on drop (open connections end with their peers).
pub(crate) struct LinkProxy {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl LinkProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `target` shaped as `link`.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot listen or resolve the target; [`Error::InvalidArgument`] for a
    /// link outside [`LinkSpec::new`]'s bounds (the proxy's delays would not be representable).
    pub(crate) fn start(target: impl ToSocketAddrs, link: LinkSpec) -> Result<LinkProxy> {
        let link = LinkSpec::new(link.mbit, link.delay_ms)?;
        let target = target
            .to_socket_addrs()
            .map_err(|e| Error::io("proxy target", e))?
            .next()
            .ok_or_else(|| Error::io("proxy target", std::io::Error::other("no address")))?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("proxy", e))?
            .port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
                    pump(client, s2, link.clone());
                    pump(server, c2, link.clone());
                }
            }
        });
        Ok(LinkProxy { port, stop })
    }

    /// Port peers dial.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Forwards `from` → `to`: a reader stamps each chunk with its due time (now + delay), a writer
/// sends it no earlier, then waits its serialisation time at the link's bandwidth.
fn pump(mut from: TcpStream, mut to: TcpStream, link: LinkSpec) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    // Bounded by `LinkSpec::new`; saturating all the same, so no value can panic here.
    let delay = Duration::try_from_secs_f64(link.delay_ms / 1e3).unwrap_or(Duration::MAX);
    thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let now = Instant::now();
                    let due = now.checked_add(delay).unwrap_or(now);
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let bytes_per_sec = link.mbit * 1e6 / 8.0;
    thread::spawn(move || {
        let mut free_at = Instant::now();
        for (due, chunk) in rx {
            let now = Instant::now();
            let start = due.max(free_at).max(now);
            if start > now {
                thread::sleep(start - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
            let busy = Duration::try_from_secs_f64(chunk.len() as f64 / bytes_per_sec)
                .unwrap_or(Duration::from_secs(3600));
            free_at = start.checked_add(busy).unwrap_or(start);
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_both_ways_with_delay_and_limited_bandwidth() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = echo.local_addr().unwrap();
        thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        // 8 Mbit/s = 1 MB/s, 20 ms each way.
        let proxy = LinkProxy::start(
            addr,
            LinkSpec {
                mbit: 8.0,
                delay_ms: 20.0,
            },
        )
        .unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        let start = Instant::now();
        c.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        assert!(
            start.elapsed() >= Duration::from_millis(40),
            "round trip {:?}",
            start.elapsed()
        );
        // 200 KB at 1 MB/s takes at least ~0.2 s one way.
        let data = vec![7u8; 200 * 1024];
        let start = Instant::now();
        c.write_all(&data).unwrap();
        let mut back = vec![0u8; data.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, data);
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "200 KB took {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn an_absurd_link_is_a_typed_error_not_a_panic() {
        for (mbit, delay_ms) in [(1e-300, 0.0), (1e300, 0.0), (10.0, 1e300), (10.0, -1.0)] {
            let link = LinkSpec { mbit, delay_ms };
            let e = LinkProxy::start("127.0.0.1:9", link)
                .err()
                .expect("refused");
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        }
    }
}
