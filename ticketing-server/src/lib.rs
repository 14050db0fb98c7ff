//! # ticketing-server
//!
//! The Ticketing server: a FIFO lock service with fencing tokens.
#![forbid(unsafe_code)]

pub mod locks;
pub mod replication;
