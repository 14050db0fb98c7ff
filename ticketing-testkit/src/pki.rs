//! The one test PKI: a CA, three node certificates (`localhost` and
//! `127.0.0.1`, server and client use) and a client certificate, in a fresh
//! directory laid out like the output of `ticketing-server gen-certs`
//! (docs/security.md, "Generating certificates"), plus a rustls server
//! configuration presenting `node1.pem` for in-process fake servers.

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One test CA and its certificates; the directory is removed on drop.
pub struct Pki {
    /// `ca.pem`, `ca-key.pem`, `node{1,2,3}.pem`, `node{1,2,3}-key.pem`,
    /// `client.pem`, `client-key.pem`.
    pub dir: PathBuf,
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// A server configuration presenting `node1.pem` (chain: node1, CA), no client auth.
    pub server: Arc<rustls::ServerConfig>,
}

/// A fresh [`Pki`].
pub fn pki() -> Pki {
    Pki::new()
}

fn leaf(
    names: &[&str],
    cn: &str,
    usages: Vec<ExtendedKeyUsagePurpose>,
    ca: &Certificate,
    ca_key: &KeyPair,
) -> (Certificate, KeyPair) {
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("names");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = usages;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, ca, ca_key).expect("sign");
    (cert, key)
}

impl Pki {
    /// A fresh CA with 3 node certificates and a client certificate.
    pub fn new() -> Pki {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ticketing-pki-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pki dir");

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA");
        // A distinct name per CA tells two of them apart (e.g. the old and the new one of a rotation).
        ca_params.distinguished_name.push(DnType::CommonName, format!("Ticketing test CA {}-{n}", std::process::id()));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("key");
        let ca = ca_params.self_signed(&ca_key).expect("CA");

        let write = |name: &str, text: &str, secret: bool| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write pki file");
            if secret {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            }
        };
        write("ca.pem", &ca.pem(), false);
        write("ca-key.pem", &ca_key.serialize_pem(), true);
        let both = || vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let mut node1 = None;
        for i in 1..=3 {
            let (cert, key) = leaf(&["localhost", "127.0.0.1"], &format!("ticketing node{i}"), both(), &ca, &ca_key);
            write(&format!("node{i}.pem"), &cert.pem(), false);
            write(&format!("node{i}-key.pem"), &key.serialize_pem(), true);
            if i == 1 {
                node1 = Some((cert, key));
            }
        }
        let usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key) = leaf(&["ticketing-client"], "ticketing client", usages, &ca, &ca_key);
        write("client.pem", &cert.pem(), false);
        write("client-key.pem", &key.serialize_pem(), true);

        let (cert, key) = node1.expect("node1");
        let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone(), ca.der().clone()], key)
            .expect("server config");
        Pki { dir, ca_pem: ca.pem(), server: Arc::new(server) }
    }

    /// The path of one of its files (`ca.pem`, `node1.pem`, `client-key.pem`, …) as a string.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().expect("utf-8 temp dir").to_owned()
    }

    /// The PEM text of one of its files.
    pub fn pem(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).expect("pki file")
    }

    /// The DER of the (first) certificate in `name`.
    pub fn der(&self, name: &str) -> Vec<u8> {
        let first = CertificateDer::pem_file_iter(self.dir.join(name)).expect("pki file").next();
        first.expect("a certificate").expect("PEM").to_vec()
    }

    /// Flags for node `i` (1-based) with mutual TLS between peers against `ca` (a path).
    pub fn peer_args(&self, i: usize, ca: &str) -> Vec<String> {
        vec![
            "--peer-tls-cert".into(),
            self.path(&format!("node{i}.pem")),
            "--peer-tls-key".into(),
            self.path(&format!("node{i}-key.pem")),
            "--peer-tls-ca".into(),
            ca.to_owned(),
        ]
    }
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_gen_certs_layout_and_two_cas_differ() {
        let (a, b) = (Pki::new(), Pki::new());
        for f in ["ca.pem", "ca-key.pem", "node1.pem", "node3-key.pem", "client.pem", "client-key.pem"] {
            assert!(a.pem(f).starts_with("-----BEGIN "), "{f}");
        }
        assert!(!a.dir.join("node4.pem").exists());
        assert_ne!(a.der("ca.pem"), b.der("ca.pem"));
        assert_eq!(a.pem("ca.pem"), a.ca_pem);
        let dir = a.dir.clone();
        drop(a);
        assert!(!dir.exists(), "removed on drop");
    }
}
