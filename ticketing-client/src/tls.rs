//! TLS modes (docs/client.md, Rust API): off, system roots, a CA file, or no verification
//! (tests only). TLS wraps the stream from its first byte (docs/protocol.md §1).
//! With TLS on, a client certificate and key (PEM files) can be presented to
//! a server that requires one (`--tls-client-ca`, docs/security.md).

use crate::error::{Error, Result, TlsError, TlsFile};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
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
            "" => return Err(TlsError::EmptyMode.into()),
            path => Tls::CaFile(PathBuf::from(path)),
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client certificate chain and its private key (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCert {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// A PEM file that cannot be used.
fn bad(file: TlsFile, path: &Path, reason: String) -> Error {
    TlsError::File { file, path: path.to_owned(), reason }.into()
}

/// The client certificate chain and key of `id`, read now.
fn identity(id: &ClientCert) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs = CertificateDer::pem_file_iter(&id.cert)
        .and_then(|c| c.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| bad(TlsFile::ClientCert, &id.cert, format!("{e:?}")))?;
    if certs.is_empty() {
        return Err(bad(TlsFile::ClientCert, &id.cert, "no PEM certificate found".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&id.key).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            bad(TlsFile::ClientKey, &id.key, "no PEM private key found".into())
        }
        e => bad(TlsFile::ClientKey, &id.key, format!("{e:?}")),
    })?;
    Ok((certs, key))
}

/// The rustls configuration for `tls` (`None` when TLS is off), presenting
/// `client_cert` when given. Reads the CA file, the system store and the
/// client certificate now, so a bad option fails at build time.
pub(crate) fn client_config(tls: &Tls, client_cert: Option<&ClientCert>) -> Result<Option<Arc<ClientConfig>>> {
    let identity = match client_cert {
        Some(_) if *tls == Tls::Off => return Err(TlsError::CertWithoutTls.into()),
        Some(id) => Some(identity(id)?),
        None => None,
    };
    let finish = |b: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>| match &identity {
        None => Ok(b.with_no_client_auth()),
        Some((certs, key)) => b
            .with_client_auth_cert(certs.clone(), key.clone_key())
            .map_err(|e| Error::from(TlsError::CertKeyMismatch(e))),
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?;
    let config = match tls {
        Tls::Off => return Ok(None),
        Tls::SystemRoots => {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(TlsError::NoSystemRoots.into());
            }
            finish(builder.with_root_certificates(roots))?
        }
        Tls::CaFile(path) => {
            let pem = std::fs::read(path).map_err(|e| bad(TlsFile::Ca, path, e.to_string()))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(TlsFile::Ca, path, e.to_string()))?;
                roots.add(cert).map_err(|e| bad(TlsFile::Ca, path, e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(bad(TlsFile::Ca, path, "no PEM certificate found".into()));
            }
            finish(builder.with_root_certificates(roots))?
        }
        Tls::InsecureSkipVerify => {
            finish(builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify(provider()))))?
        }
    };
    Ok(Some(Arc::new(config)))
}

/// The TLS server name of `host:port` (brackets of an IPv6 literal removed).
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>> {
    let host = ticketing_proto::hostport::tls_host(addr);
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName { host: host.to_owned() }.into())
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
        assert!(client_config(&Tls::Off, None).unwrap().is_none());
        assert!(client_config(&Tls::InsecureSkipVerify, None).unwrap().is_some());
        let missing = client_config(&Tls::CaFile("/nonexistent/ca.pem".into()), None).unwrap_err();
        assert_eq!(missing.code(), "invalid_argument");
        assert!(
            matches!(&missing, Error::InvalidArgument(crate::ArgumentError::Tls(TlsError::File { file: TlsFile::Ca, path, .. }))
                if path.ends_with("ca.pem")),
            "{missing:?}"
        );
        assert_eq!("".parse::<Tls>().unwrap_err(), TlsError::EmptyMode.into());
        assert!(server_name("127.0.0.1:5225").is_ok());
        assert!(server_name("[::1]:5225").is_ok());
        assert!(server_name("example.com:5225").is_ok());
        assert_eq!(
            server_name("bad_host!:5225").unwrap_err(),
            TlsError::ServerName { host: "bad_host!".into() }.into()
        );
    }

    #[test]
    fn client_certificates() {
        let dir = std::env::temp_dir().join(format!("ticketing-client-cert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["client".to_owned()]).unwrap();
        let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
        let id = ClientCert { cert: cert.clone(), key: key.clone() };
        assert!(client_config(&Tls::InsecureSkipVerify, Some(&id))
            .unwrap()
            .unwrap()
            .client_auth_cert_resolver
            .has_certs());
        let off = client_config(&Tls::Off, Some(&id)).unwrap_err();
        assert_eq!(off, TlsError::CertWithoutTls.into());
        assert!(off.to_string().contains("tls is off"), "{off}");
        let swapped = ClientCert { cert: key.clone(), key: cert.clone() };
        let e = client_config(&Tls::InsecureSkipVerify, Some(&swapped)).unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
        assert!(
            matches!(&e, Error::InvalidArgument(crate::ArgumentError::Tls(TlsError::File { path, .. })) if *path == key),
            "{e:?}"
        );
        let missing = ClientCert { cert: dir.join("none.pem"), key };
        assert!(client_config(&Tls::InsecureSkipVerify, Some(&missing)).unwrap_err().to_string().contains("none.pem"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
