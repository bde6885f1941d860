//! The README's set-up for a crate of your own, proved: a new crate outside this workspace, made
//! from the README's three snippets (dependency, config table, build script) and the
//! `own_model` example, builds and runs its binary, a test and an example — placing and training
//! its own model on `local:cpu=2` and on a TF_CONFIG cluster of real worker processes — without
//! `LD_LIBRARY_PATH`.
//!
//! The crate's sources go to a temporary folder (outside this repository, so none of its
//! `.cargo/config.toml` applies); its target dir is `target/outside-crate`, kept between runs so
//! only the first run pays for the build. The inner cargo runs `--offline` with this workspace's
//! `Cargo.lock`: every crate it needs is already in the local registry cache.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fenced block that follows `<!-- outside-crate: NAME -->` in the README.
fn readme_block(name: &str) -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let marker = format!("<!-- outside-crate: {name} -->");
    let after = &readme[readme
        .find(&marker)
        .unwrap_or_else(|| panic!("README has no `{marker}`"))..];
    let start = after.find("```").unwrap();
    let body = &after[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_string()
}

/// A command with none of the outer cargo's environment that would hide a broken set-up.
fn clean(mut cmd: Command) -> Command {
    for var in [
        "LD_LIBRARY_PATH",
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_MANIFEST_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

struct Built {
    _sources: tempfile::TempDir,
    bin: PathBuf,
    example: PathBuf,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Generates the crate, runs its `cargo test` (which builds the binary, the test and the
/// example, and runs the test), once per test process.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let sources = tempfile::Builder::new()
            .prefix("tf-iaware-outside-crate")
            .tempdir()
            .unwrap();
        let dir = sources.path();
        let dependency = readme_block("Cargo.toml").replace(
            "/path/to/tf-iaware",
            root().to_str().expect("a UTF-8 checkout path"),
        );
        write(
            &dir.join("Cargo.toml"),
            &format!(
                "[package]\nname = \"my-trainer\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                 {dependency}\n# Not part of any workspace above the temporary folder.\n[workspace]\n"
            ),
        );
        write(
            &dir.join(".cargo/config.toml"),
            &readme_block(".cargo/config.toml"),
        );
        write(&dir.join("build.rs"), &readme_block("build.rs"));
        std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
        let example = root().join("tf-iaware/examples/own_model");
        let main = std::fs::read_to_string(example.join("main.rs")).unwrap();
        let model = std::fs::read_to_string(example.join("model.rs")).unwrap();
        write(&dir.join("src/main.rs"), &main);
        write(&dir.join("src/model.rs"), &model);
        write(
            &dir.join("tests/one_step.rs"),
            "#[allow(dead_code)]\n#[path = \"../src/model.rs\"]\nmod model;\n\n\
             #[test]\nfn a_placed_step_runs() {\n\
             \x20   let m = model::build().unwrap();\n\
             \x20   let (xs, ys) = model::batch(1);\n\
             \x20   let cluster = tf_iaware::connect(\"local:cpu=2\").unwrap();\n\
             \x20   let step = tf_iaware::Step::new().target(&m.train).fetch(&m.loss);\n\
             \x20   let plan = cluster.place(&*m.scope.graph(), &step, \"round-robin\").unwrap();\n\
             \x20   let session = plan.session().unwrap();\n\
             \x20   session.run(tf_iaware::Run::new().target(&m.init)).unwrap();\n\
             \x20   let run = tf_iaware::Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys);\n\
             \x20   assert!(session.run(run).unwrap().scalar::<f32>(&m.loss).unwrap().is_finite());\n\
             }\n",
        );
        write(
            &dir.join("examples/devices.rs"),
            "fn main() -> tf_iaware::Result<()> {\n\
             \x20   let cluster = tf_iaware::connect(\"local:cpu=3\")?;\n\
             \x20   println!(\"{} devices\", cluster.cluster().devices.len());\n\
             \x20   Ok(())\n}\n",
        );
        let target = root().join("target/outside-crate");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = clean(Command::new(cargo));
        let out = cmd
            .args(["test", "--offline", "--all-targets"])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("cargo runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the outside crate's `cargo test` failed:\n{stderr}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("test a_placed_step_runs ... ok"),
            "its own test ran: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // `cargo test` leaves examples under hashed names; a build gives them their own.
        let out = clean(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())))
            .args(["build", "--offline", "--examples"])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building the outside crate's examples failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Built {
            _sources: sources,
            bin: target.join("debug/my-trainer"),
            example: target.join("debug/examples/devices"),
        }
    })
}

/// Runs the outside crate's binary on `spec`; returns its stdout.
fn train(spec: &str) -> String {
    let out = clean(Command::new(&built().bin))
        .args([spec, "15"])
        .output()
        .expect("the outside binary starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "my-trainer {spec} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The loss before and after training, and the mismatch count, of each strategy's line.
fn check_lines(stdout: &str) {
    for strategy in ["heft", "round-robin"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{strategy}:")))
            .unwrap_or_else(|| panic!("no {strategy} line in {stdout}"));
        assert!(line.contains(", 0 mismatches"), "{line}");
        let losses = line.split("loss ").nth(1).unwrap();
        let (first, rest) = losses.split_once(" -> ").unwrap();
        let last = rest.split_whitespace().next().unwrap();
        let (first, last): (f32, f32) = (first.parse().unwrap(), last.parse().unwrap());
        assert!(last < first, "{strategy}: loss {first} -> {last}");
    }
}

#[test]
fn outside_crate_trains_its_own_model_on_local_devices() {
    check_lines(&train("local:cpu=2"));
    let out = clean(Command::new(&built().example))
        .output()
        .expect("the outside example starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3 devices");
}

#[test]
fn outside_crate_trains_its_own_model_on_a_tf_config_cluster() {
    built();
    let scenario = Scenario::parse("workers=1,1").unwrap();
    let cluster = EmulatedCluster::start(&scenario, &common::exe()).unwrap();
    let spec = format!(
        "tf-config:{}",
        cluster.dir().join("tf_config.json").display()
    );
    let stdout = train(&spec);
    check_lines(&stdout);
    // round-robin spreads the model over the tasks' devices.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("round-robin:"))
        .unwrap();
    assert!(!line.contains("on 1 devices"), "{line}");
}
