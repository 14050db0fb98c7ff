//! TLS material of the server (docs/security.md): the client port's
//! acceptor (server certificate, optionally client certificates required
//! against `--tls-client-ca`) and the peer port's mutual TLS (each node
//! presents `--peer-tls-cert` and verifies the other side against
//! `--peer-tls-ca`). Everything is read from PEM files here, at start and on
//! every reload (SIGHUP); errors are plain sentences naming the setting and
//! the file.
//!
//! Server names on peer links: the dialing node verifies the acceptor's
//! certificate for the host part of the peer's `--peers` entry (a DNS name
//! or an IP address, which must be in the certificate's subject alternative
//! names). The accepting node verifies only the chain (any certificate the
//! CA signed is a cluster credential; the peer token is checked inside).

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file (at least one).
pub fn load_certs(setting: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{setting} {}: cannot read certificates: {}", path.display(), pem_error(&e)))?;
    if certs.is_empty() {
        return Err(format!("{setting} {} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn load_key(setting: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    match PrivateKeyDer::from_pem_file(path) {
        Ok(k) => Ok(k),
        Err(pem::Error::NoItemsFound) => Err(format!("{setting} {} holds no PEM private key", path.display())),
        Err(e) => Err(format!("{setting} {}: cannot read the private key: {}", path.display(), pem_error(&e))),
    }
}

fn pem_error(e: &pem::Error) -> String {
    match e {
        pem::Error::Io(io) => io.to_string(),
        other => format!("{other:?}"),
    }
}

/// The CA certificates of a PEM file as a root store (at least one).
pub fn load_roots(setting: &str, path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(setting, path)? {
        roots.add(cert).map_err(|e| format!("{setting} {}: not a usable CA certificate: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// The client port's TLS: `cert`/`key`, and with `client_ca` every client
/// must present a certificate that CA signed (mutual TLS).
pub fn client_port(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, String> {
    let certs = load_certs("--tls-cert", cert)?;
    let key = load_key("--tls-key", key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = load_roots("--tls-client-ca", ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| format!("--tls-client-ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert and --tls-key do not fit together: {e}"))?;
    Ok(Arc::new(config))
}

/// Mutual TLS between peers: the acceptor's and the dialer's configuration,
/// both with this node's certificate and the peer CA.
#[derive(Clone)]
pub struct PeerTls {
    /// Accepting side: presents the node certificate, requires the peer's (WebPkiClientVerifier).
    pub server: Arc<ServerConfig>,
    /// Dialing side: presents the node certificate, verifies the acceptor's for its `--peers` host.
    pub client: Arc<ClientConfig>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

impl PeerTls {
    /// Reads `--peer-tls-cert`, `--peer-tls-key` and `--peer-tls-ca`.
    pub fn load(cert: &Path, key: &Path, ca: &Path) -> Result<PeerTls, String> {
        let certs = load_certs("--peer-tls-cert", cert)?;
        let key = load_key("--peer-tls-key", key)?;
        let roots = load_roots("--peer-tls-ca", ca)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| format!("--peer-tls-ca {}: {e}", ca.display()))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS protocol versions: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| format!("--peer-tls-cert and --peer-tls-key do not fit together: {e}"))?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS protocol versions: {e}"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("--peer-tls-cert and --peer-tls-key do not fit together: {e}"))?;
        Ok(PeerTls { server: Arc::new(server), client: Arc::new(client) })
    }
}

/// The TLS server name of a peer address `host:port` (an IPv6 literal's
/// brackets removed); `None` when its host is not a DNS name or IP address.
pub fn peer_server_name(addr: &str) -> Option<ServerName<'static>> {
    ServerName::try_from(ticketing_proto::hostport::tls_host(addr).to_owned()).ok()
}
