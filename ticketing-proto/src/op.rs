//! [`OpId`]: the one name of a client operation across the core.

/// One client operation: an acquire, or a release (explicit, compensation or
/// best-effort). The broker allocates them; a [`Session`](crate::session::Session)
/// carries one as the caller's name for each request it sends (echoed in its
/// events), and the release [`Lane`](crate::lane::Lane) keys its entries by them,
/// so an answer finds its operation without any conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);
