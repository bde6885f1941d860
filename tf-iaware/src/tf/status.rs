//! RAII `TF_Status`.

use std::ffi::CStr;

use tf_iaware_sys as sys;

use crate::error::{Error, Result};

/// An owned `TF_Status`, deleted on drop.
pub(crate) struct Status(*mut sys::TF_Status);

impl Status {
    pub(crate) fn new() -> Self {
        // SAFETY: TF_NewStatus has no preconditions and never returns null.
        Status(unsafe { sys::TF_NewStatus() })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::TF_Status {
        self.0
    }

    /// `Ok` if the status is `TF_OK`, else [`Error::TensorFlow`] naming `call`.
    pub(crate) fn check(&self, call: &str) -> Result<()> {
        // SAFETY: self.0 is a live status.
        let code = unsafe { sys::TF_GetCode(self.0) };
        if code == sys::TF_OK {
            return Ok(());
        }
        // SAFETY: TF_Message returns a NUL-terminated string owned by the live status.
        let message = unsafe { CStr::from_ptr(sys::TF_Message(self.0)) }.to_string_lossy();
        Err(Error::tf(call, format!("{message} (code {code})")))
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewStatus, deleted once.
        unsafe { sys::TF_DeleteStatus(self.0) }
    }
}
