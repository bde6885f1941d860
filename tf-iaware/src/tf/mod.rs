//! Safe wrappers over the raw C API calls of `tf_iaware_sys` (the ones the `tensorflow` crate does
//! not wrap): version check, kernel registry, distributed-runtime servers, checkpoint index.

pub(crate) mod checkpoint_reader;
mod kernels;
mod listen;
mod server;
pub(crate) mod status;

use std::ffi::CStr;
use std::sync::OnceLock;

pub use checkpoint_reader::list_checkpoint;
pub use kernels::{kernel_device_types, kernel_device_types_for};
pub use server::Server;

use crate::error::{Error, Result};

/// Version string of the linked libtensorflow, e.g. `"2.21.0"`.
pub fn version() -> String {
    // SAFETY: TF_Version returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(tf_iaware_sys::TF_Version()) }
        .to_string_lossy()
        .into_owned()
}

/// Checks once per process that the linked libtensorflow is the release this code expects
/// (same major.minor).
///
/// # Errors
/// [`Error::TensorFlowVersion`] naming both versions and the library path.
pub(crate) fn ensure_supported_version() -> Result<()> {
    static CHECK: OnceLock<std::result::Result<(), (String, String)>> = OnceLock::new();
    let outcome = CHECK.get_or_init(|| {
        let found = version();
        let expected = tf_iaware_sys::EXPECTED_VERSION;
        let major_minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
        if major_minor(&found) == major_minor(expected) {
            Ok(())
        } else {
            Err((found, expected.to_string()))
        }
    });
    outcome
        .clone()
        .map_err(|(found, expected)| Error::TensorFlowVersion {
            found,
            expected,
            path: format!("{}/{}", tf_iaware_sys::LIB_DIR, tf_iaware_sys::LIB_FILE),
        })
}

/// Where the linked libtensorflow lives and which discovery step found it.
pub fn library_location() -> (&'static str, &'static str, &'static str) {
    (
        tf_iaware_sys::LIB_DIR,
        tf_iaware_sys::LIB_FILE,
        tf_iaware_sys::LIB_SOURCE,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn linked_version_is_supported() {
        super::ensure_supported_version().unwrap();
        assert!(super::version().starts_with("2.21"));
    }
}
