//! The combination across replicas: every gradient as Σ_k (share_k / global batch) · g_k before
//! its one update, and the loss the same way under its original name.

use super::{Output, Role};
use crate::parallel::plan::Replica;
use crate::proto::attr;

/// The replicas' shares of the global batch, the weights of every combination.
pub(super) struct Shares<'a> {
    /// The replicas, in the graph's numbering.
    pub(super) replicas: &'a [Replica],
    /// Sum of their batches.
    pub(super) global: usize,
}

/// Adds the combined loss `loss` (of type `dtype`) from every replica's copy, with
/// [`Role::Loss`].
pub(super) fn combine_loss(out: &mut Output, shares: &Shares<'_>, loss: &str, dtype: i32) {
    let parts: Vec<String> = (0..shares.replicas.len())
        .map(|k| super::replica_name(k, loss))
        .collect();
    weighted_sum(
        out,
        shares,
        loss,
        "tf_iaware_combine/loss",
        &parts,
        dtype,
        Role::Loss,
    );
}

/// Adds the combination of `parts` (every replica's gradient for update `update`, of type
/// `dtype`), with [`Role::Combine`]; returns the name of the combined tensor.
pub(super) fn combine_gradient(
    out: &mut Output,
    shares: &Shares<'_>,
    update: &str,
    parts: &[String],
    dtype: i32,
) -> String {
    let combined = format!("tf_iaware_combine/{update}/sum");
    let role = Role::Combine {
        update: update.to_string(),
    };
    let scope = format!("tf_iaware_combine/{update}");
    weighted_sum(out, shares, &combined, &scope, parts, dtype, role);
    combined
}

/// `name` = Σ_k (share_k / global) · parts[k]: one `Const` weight and one `Mul` per replica
/// (under `scope`) and an `AddN` named `name`; every node gets `role`.
fn weighted_sum(
    out: &mut Output,
    shares: &Shares<'_>,
    name: &str,
    scope: &str,
    parts: &[String],
    dtype: i32,
    role: Role,
) {
    let mut terms = Vec::with_capacity(parts.len());
    for (k, (part, r)) in parts.iter().zip(shares.replicas).enumerate() {
        let weight = format!("{scope}/weight_{k}");
        let value = attr::float_scalar(dtype, r.batch as f64 / shares.global as f64);
        let c = attr::node(
            &weight,
            "Const",
            vec![],
            vec![("dtype", attr::dtype(dtype)), ("value", value)],
        );
        let mul = format!("{scope}/mul_{k}");
        let m = attr::node(
            &mul,
            "Mul",
            vec![part.clone(), weight],
            vec![("T", attr::dtype(dtype))],
        );
        out.push(c, role.clone());
        out.push(m, role.clone());
        terms.push(mul);
    }
    let sum = attr::node(
        name,
        "AddN",
        terms,
        vec![
            ("N", attr::int(parts.len() as i64)),
            ("T", attr::dtype(dtype)),
        ],
    );
    out.push(sum, role);
}
