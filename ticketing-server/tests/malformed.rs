//! docs/protocol.md §2 and §7: every malformed frame gets `E bad_frame` (oversized:
//! `E too_large`) and a close; nothing changes; other connections go on.

mod common;
use common::*;

fn malformed_cases() -> Vec<(String, Vec<u8>)> {
    let key250 = "k".repeat(250);
    let owner64 = "o".repeat(64);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("CR before LF", b"P 1\r\n".to_vec()),
        ("CR inside", b"A 1 k\ro o 0 5\n".to_vec()),
        ("tab", b"A 1 k\to 0 5\n".to_vec()),
        ("tab as separator", b"P\t1\n".to_vec()),
        ("double space", b"A 1  k o 0 5\n".to_vec()),
        ("trailing space", b"P 1 \n".to_vec()),
        ("leading space", b" P 1\n".to_vec()),
        ("empty line", b"\n".to_vec()),
        ("lone space", b" \n".to_vec()),
        ("leading zero id", b"P 01\n".to_vec()),
        ("leading zero wait", b"A 1 k o 05 5\n".to_vec()),
        ("leading zero lease", b"A 1 k o 5 05\n".to_vec()),
        ("leading zero token", b"R 1 k o 07\n".to_vec()),
        ("zero zero", b"P 00\n".to_vec()),
        ("signed id", b"P +1\n".to_vec()),
        ("negative id", b"P -1\n".to_vec()),
        ("id over u64", b"P 18446744073709551616\n".to_vec()),
        ("hex id", b"P 0x1\n".to_vec()),
        ("wait 256", b"A 1 k o 256 5\n".to_vec()),
        ("lease 0", b"A 1 k o 0 0\n".to_vec()),
        ("lease 251", b"A 1 k o 0 251\n".to_vec()),
        ("fractional wait", b"A 1 k o 1.5 5\n".to_vec()),
        ("token 0", b"R 1 k o 0\n".to_vec()),
        ("token 2^63", b"R 1 k o 9223372036854775808\n".to_vec()),
        ("token over u64", b"R 1 k o 99999999999999999999\n".to_vec()),
        ("A missing field", b"A 1 k o 5\n".to_vec()),
        ("A extra field", b"A 1 k o 5 5 5\n".to_vec()),
        ("R missing field", b"R 1 k o\n".to_vec()),
        ("R extra field", b"R 1 k o 5 5\n".to_vec()),
        ("P missing id", b"P\n".to_vec()),
        ("P extra field", b"P 1 2\n".to_vec()),
        ("unknown op", b"X 1\n".to_vec()),
        ("lowercase op", b"p 1\n".to_vec()),
        ("server frame from client", b"T 1 k\n".to_vec()),
        ("non-ASCII key", b"A 1 k\xc3\xa9 o 0 5\n".to_vec()),
        ("DEL in owner", b"A 1 k o\x7f 0 5\n".to_vec()),
        ("NUL", b"P 1\0\n".to_vec()),
    ];
    cases.push(("key 251 bytes", format!("A 1 {key250}k o 0 5\n").into_bytes()));
    cases.push(("owner 65 bytes", format!("A 1 k {owner64}o 0 5\n").into_bytes()));
    cases.push(("R key 251 bytes", format!("R 1 {key250}k o 5\n").into_bytes()));
    cases.push(("R owner 65 bytes", format!("R 1 k {owner64}o 5\n").into_bytes()));
    // Exactly 512 bytes including the LF: legal size, so malformed, not too large.
    let mut line512 = b"A 1 ".to_vec();
    line512.resize(511, b'k');
    line512.push(b'\n');
    assert_eq!(line512.len(), 512);
    cases.push(("512-byte line (legal size, key too long)", line512));
    cases.into_iter().map(|(n, b)| (n.to_owned(), b)).collect()
}

#[tokio::test]
async fn every_malformed_case_gets_bad_frame_and_close() {
    let s = Server::start();
    // A holder whose state must survive all of it.
    let mut holder = s.client().await;
    let me = owner();
    let token = holder.grab(1, "k", &me, 30).await;

    for (name, bytes) in malformed_cases() {
        let mut c = s.client().await;
        c.send(&bytes).await;
        let line = c.line().await;
        assert_eq!(line, "E bad_frame", "case {name:?}");
        c.expect_closed().await;
    }

    // Nothing changed: the key is still held by the same grant, and the holder's connection works.
    let mut other = s.client().await;
    other.acquire(1, "k", &owner(), 0, 5).await;
    other.expect("T 1 k").await;
    holder.release(2, "k", &me, token).await;
    holder.expect("R 2 k").await;
}

#[tokio::test]
async fn valid_limits_are_accepted() {
    let s = Server::start();
    let mut c = s.client().await;
    let key = "~".repeat(250);
    let own = "!".repeat(64);
    c.acquire(18446744073709551615, &key, &own, 255, 250).await;
    let (token, _) = c.expect_grant(18446744073709551615, &key, &own).await;
    c.acquire(0, "k", &owner(), 0, 1).await;
    let line = c.line().await;
    assert!(line.starts_with("A 0 k "), "{line}");
    c.release(5, &key, &own, token).await;
    c.expect(&format!("R 5 {key}")).await;
    c.release(6, "nope", "x", 9223372036854775807).await;
    c.expect("N 6 nope").await;
}

#[tokio::test]
async fn too_large_without_lf() {
    let s = Server::start();
    let mut keep = s.client().await;
    // 512 bytes and no LF: too large, even before the LF arrives.
    let mut c = s.client().await;
    let mut bytes = b"A 1 ".to_vec();
    bytes.resize(512, b'k');
    c.send(&bytes).await;
    c.expect_error("too_large").await;
    // 513 bytes with the LF at the end: too large.
    let mut c = s.client().await;
    let mut bytes = b"P ".to_vec();
    bytes.resize(512, b'1');
    bytes.push(b'\n');
    c.send(&bytes).await;
    c.expect_error("too_large").await;
    // A huge blob: one E line, then a clean close.
    let mut c = s.client().await;
    c.send_lossy(&vec![b'z'; 100_000]).await;
    c.expect_error("too_large").await;
    // 511 bytes without LF is just incomplete: nothing happens yet.
    let mut c = s.client().await;
    c.send(&vec![b'1'; 511]).await;
    c.silent(std::time::Duration::from_millis(300)).await;
    c.send(b"\n").await;
    c.expect_error("bad_frame").await;

    keep.send(b"P 3\n").await;
    keep.expect("P 3").await;
}

#[tokio::test]
async fn frames_before_the_bad_one_take_effect() {
    let s = Server::start();
    let mut c = s.client().await;
    let me = owner();
    c.send(format!("A 1 k2 {me} 0 5\nP 2\nP 3 \n").as_bytes()).await;
    // The pong, possibly the grant (answers come in any order), then the error.
    let mut lines = Vec::new();
    for _ in 0..3 {
        let line = c.line().await;
        let end = line.starts_with("E ");
        lines.push(line);
        if end {
            break;
        }
    }
    assert_eq!(lines.last().map(String::as_str), Some("E bad_frame"), "{lines:?}");
    assert!(lines.contains(&"P 2".to_owned()), "{lines:?}");
    c.expect_closed().await;
    // The grant took effect and stays (grants outlive their connection).
    let mut d = s.client().await;
    d.acquire(1, "k2", &owner(), 0, 5).await;
    d.expect("T 1 k2").await;
    if let Some(grant) = lines.iter().find(|l| l.starts_with("A ")) {
        let (token, _) = parse_grant(grant, 1, "k2", &me);
        d.release(2, "k2", &me, token).await;
        d.expect("R 2 k2").await;
    }
}
