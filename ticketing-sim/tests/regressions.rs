//! Seeds that once found a violation, kept as tests (docs/verification.md,
//! "Simulation"). Seeds 5 and 18 (3 nodes) found the cluster stalled for
//! good (no grant within the bound after a heal) when a partition dropped
//! bytes from connections that outlived it; a partition now holds them, as
//! TCP does.

use std::time::Duration;

use ticketing_sim::run::{self, Plan};

fn no_violation(seed: u64) {
    let plan = Plan { seed, nodes: 3, clients: 4, keys: 5, duration: Duration::from_secs(30), durable: false };
    let dir = run::run_dir(None, seed);
    let out = run::run(&plan, &dir).expect("the simulation runs");
    assert_eq!(out.error, None);
    assert!(out.report.grants > 0, "seed {seed}: no grant at all");
    assert!(out.report.violations.is_empty(), "seed {seed}: {:?}\nfaults: {:?}", out.report.violations, out.faults);
}

#[test]
fn seed_5() {
    no_violation(5);
}

#[test]
fn seed_18() {
    no_violation(18);
}
