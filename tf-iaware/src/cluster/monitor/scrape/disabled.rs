//! Without the `scrape` feature: the engine behind [`Scraper`](super::Scraper) refuses to
//! start, so callers compile the same with and without the feature.

use super::{ScrapeOptions, ScrapeReport, Target};
use crate::error::{Error, Result};

/// The cargo feature the scraper needs.
pub(crate) const FEATURE: &str = "scrape";

/// The engine of a build without the `scrape` feature: none can exist.
#[derive(Debug)]
pub(super) struct Engine(std::convert::Infallible);

impl Engine {
    /// Always [`Error::NotCompiled`] naming the [`FEATURE`] and the first target.
    pub(super) fn new(targets: Vec<Target>, _options: ScrapeOptions) -> Result<Engine> {
        let what = match targets.first() {
            Some(t) => format!("reading metrics agents (first: {})", t.name),
            None => "reading metrics agents".to_string(),
        };
        Err(Error::NotCompiled {
            feature: FEATURE,
            what,
        })
    }

    pub(super) fn targets(&self) -> Vec<&Target> {
        match self.0 {}
    }

    pub(super) fn scrape(&mut self) -> Vec<ScrapeReport> {
        match self.0 {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::monitor::scrape::{scrape_many, Scraper};

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
                    let shown = e.to_string();
                    assert!(shown.contains("127.0.0.1:1"), "{shown}");
                    assert!(shown.contains("`scrape` feature"), "{shown}");
                }
                Err(other) => panic!("not NotCompiled: {other}"),
                Ok(()) => panic!("scraped without the scrape feature"),
            }
        }
    }
}
