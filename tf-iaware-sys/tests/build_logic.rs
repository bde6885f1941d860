//! Unit tests of the build script's pure logic (`build/plan.rs`, `build/defer.rs`), compiled here
//! because cargo does not run tests of a build script. This target does not use the library, so it
//! links and runs without libtensorflow: `cargo test -p tf-iaware-sys --test build_logic`.

#[allow(dead_code)] // the build script's env helpers; only the names are used here
#[path = "../build/vars.rs"]
mod vars;

#[path = "../build/plan.rs"]
mod plan;

#[path = "../build/defer.rs"]
mod defer;
