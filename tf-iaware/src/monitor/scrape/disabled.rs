//! Without the `scrape` feature: the scraper's API, refusing to run. Every method stays `pub`, as
//! in the real one, so callers compile the same with and without the feature.

use super::{ScrapeOptions, ScrapeReport, Target};
use crate::error::{Error, Result};

/// Why nothing can be scraped in this build.
pub const NOT_COMPILED: &str =
    "reading metrics agents is not compiled in: build tf-iaware with the `scrape` feature";

/// The scraper of a build without the `scrape` feature: it cannot be created.
#[derive(Debug)]
pub struct Scraper {
    never: std::convert::Infallible,
}

impl Scraper {
    /// Always fails in this build.
    ///
    /// # Errors
    /// [`Error::Scrape`] naming the first target and [`NOT_COMPILED`].
    pub fn new(targets: Vec<Target>, _options: ScrapeOptions) -> Result<Scraper> {
        Err(not_compiled(&targets))
    }

    /// The targets (never called: no `Scraper` exists in this build).
    pub fn targets(&self) -> Vec<&Target> {
        match self.never {}
    }

    /// Scrapes (never called: no `Scraper` exists in this build).
    pub fn scrape(&mut self) -> Vec<ScrapeReport> {
        match self.never {}
    }
}

/// Always fails in this build.
///
/// # Errors
/// [`Error::Scrape`] naming the first target and [`NOT_COMPILED`].
pub fn scrape_many(targets: &[Target], _options: &ScrapeOptions) -> Result<Vec<ScrapeReport>> {
    Err(not_compiled(targets))
}

fn not_compiled(targets: &[Target]) -> Error {
    Error::Scrape {
        endpoint: targets.first().map(|t| t.name.clone()).unwrap_or_default(),
        reason: NOT_COMPILED.to_string(),
    }
}
