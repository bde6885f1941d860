//! Arbitrary text as a `--cluster` spec, device name, emulated scenario and TF_CONFIG: every
//! parser returns an error, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_iaware::cluster::tf_config::TfConfig;
use tf_iaware::cluster::ClusterSpec;
use tf_iaware_emulate::Scenario;
use tf_iaware::graph::DeviceName;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(spec) = ClusterSpec::parse(text) {
            assert_eq!(ClusterSpec::parse(&spec.to_string()).ok(), Some(spec));
        }
        let _ = DeviceName::parse(text);
        let _ = Scenario::parse(text);
        let _ = TfConfig::parse(text, "fuzz input");
    }
});
