//! The peer frame decoders (`cluster::wire::decode_body`, `read_frame` and
//! the connection's `FrameReader`) fed arbitrary bytes: never a panic, every
//! decoded envelope re-encodes to a frame that decodes again, and both
//! readers agree on the frames they find.
#![no_main]
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ticketing_server::cluster::wire::{decode_body, encode, read_frame, FrameReader};

fuzz_target!(|data: &[u8]| {
    let _ = decode_body(data);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(async {
        let mut r = data;
        let mut direct = Vec::new();
        while let Ok(Some(env)) = read_frame(&mut r).await {
            let bytes = encode(&env).expect("a decoded envelope must encode");
            let mut again = &bytes[..];
            assert!(read_frame(&mut again).await.unwrap().is_some());
            direct.push(format!("{env:?}"));
        }
        let mut reader = FrameReader::new(data);
        let mut buffered = Vec::new();
        while let Ok(Some(env)) = reader.next(Duration::from_secs(1)).await {
            buffered.push(format!("{env:?}"));
        }
        assert_eq!(direct, buffered, "the two readers disagree");
    });
});
