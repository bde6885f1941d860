//! Planning past one machine, by simulation (issue 15): synthetic cluster specs through the CLI,
//! `bench --simulate` and `bench --scale-study`. No TensorFlow session, no worker processes.

mod common;

use std::collections::BTreeSet;

use common::{fails, ok};

const THOUSAND: &str =
    "synthetic:workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us:mem=2g:seed=7";

#[test]
fn bench_simulate_plans_a_thousand_workers_validly() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sim.json");
    ok(&[
        "bench",
        "--simulate",
        "--sim-cluster",
        THOUSAND,
        "--strategies",
        "replica-setter,infra-aware,heft,sync-backup,async-ps,infra-aware-async",
        "--ops",
        "2000",
        "--repeats",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{v}");
    let row = |name: &str| rows.iter().find(|r| r["planner"] == name).unwrap();
    let (stock, infra, heft) = (row("replica-setter"), row("infra-aware"), row("heft"));
    let (backup, async_ps) = (row("sync-backup"), row("async-ps"));
    assert_eq!(stock["global_batch"], 32_000);
    assert_eq!(stock["workers_used"], 1000, "equal shares use every worker");
    let ratio = |r: &serde_json::Value| r["ratio_to_lower_bound"].as_f64().unwrap();
    assert!(
        ratio(infra) >= 1.0 && ratio(infra) < ratio(stock),
        "{infra} vs {stock}"
    );
    assert_eq!(heft["kind"], "per-op");
    assert_eq!(heft["ops"], 2000);
    assert!(ratio(heft) >= 1.0, "{heft}");
    // The backup and asynchronous contenders, each in its own mode and above its own bound.
    let step = |r: &serde_json::Value| r["predicted_step_ms"].as_f64().unwrap();
    assert_eq!(stock["mode"], "sync");
    assert_eq!(backup["mode"], "backup");
    assert_eq!(async_ps["mode"], "async");
    assert_eq!(row("infra-aware-async")["mode"], "async");
    assert!(step(backup) <= step(stock), "{backup} vs {stock}");
    for r in rows.iter().filter(|r| r["kind"] == "data-parallel") {
        assert!(ratio(r) >= 1.0 - 1e-9, "{r}");
        assert!(r["images_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn the_scale_study_writes_one_row_per_planner_and_size_and_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let (json, svg) = (dir.path().join("s.json"), dir.path().join("s.svg"));
    let out = ok(&[
        "bench",
        "--scale-study",
        "--study-workers",
        "4,16,64",
        "--study-ops",
        "500,1000",
        "--strategies",
        "replica-setter,infra-aware,sync-backup,async-ps,infra-aware-async,heft,etf",
        "--repeats",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.contains("plan time ∝"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    // 5 data-parallel planners × 3 worker counts; 2 per-op strategies × (2 op counts + 3 device
    // counts).
    assert_eq!(rows.len(), 15 + 10);
    let keys: BTreeSet<(String, String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["planner"].as_str().unwrap().to_string(),
                r["sweep"].as_str().unwrap().to_string(),
                r["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys.len(), rows.len(), "one row per (planner, size)");
    assert_eq!(v["growth"].as_array().unwrap().len(), 9);
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("polyline"),
        "{chart}"
    );
}

#[test]
fn synthetic_clusters_work_with_simulate_and_bad_ones_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let graph = common::model(dir.path(), "mlp", 8);
    let out = ok(&[
        "simulate",
        "--graph",
        graph.to_str().unwrap(),
        "--cluster",
        "synthetic:workers=16:ps=2:avail=beta(2,2):cap=lognormal(0,0.5)",
        "--strategy",
        "heft",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_object().unwrap().len(), 18, "{v}");
    assert!(v["predicted_step_ms"].as_f64().unwrap() >= v["lower_bound_ms"].as_f64().unwrap());
    let err = fails(&[
        "simulate",
        "--graph",
        graph.to_str().unwrap(),
        "--cluster",
        "synthetic:workers=16:avail=lognormal(0,1)",
        "--strategy",
        "heft",
    ]);
    assert!(
        err.contains("field `avail`") && err.contains("beta"),
        "{err}"
    );
    let err = fails(&["bench", "--simulate", "--sim-cluster", "local:cpu=2"]);
    assert!(err.contains("synthetic"), "{err}");
}
