//! Principals (docs/security.md, "Several teams: principals"): the token
//! that matched names the principal; a request on a key outside its
//! prefixes is answered `F` and the connection stays; `K` grants nothing
//! when one key is forbidden; `--client-tokens-file` is the principal
//! `default` with every key; a principal's tokens file that holds no token
//! is refused at start and kept out on SIGHUP; a reload that narrows a
//! principal's keys (or removes the principal) applies to open connections
//! at once, and a reload never turns authentication off; a principal at its
//! `max_waiters` or `max_held_keys` is answered `B`.

mod common;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn config(orders_tokens: &Path, payments_tokens: &Path, orders_keys: &str) -> std::path::PathBuf {
    temp_file(&format!(
        "[[principal]]\nname = \"orders\"\ntokens_file = {:?}\nkeys = [{orders_keys}]\n\n\
         [[principal]]\nname = \"payments\"\ntokens_file = {:?}\nkeys = [\"payments/\"]\n",
        orders_tokens.to_str().unwrap(),
        payments_tokens.to_str().unwrap(),
    ))
}

fn metric(admin: u16, name: &str) -> u64 {
    ticketing_testkit::metric(admin, name).map_or(0, |v| v as u64)
}

struct Setup {
    server: Server,
    admin: u16,
    config: std::path::PathBuf,
    orders: std::path::PathBuf,
    payments: std::path::PathBuf,
}

fn start(orders_keys: &str) -> Setup {
    let orders = temp_file("orders-token\n");
    let payments = temp_file("payments-token-1\npayments-token-2\n");
    let config = config(&orders, &payments, orders_keys);
    let defaults = temp_file("default-token\n");
    let admin = ticketing_testkit::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let server = Server::with(
        &[],
        &[
            "--config",
            config.to_str().unwrap(),
            "--client-tokens-file",
            defaults.to_str().unwrap(),
            "--admin-listen",
            &admin_addr,
        ],
    );
    Setup { server, admin, config, orders, payments }
}

#[tokio::test]
async fn a_key_outside_the_prefixes_is_answered_f_and_the_connection_stays() {
    let s = start("\"orders/\", \"carts/\"");
    let mut c = Client::connect(&s.server.addr, b"orders-token").await;
    // A, S, K, R and Q outside the prefixes: F, each final.
    c.send(b"A 1 payments/1 o1 0 5\n").await;
    c.expect("F 1 payments/1").await;
    c.send(b"S 2 payments/2 o1 0 5 3\n").await;
    c.expect("F 2 payments/2").await;
    c.send(b"K 3 o1 0 5 orders/1 payments/3 carts/1\n").await;
    c.expect("F 3 payments/3").await;
    c.send(b"R 4 payments/1 o1 7\n").await;
    c.expect("F 4 payments/1").await;
    c.send(b"Q 5 order o1\n").await;
    c.expect("F 5 order").await;
    // The forbidden K granted nothing: its allowed keys are still free.
    let mut other = Client::connect(&s.server.addr, b"orders-token").await;
    other.grab(1, "orders/1", "o2", 5).await;
    other.grab(2, "carts/1", "o2", 5).await;
    // The same connection goes on: its allowed requests are served.
    let token = c.grab(6, "carts/2", "o1", 5).await;
    c.release(7, "carts/2", "o1", token).await;
    c.expect("R 7 carts/2").await;
    assert!(metric(s.admin, "ticketing_forbidden_total{principal=\"orders\"}") >= 5);

    // Both tokens of `payments` name it; `default` may use every key.
    for (i, token) in [&b"payments-token-1"[..], b"payments-token-2"].into_iter().enumerate() {
        let mut p = Client::connect(&s.server.addr, token).await;
        p.grab(1, &format!("payments/{i}"), "p", 5).await;
        p.send(b"A 2 orders/9 p 0 5\n").await;
        p.expect("F 2 orders/9").await;
    }
    let mut d = Client::connect(&s.server.addr, b"default-token").await;
    d.grab(1, "anything/at/all", "d", 5).await;
    d.grab(2, "payments/zz", "d", 5).await;
}

#[test]
fn an_empty_principal_tokens_file_or_a_token_of_two_principals_is_refused_at_start() {
    let empty = temp_file(" \n\n");
    let good = temp_file("tok\n");
    let cfg = config(&empty, &good, "\"orders/\"");
    let (code, err) = run_failing(&[], &["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("holds no token") && err.contains("orders"), "{err}");

    let cfg = config(&good, &good, "\"orders/\"");
    let (code, err) = run_failing(&[], &["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("also a token of"), "{err}");

    let cfg = config(&good, &empty, "");
    let (code, err) = run_failing(&[], &["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("keys is empty"), "{err}");
}

fn hup(server: &Server) {
    let ok = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(ok.success());
}

async fn wait_for_reload(admin: u16, result: &str, above: u64) {
    let line = format!("ticketing_reloads_total{{result=\"{result}\"}}");
    let end = Instant::now() + Duration::from_secs(10);
    while metric(admin, &line) <= above {
        assert!(Instant::now() < end, "no reload counted as {result}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn reloads_narrow_keys_at_once_and_a_bad_file_keeps_every_principal() {
    let s = start("\"orders/\", \"carts/\"");
    let mut c = Client::connect(&s.server.addr, b"orders-token").await;
    c.grab(1, "carts/1", "o", 5).await;

    // Narrowed: carts/ is no longer the orders team's, on this open connection too.
    std::fs::write(&s.config, std::fs::read_to_string(config(&s.orders, &s.payments, "\"orders/\"")).unwrap()).unwrap();
    let ok = metric(s.admin, "ticketing_reloads_total{result=\"ok\"}");
    hup(&s.server);
    wait_for_reload(s.admin, "ok", ok).await;
    c.send(b"A 2 carts/2 o 0 5\n").await;
    c.expect("F 2 carts/2").await;
    c.grab(3, "orders/1", "o", 5).await;

    // A principal's file emptied: the reload fails, every principal is kept
    // (the old token still works), and nobody gets in without a token.
    std::fs::write(&s.payments, "\n").unwrap();
    let failed = metric(s.admin, "ticketing_reloads_total{result=\"failed\"}");
    hup(&s.server);
    wait_for_reload(s.admin, "failed", failed).await;
    let mut p = Client::connect(&s.server.addr, b"payments-token-1").await;
    p.grab(1, "payments/1", "p", 5).await;
    let mut anon = Client::raw(&s.server.addr).await;
    assert!(anon.auth(b"").await.is_err(), "a client without a token was let in after the reload");
}

#[tokio::test]
async fn the_rust_client_raises_forbidden_with_the_key_and_goes_on() {
    use ticketing_client::{Error, TicketBroker};
    let s = start("\"orders/\"");
    let b = TicketBroker::builder([s.server.addr.clone()]).token("orders-token").build().unwrap();
    let secs = Duration::from_secs;
    let e = b.acquire("payments/1", secs(5), secs(5), secs(0)).await.unwrap_err();
    assert_eq!(e, Error::Forbidden { key: "payments/1".into() });
    assert_eq!(e.code(), "forbidden");
    let e = b.acquire_all(&["orders/1", "payments/2"], secs(0), secs(5), secs(0)).await.unwrap_err();
    assert_eq!(e, Error::Forbidden { key: "payments/2".into() });
    // Nothing was granted by the forbidden K, and the broker goes on.
    let t = b.acquire("orders/1", secs(0), secs(5), secs(0)).await.unwrap().expect("orders/1 is free");
    assert!(t.release().await.unwrap());
}

/// Waiters queued on `key`, by the admin view (`/locks/<key>`).
async fn queued(admin: u16, key: &str, want: usize) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let n = ticketing_testkit::http_get(admin, &format!("/locks/{key}"))
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| v["waiters"].as_array().map(Vec::len))
            .unwrap_or(0);
        if n == want {
            return;
        }
        assert!(Instant::now() < end, "{n} waiters on {key}, expected {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server with two principals: `orders` (tokens `orders-token`, the key
/// prefixes `orders_keys`, and the setting line `cap`) and `payments`
/// (`payments-token`, every key); the server and its admin port.
fn capped(orders_keys: &str, cap: &str) -> (Server, u16) {
    let orders = temp_file("orders-token\n");
    let payments = temp_file("payments-token\n");
    let config = temp_file(&format!(
        "[[principal]]\nname = \"orders\"\ntokens_file = {:?}\nkeys = [{orders_keys}]\n{cap}\n\n\
         [[principal]]\nname = \"payments\"\ntokens_file = {:?}\nkeys = [\"\"]\n",
        orders.to_str().unwrap(),
        payments.to_str().unwrap(),
    ));
    let admin = ticketing_testkit::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    (Server::with(&[], &["--config", config.to_str().unwrap(), "--admin-listen", &admin_addr]), admin)
}

#[tokio::test]
async fn a_principal_at_its_waiters_cap_gets_b_and_others_still_queue() {
    let (server, admin) = capped("\"\"", "max_waiters = 2");
    let mut holder = Client::connect(&server.addr, b"payments-token").await;
    holder.grab(1, "k", "h", 60).await;
    // Two waiters of `orders`, over two connections, queue; the third is `B`.
    let mut a = Client::connect(&server.addr, b"orders-token").await;
    a.send(b"A 1 k a 30 5\n").await;
    queued(admin, "k", 1).await;
    let mut b = Client::connect(&server.addr, b"orders-token").await;
    b.send(b"A 1 k b 30 5\n").await;
    queued(admin, "k", 2).await;
    let mut c = Client::connect(&server.addr, b"orders-token").await;
    c.send(b"A 1 k c 30 5\n").await;
    c.expect("B 1 k").await;
    // Another principal is not held back by it.
    let mut d = Client::connect(&server.addr, b"payments-token").await;
    d.send(b"A 1 k d 30 5\n").await;
    queued(admin, "k", 3).await;
    assert_eq!(metric(admin, "ticketing_principal_busy_total{principal=\"orders\"}"), 1);
    // A waiter that leaves frees its place.
    drop(a);
    queued(admin, "k", 2).await;
    c.send(b"A 2 k c 30 5\n").await;
    queued(admin, "k", 3).await;
    drop((b, c, d, holder));
}

#[tokio::test]
async fn a_principal_at_its_held_keys_cap_gets_b_until_it_releases() {
    let (server, admin) = capped("\"orders/\"", "max_held_keys = 2");
    // Two keys over two connections: the cap is the principal's, not a connection's.
    let mut a = Client::connect(&server.addr, b"orders-token").await;
    let t1 = a.grab(1, "orders/1", "a", 60).await;
    let mut b = Client::connect(&server.addr, b"orders-token").await;
    b.grab(1, "orders/2", "b", 60).await;
    b.send(b"A 2 orders/3 b 0 60\n").await;
    b.expect("B 2 orders/3").await;
    // A multi-key acquire counts each of its keys.
    a.send(b"K 2 a 0 60 orders/4 orders/5\n").await;
    a.expect("B 2 orders/4").await;
    assert_eq!(metric(admin, "ticketing_principal_busy_total{principal=\"orders\"}"), 2);
    // Another principal is not held back by it.
    let mut p = Client::connect(&server.addr, b"payments-token").await;
    p.grab(1, "orders/3", "p", 60).await;
    // A release frees a place, on any of the principal's connections.
    a.release(3, "orders/1", "a", t1).await;
    a.expect("R 3 orders/1").await;
    b.grab(4, "orders/4", "b", 60).await;
    b.send(b"A 5 orders/5 b 0 60\n").await;
    b.expect("B 5 orders/5").await;
}

#[tokio::test]
async fn a_reload_may_remove_a_principal_but_never_turns_authentication_off() {
    // Principals only (no --client-tokens-file).
    let orders = temp_file("orders-token\n");
    let payments = temp_file("payments-token\n");
    let cfg = config(&orders, &payments, "\"orders/\"");
    let admin = ticketing_testkit::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let server = Server::with(&[], &["--config", cfg.to_str().unwrap(), "--admin-listen", &admin_addr]);
    let mut p = Client::connect(&server.addr, b"payments-token").await;
    p.grab(1, "payments/1", "p", 5).await;

    // `payments` removed: its open connection may use no key any more, and
    // its token opens no connection.
    let only_orders = format!(
        "[[principal]]\nname = \"orders\"\ntokens_file = {:?}\nkeys = [\"orders/\"]\n",
        orders.to_str().unwrap()
    );
    std::fs::write(&cfg, only_orders).unwrap();
    let ok = metric(admin, "ticketing_reloads_total{result=\"ok\"}");
    hup(&server);
    wait_for_reload(admin, "ok", ok).await;
    p.send(b"A 2 payments/2 p 0 5\n").await;
    p.expect("F 2 payments/2").await;
    assert!(Client::raw(&server.addr).await.auth(b"payments-token").await.is_err());

    // Every principal gone (the file emptied by mistake): refused, so
    // authentication stays on with the old principals.
    std::fs::write(&cfg, "").unwrap();
    let failed = metric(admin, "ticketing_reloads_total{result=\"failed\"}");
    hup(&server);
    wait_for_reload(admin, "failed", failed).await;
    assert!(Client::raw(&server.addr).await.auth(b"").await.is_err(), "authentication was turned off by a reload");
    let mut o = Client::connect(&server.addr, b"orders-token").await;
    o.grab(1, "orders/1", "o", 5).await;
    o.send(b"A 2 payments/1 o 0 5\n").await;
    o.expect("F 2 payments/1").await;
}
