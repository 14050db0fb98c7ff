//! # ticketing-proto
//!
//! The sans-IO core of Ticketing: no sockets, no threads, no clock reads —
//! time and randomness are inputs.
//!
//! ```
//! use ticketing_proto::frame::{decode_client, ClientFrame, RequestId};
//! let (frame, used) = decode_client(b"P 7\n").unwrap().unwrap();
//! assert_eq!(frame, ClientFrame::Ping { id: RequestId(7) });
//! assert_eq!(used, 4);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
pub mod broker;
pub mod deadline;
pub mod entropy;
pub mod field;
pub mod frame;
pub mod hostport;
pub mod lane;
pub mod limits;
pub mod op;
pub mod params;
pub mod session;
pub mod timer;

pub use field::{Addr, Hex32, Key, KeySet, KeySetError, Owner, RequestId, Role, Token};
pub use frame::{ClientFrame, ErrorCode, FrameError, ServerFrame};

/// A counting random source for the tests: byte `i` of its output is
/// `start + i + 1` (wrapping), so a test can tell its draws apart and
/// predict them.
#[cfg(test)]
pub(crate) mod test_rng {
    use rand_core::{CryptoRng, RngCore};

    pub(crate) struct Counter(pub(crate) u8);

    impl RngCore for Counter {
        fn next_u32(&mut self) -> u32 {
            rand_core::impls::next_u32_via_fill(self)
        }
        fn next_u64(&mut self) -> u64 {
            rand_core::impls::next_u64_via_fill(self)
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            for b in dest {
                self.0 = self.0.wrapping_add(1);
                *b = self.0;
            }
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }
    impl CryptoRng for Counter {}
}
