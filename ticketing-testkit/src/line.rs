//! The one raw line-protocol client of the wire tests (docs/protocol.md):
//! it checks every byte the server sends. [`Client`] is async (tokio, over
//! TCP or TLS); [`blocking::Client`] is the same handshake over a blocking
//! `std` socket, for polling loops outside a runtime (the cluster tests).
//! Both share [`parse_greeting`], [`auth_line`] and [`check_ok`].

use std::time::Duration;
use ticketing_proto::auth::{self, Label};
use ticketing_proto::Hex32;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any single expected line may take.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(5);

/// The snonce of a greeting line `TICKETING 1 <snonce>`.
pub fn parse_greeting(line: &str) -> Result<Hex32, String> {
    let hex = line.strip_prefix("TICKETING 1 ").ok_or_else(|| format!("greeting: {line:?}"))?;
    Hex32::parse(hex.as_bytes()).map_err(|_| format!("greeting: not 64 lowercase hex: {line:?}"))
}

/// The `AUTH <cnonce> <cmac>` line (with its LF) for `token`.
pub fn auth_line(token: &[u8], snonce: &Hex32, cnonce: &Hex32) -> String {
    let cmac = auth::mac(token, Label::Client, snonce, cnonce);
    format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string())
}

/// The handshake's answer: `Ok(role)` for `OK <role> <smac>` whose smac
/// proves `token`, `Err(line)` for any other line (e.g. `E auth_failed`).
/// Panics on an `OK` line that is malformed or whose smac does not verify.
pub fn check_ok(token: &[u8], snonce: &Hex32, cnonce: &Hex32, line: &str) -> Result<String, String> {
    let Some(rest) = line.strip_prefix("OK ") else { return Err(line.to_owned()) };
    let (role, smac) = rest.split_once(' ').unwrap_or_else(|| panic!("OK <role> <smac>: {line:?}"));
    let smac = Hex32::parse(smac.as_bytes()).unwrap_or_else(|_| panic!("smac hex: {line:?}"));
    assert!(auth::verify(token, Label::Server, snonce, cnonce, &smac), "smac does not verify: {line:?}");
    Ok(role.to_owned())
}

/// A raw line client.
pub struct Client<S> {
    stream: S,
    buf: Vec<u8>,
    /// The greeting's server nonce.
    pub snonce: Option<Hex32>,
}

impl Client<TcpStream> {
    /// Connects without reading anything.
    pub async fn raw(addr: &str) -> Client<TcpStream> {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).unwrap();
        Client { stream, buf: Vec::new(), snonce: None }
    }

    /// Connects and completes the handshake with `token` (empty = auth off),
    /// checking `OK leader <smac>` and the `L` line.
    pub async fn connect(addr: &str, token: &[u8]) -> Client<TcpStream> {
        let mut c = Client::raw(addr).await;
        c.auth(token).await.expect("handshake");
        let l = c.line().await;
        assert_eq!(l, format!("L {addr}"));
        c
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Wraps a stream (e.g. TLS).
    pub fn over(stream: S) -> Client<S> {
        Client { stream, buf: Vec::new(), snonce: None }
    }

    /// Reads and checks the greeting; returns the snonce.
    pub async fn greeting(&mut self) -> Hex32 {
        let line = self.line().await;
        let snonce = parse_greeting(&line).unwrap_or_else(|e| panic!("{e}"));
        self.snonce = Some(snonce);
        snonce
    }

    /// The AUTH line for `token` on this connection (after the greeting).
    pub fn auth_line(&self, token: &[u8], cnonce: &Hex32) -> String {
        auth_line(token, &self.snonce.expect("greeting first"), cnonce)
    }

    /// Greeting + AUTH; `Ok(())` when the server answered `OK leader` with a
    /// correct smac, `Err(line)` with the server's line otherwise.
    pub async fn auth(&mut self, token: &[u8]) -> Result<(), String> {
        match self.auth_role(token).await {
            Ok(role) if role == "leader" => Ok(()),
            Ok(role) => Err(format!("OK {role}")),
            Err(line) => Err(line),
        }
    }

    /// Greeting + AUTH; `Ok(role)` after `OK <role> <smac>` with a correct
    /// smac, `Err(line)` with the server's line otherwise.
    pub async fn auth_role(&mut self, token: &[u8]) -> Result<String, String> {
        let snonce = self.greeting().await;
        let cnonce = auth::nonce(&mut rand_core::OsRng);
        let line = self.auth_line(token, &cnonce);
        self.send(line.as_bytes()).await;
        let ok = self.line().await;
        check_ok(token, &snonce, &cnonce, &ok).map(|role| {
            assert!(role == "leader" || role == "follower", "{ok}");
            role
        })
    }

    /// Writes bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Closes the sending side (TCP half-close: the server reads EOF).
    pub async fn shut_write(&mut self) {
        self.stream.shutdown().await.expect("shutdown");
    }

    /// Writes bytes, ignoring errors (the server may have closed).
    pub async fn send_lossy(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// The next line (without its LF) within `d`; `None` on timeout; panics on EOF.
    pub async fn line_within(&mut self, d: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            if let Some(n) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=n).collect();
                let text = String::from_utf8(line[..n].to_vec()).expect("ascii line");
                return Some(text);
            }
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return None,
                Ok(Ok(0)) => panic!("connection closed; unread {:?}", String::from_utf8_lossy(&self.buf)),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => panic!("read error {e}; unread {:?}", String::from_utf8_lossy(&self.buf)),
            }
        }
    }

    /// The next line within `d`; `None` on timeout, EOF or a read error (the server may die).
    pub async fn try_line_within(&mut self, d: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            if let Some(n) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=n).collect();
                return String::from_utf8(line[..n].to_vec()).ok();
            }
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// The next line; panics after [`LINE_TIMEOUT`].
    pub async fn line(&mut self) -> String {
        match self.line_within(LINE_TIMEOUT).await {
            Some(l) => l,
            None => panic!("no line within {LINE_TIMEOUT:?}"),
        }
    }

    /// Asserts the next line.
    pub async fn expect(&mut self, want: &str) {
        let got = self.line().await;
        assert_eq!(got, want);
    }

    /// Asserts that nothing arrives within `d`.
    pub async fn silent(&mut self, d: Duration) {
        if let Some(l) = self.line_within(d).await {
            panic!("unexpected line {l:?}");
        }
    }

    /// Asserts that the server closes the connection with nothing more to read.
    pub async fn expect_closed(&mut self) {
        assert!(self.buf.is_empty(), "unread data {:?}", String::from_utf8_lossy(&self.buf));
        let mut chunk = [0u8; 512];
        match tokio::time::timeout(LINE_TIMEOUT, self.stream.read(&mut chunk)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => panic!("more data: {:?}", String::from_utf8_lossy(&chunk[..n])),
            Ok(Err(e)) => panic!("closed with an error instead of a clean close: {e}"),
            Err(_) => panic!("server did not close the connection"),
        }
    }

    /// Asserts `E <code>` and then a clean close.
    pub async fn expect_error(&mut self, code: &str) {
        self.expect(&format!("E {code}")).await;
        self.expect_closed().await;
    }

    /// Sends an acquire.
    pub async fn acquire(&mut self, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
        self.send(format!("A {id} {key} {owner} {wait} {lease}\n").as_bytes()).await;
    }

    /// Sends a release.
    pub async fn release(&mut self, id: u64, key: &str, owner: &str, token: u64) {
        self.send(format!("R {id} {key} {owner} {token}\n").as_bytes()).await;
    }

    /// Reads the next line and checks it is the grant `A id key owner ...`; returns (token, waited_ms).
    pub async fn expect_grant(&mut self, id: u64, key: &str, owner: &str) -> (u64, u32) {
        let line = self.line().await;
        parse_grant(&line, id, key, owner)
    }

    /// Acquires a free key (wait 0) and returns the token.
    pub async fn grab(&mut self, id: u64, key: &str, owner: &str, lease: u8) -> u64 {
        self.acquire(id, key, owner, 0, lease).await;
        self.expect_grant(id, key, owner).await.0
    }
}

impl Client<TcpStream> {
    /// `Q` for (key, owner): `Some((token, remaining_ms))` when the owner holds the key (`H`), `None` on `N`.
    pub async fn query(&mut self, id: u64, key: &str, owner: &str) -> Option<(u64, u64)> {
        self.send(format!("Q {id} {key} {owner}\n").as_bytes()).await;
        let line = self.line().await;
        if line == format!("N {id} {key}") {
            return None;
        }
        let prefix = format!("H {id} {key} {owner} ");
        let rest = line.strip_prefix(&prefix).unwrap_or_else(|| panic!("expected H or N, got {line:?}"));
        let (token, remaining) = rest.split_once(' ').unwrap_or_else(|| panic!("bad H {line:?}"));
        Some((token.parse().unwrap(), remaining.parse().unwrap()))
    }
}

/// Checks `A id key owner token waited_ms` byte by byte and returns (token, waited_ms).
pub fn parse_grant(line: &str, id: u64, key: &str, owner: &str) -> (u64, u32) {
    let prefix = format!("A {id} {key} {owner} ");
    let rest = line.strip_prefix(&prefix).unwrap_or_else(|| panic!("expected grant {prefix}…, got {line:?}"));
    let mut parts = rest.split(' ');
    let token = parts.next().unwrap();
    let waited = parts.next().unwrap_or_else(|| panic!("no waited_ms in {line:?}"));
    assert!(parts.next().is_none(), "extra fields in {line:?}");
    for n in [token, waited] {
        assert!(!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()), "{line:?}");
        assert!(n == "0" || !n.starts_with('0'), "leading zero in {line:?}");
    }
    let token: u64 = token.parse().unwrap();
    assert!((1..(1 << 63)).contains(&token), "token range {token}");
    (token, waited.parse().unwrap())
}

/// The same client over a blocking socket.
pub mod blocking {
    use super::{auth_line, check_ok, parse_greeting};
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::time::Duration;
    use ticketing_proto::auth;

    /// A raw client connection after the handshake with the empty token.
    pub struct Client {
        pub stream: TcpStream,
        pub reader: BufReader<TcpStream>,
        /// The `OK …` line (or the `E …` line that ended the handshake).
        pub ok: String,
    }

    /// Connects to 127.0.0.1:`port` (1 s) and completes the handshake with
    /// the empty token (3 s per line); a refusal is `Ok` with the server's
    /// line in [`Client::ok`].
    pub fn hello(port: u16) -> std::io::Result<Client> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut greeting = String::new();
        reader.read_line(&mut greeting)?;
        let snonce = parse_greeting(greeting.trim_end_matches('\n')).map_err(std::io::Error::other)?;
        let cnonce = auth::nonce(&mut rand_core::OsRng);
        (&stream).write_all(auth_line(b"", &snonce, &cnonce).as_bytes())?;
        let mut ok = String::new();
        reader.read_line(&mut ok)?;
        let ok = ok.trim_end().to_owned();
        if ok.starts_with("OK ") {
            check_ok(b"", &snonce, &cnonce, &ok).expect("an OK line");
        }
        Ok(Client { stream, reader, ok })
    }

    impl Client {
        /// Writes `line` and its LF.
        pub fn send(&mut self, line: &str) -> std::io::Result<()> {
            self.stream.write_all(format!("{line}\n").as_bytes())
        }

        /// The next line that is not an `L` notification ("" on EOF).
        pub fn answer(&mut self, limit: Duration) -> std::io::Result<String> {
            self.stream.set_read_timeout(Some(limit))?;
            loop {
                let mut l = String::new();
                let n = self.reader.read_line(&mut l)?;
                if n == 0 {
                    return Ok(String::new());
                }
                let l = l.trim_end().to_owned();
                if !l.starts_with("L ") {
                    return Ok(l);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_lines_check_every_byte() {
        let (snonce, cnonce) = (Hex32([0xab; 32]), Hex32([2; 32]));
        let greeting = format!("TICKETING 1 {}", snonce.to_hex_string());
        assert_eq!(parse_greeting(&greeting), Ok(snonce));
        assert!(parse_greeting("TICKETING 2 00").is_err());
        assert!(parse_greeting(&greeting.to_uppercase()).is_err());
        let line = auth_line(b"t", &snonce, &cnonce);
        assert!(line.starts_with(&format!("AUTH {} ", cnonce.to_hex_string())) && line.ends_with('\n'));
        let smac = auth::mac(b"t", Label::Server, &snonce, &cnonce);
        let ok = format!("OK leader {}", smac.to_hex_string());
        assert_eq!(check_ok(b"t", &snonce, &cnonce, &ok), Ok("leader".to_owned()));
        assert_eq!(check_ok(b"t", &snonce, &cnonce, "E auth_failed"), Err("E auth_failed".to_owned()));
        let wrong = std::panic::catch_unwind(|| check_ok(b"other", &snonce, &cnonce, &ok));
        assert!(wrong.is_err(), "a smac for another token is refused");
    }

    #[test]
    fn grants_are_parsed_strictly() {
        assert_eq!(parse_grant("A 1 k o 7 0", 1, "k", "o"), (7, 0));
        for bad in ["A 1 k o 07 0", "A 1 k o 7", "A 1 k o 7 0 1", "A 1 k o 0 0", "A 2 k o 7 0"] {
            assert!(std::panic::catch_unwind(|| parse_grant(bad, 1, "k", "o")).is_err(), "{bad}");
        }
    }
}
