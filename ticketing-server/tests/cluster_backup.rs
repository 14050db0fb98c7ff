//! Backup and restore (docs/operating.md, "Backup and disaster recovery"):
//! a backup taken from a live durable cluster under load restores into a
//! NEW 3-node cluster with the holders and tokens as saved, and every new
//! token above the backup's high-water; a file that does not check, or a
//! restore without `--bootstrap`, is refused at start.

/// The `ticketing snapshot save` command's request (its exit codes and file
/// writing are tested in its own crate).
#[path = "../../ticketing-client/src/cli_admin.rs"]
#[allow(dead_code)]
mod cli_admin;
mod cluster_common;
use cluster_common::{
    acquire_once, durable_cluster, granted_token, node_data_dir, peer_token_args, secs, Cluster, BIN,
};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The holder's token of `key` on node `i`'s admin port, if any.
fn holder_token(c: &Cluster, i: usize, key: &str) -> Option<u64> {
    let body = cluster_common::http_get(c.nodes[i].admin, &format!("/locks/{key}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["holder"]["token"].as_u64()
}

/// The server's exit status and stderr for `args` (a start refused at once).
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let end = Instant::now() + secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "the server did not exit for {args:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code(), err)
}

#[test]
fn a_backup_under_load_restores_into_a_new_cluster_with_its_holders_and_tokens_above() {
    let name = "backup-src";
    let (old, leader) = durable_cluster(name, 3, |i| node_data_dir(name, i));
    let mut saved = Vec::new();
    for k in 0..10 {
        let key = format!("held-{k}");
        let line = acquire_once(old.nodes[leader].client, &key, "0123456789abcdef0123456789abcdef", 0, 200);
        saved.push((key, granted_token(&line).unwrap_or_else(|| panic!("{line}"))));
    }
    // Writers keep granting and releasing other keys while the backup is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let client = old.nodes[leader].client;
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 5_000 {
                let line = acquire_once(client, &format!("churn-{}", n % 7), "ffffffffffffffffffffffffffffffff", 0, 1);
                n += u64::from(granted_token(&line).is_some());
            }
            n
        })
    };
    let follower = (leader + 1) % 3;
    let admin = format!("127.0.0.1:{}", old.nodes[follower].admin);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (bytes, header) = match rt.block_on(cli_admin::snapshot(&admin, None, None)) {
        Ok(b) => b,
        Err(cli_admin::Failure::Unavailable(m) | cli_admin::Failure::Usage(m)) => panic!("{m}"),
        Err(_) => panic!("snapshot failed"),
    };
    stop.store(true, Ordering::Relaxed);
    assert!(load.join().unwrap() > 0, "the writers granted while the backup was taken");
    let high_water = header["last_token"].as_u64().unwrap();
    assert!(header["held_keys"].as_u64().unwrap() >= 10, "{header}");
    assert!(saved.iter().all(|(_, t)| *t <= high_water), "{header}");
    let file = cluster_common::log_dir().join("backup-src.backup");
    std::fs::write(&file, &bytes).unwrap();
    drop(old);

    // A file that does not check, and a restore without --bootstrap: exit 2, nothing started.
    let mut damaged = bytes.clone();
    *damaged.last_mut().unwrap() ^= 0xff;
    let bad = cluster_common::log_dir().join("backup-damaged.backup");
    std::fs::write(&bad, &damaged).unwrap();
    let peers = ["--peers", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--peer-listen", "127.0.0.1:1"];
    let token = ["--peer-token-file", "/dev/null"];
    let (code, err) = refused(&[&["--bootstrap", "--restore", bad.to_str().unwrap()][..], &peers, &token].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--restore") && err.contains("SHA-256"), "{err}");
    let (code, err) = refused(&[&["--restore", file.to_str().unwrap()][..], &peers].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs --bootstrap"), "{err}");

    // A new cluster on empty data dirs, its bootstrap node restoring the file
    // (no start grace here: the test checks the holders, not the wait).
    let name = "backup-dst";
    let mut new = Cluster::new(name, 3);
    let token = peer_token_args(name);
    for i in 0..3 {
        let data = node_data_dir(name, i).display().to_string();
        new.nodes[i].args = token.iter().cloned().chain(["--data-dir".into(), data]).collect();
    }
    new.nodes[0].args.extend(["--restore".into(), file.display().to_string(), "--start-grace".into(), "0".into()]);
    new.start_all();
    let l = new.wait_serving(secs(30)).expect("the restored cluster serves");
    assert!(new.log(0).contains("restored the backup into the new domain"), "{}", new.log(0));
    for (key, token) in &saved {
        assert_eq!(holder_token(&new, l, key), Some(*token), "{key} held as saved");
        // Still held: another owner does not get it.
        let line = acquire_once(new.nodes[l].client, key, "another-owner", 0, 5);
        assert!(granted_token(&line).is_none(), "{key}: {line}");
    }
    let line = acquire_once(new.nodes[l].client, "fresh-key", "o", 0, 5);
    let fresh = granted_token(&line).unwrap_or_else(|| panic!("{line}"));
    assert!(fresh > high_water, "a new token {fresh} above the backup's high-water {high_water}");
    // The restored node restarted on its DIR (a supervisor, the same command line) keeps its domain.
    new.kill(0);
    new.start(0, true);
    assert!(new.wait_voter(0, secs(30)), "{}", new.log(0));
    assert!(new.log(0).contains("--restore ignored: the data dir holds a domain"), "{}", new.log(0));
    assert_eq!(holder_token(&new, new.wait_serving(secs(30)).unwrap(), &saved[0].0), Some(saved[0].1));
}
