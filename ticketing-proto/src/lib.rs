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
