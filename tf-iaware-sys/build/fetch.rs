//! Step 4: the pinned TensorFlow wheel, fetched with `pip download`, verified by SHA-256, its two
//! shared objects extracted into a per-user cache (outside `target/`) and renamed into place
//! atomically, so every later build and every clone reuses them.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::discover::{self, Found};
use crate::vars;

/// TensorFlow release the project is written against.
pub const TF_VERSION: &str = "2.21.0";
/// Tags pinned so that every machine resolves the very same file.
const PYTHON_VERSION: &str = "3.11";
const ABI: &str = "cp311";
const PLATFORM: &str = "manylinux_2_27_x86_64";
/// SHA-256 of `tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl`.
const CPU_WHEEL_SHA256: &str = "2b847d217b02ee7731ed91431daf3250daa0196c3c94614d23be27232e6e5b6c";
/// The members of the wheel that are extracted.
const MEMBERS: [&str; 2] = ["libtensorflow_cc.so.2", "libtensorflow_framework.so.2"];
/// Written last into a finished cache entry.
const COMPLETE: &str = ".complete";

struct Variant {
    name: &'static str,
    package: &'static str,
    sha256: Option<String>,
}

fn variant() -> Result<Variant, String> {
    let pinned = vars::get(vars::WHEEL_SHA256);
    match vars::get(vars::VARIANT).as_deref().unwrap_or("cpu") {
        "cpu" => Ok(Variant {
            name: "cpu",
            package: "tensorflow-cpu",
            sha256: Some(pinned.unwrap_or_else(|| CPU_WHEEL_SHA256.into())),
        }),
        "gpu" => Ok(Variant {
            name: "gpu",
            package: "tensorflow",
            sha256: pinned,
        }),
        other => Err(format!(
            "{} must be `cpu` or `gpu`, not `{other}`",
            vars::VARIANT
        )),
    }
}

/// Root of the per-user cache.
fn cache_root() -> Result<PathBuf, String> {
    if let Some(dir) = vars::get(vars::CACHE_DIR) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = vars::get(vars::XDG_CACHE_HOME) {
        return Ok(PathBuf::from(xdg).join("tf-iaware"));
    }
    vars::get(vars::HOME)
        .map(|h| PathBuf::from(h).join(".cache").join("tf-iaware"))
        .ok_or_else(|| format!("no cache directory: set {} or HOME", vars::CACHE_DIR))
}

/// File name of the pinned wheel, e.g. `tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl`.
pub fn wheel_file_name() -> String {
    format!("tensorflow_cpu-{TF_VERSION}-{ABI}-{ABI}-{PLATFORM}.whl")
}

/// The per-user cache entry of the selected variant: where steps 4a–4c look and extract.
pub struct Cache {
    variant: Variant,
    root: PathBuf,
    entry: PathBuf,
}

impl Cache {
    /// Reads the variant and the cache location from the environment.
    pub fn locate() -> Result<Cache, String> {
        let variant = variant()?;
        let root = cache_root()?;
        let entry = root.join(format!("libtensorflow-{}-{TF_VERSION}", variant.name));
        Ok(Cache {
            variant,
            root,
            entry,
        })
    }

    /// The file written last into a finished entry: absent until a fetch or extract completes.
    pub fn complete_marker(&self) -> PathBuf {
        self.entry.join(COMPLETE)
    }

    fn source(&self) -> String {
        format!(
            "cached {} wheel in {}",
            self.variant.package,
            self.entry.display()
        )
    }

    /// Step 4a: a finished extract (no network, no checksum: it was verified when it was made).
    pub fn cached(&self, notes: &mut Vec<String>) -> Option<Found> {
        if self.entry.join(COMPLETE).is_file() {
            if let Some(found) = discover::in_dir(&self.entry, self.source()) {
                return Some(found);
            }
        }
        notes.push(format!(
            "cache: no finished extract in {}",
            self.entry.display()
        ));
        None
    }

    /// Step 4b (`wheel` given) or 4c (`None`: fetched with pip): verifies the wheel, extracts its
    /// two shared objects into a temporary folder and renames it into place.
    pub fn install(&self, wheel: Option<&Path>) -> Result<Found, String> {
        let Some(sha256) = self.variant.sha256.clone() else {
            return Err(format!(
                "the `{}` variant is not pinned: set {} to the SHA-256 of the wheel you trust",
                self.variant.name,
                vars::WHEEL_SHA256
            ));
        };
        let (root, entry) = (&self.root, &self.entry);
        fs::create_dir_all(root)
            .map_err(|e| format!("cannot create cache {}: {e}", root.display()))?;
        let work = tempdir_in(root)?;
        let result = (|| {
            let wheel = match wheel {
                Some(w) => w.to_path_buf(),
                None => download(&self.variant, &work)?,
            };
            verify(&wheel, &sha256)?;
            let staged = work.join("lib");
            extract(&wheel, &staged)?;
            File::create(staged.join(COMPLETE))
                .and_then(|mut f| writeln!(f, "{sha256}"))
                .map_err(|e| format!("cannot write {}: {e}", staged.display()))?;
            // Atomic publish: a concurrent build may have won the race; its copy is as good as ours.
            if let Err(e) = fs::rename(&staged, entry) {
                if !entry.join(COMPLETE).is_file() {
                    return Err(format!(
                        "cannot move {} to {}: {e}",
                        staged.display(),
                        entry.display()
                    ));
                }
            }
            Ok(())
        })();
        let _ = fs::remove_dir_all(&work);
        result?;
        discover::in_dir(entry, self.source())
            .ok_or_else(|| format!("extracted cache {} lacks {:?}", entry.display(), MEMBERS))
    }
}

fn tempdir_in(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join(format!(".partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Runs `python3 -m pip download` for the pinned wheel into `dir` and returns the wheel's path.
fn download(variant: &Variant, dir: &Path) -> Result<PathBuf, String> {
    let python = vars::get(vars::PYTHON).unwrap_or_else(|| "python3".into());
    let spec = format!("{}=={TF_VERSION}", variant.package);
    println!("cargo:warning=tf-iaware-sys: downloading {spec} ({PLATFORM}, {ABI}) with pip, once per user (~274 MB)");
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--no-cache-dir",
        ])
        .args(["--disable-pip-version-check", "--progress-bar", "off"])
        .args([
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            "--abi",
            ABI,
        ])
        .args(["--platform", PLATFORM, "-d"])
        .arg(dir)
        .arg(&spec)
        .status()
        .map_err(|e| format!("cannot run `{python} -m pip`: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`{python} -m pip download {spec}` failed ({status})"
        ));
    }
    fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("pip reported success but left no .whl in {}", dir.display()))
}

fn verify(wheel: &Path, expected: &str) -> Result<(), String> {
    let mut file =
        File::open(wheel).map_err(|e| format!("cannot open {}: {e}", wheel.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read {}: {e}", wheel.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let got: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if got != expected.to_ascii_lowercase() {
        return Err(format!(
            "{} has SHA-256 {got}, expected {expected}: refusing to link it",
            wheel.display()
        ));
    }
    Ok(())
}

fn extract(wheel: &Path, dest: &Path) -> Result<(), String> {
    let file = File::open(wheel).map_err(|e| format!("cannot open {}: {e}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| format!("{} is not a wheel: {e}", wheel.display()))?;
    fs::create_dir_all(dest).map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
    for member in MEMBERS {
        let name = format!("tensorflow/{member}");
        let mut entry = archive
            .by_name(&name)
            .map_err(|e| format!("{} has no {name}: {e}", wheel.display()))?;
        let target = dest.join(member);
        let mut out = File::create(&target)
            .map_err(|e| format!("cannot create {}: {e}", target.display()))?;
        io::copy(&mut entry, &mut out).map_err(|e| format!("cannot extract {name}: {e}"))?;
        out.sync_all()
            .map_err(|e| format!("cannot sync {}: {e}", target.display()))?;
    }
    Ok(())
}
