//! The client's typed errors (docs/client.md, Rust API).

use std::fmt;
use std::path::PathBuf;
use ticketing_proto::broker::{ConfigError, Failure};
use ticketing_proto::params::ParamError;

/// Everything a client call can fail with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// `B`: refused for capacity. Final: no internal retry; a new acquire
    /// (with a new owner) after the caller's own backoff is fine.
    Busy,
    /// `F`: this client's principal may not use `key` (for a multi-key
    /// acquire, the first such key); nothing was granted. Final and never
    /// retried: only the server's configuration can change it
    /// (docs/security.md, "Several teams: principals").
    Forbidden {
        /// The key the principal may not use.
        key: String,
    },
    /// The request may have been sent and no definite answer came: the lock
    /// may have been granted. Do NOT enter the critical section. The release
    /// lane asks the leader about the acquire and releases exactly its grant
    /// within 5 s (docs/client.md, "Release lane"); only if no leader answers
    /// within those 5 s does a grant stay until its lease ends.
    Indeterminate,
    /// Granted, but less than the work budget (or nothing) was left of the
    /// conservative lease; the grant was handed to the release lane.
    InsufficientTime,
    /// No ready connection within the budget: nothing was sent, definitely
    /// not acquired.
    Unavailable,
    /// No final answer to a release within 5 s (or the release lane was
    /// full). Never an assumed success; the lease is the last safety net.
    ReleaseUnconfirmed,
    /// The broker is closed (or, for a ticket, it belongs to another process
    /// after a fork).
    Closed,
    /// Authentication failed: the server refused the token, or it could not
    /// prove it knows the token (a possible fake server). Nothing was sent.
    AuthFailed,
    /// A bad key, duration, address or TLS option; nothing was sent. The
    /// cause says which ([`std::error::Error::source`] returns it).
    InvalidArgument(ArgumentError),
}

impl Error {
    /// A stable machine-readable code: `busy`, `forbidden`, `indeterminate`,
    /// `insufficient_time`, `unavailable`, `release_unconfirmed`, `closed`,
    /// `auth_failed`, `invalid_argument`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Busy => "busy",
            Error::Forbidden { .. } => "forbidden",
            Error::Indeterminate => "indeterminate",
            Error::InsufficientTime => "insufficient_time",
            Error::Unavailable => "unavailable",
            Error::ReleaseUnconfirmed => "release_unconfirmed",
            Error::Closed => "closed",
            Error::AuthFailed => "auth_failed",
            Error::InvalidArgument(_) => "invalid_argument",
        }
    }
}

impl Error {
    /// The name every binding gives this error's class: the code in
    /// CamelCase and `Error` (`busy` → `BusyError`, `auth_failed` →
    /// `AuthFailedError`).
    pub fn class_name(&self) -> String {
        let mut name = String::new();
        for word in self.code().split('_') {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                name.push(first.to_ascii_uppercase());
                name.extend(chars);
            }
        }
        name + "Error"
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy => f.write_str("busy: the server refused the acquire for capacity"),
            Error::Forbidden { key } => write!(f, "forbidden: this client's principal may not use the key {key}"),
            Error::Indeterminate => f.write_str(
                "indeterminate: the acquire may have been granted; do not enter the critical section \
                 (the client releases such a grant within 5 s, else it ends with its lease)",
            ),
            Error::InsufficientTime => {
                f.write_str("insufficient time: the grant left less than the work budget; it is being released")
            }
            Error::Unavailable => f.write_str("unavailable: no ready connection within the budget; nothing was sent"),
            Error::ReleaseUnconfirmed => f.write_str("release unconfirmed: no final answer within 5 s"),
            Error::Closed => f.write_str("closed: the broker is closed"),
            Error::AuthFailed => {
                f.write_str("auth failed: the server refused the token or could not prove it knows it")
            }
            Error::InvalidArgument(cause) => write!(f, "invalid argument: {cause}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidArgument(cause) => Some(cause),
            _ => None,
        }
    }
}

/// Why an argument or option was refused ([`Error::InvalidArgument`]):
/// nothing was sent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ArgumentError {
    /// A key, wait, lease or budget (docs/protocol.md §2).
    Param(ParamError),
    /// The addresses (or the pool's limits).
    Config(ConfigError),
    /// A TLS option.
    Tls(TlsError),
}

impl fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgumentError::Param(e) => e.fmt(f),
            ArgumentError::Config(e) => e.fmt(f),
            ArgumentError::Tls(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ArgumentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ArgumentError::Param(e) => Some(e),
            ArgumentError::Config(e) => Some(e),
            ArgumentError::Tls(e) => Some(e),
        }
    }
}

/// Which PEM file of the TLS options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFile {
    /// The client certificate chain.
    ClientCert,
    /// The client certificate's private key.
    ClientKey,
    /// The CA file the server is verified against.
    Ca,
}

/// A refused TLS option (docs/client.md, Rust API; docs/security.md).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TlsError {
    /// An empty TLS mode.
    EmptyMode,
    /// A client certificate without its key, or a key without its certificate.
    CertWithoutKey,
    /// A client certificate while TLS is off.
    CertWithoutTls,
    /// A PEM file that cannot be read or holds nothing usable.
    File {
        /// Which file.
        file: TlsFile,
        /// Its path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The client certificate and key do not fit together.
    CertKeyMismatch(rustls::Error),
    /// The crypto provider offers no safe protocol version.
    Versions(rustls::Error),
    /// The system store holds no usable certificate.
    NoSystemRoots,
    /// The host of an address is not a TLS server name.
    ServerName {
        /// The host.
        host: String,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::EmptyMode => f.write_str("tls must be off, system-roots, insecure-skip-verify or a CA file path"),
            TlsError::CertWithoutKey => f.write_str("tls client certificate and key must be given together"),
            TlsError::CertWithoutTls => {
                f.write_str("tls client certificate given but tls is off: choose a TLS mode too")
            }
            TlsError::File { file, path, reason } => {
                let what = match file {
                    TlsFile::ClientCert => "tls client certificate",
                    TlsFile::ClientKey => "tls client key",
                    TlsFile::Ca => "tls CA file",
                };
                write!(f, "{what} {}: {reason}", path.display())
            }
            TlsError::CertKeyMismatch(e) => write!(f, "tls client certificate and key do not fit together: {e}"),
            TlsError::Versions(e) => write!(f, "tls: {e}"),
            TlsError::NoSystemRoots => f.write_str("tls system-roots: no usable certificate in the system store"),
            TlsError::ServerName { host } => write!(f, "tls server name {host:?}: invalid dns name"),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::CertKeyMismatch(e) | TlsError::Versions(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ParamError> for Error {
    fn from(e: ParamError) -> Self {
        Error::InvalidArgument(ArgumentError::Param(e))
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::InvalidArgument(ArgumentError::Config(e))
    }
}

impl From<TlsError> for Error {
    fn from(e: TlsError) -> Self {
        Error::InvalidArgument(ArgumentError::Tls(e))
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Busy => Error::Busy,
            Failure::Forbidden(key) => Error::Forbidden { key: key.to_string() },
            Failure::Indeterminate => Error::Indeterminate,
            Failure::InsufficientTime => Error::InsufficientTime,
            Failure::Unavailable => Error::Unavailable,
            Failure::AuthFailed => Error::AuthFailed,
            Failure::ReleaseUnconfirmed => Error::ReleaseUnconfirmed,
            Failure::Closed => Error::Closed,
        }
    }
}

/// `Result` with the client's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The class every binding defines for each error (Python's and Ruby's
    /// exception classes, Node's error classes).
    #[test]
    fn class_names_follow_the_codes() {
        let named: Vec<(&str, String)> = [
            Error::Busy,
            Error::Forbidden { key: "k".into() },
            Error::Indeterminate,
            Error::InsufficientTime,
            Error::Unavailable,
            Error::ReleaseUnconfirmed,
            Error::Closed,
            Error::AuthFailed,
        ]
        .iter()
        .map(|e| (e.code(), e.class_name()))
        .collect();
        let want = [
            ("busy", "BusyError"),
            ("forbidden", "ForbiddenError"),
            ("indeterminate", "IndeterminateError"),
            ("insufficient_time", "InsufficientTimeError"),
            ("unavailable", "UnavailableError"),
            ("release_unconfirmed", "ReleaseUnconfirmedError"),
            ("closed", "ClosedError"),
            ("auth_failed", "AuthFailedError"),
        ];
        assert_eq!(named, want.map(|(c, n)| (c, n.to_owned())).to_vec());
    }
}
