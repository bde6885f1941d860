//! Without the `scrape` feature: the scraper's API, refusing to run. Every method stays `pub`, as
//! in the real one, so callers compile the same with and without the feature.

use super::{ScrapeOptions, ScrapeReport, Target};
use crate::error::{Error, Result};

/// The cargo feature the scraper needs.
pub const FEATURE: &str = "scrape";

/// The scraper of a build without the `scrape` feature: it cannot be created.
#[derive(Debug)]
pub struct Scraper {
    never: std::convert::Infallible,
}

impl Scraper {
    /// Always fails in this build.
    ///
    /// # Errors
    /// [`Error::NotCompiled`] naming the [`FEATURE`] and the first target.
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
/// [`Error::NotCompiled`] naming the [`FEATURE`] and the first target.
pub fn scrape_many(targets: &[Target], _options: &ScrapeOptions) -> Result<Vec<ScrapeReport>> {
    Err(not_compiled(targets))
}

fn not_compiled(targets: &[Target]) -> Error {
    let what = match targets.first() {
        Some(t) => format!("reading metrics agents (first: {})", t.name),
        None => "reading metrics agents".to_string(),
    };
    Error::NotCompiled {
        feature: FEATURE,
        what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_compiled_scrape_names_the_feature_and_target() {
        let targets = vec![Target::new("127.0.0.1:1")];
        for result in [
            Scraper::new(targets.clone(), ScrapeOptions::default()).map(|_| ()),
            scrape_many(&targets, &ScrapeOptions::default()).map(|_| ()),
        ] {
            match result {
                Err(e @ Error::NotCompiled { feature, .. }) => {
                    assert_eq!(feature, FEATURE);
                    let message = e.to_string();
                    assert!(message.contains("127.0.0.1:1"), "{message}");
                    assert!(message.contains("`scrape` feature"), "{message}");
                }
                Err(other) => panic!("not NotCompiled: {other}"),
                Ok(()) => panic!("scraped without the scrape feature"),
            }
        }
    }
}
