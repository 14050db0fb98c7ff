//! Two of three killed: the survivor grants nothing; the killed pair
//! restarted without `--bootstrap` never forms a leader (docs/deployment.md, rolling restart).

mod cluster_common;
use cluster_common::*;
use std::time::{Duration, Instant};

#[test]
fn lost_majority_never_comes_back() {
    let mut c = Cluster::new("majority", 3);
    c.start_all();
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(10)));
    }
    let a = acquire_once(c.nodes[leader].client, "k", "o", 0, 5);
    assert!(granted_token(&a).is_some(), "{a}");

    // Kill the two followers: the leader loses its quorum.
    let survivor = leader;
    let victims: Vec<usize> = (0..3).filter(|&i| i != survivor).collect();
    for &v in &victims {
        c.kill(v);
    }
    // Within the quorum-ack limit (1.21 s) plus slack it stops serving.
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let h = hello(c.nodes[survivor].client).unwrap();
        if !h.ok.starts_with("OK leader") {
            break;
        }
        assert!(Instant::now() < end, "a leader without quorum must stop serving");
        std::thread::sleep(Duration::from_millis(50));
    }
    let check_nothing_granted = |c: &Cluster, secs: u64| {
        let end = Instant::now() + Duration::from_secs(secs);
        let mut n = 0;
        while Instant::now() < end {
            for i in 0..3 {
                if c.nodes[i].child.is_some() {
                    let ans = acquire_once(c.nodes[i].client, &format!("x{n}"), "o", 1, 5);
                    assert!(granted_token(&ans).is_none(), "node {i} granted: {ans}");
                    n += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        n
    };
    let n = check_nothing_granted(&c, 3);
    println!("survivor alone: {n} acquires, none granted");

    // Restart the pair without --bootstrap: no leader ever.
    for &v in &victims {
        c.start(v, false);
    }
    let n = check_nothing_granted(&c, 6);
    assert!(c.leaders().is_empty());
    for i in 0..3 {
        let s = status(c.nodes[i].admin).unwrap();
        // openraft 0.9 keeps a partitioned leader in the Leader role; it must not serve.
        assert_ne!(s["serving"], true, "node {i}: {s}");
        if i != survivor {
            assert_ne!(s["role"], "leader", "node {i}: {s}");
        }
    }
    println!("after restarting the pair: {n} acquires, none granted, no leader");
}
