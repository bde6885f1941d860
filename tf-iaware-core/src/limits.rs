//! The bounds of every count a user gives (flags, specs, files), in one place: the CLI checks its
//! flags against them when it parses them ([`check`]), and the library functions that take the
//! counts check them again, so an absurd number (`--ops 18446744073709551615`) is an error naming
//! the flag instead of memory growing until the process is killed.

use crate::error::{Error, Result};

/// Most steps (timed or warm-up) one training run takes.
pub const MAX_STEPS: usize = 10_000_000;
/// Largest global batch a synthetic run takes (its bytes are checked against memory as well).
pub const MAX_BATCH: usize = 1 << 24;
/// Most workers of a synthetic cluster or a scale study.
pub const MAX_WORKERS: usize = 100_000;
/// Most parameter-server tasks of a synthetic cluster.
pub const MAX_PS: usize = 4_096;
/// Most tasks a TF_CONFIG cluster may list (all jobs together).
pub const MAX_TASKS: usize = 100_000;
/// Most CPU devices of `local:cpu=N`.
pub const MAX_LOCAL_CPUS: usize = 256;
/// Most ops of a synthetic layered DAG (`bench --simulate --ops`, `--study-ops`): a million ops
/// take about a gigabyte to place.
pub const MAX_OPS: usize = 1_000_000;
/// Most rounds a benchmark repeats.
pub const MAX_REPEATS: usize = 1_000;
/// Most samples of a benchmark's "time to train" column (a hundred ImageNet epochs).
pub const MAX_SAMPLES: usize = 1 << 37;

/// `value` if it lies within `min..=max`; `what` names the flag or field in the error.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what`, the value and the bounds.
pub fn check(what: &str, value: usize, min: usize, max: usize) -> Result<usize> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(Error::InvalidArgument {
            what: format!("{what} {value}"),
            reason: format!("must be {min} to {max}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outside_their_bounds_name_the_flag_and_the_bounds() {
        assert_eq!(check("--ops", 10, 1, MAX_OPS).unwrap(), 10);
        let e = check("--ops", usize::MAX, 1, MAX_OPS)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--ops") && e.contains(&MAX_OPS.to_string()),
            "{e}"
        );
        assert!(check("--study-workers", 0, 1, MAX_WORKERS).is_err());
    }
}
