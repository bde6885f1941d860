//! Property tests of the emulated-scenario parser (moved here from tf-iaware's parser tests with
//! the emulation itself): arbitrary text is a scenario or an error, never a panic; generated
//! inline scenarios parse to their workers.

use proptest::prelude::*;
use tf_iaware_emulate::Scenario;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that looks a little like each format: brackets, quotes, colons, digits, escapes.
fn textish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9:=,.@/{}\\[\\]\" \\\\_-]{0,80}",
        proptest::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_is_a_scenario_or_an_error(text in textish()) {
        let _ = Scenario::parse(&text);
    }

    #[test]
    fn inline_scenarios_parse_to_their_workers(cpus in proptest::collection::vec(1u32..=400, 1..8)) {
        let text = format!(
            "workers={}",
            cpus.iter().map(|c| format!("{}", f64::from(*c) / 100.0)).collect::<Vec<_>>().join(",")
        );
        let s = Scenario::parse(&text).unwrap();
        prop_assert_eq!(s.workers.len(), cpus.len());
    }
}
