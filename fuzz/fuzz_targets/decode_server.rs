//! Server → client frames as the client decodes them: never a panic, and
//! every decoded frame encodes back to bytes that decode to the same frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ticketing_proto::frame::decode_server;
use ticketing_proto::ServerFrame;

/// KNOWN, OPEN: `decode_server` accepts an `E` text with a leading, trailing
/// or double space (docs/protocol.md §2 calls that malformed); the encoder
/// cleans it, so such frames do not round-trip. Reproduction:
/// `ticketing-verify/tests/repro_error_text.rs`. Skipped here so the target
/// keeps looking for other bugs; remove once fixed.
fn known_error_text_bug(f: &ServerFrame) -> bool {
    matches!(f, ServerFrame::Error { text: Some(t), .. }
        if t.starts_with(' ') || t.ends_with(' ') || t.contains("  "))
}

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
        if !known_error_text_bug(&frame) && !long_error_code(&frame) {
            let again = frame.to_bytes();
            assert_eq!(decode_server(&again).unwrap(), Some((frame, again.len())));
        }
        buf = &buf[used..];
    }
});
