//! The server's client port — the handshake and then the requests — driven
//! by arbitrary client bytes through the public `conn::serve` of
//! ticketing-server (standalone replicator, auth off, so a well-formed
//! `AUTH` line gets through and the fuzzer reaches the request matrix).
//! Tokio's clock is paused, so waits and leases pass at once. Checked: no
//! panic, the connection ends, and everything it wrote is well-formed
//! server frames.
#![no_main]
use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ticketing_proto::frame::decode_server;
use ticketing_proto::Addr;
use ticketing_server::config::Limits;
use ticketing_server::conn::{self, ConnContext};
use ticketing_server::manager;
use ticketing_server::metrics::Metrics;
use ticketing_server::replication::{Replicator, Standalone};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(async {
        let me = Addr::new("127.0.0.1:5225".to_owned()).unwrap();
        let replicator: Arc<dyn Replicator> = Arc::new(Standalone::new(me.clone()));
        let manager = manager::spawn(replicator.clone(), Limits::default(), Arc::new(Metrics::default()), me.clone());
        let ctx = ConnContext {
            manager,
            leadership: replicator.leadership(),
            client_tokens: Default::default(),
            advertise: me,
            max_pending: 1024,
            max_write_buffer: 1 << 20,
            write_buffers: ticketing_server::conn::WriteBuffers::new(1 << 28),
        };
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_stop_tx, stop_rx) = tokio::sync::broadcast::channel(1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let budget = ticketing_server::preauth::PreAuth::new(8, 8);
        let (preauth, _) = budget.admit("127.0.0.1".parse().unwrap());
        let peer = "127.0.0.1:40000".parse().unwrap();
        let serve = conn::serve(server, manager::ConnId(1), peer, &ctx, deadline, stop_rx, preauth);
        let talk = async {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut out = Vec::new();
            let _ = client.read_to_end(&mut out).await;
            out
        };
        let (out, ()) = tokio::time::timeout(Duration::from_secs(600), async { tokio::join!(talk, serve) })
            .await
            .expect("the connection did not end within 600 s of (paused) time");
        let mut buf = &out[..];
        while !buf.is_empty() {
            match decode_server(buf) {
                Ok(Some((_, used))) => buf = &buf[used..],
                other => panic!("the server wrote a malformed frame: {other:?} in {:?}", String::from_utf8_lossy(buf)),
            }
        }
    });
});
