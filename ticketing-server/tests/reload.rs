//! SIGHUP re-reads the client tokens file and the client port's certificate,
//! key and client CA (docs/security.md, "Rotation"), under a light load that
//! never sees a failed request: old and new token both valid, then the old
//! one removed; a new server certificate (from a new CA the clients already
//! trust); the old client CA removed; a broken key file keeps the current
//! material and counts `ticketing_reloads_total{result="failed"}`.

mod cluster_common;
mod common;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ticketing_client::{Error, TicketBroker, Tls};
use ticketing_testkit::Pki;
use tokio_rustls::rustls;

/// `ticketing_reloads_total{result="…"}` on the admin port.
pub fn reloads(admin: u16, result: &str) -> u64 {
    ticketing_testkit::metric(admin, &format!("ticketing_reloads_total{{result=\"{result}\"}}")).map_or(0, |v| v as u64)
}

/// Waits until the counter reaches `n`.
pub async fn wait_reloads(admin: u16, result: &str, n: u64) {
    let end = Instant::now() + Duration::from_secs(10);
    while reloads(admin, result) < n {
        assert!(Instant::now() < end, "reload {result} #{n} not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hup(pid: u32) {
    assert!(std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
}

/// Acquires and releases in a loop until `stop`; every failure is kept,
/// and `oks` counts the rounds that worked.
fn load(
    b: TicketBroker,
    key: &'static str,
    stop: Arc<AtomicBool>,
    oks: Arc<AtomicU32>,
) -> tokio::task::JoinHandle<(u32, Vec<String>)> {
    tokio::spawn(async move {
        let (mut ok, mut failures) = (0, Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match b.acquire_secs(key, 2.0, 5.0, 0.0).await {
                Ok(Some(t)) => match t.release().await {
                    Ok(true) => {
                        ok += 1;
                        oks.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.push(format!("release: {other:?}")),
                },
                other => failures.push(format!("acquire: {other:?}")),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        b.close().await;
        (ok, failures)
    })
}

/// Waits (at most 10 s) until a load has worked `n` rounds.
async fn worked(oks: &AtomicU32, n: u32) {
    let end = Instant::now() + Duration::from_secs(10);
    while oks.load(Ordering::Relaxed) < n {
        assert!(Instant::now() < end, "the load did not get going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The DER of the certificate the server presents now.
async fn served_cert(addr: &str, roots: &Path, client: &Pki) -> Vec<u8> {
    let mut store = rustls::RootCertStore::empty();
    for c in ticketing_server::tls::load_certs("roots", roots).unwrap() {
        store.add(c).unwrap();
    }
    let certs = ticketing_server::tls::load_certs("cert", &client.dir.join("client.pem")).unwrap();
    let key = ticketing_server::tls::load_key("key", &client.dir.join("client-key.pem")).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_client_auth_cert(certs, key)
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn write(path: &Path, text: &str) {
    // Write a sibling and rename it over: a reader never sees half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_client_tokens_and_certificates_without_a_failed_request() {
    let (old, new) = (Pki::new(), Pki::new());
    let dir: PathBuf = cluster_common::log_dir().join("reload");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key, client_ca, roots, tokens) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("client-ca.pem"),
        dir.join("roots.pem"),
        dir.join("tokens"),
    );
    write(&cert, &old.pem("node1.pem"));
    write(&key, &old.pem("node1-key.pem"));
    write(&client_ca, &old.pem("ca.pem"));
    // Clients trust the old and the new CA from the start (step 1 of a CA rotation).
    write(&roots, &format!("{}{}", old.pem("ca.pem"), new.pem("ca.pem")));
    write(&tokens, "token-a\n");
    let admin = cluster_common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let p = |p: &Path| p.to_str().unwrap().to_owned();
    let args = [
        "--tls-cert".to_owned(),
        p(&cert),
        "--tls-key".to_owned(),
        p(&key),
        "--tls-client-ca".to_owned(),
        p(&client_ca),
        "--client-tokens-file".to_owned(),
        p(&tokens),
        "--admin-listen".to_owned(),
        admin_addr,
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = common::Server::with(&[], &args);
    let broker = |token: &str, client: &Pki| {
        TicketBroker::builder([s.addr.clone()])
            .token(token)
            .tls(Tls::CaFile(roots.clone()))
            .tls_client_cert(client.dir.join("client.pem"))
            .tls_client_key(client.dir.join("client-key.pem"))
            .build()
            .unwrap()
    };
    let works = |b: TicketBroker| async move {
        assert!(b.wait_ready(Duration::from_secs(10)).await, "{:?}", b.status().await);
        let t = b.acquire_secs("probe", 2.0, 5.0, 0.0).await.unwrap().expect("granted");
        assert!(t.release().await.unwrap());
        b.close().await;
    };
    let stop_a = Arc::new(AtomicBool::new(false));
    let oks_a = Arc::new(AtomicU32::new(0));
    let load_a = load(broker("token-a", &old), "load-a", stop_a.clone(), oks_a.clone());
    worked(&oks_a, 3).await;

    // Token rotation, step 1: old and new both valid.
    write(&tokens, "token-a\ntoken-b\n");
    hup(s.pid());
    wait_reloads(admin, "ok", 1).await;
    works(broker("token-b", &old)).await;
    works(broker("token-a", &old)).await;
    // Clients move to the new token (and, for later, to a client certificate of the new CA).
    write(&client_ca, &format!("{}{}", old.pem("ca.pem"), new.pem("ca.pem")));
    hup(s.pid());
    wait_reloads(admin, "ok", 2).await;
    let stop_b = Arc::new(AtomicBool::new(false));
    let oks_b = Arc::new(AtomicU32::new(0));
    let load_b = load(broker("token-b", &new), "load-b", stop_b.clone(), oks_b.clone());
    worked(&oks_b, 3).await;
    stop_a.store(true, Ordering::Relaxed);
    let (ok_a, failed_a) = load_a.await.unwrap();
    assert!(failed_a.is_empty() && ok_a > 0, "load a: {ok_a} ok, failures {failed_a:?}");

    // Step 2: the old token removed.
    write(&tokens, "token-b\n");
    hup(s.pid());
    wait_reloads(admin, "ok", 3).await;
    let refused = broker("token-a", &new);
    assert!(!refused.wait_ready(Duration::from_secs(1)).await);
    assert_eq!(refused.acquire_secs("probe", 0.0, 5.0, 0.0).await.unwrap_err(), Error::AuthFailed);
    refused.close().await;
    works(broker("token-b", &new)).await;

    // A new server certificate (from the new CA) and the old client CA removed.
    assert_eq!(served_cert(&s.addr, &roots, &new).await, old.der("node1.pem"));
    write(&cert, &new.pem("node1.pem"));
    write(&key, &new.pem("node1-key.pem"));
    write(&client_ca, &new.pem("ca.pem"));
    hup(s.pid());
    wait_reloads(admin, "ok", 4).await;
    assert_eq!(served_cert(&s.addr, &roots, &new).await, new.der("node1.pem"));
    let old_client = broker("token-b", &old);
    assert!(!old_client.wait_ready(Duration::from_secs(1)).await, "a client certificate of the removed CA");
    old_client.close().await;
    works(broker("token-b", &new)).await;

    // A broken key file: the reload fails, the current material stays.
    write(&key, "not a key\n");
    hup(s.pid());
    wait_reloads(admin, "failed", 1).await;
    assert_eq!(reloads(admin, "ok"), 4);
    assert_eq!(served_cert(&s.addr, &roots, &new).await, new.der("node1.pem"));
    works(broker("token-b", &new)).await;

    stop_b.store(true, Ordering::Relaxed);
    let (ok_b, failed_b) = load_b.await.unwrap();
    assert!(failed_b.is_empty() && ok_b > 0, "load b: {ok_b} ok, failures {failed_b:?}");
}
