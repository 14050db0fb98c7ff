//! The accepting side of the peer handshake (`cluster::wire::accept_handshake`)
//! fed arbitrary dialer bytes: never a panic; success only with a valid MAC
//! (impossible to guess, so any `Ok` is a bug).
#![no_main]
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ticketing_proto::auth::Secret;
use ticketing_server::cluster::types::NodeId;
use ticketing_server::cluster::wire::accept_handshake;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(async {
        let mut r = data;
        let mut w = tokio::io::sink();
        let res = accept_handshake(&mut r, &mut w, Some(&[Secret::from("peer-secret")]), NodeId(42), None, Duration::from_secs(5)).await;
        assert!(res.is_err(), "a handshake without the peer token succeeded");
    });
});
