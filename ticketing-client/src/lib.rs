//! Rust client for Ticketing (work in progress).
