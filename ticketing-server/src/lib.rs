//! # ticketing-server
//!
//! The Ticketing server: a FIFO lock service with fencing tokens.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod domain_time;
pub mod gencerts;
pub mod listener;
pub mod locks;
pub mod manager;
pub mod reload;
pub mod replication;
pub mod server;
pub mod tls;
