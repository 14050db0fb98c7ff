//! `ticketing-server gen-certs`: a test CA, a certificate per node and a
//! client certificate (docs/security.md, "Generating certificates"), so the
//! mutual-TLS recipe of docs/deployment.md needs no openssl.
//!
//! Written files (PEM; keys are created mode 0600):
//! - `ca.pem`, `ca-key.pem`: the CA (keep `ca-key.pem` offline);
//! - `node<i>.pem`, `node<i>-key.pem` for i = 1..=N: usable as both
//!   `--tls-cert` (client port) and `--peer-tls-cert` (serverAuth and
//!   clientAuth), naming the node's host;
//! - `client.pem`, `client-key.pem`: a client certificate (clientAuth) for
//!   `--tls-client-ca`.

use clap::Parser;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `ticketing-server gen-certs --dir D [--nodes N] [--hosts H1,H2,...]`
#[derive(Debug, Parser)]
#[command(
    name = "ticketing-server gen-certs",
    about = "Writes a test CA, a certificate per node and a client certificate (PEM) into --dir"
)]
pub struct GenCerts {
    /// Directory to write into (created if missing; existing files are not overwritten).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Number of node certificates.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub nodes: usize,
    /// Host names or IP addresses of the nodes, one per node in order (each
    /// node's certificate names its host; clients and peers verify it).
    /// Default: every node is `localhost` and `127.0.0.1` (one machine).
    #[arg(long, value_name = "H1,H2,...", value_delimiter = ',')]
    pub hosts: Vec<String>,
}

fn fail(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// Writes `text` to `dir/name`; never overwrites. Keys get mode 0600.
fn write_new(dir: &Path, name: &str, text: &str, secret: bool) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path).map_err(|e| fail(&format!("cannot create {}", path.display()), e))?;
    f.write_all(text.as_bytes()).map_err(|e| fail(&format!("cannot write {}", path.display()), e))?;
    Ok(path)
}

fn leaf(
    names: Vec<String>,
    cn: &str,
    usages: Vec<ExtendedKeyUsagePurpose>,
    ca: &Certificate,
    ca_key: &KeyPair,
) -> Result<(String, String), String> {
    let mut params = CertificateParams::new(names).map_err(|e| fail("certificate names", e))?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = usages;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().map_err(|e| fail("key generation", e))?;
    let cert = params.signed_by(&key, ca, ca_key).map_err(|e| fail("signing", e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Generates and writes everything; returns the written paths.
pub fn run(args: &GenCerts) -> Result<Vec<PathBuf>, String> {
    if args.nodes == 0 || args.nodes > 100 {
        return Err(format!("--nodes must be 1..=100, got {}", args.nodes));
    }
    let hosts: Vec<String> = args.hosts.iter().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty()).collect();
    if !hosts.is_empty() && hosts.len() != args.nodes {
        return Err(format!("--hosts must name one host per node: {} hosts for --nodes {}", hosts.len(), args.nodes));
    }
    std::fs::create_dir_all(&args.dir).map_err(|e| fail(&format!("cannot create {}", args.dir.display()), e))?;

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA", e))?;
    // A random suffix tells two test CAs apart (e.g. the old and the new one during a rotation).
    let tag = rand_core::RngCore::next_u32(&mut rand_core::OsRng);
    ca_params.distinguished_name.push(DnType::CommonName, format!("Ticketing test CA {tag:08x}"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().map_err(|e| fail("key generation", e))?;
    let ca = ca_params.self_signed(&ca_key).map_err(|e| fail("CA", e))?;

    let mut written = vec![
        write_new(&args.dir, "ca.pem", &ca.pem(), false)?,
        write_new(&args.dir, "ca-key.pem", &ca_key.serialize_pem(), true)?,
    ];
    for i in 1..=args.nodes {
        let names = match hosts.get(i - 1) {
            Some(h) => vec![h.clone()],
            None => vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        };
        let usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key) = leaf(names, &format!("ticketing node{i}"), usages, &ca, &ca_key)?;
        written.push(write_new(&args.dir, &format!("node{i}.pem"), &cert, false)?);
        written.push(write_new(&args.dir, &format!("node{i}-key.pem"), &key, true)?);
    }
    let usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let (cert, key) = leaf(vec!["ticketing-client".to_owned()], "ticketing client", usages, &ca, &ca_key)?;
    written.push(write_new(&args.dir, "client.pem", &cert, false)?);
    written.push(write_new(&args.dir, "client-key.pem", &key, true)?);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_nodes_and_a_client_and_never_overwrites() {
        let dir = std::env::temp_dir().join(format!("ticketing-gencerts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let args = GenCerts { dir: dir.clone(), nodes: 3, hosts: vec![] };
        let files = run(&args).unwrap();
        assert_eq!(files.len(), 2 + 3 * 2 + 2);
        for f in &files {
            assert!(std::fs::read_to_string(f).unwrap().starts_with("-----BEGIN "), "{}", f.display());
        }
        let node1 = crate::tls::load_certs("x", &dir.join("node1.pem")).unwrap();
        let tls = crate::tls::PeerTls::load(&dir.join("node1.pem"), &dir.join("node1-key.pem"), &dir.join("ca.pem"));
        assert!(tls.is_ok() && node1.len() == 1);
        assert!(run(&args).unwrap_err().contains("cannot create"), "existing files are kept");
        let bad = GenCerts { dir: dir.join("x"), nodes: 3, hosts: vec!["a".into()] };
        assert!(run(&bad).unwrap_err().contains("one host per node"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
