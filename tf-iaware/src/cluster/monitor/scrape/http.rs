//! The scraper itself, on hyper and a single-threaded tokio runtime.

use std::time::{Duration, Instant};

use super::{ScrapeOptions, ScrapeReport, Target};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ACCEPT, CONNECTION, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use crate::cluster::monitor::derive::CounterDeriver;
use crate::cluster::monitor::exposition::Exposition;
use crate::cluster::monitor::metrics::{self, INFO};
use crate::cluster::monitor::snapshot::Snapshot;
use crate::error::{Error, Result};

/// Normalises `host:port` or `http://host[:port][/path]` to a URI with a path.
///
/// # Errors
/// [`Error::Scrape`] for anything but plain HTTP with a host.
pub(crate) fn endpoint_uri(endpoint: &str) -> Result<Uri> {
    let bad = |reason: &str| Error::Scrape {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let with_scheme = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let uri: Uri = with_scheme
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| bad(&format!("not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad(
            "only http:// endpoints are supported (put TLS in a proxy in front)",
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host"));
    }
    if uri.path() == "/" && uri.query().is_none() {
        let mut parts = uri.into_parts();
        parts.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/metrics"));
        return Uri::from_parts(parts).map_err(|e| bad(&e.to_string()));
    }
    Ok(uri)
}

struct TargetState {
    target: Target,
    uris: Vec<Uri>,
    /// Last good snapshot, its age when read, and when it was read.
    last_good: Option<(Snapshot, Instant)>,
    counters: CounterDeriver,
}

/// The engine behind a [`Scraper`](super::Scraper): one tokio runtime and every target's state.
pub(super) struct Engine {
    targets: Vec<TargetState>,
    options: ScrapeOptions,
    /// Always `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    epoch: Instant,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Dropping a runtime blocks on its workers, which is not allowed inside another
        // runtime: there, let it wind down in the background.
        if let Some(rt) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            }
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scraper")
            .field(
                "targets",
                &self
                    .targets
                    .iter()
                    .map(|t| &t.target.name)
                    .collect::<Vec<_>>(),
            )
            .field("options", &self.options)
            .finish()
    }
}

impl Engine {
    /// An engine for `targets` ([`super::Scraper::new`]).
    pub(super) fn new(targets: Vec<Target>, options: ScrapeOptions) -> Result<Engine> {
        if options.timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "scrape timeout".into(),
                reason: "must be more than 0".into(),
            });
        }
        let mut states = Vec::with_capacity(targets.len());
        for t in targets {
            if t.urls.is_empty() {
                return Err(Error::Scrape {
                    endpoint: t.name.clone(),
                    reason: "the target has no URL".into(),
                });
            }
            let uris = t
                .urls
                .iter()
                .map(|u| endpoint_uri(u))
                .collect::<Result<Vec<_>>>()?;
            states.push(TargetState {
                counters: CounterDeriver::new(
                    options.ewma_tau.as_secs_f64(),
                    options.window.as_secs_f64(),
                ),
                target: t,
                uris,
                last_good: None,
            });
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| Error::MonitorThread {
                what: "scraper runtime".into(),
                source,
            })?;
        Ok(Engine {
            targets: states,
            options,
            runtime: Some(runtime),
            epoch: Instant::now(),
        })
    }

    /// The targets, in order.
    pub(super) fn targets(&self) -> Vec<&Target> {
        self.targets.iter().map(|t| &t.target).collect()
    }

    /// Scrapes every target concurrently; one report per target, in order
    /// ([`super::Scraper::scrape`]).
    pub(super) fn scrape(&mut self) -> Vec<ScrapeReport> {
        let jobs: Vec<Vec<Uri>> = self.targets.iter().map(|t| t.uris.clone()).collect();
        let (timeout, max) = (self.options.timeout, self.options.max_page_bytes);
        let run = |rt: &tokio::runtime::Runtime| {
            rt.block_on(async move {
                let start = Instant::now();
                // Every page of every target is its own task: nothing waits on anything else.
                let handles: Vec<Vec<_>> = jobs
                    .into_iter()
                    .map(|uris| {
                        uris.into_iter()
                            .map(|uri| {
                                tokio::spawn(async move {
                                    let page = tokio::time::timeout(timeout, fetch(&uri, max))
                                        .await
                                        .unwrap_or_else(|_| {
                                            Err(format!("no complete answer within {timeout:?}"))
                                        })
                                        .map_err(|reason| Error::Scrape {
                                            endpoint: uri.to_string(),
                                            reason,
                                        });
                                    (uri, page, Instant::now())
                                })
                            })
                            .collect()
                    })
                    .collect();
                let mut out = Vec::with_capacity(handles.len());
                for target in handles {
                    let mut pages = Vec::with_capacity(target.len());
                    let mut done = start;
                    let mut complete = true;
                    for h in target {
                        match h.await {
                            Ok((uri, page, at)) => {
                                done = done.max(at);
                                pages.push((uri, page));
                            }
                            Err(_) => complete = false,
                        }
                    }
                    out.push(complete.then(|| (pages, done.duration_since(start), done)));
                }
                out
            })
        };
        // A runtime cannot be entered from inside another: scrape from a helper thread then.
        let results = match &self.runtime {
            None => Vec::new(),
            Some(rt) if tokio::runtime::Handle::try_current().is_ok() => {
                std::thread::scope(|s| s.spawn(|| run(rt)).join().unwrap_or_default())
            }
            Some(rt) => run(rt),
        };
        let mut reports = Vec::with_capacity(self.targets.len());
        let mut results = results.into_iter();
        for state in self.targets.iter_mut() {
            let (pages, elapsed, done) = match results.next().flatten() {
                Some(r) => r,
                None => (Vec::new(), Duration::ZERO, Instant::now()),
            };
            let t_s = done.duration_since(self.epoch).as_secs_f64();
            let outcome = if pages.is_empty() {
                Err(Error::Scrape {
                    endpoint: state.target.name.clone(),
                    reason: "the scrape task failed".into(),
                })
            } else {
                read_pages(&state.target.name, pages)
            };
            let report = match outcome {
                Ok(page) => match metrics::from_exposition(&page, &state.target.name) {
                    Ok(raw) => {
                        let mut snap = if page.family(INFO).is_some() {
                            raw
                        } else {
                            state.counters.push(t_s, raw)
                        };
                        snap.source = state.target.name.clone();
                        state.last_good = Some((snap.clone(), done));
                        finish(snap, done, &self.options, None, elapsed, &state.target.name)
                    }
                    Err(e) => self_stale(state, e, elapsed, &self.options),
                },
                Err(e) => self_stale(state, e, elapsed, &self.options),
            };
            reports.push(report);
        }
        reports
    }
}

/// Parses and merges a target's pages.
fn read_pages(name: &str, pages: Vec<(Uri, Result<String>)>) -> Result<Exposition> {
    let mut merged = Exposition::new();
    for (uri, text) in pages {
        let page = Exposition::parse(&text?).map_err(|e| Error::Scrape {
            endpoint: uri.to_string(),
            reason: e.to_string(),
        })?;
        merged.merge(page).map_err(|e| Error::Scrape {
            endpoint: name.to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(merged)
}

/// A report for a failed scrape: the last good snapshot (or an empty one), stale.
fn self_stale(
    state: &TargetState,
    error: Error,
    elapsed: Duration,
    options: &ScrapeOptions,
) -> ScrapeReport {
    let (snap, read_at) = match &state.last_good {
        Some((s, at)) => (s.clone(), *at),
        None => (Snapshot::empty(&state.target.name), Instant::now()),
    };
    finish(
        snap,
        read_at,
        options,
        Some(error),
        elapsed,
        &state.target.name,
    )
}

/// Sets the age (age when read + time since) and staleness of a snapshot.
fn finish(
    mut snap: Snapshot,
    read_at: Instant,
    options: &ScrapeOptions,
    error: Option<Error>,
    elapsed: Duration,
    name: &str,
) -> ScrapeReport {
    let since = u64::try_from(read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
    let age = snap.age_ms.saturating_add(since);
    snap.set_age_ms(age);
    snap.stale = false;
    snap.stale_reason = None;
    if let Some(e) = &error {
        snap.mark_stale(if snap.samples == 0 && snap.taken_unix_ms == 0 {
            format!("never read: {e}")
        } else {
            format!("{e}; reading is {:.1} s old", age as f64 / 1000.0)
        });
    } else if Duration::from_millis(age) > options.max_age {
        snap.mark_stale(format!(
            "reading is {:.1} s old (limit {:.1} s)",
            age as f64 / 1000.0,
            options.max_age.as_secs_f64()
        ));
    }
    ScrapeReport {
        target: name.to_string(),
        snapshot: snap,
        error,
        elapsed,
    }
}

/// Fetches one page (no deadline of its own; the caller sets one).
async fn fetch(uri: &Uri, max_bytes: usize) -> std::result::Result<String, String> {
    let host = uri.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake failed: {e}"))?;
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let path = uri.path_and_query().map_or("/metrics", |p| p.as_str());
    let request = Request::get(path)
        .header(
            HOST,
            HeaderValue::from_str(&authority).map_err(|e| e.to_string())?,
        )
        .header(
            ACCEPT,
            "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1",
        )
        .header(USER_AGENT, concat!("tf-iaware/", env!("CARGO_PKG_VERSION")))
        .header(CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        if response.status() != StatusCode::OK {
            return Err(format!("answered HTTP {}", response.status()));
        }
        if let Some(ct) = response.headers().get(CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
            if !(ct.starts_with("text/") || ct.starts_with("application/openmetrics-text")) {
                return Err(format!(
                    "content type `{ct}` is not the Prometheus text format"
                ));
            }
        }
        let body = Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    format!("page is larger than {max_bytes} bytes")
                } else {
                    format!("reading the page failed: {e}")
                }
            })?
            .to_bytes();
        String::from_utf8(body.to_vec()).map_err(|_| "page is not UTF-8".to_string())
    };
    tokio::pin!(conn);
    tokio::pin!(exchange);
    tokio::select! {
        r = &mut exchange => r,
        c = &mut conn => match c {
            // The connection finished first (closed cleanly): the exchange has its answer.
            Ok(()) => exchange.await,
            Err(e) => Err(format!("connection failed: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::monitor::agent::{Agent, AgentConfig, StaticPage};
    use crate::cluster::monitor::scrape::{scrape_many, Scraper};
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::Arc;

    fn serve(page: &str) -> Agent {
        Agent::serve(
            AgentConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                ..Default::default()
            },
            Arc::new(StaticPage(page.to_string())),
        )
        .unwrap()
    }

    #[test]
    fn endpoint_forms() {
        assert_eq!(
            endpoint_uri("127.0.0.1:9100").unwrap().to_string(),
            "http://127.0.0.1:9100/metrics"
        );
        assert_eq!(
            endpoint_uri("http://h:1").unwrap().to_string(),
            "http://h:1/metrics"
        );
        assert_eq!(
            endpoint_uri("http://h:1/").unwrap().to_string(),
            "http://h:1/metrics"
        );
        assert_eq!(
            endpoint_uri("http://h:1/x/metrics?a=b")
                .unwrap()
                .to_string(),
            "http://h:1/x/metrics?a=b"
        );
        for bad in ["https://h/metrics", "http://", "::::", "ftp://h/"] {
            assert!(endpoint_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn node_exporter_target_gets_rates_on_second_scrape() {
        let node = serve(include_str!(
            "../../../../../tf-iaware-core/tests/fixtures/monitor/node_exporter.prom"
        ));
        let dcgm = serve(include_str!(
            "../../../../../tf-iaware-core/tests/fixtures/monitor/dcgm_exporter.prom"
        ));
        let target = Target::with_urls(
            "worker-3",
            &[&node.local_addr().to_string(), &dcgm.metrics_url()],
        );
        let mut scraper = Scraper::new(vec![target], ScrapeOptions::default()).unwrap();
        let r = scraper.scrape().remove(0);
        assert!(r.error.is_none(), "{:?}", r.error);
        let s = r.snapshot;
        assert!(!s.stale);
        assert_eq!(s.source, "worker-3");
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(s.cpu.logical_cores, 2);
        assert_eq!(s.device("GPU:1").unwrap().compute_share.last, 1.0 - 0.87);
        // Same counters again: zero rates, fully idle CPUs are not a rate yet (no time passed
        // in the counters), so utilisation stays unknown rather than wrong.
        let again = scraper.scrape().remove(0).snapshot;
        assert_eq!(again.samples, 2);
        assert_eq!(again.network[0].rx_bytes_per_sec, Some(0.0));
        assert_eq!(again.cpu.utilisation, None);
    }

    #[test]
    fn refusing_hanging_and_garbage_endpoints_do_not_block_others() {
        let good = serve("# TYPE up gauge\nup 1\n");
        let garbage = serve("up{ 1\n");
        // Accepts but never answers.
        let hang = TcpListener::bind("127.0.0.1:0").unwrap();
        let hang_addr = hang.local_addr().unwrap();
        let hold = std::thread::spawn(move || {
            let conns: Vec<_> = hang.incoming().take(1).collect();
            std::thread::sleep(Duration::from_secs(3));
            drop(conns);
        });
        // Refuses: a port nothing listens on.
        let refused = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let targets = vec![
            Target::new(&good.local_addr().to_string()),
            Target::new(&hang_addr.to_string()),
            Target::new(&refused.to_string()),
            Target::new(&garbage.local_addr().to_string()),
        ];
        let options = ScrapeOptions {
            timeout: Duration::from_millis(500),
            ..Default::default()
        };
        let mut scraper = Scraper::new(targets, options).unwrap();
        let reports = scraper.scrape();
        // One report per target, in order: the good one read in full although the hanging one
        // never answered (its error is the per-endpoint timeout, not a stall of the others).
        assert_eq!(reports.len(), 4);
        assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
        assert!(!reports[0].snapshot.stale);
        let hung = reports[1].error.as_ref().unwrap().to_string();
        assert!(hung.contains("within"), "{hung}");
        assert!(reports[1].snapshot.stale);
        assert!(reports[1]
            .snapshot
            .stale_reason
            .as_ref()
            .unwrap()
            .starts_with("never read"));
        let refused = reports[2].error.as_ref().unwrap().to_string();
        assert!(refused.contains("cannot connect"), "{refused}");
        let garbage = reports[3].error.as_ref().unwrap().to_string();
        assert!(garbage.contains("line 1"), "{garbage}");
        // A good endpoint that goes away: its last reading comes back stale, with its age.
        let addr = good.local_addr().to_string();
        good.stop();
        std::thread::sleep(Duration::from_millis(20));
        let mut one = Scraper::new(vec![Target::new(&addr)], ScrapeOptions::default()).unwrap();
        let r = one.scrape().remove(0);
        assert!(r.snapshot.stale);
        hold.join().unwrap();
    }

    #[test]
    fn last_good_reading_is_served_stale() {
        let agent = serve("# TYPE up gauge\nup 1\n");
        let addr = agent.local_addr().to_string();
        let mut scraper = Scraper::new(vec![Target::new(&addr)], ScrapeOptions::default()).unwrap();
        let first = scraper.scrape().remove(0);
        assert!(!first.snapshot.stale);
        agent.stop();
        std::thread::sleep(Duration::from_millis(30));
        let second = scraper.scrape().remove(0);
        assert!(second.error.is_some());
        assert!(second.snapshot.stale);
        assert!(second.snapshot.age_ms >= 30, "{}", second.snapshot.age_ms);
        assert_eq!(second.snapshot.samples, first.snapshot.samples);
        let reason = second.snapshot.stale_reason.unwrap();
        assert!(reason.contains("s old"), "{reason}");
    }

    #[test]
    fn oversized_pages_and_wrong_types_are_refused() {
        let agent = serve(&"x 1\n".repeat(1000));
        let r = scrape_many(
            &[Target::new(&agent.local_addr().to_string())],
            &ScrapeOptions {
                max_page_bytes: 100,
                ..Default::default()
            },
        )
        .unwrap()
        .remove(0);
        let e = r.error.unwrap().to_string();
        assert!(e.contains("larger than 100 bytes"), "{e}");
        // A server answering with another content type.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            if let Some(Ok(mut c)) = l.incoming().next() {
                let mut buf = [0u8; 1024];
                let _ = c.read(&mut buf);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.google.protobuf\r\nContent-Length: 2\r\n\r\nxx");
            }
        });
        let r = scrape_many(&[Target::new(&addr.to_string())], &ScrapeOptions::default())
            .unwrap()
            .remove(0);
        assert!(r.error.unwrap().to_string().contains("content type"));
        t.join().unwrap();
    }

    #[test]
    fn bad_targets_are_rejected_up_front() {
        assert!(Scraper::new(
            vec![Target::new("https://x/metrics")],
            ScrapeOptions::default()
        )
        .is_err());
        assert!(Scraper::new(
            vec![Target::with_urls("empty", &[])],
            ScrapeOptions::default()
        )
        .is_err());
        assert!(Scraper::new(
            vec![],
            ScrapeOptions {
                timeout: Duration::ZERO,
                ..Default::default()
            }
        )
        .is_err());
    }

    #[test]
    fn works_from_inside_a_runtime() {
        let agent = serve("up 1\n");
        let addr = agent.local_addr().to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let reports = rt.block_on(async {
            scrape_many(&[Target::new(&addr)], &ScrapeOptions::default()).unwrap()
        });
        assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
    }
}
