//! Adds the rpath of the libtensorflow that tf-iaware-sys linked (published through its `links`
//! metadata as `DEP_TF_IAWARE_LIBDIR`), so the CLI, tests, benches and examples run without
//! LD_LIBRARY_PATH; and exports the library's `bind` from every executable, so TensorFlow's
//! gRPC servers listen only on their task's own address (tf-iaware's `tf::listen`).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TF_IAWARE_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_TF_IAWARE_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=bind");
}
