//! Maps the client's typed `Error` to the Ruby exception tree, and converts
//! Ruby arguments (seconds, keys) for the client.
//!
//! The exception classes are defined once, in `lib/ticketing/errors.rb`;
//! this module only looks them up by name and picks one per variant.
#![forbid(unsafe_code)]

use magnus::{prelude::*, value::ReprValue, Error, ExceptionClass, Integer, RArray, RModule, RString, Ruby, Value};
use ticketing_client::Error as ClientError;

/// `Ticketing::<name>`, an exception class defined by `ticketing/errors`.
fn class(ruby: &Ruby, name: &str) -> Result<ExceptionClass, Error> {
    let module: RModule = ruby.class_object().const_get("Ticketing")?;
    module.const_get(name)
}

/// An exception of `Ticketing::<name>` with `msg`; if the class cannot be
/// found (it always is: init requires `ticketing/errors`), a RuntimeError
/// that still says what happened.
fn raise(ruby: &Ruby, name: &str, msg: String) -> Error {
    match class(ruby, name) {
        Ok(cls) => Error::new(cls, msg),
        Err(_) => Error::new(ruby.exception_runtime_error(), format!("{msg} (Ticketing::{name})")),
    }
}

/// The Ruby exception for a client error. `InvalidArgument` becomes
/// `ArgumentError` (nothing was sent); every other variant its own subclass
/// of `Ticketing::Error`, carrying the client's message.
pub(crate) fn to_rb(ruby: &Ruby, err: ClientError) -> Error {
    let msg = err.to_string();
    match err {
        ClientError::InvalidArgument(cause) => Error::new(ruby.exception_arg_error(), cause.to_string()),
        ClientError::Forbidden { key } => forbidden(ruby, msg, key),
        // `Ticketing::<class_name>` (`BusyError`, …); a variant added later
        // whose class Ruby does not define gets the base class, with the
        // client's code in its message.
        other => match class(ruby, &other.class_name()) {
            Ok(cls) => Error::new(cls, msg),
            Err(_) => raise(ruby, "Error", format!("{} ({})", msg, other.code())),
        },
    }
}

/// `Ticketing::ForbiddenError` with the message and its `key`.
fn forbidden(ruby: &Ruby, msg: String, key: String) -> Error {
    let made = class(ruby, "ForbiddenError").and_then(|cls| cls.new_instance((msg.clone(), key)));
    match made {
        Ok(exception) => Error::from(exception),
        Err(_) => raise(ruby, "ForbiddenError", msg),
    }
}

/// The client task ended without a result (its runtime shut down, or it
/// panicked): the base `Ticketing::Error`.
pub(crate) fn task_lost(ruby: &Ruby) -> Error {
    raise(ruby, "Error", "the client task ended without a result (runtime shut down)".to_owned())
}

/// A number of seconds (`Integer`, `Float`, `Rational`, any `Numeric`) as
/// `f64` for the client, which rounds fractions up and range-checks. A
/// non-number is a `TypeError`; an Integer beyond 64 bits an
/// `ArgumentError` (out of range, as every other out-of-range duration).
pub(crate) fn secs(ruby: &Ruby, name: &str, value: Value) -> Result<f64, Error> {
    if !value.is_kind_of(ruby.class_numeric()) {
        return Err(Error::new(
            ruby.exception_type_error(),
            format!("{name} must be a number of seconds (Integer or Float), not {}", value.class().inspect()),
        ));
    }
    if let Some(int) = Integer::from_value(value) {
        return match int.to_i64() {
            Ok(v) => Ok(v as f64),
            Err(_) => Err(Error::new(ruby.exception_arg_error(), format!("{name} is out of range (got {int})"))),
        };
    }
    f64::try_convert(value)
}

/// A key as a Rust string. A non-String is a `TypeError`; a String that is
/// not valid UTF-8 cannot be visible ASCII, so it is an `ArgumentError`
/// (the client checks the 1–250 visible-ASCII rule for the rest).
pub(crate) fn key(ruby: &Ruby, value: Value) -> Result<String, Error> {
    let Some(s) = RString::from_value(value) else {
        return Err(Error::new(
            ruby.exception_type_error(),
            format!("key must be a String, not {}", value.class().inspect()),
        ));
    };
    s.to_string().map_err(|_| {
        Error::new(ruby.exception_arg_error(), "key must be 1-250 visible ASCII bytes (0x21-0x7E)".to_owned())
    })
}

/// A permit count as `i64` for the client, which checks 1–65535. A
/// non-Integer is a `TypeError`; an Integer beyond 64 bits an
/// `ArgumentError` (out of range, like 0 or 65536).
pub(crate) fn permits(ruby: &Ruby, value: Value) -> Result<i64, Error> {
    let Some(int) = Integer::from_value(value) else {
        return Err(Error::new(
            ruby.exception_type_error(),
            format!("n must be an Integer number of permits, not {}", value.class().inspect()),
        ));
    };
    int.to_i64().map_err(|_| Error::new(ruby.exception_arg_error(), format!("n must be 1-65535 permits (got {int})")))
}

/// The keys of a multi-key acquire. A non-Array is a `TypeError`, each
/// element as [`key`]; the client checks the count (2–16), duplicates and
/// the frame size.
pub(crate) fn keys(ruby: &Ruby, value: Value) -> Result<Vec<String>, Error> {
    let Some(list) = RArray::from_value(value) else {
        return Err(Error::new(
            ruby.exception_type_error(),
            format!("keys must be an Array of Strings, not {}", value.class().inspect()),
        ));
    };
    list.into_iter().map(|k| key(ruby, k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use magnus::error::ErrorType;

    /// The class name and message of an error built in Rust (lazily, or as
    /// an exception object with attributes, as `ForbiddenError`).
    fn parts(err: &Error) -> (String, String) {
        match err.error_type() {
            ErrorType::Error(class, msg) => (class.inspect(), msg.to_string()),
            ErrorType::Exception(e) => {
                let msg: String = e.funcall("message", ()).expect("message");
                (e.class().inspect(), msg)
            }
            other => panic!("not a Rust-built error: {other:?}"),
        }
    }

    // One test: the embedded Ruby VM is started once per process and used
    // from this thread only.
    #[test]
    fn errors_and_arguments_in_an_embedded_ruby() {
        Ruby::init(|ruby| {
            let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/lib");
            let _: Value = ruby.eval(&format!("$LOAD_PATH.unshift({lib:?})"))?;
            ruby.require("ticketing/errors")?;

            let cases = [
                (ClientError::Busy, "Ticketing::BusyError"),
                (ClientError::Forbidden { key: "payments/1".into() }, "Ticketing::ForbiddenError"),
                (ClientError::Indeterminate, "Ticketing::IndeterminateError"),
                (ClientError::InsufficientTime, "Ticketing::InsufficientTimeError"),
                (ClientError::Unavailable, "Ticketing::UnavailableError"),
                (ClientError::ReleaseUnconfirmed, "Ticketing::ReleaseUnconfirmedError"),
                (ClientError::Closed, "Ticketing::ClosedError"),
                (ClientError::AuthFailed, "Ticketing::AuthFailedError"),
                (ClientError::from(ticketing_client::TlsError::EmptyMode), "ArgumentError"),
            ];
            for (err, class) in cases {
                let msg = err.to_string();
                let (got_class, got_msg) = parts(&to_rb(ruby, err.clone()));
                assert_eq!(got_class, class, "{err:?}");
                if class == "ArgumentError" {
                    assert_eq!(got_msg, "tls must be off, system-roots, insecure-skip-verify or a CA file path");
                } else {
                    assert_eq!(got_msg, msg, "the client's message is kept");
                }
            }
            assert_eq!(parts(&task_lost(ruby)).0, "Ticketing::Error");

            let num = |src: &str| -> Result<Value, Error> { ruby.eval(src) };
            assert_eq!(secs(ruby, "wait", num("5")?)?, 5.0);
            assert_eq!(secs(ruby, "wait", num("0.2")?)?, 0.2);
            assert!((secs(ruby, "wait", num("Rational(1, 3)")?)? - 1.0 / 3.0).abs() < 1e-12);
            assert!(secs(ruby, "wait", num("Float::NAN")?)?.is_nan());
            assert_eq!(parts(&secs(ruby, "wait", num("2**80")?).unwrap_err()).0, "ArgumentError");
            assert_eq!(parts(&secs(ruby, "wait", num("'5'")?).unwrap_err()).0, "TypeError");
            assert_eq!(parts(&secs(ruby, "wait", num("nil")?).unwrap_err()).0, "TypeError");

            assert_eq!(key(ruby, num("'seat-1'")?)?, "seat-1");
            assert_eq!(parts(&key(ruby, num(":seat")?).unwrap_err()).0, "TypeError");
            assert_eq!(parts(&key(ruby, num("\"\\xff\".b")?).unwrap_err()).0, "ArgumentError");

            assert_eq!(permits(ruby, num("5")?)?, 5);
            assert_eq!(permits(ruby, num("0")?)?, 0, "the range is the client's to check");
            assert_eq!(parts(&permits(ruby, num("2**80")?).unwrap_err()).0, "ArgumentError");
            assert_eq!(parts(&permits(ruby, num("2.0")?).unwrap_err()).0, "TypeError");
            assert_eq!(parts(&permits(ruby, num("'2'")?).unwrap_err()).0, "TypeError");
            assert_eq!(keys(ruby, num("%w[a b]")?)?, vec!["a".to_owned(), "b".to_owned()]);
            assert_eq!(parts(&keys(ruby, num("'a'")?).unwrap_err()).0, "TypeError");
            assert_eq!(parts(&keys(ruby, num("['a', :b]")?).unwrap_err()).0, "TypeError");
            Ok(())
        })
        .unwrap();
    }
}
