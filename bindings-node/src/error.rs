//! Client errors as JS errors for the JS layer to re-type.
//!
//! Every error this module builds is a JS `Error` whose `code` property is
//! the stable code (`BUSY`, `INVALID_ARGUMENT`, `ABORTED`, …), set by napi
//! from the error's status string; `index.js` picks the typed class
//! (`BusyError`, `RangeError`, …) by that property. The message is the
//! client's, without any prefix.

use napi::bindgen_prelude::JsError;
use napi::Env;
use ticketing_client::Error;

/// The result of a native call: a JS error carries its code as status.
pub(crate) type JsResult<T> = napi::Result<T, Code>;

/// The stable code of a native error: the JS `err.code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code(std::borrow::Cow<'static, str>);

impl Code {
    fn of(code: &'static str) -> Code {
        Code(std::borrow::Cow::Borrowed(code))
    }

    /// A client error's code ([`Error::code`]) as JS spells it: `busy` →
    /// `BUSY`, `auth_failed` → `AUTH_FAILED`.
    fn client(err: &Error) -> Code {
        Code(std::borrow::Cow::Owned(err.code().to_ascii_uppercase()))
    }
}

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Why a bridged operation ended without a value.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client's typed error.
    Client(Error),
    /// A bad argument found by the binding itself (before the client).
    Invalid(String),
    /// Cancelled through the acquire's `Canceller` (an `AbortSignal`): the
    /// client future was dropped before this was reported.
    Aborted,
    /// The task ended without a result (only when the runtime shuts down).
    Lost,
    /// napi itself failed (creating a promise, converting a value).
    Napi(napi::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Client(e)
    }
}

impl Failure {
    /// The code and the message of the JS error.
    fn parts(self) -> (Code, String) {
        match self {
            // The cause alone: "invalid argument: " would only repeat the class (RangeError).
            Failure::Client(Error::InvalidArgument(cause)) => (Code::of("INVALID_ARGUMENT"), cause.to_string()),
            Failure::Client(e) => (Code::client(&e), e.to_string()),
            Failure::Invalid(why) => (Code::of("INVALID_ARGUMENT"), why),
            Failure::Aborted => (Code::of("ABORTED"), "the operation was aborted".to_owned()),
            Failure::Lost => {
                (Code::of("TICKETING"), "the client task ended without a result (runtime shut down)".to_owned())
            }
            Failure::Napi(e) => (Code::of("TICKETING"), format!("{}: {}", e.status, e.reason)),
        }
    }

    /// The error, to be thrown by a synchronous native call.
    pub(crate) fn into_js(self) -> napi::Error<Code> {
        let (code, message) = self.parts();
        napi::Error::new(code, message)
    }

    /// The error as a JS value built on the JS thread (`env`), for a
    /// promise to reject with: napi passes such an error on as it is.
    pub(crate) fn into_rejection(self, env: Env) -> napi::Error {
        let key = match &self {
            Failure::Client(Error::Forbidden { key }) => Some(key.clone()),
            _ => None,
        };
        let error = JsError::from(self.into_js()).into_unknown(env);
        if let Some(key) = key {
            // A `ForbiddenError` carries the key its principal may not use.
            if let Ok(napi::ValueType::Object) = error.get_type() {
                // SAFETY: the value was just checked to be an object.
                if let Ok(mut object) = unsafe { error.cast::<napi::bindgen_prelude::Object>() } {
                    use napi::bindgen_prelude::JsObjectValue;
                    let _ = object.set_named_property("key", key);
                }
            }
        }
        napi::Error::from(error)
    }
}

impl From<napi::Error> for Failure {
    fn from(e: napi::Error) -> Self {
        Failure::Napi(e)
    }
}

/// A synchronous client error (constructor arguments, TLS option).
pub(crate) fn client(e: Error) -> napi::Error<Code> {
    Failure::Client(e).into_js()
}

/// A bad argument found by the binding itself (before the client).
pub(crate) fn invalid(why: impl std::fmt::Display) -> napi::Error<Code> {
    Failure::Invalid(why.to_string()).into_js()
}

/// napi's own failure (creating a promise), as a native error.
pub(crate) fn napi_failed(e: napi::Error) -> napi::Error<Code> {
    Failure::Napi(e).into_js()
}
