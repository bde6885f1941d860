//! Adds the rpath of the libtensorflow that tf-iaware-sys linked (published through its `links`
//! metadata as `DEP_TF_IAWARE_LIBDIR`), so the library's tests and examples run without
//! LD_LIBRARY_PATH, and re-publishes that folder to crates that depend on tf-iaware (its own
//! `links = "tf_iaware_rt"`): their build script reads it as `DEP_TF_IAWARE_RT_LIBDIR` and adds
//! the same rpath to their binaries (README, "Quick start: the library"). Its own tests and
//! examples export the library's `bind` (`tf::listen`), as a crate that starts TensorFlow servers
//! must.
fn main() {
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=bind");
    println!("cargo:rerun-if-env-changed=DEP_TF_IAWARE_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_TF_IAWARE_LIBDIR") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
        println!("cargo:libdir={dir}");
    }
}
