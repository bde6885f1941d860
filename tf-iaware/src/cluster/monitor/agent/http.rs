//! The agent's HTTP server, on hyper and a single-threaded tokio runtime.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{watch, Notify, Semaphore};

use super::{AgentConfig, MetricsSource};
use crate::cluster::monitor::exposition::CONTENT_TYPE as METRICS_CONTENT_TYPE;
use crate::error::{Error, Result};

/// The running server behind an [`Agent`](super::Agent); stopped when dropped.
pub(super) struct Server {
    addr: SocketAddr,
    shutdown: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Binds `config.listen` and serves `source` on a background thread ([`super::Agent::serve`]).
    pub(super) fn serve(config: AgentConfig, source: Arc<dyn MetricsSource>) -> Result<Server> {
        let listen = config.listen.to_string();
        let agent_err = |reason: String| Error::Agent {
            listen: listen.clone(),
            reason,
        };
        if config.max_connections == 0 || config.header_read_timeout.is_zero() {
            return Err(agent_err(
                "max_connections and header_read_timeout must be more than 0".into(),
            ));
        }
        let std_listener =
            StdListener::bind(config.listen).map_err(|e| agent_err(e.to_string()))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| agent_err(e.to_string()))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| agent_err(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| Error::MonitorThread {
                what: "agent runtime".into(),
                source,
            })?;
        let listener = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(|e| agent_err(e.to_string()))?
        };
        let (tx, rx) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name(format!("tf-iaware-agent-{}", addr.port()))
            .spawn(move || runtime.block_on(accept_loop(listener, config, source, rx)))
            .map_err(|source| Error::MonitorThread {
                what: "agent thread".into(),
                source,
            })?;
        log::info!("metrics agent listening on http://{addr}/metrics");
        Ok(Server {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address actually bound.
    pub(super) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection and waits for the server thread.
    pub(super) fn stop(mut self) {
        self.shutdown();
    }

    /// Blocks until the server thread ends.
    pub(super) fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the metrics agent's thread panicked");
            }
        }
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the metrics agent's thread panicked");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    config: AgentConfig,
    source: Arc<dyn MetricsSource>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .max_buf_size(config.max_header_bytes.max(8192))
        .max_header_size(config.max_header_bytes)
        .keep_alive(true);
    let http = Arc::new(http);
    // Open connections that have not sent a request yet, oldest first.
    let silent: Arc<Mutex<VecDeque<Silent>>> = Arc::default();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                log::warn!("metrics agent: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let victim = {
                    let mut q = silent.lock().unwrap_or_else(|p| p.into_inner());
                    q.retain(|c| c.is_silent());
                    q.pop_front()
                };
                let Some(victim) = victim else {
                    log::debug!(
                        "metrics agent: refusing {peer}: {} connections open, all served",
                        config.max_connections
                    );
                    drop(stream);
                    continue;
                };
                victim.evict.notify_one();
                match tokio::time::timeout(
                    Duration::from_millis(200),
                    Arc::clone(&slots).acquire_owned(),
                )
                .await
                {
                    Ok(Ok(slot)) => slot,
                    _ => {
                        drop(stream);
                        continue;
                    }
                }
            }
        };
        let me = Silent::default();
        silent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(me.clone());
        let _ = stream.set_nodelay(true);
        let source = Arc::clone(&source);
        let http = Arc::clone(&http);
        let lifetime = config.connection_lifetime;
        tokio::spawn(async move {
            let served = Arc::clone(&me.served);
            let service = hyper::service::service_fn(move |req| {
                served.store(true, Ordering::Relaxed);
                let source = Arc::clone(&source);
                async move { Ok::<_, Infallible>(respond(&req, &*source)) }
            });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = tokio::time::timeout(lifetime, conn) => match r {
                    Ok(Err(e)) => log::debug!("metrics agent: connection from {peer}: {e}"),
                    Err(_) => log::debug!("metrics agent: closing {peer} after {lifetime:?}"),
                    Ok(Ok(())) => {}
                },
                _ = me.evict.notified() => {
                    log::debug!("metrics agent: closing silent {peer} to make room");
                }
            }
            me.done.store(true, Ordering::Relaxed);
            drop(slot);
        });
    }
}

/// An open connection, as the accept loop sees it.
#[derive(Clone, Default)]
struct Silent {
    /// It has sent at least one request.
    served: Arc<AtomicBool>,
    /// It is closed.
    done: Arc<AtomicBool>,
    /// Closes it.
    evict: Arc<Notify>,
}

impl Silent {
    fn is_silent(&self) -> bool {
        !self.served.load(Ordering::Relaxed) && !self.done.load(Ordering::Relaxed)
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// The answer to one request.
fn respond(req: &Request<Incoming>, source: &dyn MetricsSource) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let readable = req.method() == Method::GET || req.method() == Method::HEAD;
    match (path, readable) {
        ("/metrics", true) => text(StatusCode::OK, METRICS_CONTENT_TYPE, source.metrics_page()),
        ("/healthz", true) => text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
        ("/metrics" | "/healthz", false) => {
            let mut r = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain; charset=utf-8",
                format!("{} is not allowed on {path}; use GET\n", req.method()),
            );
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found; try /metrics or /healthz\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::monitor::agent::{Agent, StaticPage};
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn local_agent(page: &str, config: AgentConfig) -> Agent {
        Agent::serve(
            AgentConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                ..config
            },
            Arc::new(StaticPage(page.to_string())),
        )
        .unwrap()
    }

    /// Sends raw bytes, returns everything the server answers until it closes or times out.
    fn raw(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn routes() {
        let agent = local_agent("up 1\n", AgentConfig::default());
        let a = agent.local_addr();
        assert!(a.ip().is_loopback());
        let r = raw(
            a,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("content-type: text/plain; version=0.0.4\r\n"),
            "{r}"
        );
        assert!(r.ends_with("\r\n\r\nup 1\n"), "{r}");
        let r = raw(a, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(r.ends_with("up 1\n"), "{r}");
        let r = raw(
            a,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("ok\n"), "{r}");
        let r = raw(
            a,
            b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        let r = raw(
            a,
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        assert!(
            r.starts_with("HTTP/1.1 405") && r.contains("allow: GET, HEAD"),
            "{r}"
        );
        let r = raw(
            a,
            b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200") && !r.contains("up 1"), "{r}");
        agent.stop();
        assert!(
            TcpStream::connect(a).is_err(),
            "stopped agents no longer listen"
        );
    }

    #[test]
    fn slow_and_oversized_requests_do_not_stall_others() {
        let agent = local_agent(
            "up 1\n",
            AgentConfig {
                header_read_timeout: Duration::from_millis(500),
                ..Default::default()
            },
        );
        let a = agent.local_addr();
        // A slowloris: half a request line, then nothing.
        let mut slow = TcpStream::connect(a).unwrap();
        slow.write_all(b"GET /metr").unwrap();
        // An idle connection that never sends anything.
        let idle = TcpStream::connect(a).unwrap();
        // Meanwhile a normal client is served in full while both are still open.
        let r = raw(
            a,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.ends_with("up 1\n"), "{r}");
        // The slow one is cut off by the server (after its header timeout): its read ends with
        // the server's close, not with the client's own read deadline.
        slow.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut buf = Vec::new();
        if let Err(e) = slow.read_to_end(&mut buf) {
            assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "the server never cut the slow request off: {e}"
            );
        }
        drop(idle);
        // Oversized headers: refused, and the server still serves.
        let big = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let r = raw(a, big.as_bytes());
        assert!(r.is_empty() || r.starts_with("HTTP/1.1 431"), "{r}");
        let r = raw(
            a,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.ends_with("ok\n"), "{r}");
    }

    #[test]
    fn silent_connections_make_room_for_new_ones() {
        let agent = local_agent(
            "up 1\n",
            AgentConfig {
                max_connections: 2,
                ..Default::default()
            },
        );
        let a = agent.local_addr();
        // A slow client holds every slot without sending anything.
        let mut slow: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(a).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        // Probes are still answered: each closes the oldest silent connection.
        for _ in 0..5 {
            let r = raw(
                a,
                b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            );
            assert!(r.ends_with("up 1\n"), "{r}");
            slow.push(TcpStream::connect(a).unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
        // The first silent connection was closed by the agent.
        let mut first = slow.remove(0);
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            first.read(&mut buf).unwrap_or(0),
            0,
            "closed without an answer"
        );
    }

    #[test]
    fn bind_errors_name_the_address() {
        let agent = local_agent("up 1\n", AgentConfig::default());
        let err = Agent::serve(
            AgentConfig {
                listen: agent.local_addr(),
                ..Default::default()
            },
            Arc::new(StaticPage(String::new())),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains(&agent.local_addr().to_string()),
            "{err}"
        );
    }
}
