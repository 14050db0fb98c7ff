//! Client → server frames as the server decodes them: never a panic, and
//! every decoded frame encodes back to bytes that decode to the same frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ticketing_proto::frame::decode_client;

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    while let Ok(Some((frame, used))) = decode_client(buf) {
        assert!(used > 0 && used <= buf.len());
        let again = frame.to_bytes();
        assert_eq!(decode_client(&again).unwrap(), Some((frame, again.len())));
        buf = &buf[used..];
    }
});
