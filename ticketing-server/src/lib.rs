//! Ticketing server (work in progress).
