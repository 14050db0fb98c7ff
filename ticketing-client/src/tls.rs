//! TLS modes (docs/client.md, Rust API): off, system roots, a CA file, or no verification
//! (tests only). TLS wraps the stream from its first byte (docs/protocol.md §1).

use crate::error::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

/// How connections are secured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Tls {
    /// Plain TCP (the default).
    #[default]
    Off,
    /// TLS, verified against the operating system's trust store.
    SystemRoots,
    /// TLS, verified against the CA certificates (PEM) in this file.
    CaFile(PathBuf),
    /// TLS without any certificate verification. Tests only: it protects
    /// against nothing but passive eavesdropping.
    InsecureSkipVerify,
}

impl FromStr for Tls {
    type Err = Error;

    /// `"off"`, `"system-roots"`, `"insecure-skip-verify"`; anything else is
    /// the path of a CA file (an empty string is refused).
    fn from_str(s: &str) -> Result<Tls> {
        Ok(match s {
            "off" => Tls::Off,
            "system-roots" => Tls::SystemRoots,
            "insecure-skip-verify" => Tls::InsecureSkipVerify,
            "" => {
                return Err(Error::InvalidArgument(
                    "tls must be off, system-roots, insecure-skip-verify or a CA file path".into(),
                ))
            }
            path => Tls::CaFile(PathBuf::from(path)),
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration for `tls` (`None` when TLS is off). Reads the
/// CA file or the system store now, so a bad option fails at build time.
pub(crate) fn client_config(tls: &Tls) -> Result<Option<Arc<ClientConfig>>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidArgument(format!("tls: {e}")))?;
    let config = match tls {
        Tls::Off => return Ok(None),
        Tls::SystemRoots => {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(Error::InvalidArgument(
                    "tls system-roots: no usable certificate in the system store".into(),
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Tls::CaFile(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| Error::InvalidArgument(format!("tls CA file {}: {e}", path.display())))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| Error::InvalidArgument(format!("tls CA file {}: {e}", path.display())))?;
                roots.add(cert).map_err(|e| Error::InvalidArgument(format!("tls CA file {}: {e}", path.display())))?;
            }
            if roots.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "tls CA file {}: no PEM certificate found",
                    path.display()
                )));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Tls::InsecureSkipVerify => {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify(provider()))).with_no_client_auth()
        }
    };
    Ok(Some(Arc::new(config)))
}

/// The TLS server name of `host:port` (brackets of an IPv6 literal removed).
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| Error::InvalidArgument(format!("tls server name {host:?}: {e}")))
}

/// Accepts any certificate; handshake signatures are still checked.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_modes() {
        assert_eq!("off".parse::<Tls>().unwrap(), Tls::Off);
        assert_eq!("system-roots".parse::<Tls>().unwrap(), Tls::SystemRoots);
        assert_eq!("insecure-skip-verify".parse::<Tls>().unwrap(), Tls::InsecureSkipVerify);
        assert_eq!("/etc/ca.pem".parse::<Tls>().unwrap(), Tls::CaFile("/etc/ca.pem".into()));
        assert!("".parse::<Tls>().is_err());
    }

    #[test]
    fn configs() {
        assert!(client_config(&Tls::Off).unwrap().is_none());
        assert!(client_config(&Tls::InsecureSkipVerify).unwrap().is_some());
        let missing = client_config(&Tls::CaFile("/nonexistent/ca.pem".into())).unwrap_err();
        assert_eq!(missing.code(), "invalid_argument");
        assert!(server_name("127.0.0.1:5225").is_ok());
        assert!(server_name("[::1]:5225").is_ok());
        assert!(server_name("example.com:5225").is_ok());
    }
}
