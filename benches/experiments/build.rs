//! Adds the rpath of the libtensorflow that tf-iaware linked (published through its `links`
//! metadata as `DEP_TF_IAWARE_RT_LIBDIR`), so this crate's unit tests run without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TF_IAWARE_RT_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_TF_IAWARE_RT_LIBDIR") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
