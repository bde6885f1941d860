//! tf-iaware: infrastructure-aware device placement for TensorFlow.
pub fn version() -> String {
    // SAFETY: static string.
    unsafe { std::ffi::CStr::from_ptr(tf_iaware_sys::TF_Version()) }.to_string_lossy().into_owned()
}
