//! A scripted fake Ticketing server for the client's integration tests: it
//! speaks the line protocol on 127.0.0.1:0, computes `smac` with
//! `ticketing_proto::auth`, answers pings, records every line it reads, and
//! hands every request line to a script that decides the answer.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ticketing_proto::auth::{self, Label};
use ticketing_proto::frame::Hex32;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// One thing the fake does in answer to a request.
#[derive(Debug, Clone)]
pub enum Step {
    /// Send this line (LF added).
    Send(String),
    /// Wait.
    Sleep(Duration),
    /// Close the connection.
    Close,
}

/// A request as the fake read it.
#[derive(Debug, Clone)]
pub struct Req {
    /// Which accepted connection (0-based).
    pub conn: usize,
    /// The fields of the line.
    pub f: Vec<String>,
}

impl Req {
    pub fn op(&self) -> &str {
        &self.f[0]
    }
    pub fn id(&self) -> &str {
        &self.f[1]
    }
    pub fn key(&self) -> &str {
        &self.f[2]
    }
    pub fn owner(&self) -> &str {
        if self.op() == "K" {
            &self.f[2]
        } else {
            &self.f[3]
        }
    }
    /// The keys of a `K` (fields 5…), or the one key of any other request.
    pub fn keys(&self) -> Vec<&str> {
        if self.op() == "K" {
            self.f[5..].iter().map(String::as_str).collect()
        } else {
            vec![self.key()]
        }
    }
}

type Script = dyn Fn(&Req) -> Vec<Step> + Send + Sync;

/// How the fake behaves.
pub struct Behavior {
    /// Token the client must prove (empty: auth off, anything accepted).
    pub token: Vec<u8>,
    /// Token used for `smac` (normally = `token`; a different one fakes a fake).
    pub smac_token: Vec<u8>,
    /// `leader` or `follower`.
    pub role: &'static str,
    /// Lines sent right after `OK` on every connection, e.g. `L <addr>`.
    pub after_ok: Vec<String>,
    /// Lines sent right after `OK` on the first connection only.
    pub after_first_ok: Vec<String>,
    /// Answer `P`.
    pub answer_pings: bool,
    /// Close every connection at once after accepting it.
    pub hang_up_at_once: bool,
    /// Connections from this index on (0-based) are accepted but never
    /// greeted: a hung handshake. `Some(0)`: a silent server.
    pub silent_from: Option<usize>,
    /// The answer to each request line (`A`/`S`/`K`/`R`/`Q`).
    pub script: Box<Script>,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            token: Vec::new(),
            smac_token: Vec::new(),
            role: "leader",
            after_ok: vec![],
            after_first_ok: vec![],
            answer_pings: true,
            hang_up_at_once: false,
            silent_from: None,
            script: Box::new(|_| vec![]),
        }
    }
}

impl Behavior {
    /// A fake that answers with `script`.
    pub fn script(script: impl Fn(&Req) -> Vec<Step> + Send + Sync + 'static) -> Behavior {
        Behavior { script: Box::new(script), ..Behavior::default() }
    }
}

#[derive(Default)]
pub struct Record {
    /// Every line read (without LF), with its connection index.
    pub lines: Vec<(usize, String)>,
    /// Every byte read.
    pub raw: Vec<u8>,
    /// When each connection was accepted.
    pub accepted: Vec<Instant>,
    /// When each connection was seen closing by the client (EOF), by index.
    pub eof: Vec<usize>,
}

/// A running fake server.
pub struct Fake {
    pub addr: String,
    pub rec: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn grant(r: &Req, token: u64, waited_ms: u32) -> Step {
    Step::Send(format!("A {} {} {} {token} {waited_ms}", r.id(), r.key(), r.owner()))
}

/// `G` for an `S`.
pub fn grant_shared(r: &Req, token: u64, waited_ms: u32, slot: u16) -> Step {
    Step::Send(format!("G {} {} {} {token} {waited_ms} {slot}", r.id(), r.key(), r.owner()))
}

/// `A` for a `K`: echoes its FIRST key.
pub fn grant_all(r: &Req, token: u64, waited_ms: u32) -> Step {
    Step::Send(format!("A {} {} {} {token} {waited_ms}", r.id(), r.keys()[0], r.owner()))
}

pub fn line(s: impl Into<String>) -> Step {
    Step::Send(s.into())
}

impl Fake {
    pub async fn start(b: Behavior) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, b)
    }

    pub fn start_on(listener: TcpListener, b: Behavior) -> Fake {
        let addr = listener.local_addr().unwrap().to_string();
        let rec = Arc::new(Mutex::new(Record::default()));
        let b = Arc::new(b);
        let r2 = rec.clone();
        let task = tokio::spawn(async move {
            let mut n = 0usize;
            let mut conns = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                r2.lock().unwrap().accepted.push(Instant::now());
                conns.push(tokio::spawn(serve(stream, n, b.clone(), r2.clone())));
                n += 1;
            }
        });
        Fake { addr, rec, task }
    }

    /// A fake speaking TLS (rustls `config`) on 127.0.0.1:0. A client that
    /// does not complete the TLS handshake within 300 ms is hung up on.
    pub async fn start_tls(b: Behavior, config: Arc<rustls::ServerConfig>) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let rec = Arc::new(Mutex::new(Record::default()));
        let b = Arc::new(b);
        let r2 = rec.clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let task = tokio::spawn(async move {
            let mut n = 0usize;
            while let Ok((stream, _)) = listener.accept().await {
                r2.lock().unwrap().accepted.push(Instant::now());
                let (acceptor, b, r2) = (acceptor.clone(), b.clone(), r2.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_millis(300), acceptor.accept(stream)).await
                    {
                        serve(tls, n, b, r2).await;
                    }
                });
                n += 1;
            }
        });
        Fake { addr, rec, task }
    }

    /// Request lines (A, S, K and R) in arrival order.
    pub fn requests(&self) -> Vec<Req> {
        self.rec
            .lock()
            .unwrap()
            .lines
            .iter()
            .filter(|(_, l)| ["A ", "S ", "K ", "R "].iter().any(|p| l.starts_with(p)))
            .map(|(c, l)| Req { conn: *c, f: l.split(' ').map(str::to_owned).collect() })
            .collect()
    }

    /// Every request line of kind `op` (e.g. `Q`), in arrival order.
    pub fn lines_of(&self, op: &str) -> Vec<Req> {
        self.rec
            .lock()
            .unwrap()
            .lines
            .iter()
            .filter(|(_, l)| l.split(' ').next() == Some(op))
            .map(|(c, l)| Req { conn: *c, f: l.split(' ').map(str::to_owned).collect() })
            .collect()
    }

    pub fn count(&self, op: &str) -> usize {
        self.requests().iter().filter(|r| r.op() == op).count()
    }

    pub fn raw(&self) -> Vec<u8> {
        self.rec.lock().unwrap().raw.clone()
    }

    pub fn accepted(&self) -> Vec<Instant> {
        self.rec.lock().unwrap().accepted.clone()
    }

    pub fn eofs(&self) -> Vec<usize> {
        self.rec.lock().unwrap().eof.clone()
    }

    /// Polls `cond` every 10 ms for at most `max`.
    pub async fn wait_for(&self, max: Duration, cond: impl Fn(&Fake) -> bool) -> bool {
        let end = Instant::now() + max;
        while Instant::now() < end {
            if cond(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cond(self)
    }
}

async fn serve<S>(stream: S, conn: usize, b: Arc<Behavior>, rec: Arc<Mutex<Record>>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    if b.hang_up_at_once {
        return;
    }
    if b.silent_from.is_some_and(|from| conn >= from) {
        // Hold the socket open, say nothing, until the client hangs up.
        let mut stream = Box::pin(stream);
        let mut sink = [0u8; 64];
        while matches!(tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await, Ok(n) if n > 0) {}
        return;
    }
    let (rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<String>>();
    let writer = tokio::spawn(async move {
        while let Some(Some(l)) = rx.recv().await {
            if wr.write_all(format!("{l}\n").as_bytes()).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let snonce = auth::nonce(&mut rand_core::OsRng);
    let _ = tx.send(Some(format!("TICKETING 1 {}", snonce.to_hex_string())));
    let mut lines = BufReader::new(rd);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match lines.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&buf).trim_end_matches('\n').to_owned();
        {
            let mut r = rec.lock().unwrap();
            r.raw.extend_from_slice(&buf);
            r.lines.push((conn, text.clone()));
        }
        let f: Vec<String> = text.split(' ').map(str::to_owned).collect();
        match f[0].as_str() {
            "AUTH" if f.len() == 3 => {
                let cnonce = Hex32::parse(f[1].as_bytes()).unwrap();
                let cmac = Hex32::parse(f[2].as_bytes()).unwrap();
                if !b.token.is_empty() && !auth::verify(&b.token, Label::Client, &snonce, &cnonce, &cmac) {
                    let _ = tx.send(Some("E auth_failed".into()));
                    let _ = tx.send(None);
                    continue;
                }
                let smac = auth::mac(&b.smac_token, Label::Server, &snonce, &cnonce);
                let _ = tx.send(Some(format!("OK {} {}", b.role, smac.to_hex_string())));
                for l in &b.after_ok {
                    let _ = tx.send(Some(l.clone()));
                }
                if conn == 0 {
                    for l in &b.after_first_ok {
                        let _ = tx.send(Some(l.clone()));
                    }
                }
            }
            "P" => {
                if b.answer_pings {
                    let _ = tx.send(Some(text.clone()));
                }
            }
            _ => {
                let steps = (b.script)(&Req { conn, f });
                let tx = tx.clone();
                tokio::spawn(async move {
                    for s in steps {
                        match s {
                            Step::Send(l) => {
                                let _ = tx.send(Some(l));
                            }
                            Step::Sleep(d) => tokio::time::sleep(d).await,
                            Step::Close => {
                                let _ = tx.send(None);
                            }
                        }
                    }
                });
            }
        }
    }
    rec.lock().unwrap().eof.push(conn);
    let _ = tx.send(None);
    let _ = writer.await;
}

/// The test PKI (a CA, node and client certificates, a server configuration).
#[allow(unused_imports)]
pub use ticketing_testkit::{pki, Pki};

/// A broker for `addr` with the empty token, ready.
pub async fn broker(addr: &str) -> ticketing_client::TicketBroker {
    let b = ticketing_client::TicketBroker::connect(addr).await.unwrap();
    assert!(b.wait_ready(Duration::from_secs(5)).await, "broker not ready");
    b
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}
