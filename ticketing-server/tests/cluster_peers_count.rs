//! docs/deployment.md, "A 3-node cluster": only 3 or 5 voters; any other peer count exits 2 with a clear message.

mod cluster_common;
use cluster_common::{free_port, BIN, PEER_TOKEN};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn peer_counts_other_than_3_or_5_exit_2() {
    for n in [1usize, 2, 4, 6] {
        let peers: Vec<String> = (0..n).map(|_| format!("127.0.0.1:{}", free_port())).collect();
        let mut child = Command::new(BIN)
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--peer-listen", &peers[0], "--peers", &peers.join(",")])
            .env("TICKETING_PEER_TOKEN", PEER_TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < end, "{n} peers: the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{n} peers: {err}");
        assert!(err.contains("3 or 5"), "{n} peers: unclear message {err:?}");
    }
}
