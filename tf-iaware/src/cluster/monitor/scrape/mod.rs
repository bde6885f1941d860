//! Reading many metrics endpoints at once: tf-iaware agents, or a host's node_exporter and
//! dcgm-exporter pages, into [`Snapshot`]s.
//!
//! All endpoints are fetched concurrently on one thread, each with its own deadline, so an
//! endpoint that refuses, hangs or sends garbage only costs its own reading: the [`Scraper`]
//! then hands out the target's last good snapshot marked stale, with its age and the reason.
//! Pages from plain exporters carry counters only; the scraper derives utilisation and rates
//! from two successive scrapes of the same target.
//!
//! Needs the `scrape` feature (on by default: tokio and hyper); without it [`Scraper::new`] and
//! [`scrape_many`] return [`Error::NotCompiled`](crate::Error::NotCompiled) naming the feature.

use std::time::Duration;

use crate::cluster::monitor::snapshot::Snapshot;
use crate::error::{Error, Result};

// The engine behind [`Scraper`]: the real one, or a stand-in that refuses to start. Both have the
// same private shape (`Engine::new`, `targets`, `scrape`), so the public API below is written and
// documented once for both builds.
#[cfg(not(feature = "scrape"))]
mod disabled;
#[cfg(feature = "scrape")]
mod http;
#[cfg(not(feature = "scrape"))]
use disabled as backend;
#[cfg(not(feature = "scrape"))]
pub(crate) use disabled::FEATURE;
#[cfg(feature = "scrape")]
use http as backend;

/// Scrapes a fixed set of targets again and again, remembering each target's last good reading
/// and the counters needed for rates.
#[derive(Debug)]
pub struct Scraper(backend::Engine);

impl Scraper {
    /// A scraper of `targets`.
    ///
    /// # Errors
    /// [`Error::Scrape`] naming the first endpoint that is not an `http://` URL or
    /// `host:port`, or a target without URLs; [`Error::InvalidArgument`] for a zero timeout;
    /// [`Error::MonitorThread`] if the runtime cannot be created; in a build without the
    /// `scrape` feature, always [`Error::NotCompiled`] naming the feature and the first target.
    pub fn new(targets: Vec<Target>, options: ScrapeOptions) -> Result<Scraper> {
        backend::Engine::new(targets, options).map(Scraper)
    }

    /// The targets, in order.
    pub fn targets(&self) -> Vec<&Target> {
        self.0.targets()
    }

    /// Scrapes every target concurrently; one report per target, in order. Takes at most about
    /// [`ScrapeOptions::timeout`] whatever the endpoints do.
    pub fn scrape(&mut self) -> Vec<ScrapeReport> {
        self.0.scrape()
    }
}

/// Scrapes `targets` once.
///
/// # Errors
/// As [`Scraper::new`]; failures of individual endpoints are in the reports.
pub fn scrape_many(targets: &[Target], options: &ScrapeOptions) -> Result<Vec<ScrapeReport>> {
    Ok(Scraper::new(targets.to_vec(), options.clone())?.scrape())
}

/// One machine to read: a name and the pages that describe it (e.g. its node_exporter and its
/// dcgm-exporter), merged into one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Name used as the snapshots' `source`.
    pub name: String,
    /// Page URLs (`http://host:port/path`).
    pub urls: Vec<String>,
}

impl Target {
    /// A target read from one endpoint: `host:port` (path `/metrics`) or an `http://` URL
    /// (path `/metrics` when none is given). The name is the endpoint as given.
    pub fn new(endpoint: &str) -> Self {
        Target {
            name: endpoint.to_string(),
            urls: vec![endpoint.to_string()],
        }
    }

    /// A target named `name` read from several pages.
    pub fn with_urls(name: &str, urls: &[&str]) -> Self {
        Target {
            name: name.to_string(),
            urls: urls.iter().map(|u| u.to_string()).collect(),
        }
    }
}

/// How to scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct ScrapeOptions {
    /// Deadline per page: connect, request and whole body (default 2 s).
    pub timeout: Duration,
    /// Largest page accepted, bytes (default 16 MiB).
    pub max_page_bytes: usize,
    /// A reading older than this is stale even if the endpoint answered (default 10 s).
    pub max_age: Duration,
    /// EWMA time constant for rates derived from exporter counters (default 10 s).
    pub ewma_tau: Duration,
    /// Window for rates derived from exporter counters (default 60 s).
    pub window: Duration,
}

impl Default for ScrapeOptions {
    fn default() -> Self {
        ScrapeOptions {
            timeout: Duration::from_secs(2),
            max_page_bytes: 16 << 20,
            max_age: Duration::from_secs(10),
            ewma_tau: Duration::from_secs(10),
            window: Duration::from_secs(60),
        }
    }
}

/// The outcome of scraping one target.
#[derive(Debug)]
pub struct ScrapeReport {
    /// The target's name.
    pub target: String,
    /// The reading: fresh, or the last good one (or an empty one) marked stale with its age.
    pub snapshot: Snapshot,
    /// What went wrong this time, if anything.
    pub error: Option<Error>,
    /// Time spent on this target, wall clock.
    pub elapsed: Duration,
}
