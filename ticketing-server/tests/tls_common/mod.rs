//! Test certificates: a CA, three node certificates (localhost and
//! 127.0.0.1) and a client certificate, written by the server's own
//! `gen-certs` code (rcgen) into a fresh directory.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// One test CA and its certificates.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// A fresh CA with 3 node certificates and a client certificate.
    pub fn new() -> Pki {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ticketing-pki-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let args = ticketing_server::gencerts::GenCerts { dir: dir.clone(), nodes: 3, hosts: Vec::new() };
        ticketing_server::gencerts::run(&args).expect("gen-certs");
        Pki { dir }
    }

    /// The path of one of its files (`ca.pem`, `node1.pem`, `client-key.pem`, …) as a string.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }

    /// The PEM text of one of its files.
    pub fn pem(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap()
    }

    /// The DER of the (first) certificate in `name`.
    pub fn der(&self, name: &str) -> Vec<u8> {
        ticketing_server::tls::load_certs("test", &self.dir.join(name)).unwrap()[0].to_vec()
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

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
