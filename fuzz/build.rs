//! Adds the rpath of the libtensorflow that tf-iaware-sys linked (published through its `links`
//! metadata as `DEP_TF_IAWARE_LIBDIR`), so fuzz targets run without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TF_IAWARE_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_TF_IAWARE_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
