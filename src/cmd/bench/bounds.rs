//! `bench`'s numbers and output paths, checked before any cluster starts: an absurd flag should
//! cost an error, not a cluster, a calibration and a run that never ends.

use anyhow::{bail, Result};
use tf_iaware::runtime::train::{MAX_BATCH, MAX_STEPS};

/// Checks `args`' numbers against their documented ranges and that `--svg` can be written
/// (`--json` is checked where the bench begins).
pub(super) fn check(args: &super::Args) -> Result<()> {
    if !(1..=MAX_STEPS).contains(&args.steps) {
        bail!("--steps {}: must be 1 to {MAX_STEPS}", args.steps);
    }
    if args.warmup > MAX_STEPS {
        bail!(
            "--warmup {}: warm-up steps must be at most {MAX_STEPS}",
            args.warmup
        );
    }
    if !(1..=args.steps).contains(&args.repeats) {
        bail!(
            "--repeats {}: must be 1 to --steps ({}), each round timing at least one step",
            args.repeats,
            args.steps
        );
    }
    if !(1..=MAX_BATCH).contains(&args.batch) {
        bail!(
            "--batch {}: the global batch must be 1 to {MAX_BATCH}",
            args.batch
        );
    }
    if args.samples == 0 {
        bail!("--samples 0: the \"time to train\" column needs at least 1 sample");
    }
    Ok(())
}
