//! RAII `TF_Status`.

use std::ffi::CStr;

use tf_iaware_sys as sys;

use crate::error::{Error, Result, TfCode};

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
        Err(Error::tf(
            call,
            TfCode::from_number(u32::try_from(code).unwrap_or(u32::MAX)),
            message,
        ))
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewStatus, deleted once.
        unsafe { sys::TF_DeleteStatus(self.0) }
    }
}

/// The core mirror of a `tensorflow` crate status code.
pub(crate) fn code_of(code: tensorflow::Code) -> TfCode {
    use tensorflow::Code as C;
    match code {
        C::Ok => TfCode::Ok,
        C::Cancelled => TfCode::Cancelled,
        C::Unknown => TfCode::Unknown,
        C::InvalidArgument => TfCode::InvalidArgument,
        C::DeadlineExceeded => TfCode::DeadlineExceeded,
        C::NotFound => TfCode::NotFound,
        C::AlreadyExists => TfCode::AlreadyExists,
        C::PermissionDenied => TfCode::PermissionDenied,
        C::ResourceExhausted => TfCode::ResourceExhausted,
        C::FailedPrecondition => TfCode::FailedPrecondition,
        C::Aborted => TfCode::Aborted,
        C::OutOfRange => TfCode::OutOfRange,
        C::Unimplemented => TfCode::Unimplemented,
        C::Internal => TfCode::Internal,
        C::Unavailable => TfCode::Unavailable,
        C::DataLoss => TfCode::DataLoss,
        C::Unauthenticated => TfCode::Unauthenticated,
        C::UnrecognizedEnumValue(n) => TfCode::from_number(n),
    }
}

/// [`Error::TensorFlow`] naming `call`, with the code and message of `e` — a TensorFlow status
/// (the attribute setters' boxed errors may hold one); any other error (a NUL in a name) is
/// [`TfCode::InvalidArgument`] with its own message.
pub(crate) fn error(call: impl Into<String>, e: &(dyn std::error::Error + 'static)) -> Error {
    match e.downcast_ref::<tensorflow::Status>() {
        Some(status) => {
            // The message without the `Code: ` prefix the status's Display puts before it.
            #[allow(deprecated)]
            let message = std::error::Error::description(status).to_string();
            Error::tf(call, code_of(status.code()), message)
        }
        None => Error::tf(call, TfCode::InvalidArgument, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_becomes_an_error_with_its_code_and_bare_message() {
        for code in TfCode::ALL.into_iter().filter(|c| *c != TfCode::Ok) {
            let c = tensorflow::Code::UnrecognizedEnumValue(code.number());
            // The crate's own variant for the number, through a status that holds it.
            let status = tensorflow::Status::new_set_lossy(c, "the message");
            assert_eq!(code_of(status.code()), code);
            let e = error("Session::run(x)", &status);
            assert_eq!(e.tf_code(), Some(code));
            assert_eq!(
                e.to_string(),
                format!("TensorFlow Session::run(x) failed: {code}: the message")
            );
        }
    }
}
