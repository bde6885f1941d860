//! How in-graph replication grows with the number of workers: for the zoo `mlp` (a
//! single-tower GraphDef, replicated as any user graph is), times the pure replication, the
//! analysis of the replicated graph by TensorFlow (import, shape inference, colocation), the
//! placement check and rewrite, the session set-up and the first step, on in-process CPU devices
//! (one per worker, so no process start-up is counted).
//!
//! `cargo run --release -p tf-iaware --example replication_scale -- 4 16 32`
use std::collections::BTreeMap;
use std::time::Instant;

use tf_iaware::graph::analyze::analyze_bytes;
use tf_iaware::parallel::replicate::{replicate, BatchData};
use tf_iaware::parallel::{DataParallelPlan, Replica};
use tf_iaware::runtime::replicated::{self, Workload};
use tf_iaware::runtime::{PlacedSession, SessionConfig, Trainer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let counts = if counts.is_empty() {
        vec![4, 16]
    } else {
        counts
    };
    println!(
        "workers  nodes  replicate_ms  analyze_ms  apply_ms  session_ms  first_step_ms  step_ms"
    );
    for n in counts {
        let per = 16;
        let m = tf_iaware::models::build("mlp", per * n, 1)?;
        let bytes = m.net.graph().graph_def()?;
        let single = analyze_bytes(&bytes, "mlp")?;
        let cpu = "/job:localhost/replica:0/task:0/device:CPU";
        let mut plan = DataParallelPlan {
            strategy: "scale".into(),
            replicas: (0..n)
                .map(|k| Replica {
                    device: format!("{cpu}:{}", k + 1),
                    batch: per,
                })
                .collect(),
            variable_devices: BTreeMap::new(),
            global_device: format!("{cpu}:0"),
            predicted_step_ms: None,
        };
        for v in replicated::variables(&single.op_graph) {
            plan.variable_devices.insert(v.name, format!("{cpu}:0"));
        }
        let t = Instant::now();
        let r = replicate(
            &single.graph_def,
            &single.signatures,
            &m.sidecar,
            &plan,
            BatchData::Synthetic { seed: 1 },
        )?;
        let replicate_ms = t.elapsed().as_secs_f64() * 1e3;
        let nodes = r.graph_def.node.len();
        let Workload::Graph(g) = Workload::graph("mlp", single, m.sidecar.clone())? else {
            unreachable!()
        };
        let cluster = tf_iaware::connect(&format!("local:cpu={}", n + 1))?;
        let t = Instant::now();
        let built = replicated::build(&g, &plan, cluster.cluster())?;
        let analyze_ms = t.elapsed().as_secs_f64() * 1e3 - replicate_ms;
        let t = Instant::now();
        let placed = tf_iaware::placer::apply::apply(
            &built.analyzed.graph_def,
            &built.analyzed.op_graph,
            cluster.cluster(),
            &built.placement,
        )?;
        let apply_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let session = PlacedSession::new(placed.graph, &SessionConfig::local_cpus(n + 1))?;
        let trainer = Trainer::new(session, &built.replication.sidecar, None, 1)?;
        trainer.init()?;
        let session_ms = t.elapsed().as_secs_f64() * 1e3;
        let (_, first, _) = trainer.step(0, false)?;
        let mut steps: Vec<f64> = (1..6)
            .map(|i| trainer.step(i, false).map(|(_, ms, _)| ms))
            .collect::<Result<_, _>>()?;
        steps.sort_by(f64::total_cmp);
        println!(
            "{n:>7}  {nodes:>5}  {replicate_ms:>12.1}  {analyze_ms:>10.1}  {apply_ms:>8.1}  {session_ms:>10.1}  {first:>13.1}  {:>7.1}",
            steps[2]
        );
    }
    Ok(())
}
