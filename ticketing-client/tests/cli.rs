//! The `ticketing` CLI, run as a process against scripted fake servers.

mod support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::*;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

async fn ticketing(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ticketing"));
    cmd.args(args)
        .env_remove("TICKETING_ADDR")
        .env_remove("TICKETING_TOKEN_FILE")
        .env_remove("TICKETING_TLS")
        .env_remove("TICKETING_ADMIN_TOKEN_FILE")
        .env_remove("TICKETING_ADMIN_CA");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output()).await.expect("the CLI hung").unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// A fresh path in the temp dir (removed first if it exists).
fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let p = std::env::temp_dir().join(format!(
        "ticketing-cli-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

fn granting(token: u64) -> Behavior {
    Behavior::script(move |r| match r.op() {
        "A" => vec![grant(r, token, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    })
}

#[tokio::test]
async fn grant_runs_the_command_with_its_env_propagates_the_status_and_releases() {
    let fake = Fake::start(granting(4242)).await;
    let out = scratch("env");
    let script = r#"printf '%s %s %s' "$TICKETING_TOKEN" "$TICKETING_KEY" "$TICKETING_DEADLINE_MS" > "$0"; exit 7"#;
    let r = ticketing(
        &[
            "--addr",
            &fake.addr,
            "lock",
            "job-1",
            "--wait",
            "5",
            "--lease",
            "30",
            "--",
            "sh",
            "-c",
            script,
            out.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(7), "CMD's status: {}", r.stderr);
    let env = std::fs::read_to_string(&out).unwrap();
    let f: Vec<&str> = env.split(' ').collect();
    assert_eq!((f[0], f[1]), ("4242", "job-1"));
    let ms: u64 = f[2].parse().unwrap();
    assert!(ms > 25_000 && ms <= 29_970, "ms until the conservative deadline: {ms}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let (a, rel) = (&reqs[0], &reqs[1]);
    assert_eq!((a.op(), a.key(), a.f[4].as_str(), a.f[5].as_str()), ("A", "job-1", "5", "30"));
    assert_eq!((rel.op(), rel.key(), rel.owner(), rel.f[4].as_str()), ("R", "job-1", a.owner(), "4242"));
    let _ = std::fs::remove_file(out);
}

#[tokio::test]
async fn t_is_exit_75_and_the_command_does_not_run() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("T {} {}", r.id(), r.key()))])).await;
    let marker = scratch("t");
    let r = ticketing(
        &["--addr", &fake.addr, "lock", "k", "--wait", "0", "--lease", "5", "--", "touch", marker.to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(75), "{}", r.stderr);
    assert!(r.stderr.contains("not granted"), "{}", r.stderr);
    assert!(!marker.exists());
}

#[tokio::test]
async fn b_is_exit_76() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("B {} {}", r.id(), r.key()))])).await;
    let r = ticketing(&["--addr", &fake.addr, "lock", "k", "--wait", "3", "--lease", "5", "--", "true"], &[]).await;
    assert_eq!(r.code, Some(76), "{}", r.stderr);
    assert!(r.stderr.contains("busy"), "{}", r.stderr);
    assert_eq!(fake.count("A"), 1);
}

#[tokio::test]
async fn f_is_exit_81_naming_the_key_and_the_command_does_not_run() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("F {} {}", r.id(), r.keys()[1]))])).await;
    let marker = scratch("f");
    let r = ticketing(
        &[
            "--addr",
            &fake.addr,
            "lock",
            "orders/1",
            "payments/2",
            "--all",
            "--wait",
            "3",
            "--lease",
            "5",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(81), "{}", r.stderr);
    assert!(r.stderr.contains("forbidden") && r.stderr.contains("payments/2"), "{}", r.stderr);
    assert!(!marker.exists());
    assert_eq!(fake.count("K"), 1, "never retried");
}

#[tokio::test]
async fn session_lost_after_the_send_is_exit_77() {
    let fake = Fake::start(Behavior::script(|_| vec![Step::Close])).await;
    let r = ticketing(&["--addr", &fake.addr, "lock", "k", "--wait", "3", "--lease", "5", "--", "true"], &[]).await;
    assert_eq!(r.code, Some(77), "{}", r.stderr);
    assert!(r.stderr.contains("indeterminate"), "{}", r.stderr);
}

#[tokio::test]
async fn budget_not_covered_is_exit_78_and_the_grant_is_released() {
    let fake = Fake::start(granting(9)).await;
    // budget = lease: the conservative deadline (lease × 0.999) can never cover it.
    let r = ticketing(
        &["--addr", &fake.addr, "lock", "k", "--wait", "1", "--lease", "2", "--budget", "2", "--", "true"],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(78), "{}", r.stderr);
    assert!(fake.wait_for(secs(2.0), |f| f.count("R") == 1).await, "compensating R before exit");
}

#[tokio::test]
async fn lease_shorter_than_the_command_sends_sigterm_and_exits_79() {
    let fake = Fake::start(granting(77)).await;
    let marker = scratch("term");
    // The command notes the SIGTERM and exits 0: the exit code is still 79.
    let script = r#"trap 'echo term > "$0"; kill $! 2>/dev/null; exit 0' TERM; sleep 20 & wait"#;
    let r = ticketing(
        &[
            "--addr",
            &fake.addr,
            "lock",
            "k",
            "--wait",
            "1",
            "--lease",
            "1",
            "--",
            "sh",
            "-c",
            script,
            marker.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(79), "{}", r.stderr);
    assert!(r.stderr.contains("SIGTERM"), "{}", r.stderr);
    assert!(r.elapsed < secs(10.0), "{:?}", r.elapsed);
    assert!(r.elapsed >= Duration::from_millis(900), "not before the deadline: {:?}", r.elapsed);
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "term");
    assert_eq!(fake.count("R"), 1, "released after the command ended");
    let _ = std::fs::remove_file(marker);
}

#[tokio::test]
async fn kill_after_sends_sigkill_to_a_command_ignoring_sigterm() {
    let fake = Fake::start(granting(78)).await;
    let r = ticketing(
        &[
            "--addr",
            &fake.addr,
            "lock",
            "k",
            "--wait",
            "1",
            "--lease",
            "1",
            "--kill-after",
            "0.3",
            "--",
            "sh",
            "-c",
            // An ignored SIGTERM survives exec: the sleep itself ignores it.
            "trap '' TERM; exec sleep 20",
        ],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(79), "{}", r.stderr);
    assert!(r.stderr.contains("SIGKILL"), "{}", r.stderr);
    assert!(r.elapsed < secs(10.0), "{:?}", r.elapsed);
}

#[tokio::test]
async fn command_killed_by_a_signal_is_128_plus_n_and_missing_command_is_127() {
    let fake = Fake::start(granting(5)).await;
    let r = ticketing(
        &["--addr", &fake.addr, "lock", "k", "--wait", "1", "--lease", "5", "--", "sh", "-c", "kill -9 $$"],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(137), "{}", r.stderr);
    let r = ticketing(
        &["--addr", &fake.addr, "lock", "k", "--wait", "1", "--lease", "5", "--", "/nonexistent/ticketing-no-such-cmd"],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(127), "{}", r.stderr);
    assert_eq!(fake.count("R"), 2, "both locks released");
}

#[tokio::test]
async fn dead_address_is_exit_69_fast() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let r = ticketing(&["--addr", &addr, "lock", "k", "--wait", "0", "--lease", "5", "--", "true"], &[]).await;
    assert_eq!(r.code, Some(69), "{}", r.stderr);
    assert!(r.elapsed < secs(5.0), "{:?}", r.elapsed);
    let r = ticketing(&["--addr", &addr, "ping", "--timeout", "0.3"], &[]).await;
    assert_eq!(r.code, Some(69), "{}", r.stderr);
}

#[tokio::test]
async fn token_file_and_addr_from_the_environment() {
    let fake =
        Fake::start(Behavior { token: b"tok-123".to_vec(), smac_token: b"tok-123".to_vec(), ..granting(11) }).await;
    let good = scratch("good-token");
    std::fs::write(&good, "tok-123\n").unwrap();
    let bad = scratch("bad-token");
    std::fs::write(&bad, "not-the-token\n").unwrap();
    let addrs = format!("127.0.0.1:1,{}", fake.addr);
    let envs = [("TICKETING_ADDR", addrs.as_str()), ("TICKETING_TOKEN_FILE", good.to_str().unwrap())];
    let r = ticketing(&["lock", "k", "--wait", "1", "--lease", "5", "--", "true"], &envs).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let r = ticketing(&["ping"], &envs).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("ready in") && r.stdout.contains(&format!("leader {}", fake.addr)), "{}", r.stdout);
    // A wrong token: exit 80 for lock and ping.
    let envs = [("TICKETING_ADDR", fake.addr.as_str()), ("TICKETING_TOKEN_FILE", bad.to_str().unwrap())];
    let r = ticketing(&["lock", "k", "--wait", "1", "--lease", "5", "--", "true"], &envs).await;
    assert_eq!(r.code, Some(80), "{}", r.stderr);
    let r = ticketing(&["ping", "--timeout", "3"], &envs).await;
    assert_eq!(r.code, Some(80), "{}", r.stderr);
    let raw = String::from_utf8_lossy(&fake.raw()).into_owned();
    assert!(!raw.contains("tok-123") && !raw.contains("not-the-token"), "the token never crosses the wire");
    let _ = (std::fs::remove_file(good), std::fs::remove_file(bad));
}

#[tokio::test]
async fn usage_errors_are_exit_64_and_send_nothing() {
    let fake = Fake::start(granting(1)).await;
    let a = fake.addr.as_str();
    for args in [
        vec!["--addr", a, "lock", "k", "--wait", "1", "--lease", "5"],
        vec!["--addr", a, "lock", "bad\tkey", "--wait", "1", "--lease", "5", "--", "true"],
        vec!["--addr", a, "lock", "k", "--wait", "NaN", "--lease", "5", "--", "true"],
        vec!["--addr", a, "lock", "k", "--wait", "1", "--lease", "0", "--", "true"],
        vec!["--addr", a, "lock", "k", "--wait", "1", "--lease", "5", "--budget", "6", "--", "true"],
        vec!["--addr", "no-port", "ping"],
        vec!["--addr", a, "--tls", "", "ping"],
        vec!["--addr", a, "--token-file", "/nonexistent/token", "ping"],
        vec!["--addr", a, "ping", "--timeout", "-1"],
        vec!["--addr", a, "frobnicate"],
    ] {
        let r = ticketing(&args, &[]).await;
        assert_eq!(r.code, Some(64), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.is_empty(), "{args:?}: a message");
    }
    assert_eq!(fake.requests().len(), 0);
    let r = ticketing(&["--help"], &[]).await;
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("lock") && r.stdout.contains("ping"));
}

/// A one-route admin HTTP fake: every request gets `status` and `body`; the request paths are recorded.
async fn fake_admin(status: &'static str, body: String) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let paths: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let seen = paths.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            // The path, and the body after a space when there is one.
            let path = req.split(' ').nth(1).unwrap_or("").to_owned();
            let sent = req.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
            seen.lock().unwrap().push(if sent.is_empty() { path } else { format!("{path} {sent}") });
            let resp = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    (addr, paths)
}

#[tokio::test]
async fn locks_prints_holder_and_waiters_following_a_follower_to_the_leader() {
    let body = r#"{"key":"seat/1","holder":{"owner_prefix":"01234567","token":99,"remaining_ms":4000,"granted_dt":100},
        "waiters":[{"owner_prefix":"aaaaaaaa","client":"127.0.0.1:4001","waited_ms":50,"wait_left_ms":950}],"domain_time_ms":1100}"#;
    let (leader, leader_paths) = fake_admin("200 OK", body.to_owned()).await;
    let follower_body = format!(r#"{{"error":"not the leader","leader":"127.0.0.1:5225","leader_admin":"{leader}"}}"#);
    let (follower, _) = fake_admin("503 Service Unavailable", follower_body).await;
    let r = ticketing(&["locks", "seat/1", "--admin", &follower], &[]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(leader_paths.lock().unwrap().as_slice(), ["/locks/seat%2F1"]);
    assert!(r.stdout.contains("owner 01234567…  token 99  remaining 4000 ms"), "{}", r.stdout);
    assert!(r.stdout.contains("1  aaaaaaaa…  exclusive  127.0.0.1:4001  50"), "{}", r.stdout);

    let (bad, _) = fake_admin("400 Bad Request", r#"{"error":"bad key"}"#.to_owned()).await;
    assert_eq!(ticketing(&["locks", "k", "--admin", &bad], &[]).await.code, Some(64));
    let (lost, _) =
        fake_admin("503 Service Unavailable", r#"{"error":"not the leader","leader":null}"#.to_owned()).await;
    let r = ticketing(&["locks", "k", "--admin", &lost], &[]).await;
    assert_eq!(r.code, Some(69), "{}", r.stderr);
    assert!(r.stderr.contains("not the leader"), "{}", r.stderr);
    assert_eq!(ticketing(&["locks", "k"], &[]).await.code, Some(64), "--admin is required");
    let r = ticketing(&["locks", "k", "--admin", &lost, "--admin-ca", "/nonexistent/admin-ca.pem"], &[]).await;
    assert_eq!(r.code, Some(64), "{}", r.stderr);
    assert!(r.stderr.contains("--admin-ca /nonexistent/admin-ca.pem"), "{}", r.stderr);
}

#[tokio::test]
async fn cluster_add_asks_the_leader_and_a_refusal_is_exit_82() {
    let members = r#"{"domain":"d0","leader_id":1,"members":[
        {"id":1,"peer":"10.0.0.1:5226","client":"10.0.0.1:5225","voter":true,"admin":"10.0.0.1:5227"},
        {"id":2,"peer":"10.0.0.2:5226","client":"10.0.0.2:5225","voter":true,"admin":null},
        {"id":4,"peer":"10.0.0.4:5226","client":"10.0.0.4:5225","voter":false,"admin":null}]}"#;
    let (leader, leader_paths) = fake_admin("200 OK", members.to_owned()).await;
    let follower_body = format!(r#"{{"error":"not the leader","leader":"127.0.0.1:5225","leader_admin":"{leader}"}}"#);
    let (follower, follower_paths) = fake_admin("503 Service Unavailable", follower_body).await;
    let r = ticketing(&["cluster", "add", "10.0.0.4:5226", "10.0.0.5:5226", "--admin", &follower], &[]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let asked = r#"/cluster/add {"peers":["10.0.0.4:5226","10.0.0.5:5226"]}"#;
    assert_eq!(follower_paths.lock().unwrap().as_slice(), [asked]);
    assert_eq!(leader_paths.lock().unwrap().as_slice(), [asked]);
    assert!(r.stdout.contains("domain  d0"), "{}", r.stdout);
    let rows: Vec<Vec<&str>> = r.stdout.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["1", "leader", "10.0.0.1:5226", "10.0.0.1:5225", "10.0.0.1:5227"], "{}", r.stdout);
    assert_eq!(rows[2], ["4", "learner", "10.0.0.4:5226", "10.0.0.4:5225", "-"], "{}", r.stdout);

    // `list` asks the node given, whatever its role.
    let r = ticketing(&["cluster", "list", "--admin", &leader], &[]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(leader_paths.lock().unwrap().last().map(String::as_str), Some("/cluster"));

    let (refusing, paths) =
        fake_admin("409 Conflict", r#"{"error":"refused: it would lose the majority"}"#.into()).await;
    let r = ticketing(&["cluster", "remove", "3", "10.0.0.2:5226", "--admin", &refusing], &[]).await;
    assert_eq!(r.code, Some(82), "{}", r.stderr);
    assert!(r.stderr.contains("cluster remove: refused: it would lose the majority"), "{}", r.stderr);
    assert_eq!(paths.lock().unwrap().as_slice(), [r#"/cluster/remove {"nodes":["3","10.0.0.2:5226"]}"#]);
    // Two addresses, never one or three.
    assert_eq!(ticketing(&["cluster", "add", "a:1", "--admin", &refusing], &[]).await.code, Some(64));
    assert_eq!(ticketing(&["cluster", "add", "a:1", "b:1", "c:1", "--admin", &refusing], &[]).await.code, Some(64));
}

#[tokio::test]
async fn snapshot_save_writes_a_checked_backup_from_the_leader() {
    use sha2::Digest;
    let data = "TKLS-snapshot-bytes";
    let digest: String = sha2::Sha256::digest(data.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let header = format!(
        r#"{{"domain":"d0","applied_index":9,"last_token":77,"domain_time_ms":5,"held_keys":1,"longest_lease_ms":3000,"created_unix_ms":1,"bytes":{},"sha256":"{digest}"}}"#,
        data.len()
    );
    let backup = format!("TICKETING-BACKUP 1\n{header}\n{data}");
    let (leader, paths) = fake_admin("200 OK", backup.clone()).await;
    let follower_body = format!(r#"{{"error":"not the leader","leader":"127.0.0.1:5225","leader_admin":"{leader}"}}"#);
    let (follower, _) = fake_admin("503 Service Unavailable", follower_body).await;
    let out = scratch("backup");
    let r = ticketing(&["snapshot", "save", out.to_str().unwrap(), "--admin", &follower], &[]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(paths.lock().unwrap().as_slice(), ["/snapshot"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), backup);
    assert!(r.stdout.contains("applied index 9, 1 held keys, token high-water 77"), "{}", r.stdout);

    // A damaged answer is refused and nothing is written.
    let (bad, _) =
        fake_admin("200 OK", backup.replace("bytes", "bytez").replace("TKLS-snapshot", "TKLS-snapsh0t")).await;
    let out2 = scratch("backup-bad");
    let r = ticketing(&["snapshot", "save", out2.to_str().unwrap(), "--admin", &bad], &[]).await;
    assert_eq!(r.code, Some(69), "{}", r.stderr);
    assert!(!out2.exists(), "nothing written");
    let (standalone, _) =
        fake_admin("404 Not Found", r#"{"error":"a standalone server has no cluster snapshot"}"#.into()).await;
    let r = ticketing(&["snapshot", "save", out2.to_str().unwrap(), "--admin", &standalone], &[]).await;
    assert_eq!(r.code, Some(64), "{}", r.stderr);
}

/// S → G (slot 1), K → A, R → R.
fn granting_grants(token: u64) -> Behavior {
    Behavior::script(move |r| match r.op() {
        "S" => vec![grant_shared(r, token, 0, 1)],
        "K" => vec![grant_all(r, token, 0)],
        "A" => vec![grant(r, token, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    })
}

const ENV_SCRIPT: &str =
    r#"printf '%s|%s|%s|%s' "$TICKETING_TOKEN" "$TICKETING_KEY" "$TICKETING_KEYS" "${TICKETING_SLOT-unset}" > "$0""#;

#[tokio::test]
async fn shared_n_holds_a_counted_grant_and_passes_its_slot() {
    let fake = Fake::start(granting_grants(51)).await;
    let out = scratch("shared");
    let args = ["--addr", &fake.addr, "lock", "pool", "--shared", "3", "--wait", "2", "--lease", "30", "--"];
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend(["sh", "-c", ENV_SCRIPT, out.to_str().unwrap()]);
    let r = ticketing(&argv, &[("TICKETING_SLOT", "inherited")]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "51|pool|pool|1");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!((reqs[0].op(), reqs[0].key(), reqs[0].f[6].as_str()), ("S", "pool", "3"));
    assert_eq!((reqs[1].op(), reqs[1].key(), reqs[1].f[4].as_str()), ("R", "pool", "51"));
    let _ = std::fs::remove_file(out);
}

#[tokio::test]
async fn all_holds_every_key_with_one_token_and_releases_each() {
    let fake = Fake::start(granting_grants(52)).await;
    let out = scratch("all");
    let args = ["--addr", &fake.addr, "lock", "--all", "b", "a", "--wait", "2", "--lease", "30", "--"];
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend(["sh", "-c", ENV_SCRIPT, out.to_str().unwrap()]);
    let r = ticketing(&argv, &[("TICKETING_SLOT", "inherited")]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "52|b|b a|unset", "no slot for an exclusive grant");
    let reqs = fake.requests();
    assert_eq!(reqs[0].f[0], "K");
    assert_eq!(reqs[0].keys(), ["b", "a"]);
    let mut rel: Vec<(&str, &str)> =
        reqs[1..].iter().filter(|r| r.op() == "R").map(|r| (r.key(), r.f[4].as_str())).collect();
    rel.sort();
    assert_eq!(rel, [("a", "52"), ("b", "52")], "one R per key");
    let _ = std::fs::remove_file(out);
}

#[tokio::test]
async fn bad_shared_and_key_lists_are_exit_64_and_send_nothing() {
    let fake = Fake::start(granting_grants(53)).await;
    let marker = scratch("bad-grants");
    let m = marker.to_str().unwrap();
    let cases: [&[&str]; 6] = [
        &["lock", "k", "--shared", "0"],
        &["lock", "k", "--shared", "65536"],
        &["lock", "a", "b"],                  // several keys need --all
        &["lock", "a", "b", "--shared", "2"], // --shared takes one key
        &["lock", "--all", "a"],              // --all takes 2-16 keys
        &["lock", "--all", "a", "a"],         // a key twice
    ];
    for case in cases {
        let mut argv = vec!["--addr", fake.addr.as_str()];
        argv.extend_from_slice(case);
        argv.extend(["--wait", "1", "--lease", "5", "--", "touch", m]);
        let r = ticketing(&argv, &[]).await;
        assert_eq!(r.code, Some(64), "{case:?}: {}", r.stderr);
        assert!(!marker.exists(), "{case:?}: CMD must not run");
    }
    let r = ticketing(
        &[
            "--addr", &fake.addr, "lock", "--all", "a", "b", "--shared", "2", "--wait", "1", "--lease", "5", "--",
            "true",
        ],
        &[],
    )
    .await;
    assert_eq!(r.code, Some(64), "--shared and --all exclude each other: {}", r.stderr);
    assert!(fake.requests().is_empty(), "nothing was sent: {:?}", fake.requests());
}

#[tokio::test]
async fn locks_passes_the_admin_token_and_a_401_is_exit_80() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An admin port that wants `Bearer right`.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            let (status, body) = if req.contains("\r\nAuthorization: Bearer right\r\n") {
                ("200 OK", r#"{"key":"k","holders":[],"waiters":[],"domain_time_ms":5}"#)
            } else {
                ("401 Unauthorized", "unauthorized")
            };
            let resp =
                format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    let r = ticketing(&["locks", "k", "--admin", &addr], &[]).await;
    assert_eq!(r.code, Some(80), "{}", r.stderr);
    assert!(r.stderr.contains("needs an admin token"), "{}", r.stderr);
    let wrong = scratch("wrong-admin-token");
    std::fs::write(&wrong, "wrong\n").unwrap();
    let r = ticketing(&["locks", "k", "--admin", &addr, "--admin-token-file", wrong.to_str().unwrap()], &[]).await;
    assert_eq!(r.code, Some(80), "{}", r.stderr);
    assert!(r.stderr.contains("refused the admin token"), "{}", r.stderr);
    let right = scratch("right-admin-token");
    std::fs::write(&right, "right\n").unwrap();
    let r =
        ticketing(&["locks", "k", "--admin", &addr], &[("TICKETING_ADMIN_TOKEN_FILE", right.to_str().unwrap())]).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("holder       none"), "{}", r.stdout);
}
