//! The peer frame decoder (`cluster::wire::read_frame`, `decode_body`) fed
//! arbitrary bytes: never a panic, and every decoded envelope re-encodes to
//! a frame that decodes again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ticketing_server::cluster::wire::{decode_body, encode, read_frame};

fuzz_target!(|data: &[u8]| {
    let _ = decode_body(data);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let mut r = data;
        while let Ok(Some(env)) = read_frame(&mut r).await {
            let bytes = encode(&env).expect("a decoded envelope must encode");
            let mut again = &bytes[..];
            assert!(read_frame(&mut again).await.unwrap().is_some());
        }
    });
});
