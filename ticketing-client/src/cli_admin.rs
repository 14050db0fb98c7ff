//! The CLI's admin HTTP client: `ticketing locks KEY --admin HOST:PORT`
//! (docs/client.md, "Who holds, who waits": the leader's `/locks/<key>`
//! printed as a table) and `ticketing cluster list|add|remove`
//! (docs/operating.md, "Growing and shrinking a cluster"). What only the
//! leader answers is asked of the leader: a follower's answer names the
//! leader's admin address, and it is followed once.

use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types::pem::PemObject, pki_types::CertificateDer, pki_types::ServerName};

/// How long one HTTP exchange may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTPS to admin ports with `--admin-tls-cert`: their certificates are
/// verified against the CA certificates (PEM) in `ca`.
pub fn tls(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let bad = |why: String| format!("--admin-ca {}: {why}", ca.display());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(format!("{e:?}")))? {
        roots.add(cert.map_err(|e| bad(format!("{e:?}")))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no PEM certificate found".into()));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection to `admin`, over TLS when `tls` is given.
async fn connect(admin: &str, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<Box<dyn Stream>, String> {
    let tcp = TcpStream::connect(admin).await.map_err(|e| format!("cannot connect to {admin}: {e}"))?;
    let Some(config) = tls else { return Ok(Box::new(tcp)) };
    let host = match admin.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => admin,
    };
    let name =
        ServerName::try_from(host.to_owned()).map_err(|_| format!("{admin}: {host:?} is not a TLS server name"))?;
    let s = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("{admin}: TLS: {e}"))?;
    Ok(Box::new(s))
}

/// One exchange of `ask` with `admin`: (status code, body); with
/// `Authorization: Bearer <token>` when an admin token is given.
async fn request(admin: &str, ask: &Ask<'_>) -> Result<(u16, Vec<u8>), String> {
    let (method, path, body, token, limit) = (ask.method, &ask.path, ask.body.as_deref(), ask.token, ask.limit);
    let exchange = async {
        let mut s = connect(admin, ask.tls).await?;
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let content = body
            .map(|b| format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()))
            .unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {admin}\r\n{auth}{content}Connection: close\r\n\r\n{}",
            body.unwrap_or_default()
        );
        s.write_all(req.as_bytes()).await.map_err(|e| format!("{admin}: {e}"))?;
        let mut out = Vec::new();
        if let Err(e) = s.read_to_end(&mut out).await {
            // A TLS peer that closes without close_notify still sent its whole answer.
            if out.is_empty() || e.kind() != std::io::ErrorKind::UnexpectedEof {
                return Err(format!("{admin}: {e}"));
            }
        }
        let end =
            out.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("{admin}: not an HTTP answer"))?;
        let head = String::from_utf8_lossy(&out[..end]);
        let code = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{admin}: not an HTTP answer"))?;
        Ok((code, out[end + 4..].to_vec()))
    };
    tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| format!("{admin}: no answer within {} s", limit.as_secs()))?
}

/// What to ask an admin port.
pub struct Ask<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The path.
    pub path: String,
    /// A JSON body.
    pub body: Option<String>,
    /// The admin token.
    pub token: Option<&'a str>,
    /// HTTPS, its certificate verified against these roots.
    pub tls: Option<&'a Arc<rustls::ClientConfig>>,
    /// How long the exchange may take.
    pub limit: Duration,
}

/// Asks `admin`, following a follower's pointer (`503` naming the
/// leader's admin address) to the leader's admin port once: the node that
/// answered, its status code and body. `401` is [`Failure::AuthFailed`]; a
/// `503` without a leader to follow is [`Failure::Unavailable`].
async fn follow(admin: &str, ask: &Ask<'_>) -> Result<(String, u16, Vec<u8>), Failure> {
    let mut at = admin.to_owned();
    for _ in 0..2 {
        let (code, body) = request(&at, ask).await.map_err(Failure::Unavailable)?;
        if code == 401 {
            let why = if ask.token.is_some() {
                "refused the admin token"
            } else {
                "needs an admin token (--admin-token-file)"
            };
            return Err(Failure::AuthFailed(format!("{at} {why}")));
        }
        if code != 503 {
            return Ok((at, code, body));
        }
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match v["leader_admin"].as_str() {
            Some(next) if next != at => at = next.to_owned(),
            _ => {
                let leader = v["leader"].as_str().map(|l| format!(" (the leader is {l})")).unwrap_or_default();
                return Err(Failure::Unavailable(format!(
                    "{at} is not the leader and knows no leader admin address{leader}"
                )));
            }
        }
    }
    Err(Failure::Unavailable(format!("{admin}: the leader moved while asking")))
}

/// [`follow`], the answer read as JSON: the status code and the value.
pub async fn ask_leader(admin: &str, ask: &Ask<'_>) -> Result<(u16, Value), Failure> {
    let (at, code, body) = follow(admin, ask).await?;
    let v = serde_json::from_slice(&body).map_err(|_| {
        Failure::Unavailable(format!("{at}: answer {code} is not JSON: {}", String::from_utf8_lossy(&body).trim()))
    })?;
    Ok((code, v))
}

/// Percent-encodes what is not unreserved in a URL path segment.
fn encode(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What went wrong, with the exit code to use.
pub enum Failure {
    /// The key is not a valid key (64).
    Usage(String),
    /// No leader could be asked (69).
    Unavailable(String),
    /// The admin port refused the admin token, or asked for one (80).
    AuthFailed(String),
    /// The leader refused a membership change, with the reason (82).
    Refused(String),
}

/// Fetches `/locks/<key>` from the leader (following a follower's pointer
/// once), with the admin token if given, over TLS if `tls` is given.
pub async fn fetch(
    admin: &str,
    key: &str,
    token: Option<&str>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Value, Failure> {
    let path = format!("/locks/{}", encode(key));
    let ask = Ask { method: "GET", path, body: None, token, tls, limit: HTTP_TIMEOUT };
    match ask_leader(admin, &ask).await? {
        (200, v) => Ok(v),
        (400, v) => Err(Failure::Usage(format!("key {key:?}: {}", v["error"].as_str().unwrap_or("invalid")))),
        (code, v) => Err(Failure::Unavailable(format!("{admin}: answer {code}: {v}"))),
    }
}

/// What `ticketing cluster` does.
pub enum Change {
    /// List the members (any node answers).
    List,
    /// Grow 3 → 5 with the nodes at these peer addresses.
    Add(Vec<String>),
    /// Shrink 5 → 3 without these nodes (NodeIds or peer addresses).
    Remove(Vec<String>),
}

/// How long a membership change may take to answer (the server answers
/// within 45 s, `202` when it goes on).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Lists the members, or asks the leader for a change: the membership
/// after it (`/cluster` of the node that answered).
pub async fn cluster(
    admin: &str,
    change: &Change,
    token: Option<&str>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Value, Failure> {
    let json = |field: &str, v: &[String]| Some(serde_json::json!({ field: v }).to_string());
    let (method, path, body, limit) = match change {
        Change::List => ("GET", "/cluster", None, HTTP_TIMEOUT),
        Change::Add(peers) => ("POST", "/cluster/add", json("peers", peers), CHANGE_TIMEOUT),
        Change::Remove(nodes) => ("POST", "/cluster/remove", json("nodes", nodes), CHANGE_TIMEOUT),
    };
    // `list` is answered by any node (never a 503 to follow).
    let ask = Ask { method, path: path.into(), body, token, tls, limit };
    let (code, v) = ask_leader(admin, &ask).await?;
    let error = || v["error"].as_str().unwrap_or("no reason given").to_owned();
    match code {
        200 => Ok(v),
        202 => Err(Failure::Unavailable(error())),
        404 => Err(Failure::Usage(error())),
        400 | 409 => Err(Failure::Refused(error())),
        _ => Err(Failure::Unavailable(format!("{admin}: answer {code}: {}", error()))),
    }
}

/// How long taking a backup may take (a large state is written whole).
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(120);

/// The first line of a backup file (as the server writes it).
const BACKUP_MAGIC: &[u8] = b"TICKETING-BACKUP 1\n";

/// `GET /snapshot` from the leader (a follower's pointer followed once),
/// checked (its header, length and SHA-256): the backup file's bytes and
/// its header.
pub async fn snapshot(
    admin: &str,
    token: Option<&str>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<(Vec<u8>, Value), Failure> {
    let ask = Ask { method: "GET", path: "/snapshot".into(), body: None, token, tls, limit: SNAPSHOT_TIMEOUT };
    let (at, code, body) = follow(admin, &ask).await?;
    if code == 200 {
        let header = check_backup(&body).map_err(|e| Failure::Unavailable(format!("{at}: {e}")))?;
        return Ok((body, header));
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let why = v["error"].as_str().map(str::to_owned).unwrap_or_else(|| format!("answer {code}"));
    Err(if code == 404 { Failure::Usage(why) } else { Failure::Unavailable(format!("{at}: {why}")) })
}

/// A backup's header, once its length and SHA-256 check.
fn check_backup(file: &[u8]) -> Result<Value, String> {
    use sha2::Digest;
    let rest = file.strip_prefix(BACKUP_MAGIC).ok_or("the answer is not a Ticketing backup")?;
    let end = rest.iter().position(|&b| b == b'\n').ok_or("the backup has no header line")?;
    let header: Value = serde_json::from_slice(&rest[..end]).map_err(|e| format!("the backup's header: {e}"))?;
    let data = &rest[end + 1..];
    if header["bytes"].as_u64() != Some(data.len() as u64) {
        return Err(format!("the backup has {} bytes of snapshot, its header says {}", data.len(), header["bytes"]));
    }
    let digest: String = sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect();
    if header["sha256"].as_str() != Some(digest.as_str()) {
        return Err("the backup's SHA-256 does not match its header".into());
    }
    Ok(header)
}

/// The members as a table: NodeId, role (voter/learner, the leader
/// marked), peer, client and admin addresses.
pub fn members_table(v: &Value) -> String {
    let leader = v["leader_id"].as_u64();
    let head = ["node", "role", "peer", "client", "admin"].map(str::to_owned);
    let rows: Vec<[String; 5]> = v["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let voter = m["voter"].as_bool() == Some(true);
            let role = match (voter, m["id"].as_u64() == leader && leader.is_some()) {
                (true, true) => "leader",
                (true, false) => "voter",
                (false, _) => "learner",
            };
            let text = |f: &str| m[f].as_str().unwrap_or("-").to_owned();
            [num(&m["id"]), role.to_owned(), text("peer"), text("client"), text("admin")]
        })
        .collect();
    let mut width = [0usize; 5];
    for r in std::iter::once(&head).chain(&rows) {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = format!("domain  {}\n", v["domain"].as_str().unwrap_or("-"));
    for r in std::iter::once(&head).chain(&rows) {
        let cells: Vec<String> = r.iter().zip(width).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn num(v: &Value) -> String {
    v.as_u64().map(|n| n.to_string()).unwrap_or_else(|| "-".into())
}

/// The table (owner prefixes only: the server never sends a full owner).
pub fn table(key: &str, v: &Value) -> String {
    let mut out = format!("key          {key}\ndomain time  {} ms\n", num(&v["domain_time_ms"]));
    let holder = |h: &Value| {
        format!(
            "owner {}…  token {}  remaining {} ms  granted at domain time {} ms",
            h["owner_prefix"].as_str().unwrap_or("?"),
            num(&h["token"]),
            num(&h["remaining_ms"]),
            num(&h["granted_dt"]),
        )
    };
    // Every holder (`holders`; a server of an earlier build sends `holder` only).
    let holders = match v["holders"].as_array() {
        Some(hs) => hs.clone(),
        None => v["holder"].as_object().map(|_| vec![v["holder"].clone()]).unwrap_or_default(),
    };
    match holders.as_slice() {
        [] => out.push_str("holder       none\n"),
        [h] if h["slot"].is_null() => out.push_str(&format!("holder       {}\n", holder(h))),
        hs => {
            out.push_str(&format!("holders      {} counted\n", hs.len()));
            for h in hs {
                out.push_str(&format!("  slot {:<5}  {}\n", num(&h["slot"]), holder(h)));
            }
        }
    }
    let waiters = v["waiters"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("waiters      {}\n", waiters.len()));
    if !waiters.is_empty() {
        let kind = |w: &Value| match w["kind"].as_str() {
            Some("shared") => format!("shared n={}", num(&w["n"])),
            Some("all") => {
                let keys: Vec<&str> = w["keys"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                format!("all {}", keys.join(","))
            }
            _ => "exclusive".to_owned(),
        };
        let rows: Vec<[String; 6]> = waiters
            .iter()
            .enumerate()
            .map(|(i, w)| {
                [
                    (i + 1).to_string(),
                    format!("{}…", w["owner_prefix"].as_str().unwrap_or("?")),
                    kind(w),
                    w["client"].as_str().unwrap_or("?").to_owned(),
                    num(&w["waited_ms"]),
                    num(&w["wait_left_ms"]),
                ]
            })
            .collect();
        let head = ["#", "owner", "kind", "client", "waited_ms", "wait_left_ms"].map(str::to_owned);
        let mut width = [0usize; 6];
        for r in std::iter::once(&head).chain(&rows) {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for r in std::iter::once(&head).chain(&rows) {
            let cells: Vec<String> = r.iter().zip(width).map(|(c, w)| format!("{c:<w$}")).collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lists_holder_and_waiters_in_order() {
        let v: Value = serde_json::from_str(
            r#"{"key":"k","domain_time_ms":5000,"holder":{"owner_prefix":"01234567","token":17,"remaining_ms":900,"granted_dt":4100},
               "waiters":[{"owner_prefix":"aaaaaaaa","client":"127.0.0.1:4000","waited_ms":12,"wait_left_ms":29988},
                          {"owner_prefix":"bb","client":"10.0.0.2:55555","waited_ms":3,"wait_left_ms":997}]}"#,
        )
        .unwrap();
        let t = table("k", &v);
        assert!(
            t.contains("holder       owner 01234567…  token 17  remaining 900 ms  granted at domain time 4100 ms"),
            "{t}"
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[3], "waiters      2");
        assert_eq!(lines[4], "#  owner      kind       client          waited_ms  wait_left_ms");
        assert_eq!(lines[5], "1  aaaaaaaa…  exclusive  127.0.0.1:4000  12         29988");
        assert_eq!(lines[6], "2  bb…        exclusive  10.0.0.2:55555  3          997");
        let empty = table("k", &serde_json::from_str(r#"{"holder":null,"waiters":[],"domain_time_ms":1}"#).unwrap());
        assert!(empty.contains("holder       none\nwaiters      0\n"), "{empty}");
    }

    #[test]
    fn table_lists_every_counted_holder_and_each_waiters_kind() {
        let v: Value = serde_json::from_str(
            r#"{"domain_time_ms":5000,
               "holders":[{"owner_prefix":"aaaa","token":17,"remaining_ms":900,"granted_dt":4100,"slot":0},
                          {"owner_prefix":"bbbb","token":18,"remaining_ms":950,"granted_dt":4150,"slot":2}],
               "waiters":[{"owner_prefix":"cc","client":"c:1","waited_ms":1,"wait_left_ms":2,"kind":"shared","n":3},
                          {"owner_prefix":"dd","client":"c:2","waited_ms":1,"wait_left_ms":2,"kind":"all","keys":["k","m"]}]}"#,
        )
        .unwrap();
        let t = table("k", &v);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[2], "holders      2 counted");
        assert_eq!(lines[3], "  slot 0      owner aaaa…  token 17  remaining 900 ms  granted at domain time 4100 ms");
        assert_eq!(lines[4], "  slot 2      owner bbbb…  token 18  remaining 950 ms  granted at domain time 4150 ms");
        assert_eq!(lines[7], "1  cc…    shared n=3  c:1     1          2");
        assert_eq!(lines[8], "2  dd…    all k,m     c:2     1          2");
    }

    #[test]
    fn keys_are_percent_encoded_in_the_path() {
        assert_eq!(encode("seat-1"), "seat-1");
        assert_eq!(encode("a/b?c#%"), "a%2Fb%3Fc%23%25");
    }
}
