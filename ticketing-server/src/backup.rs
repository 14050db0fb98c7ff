//! Backups of a live cluster's lock state (docs/operating.md, "Backup and
//! disaster recovery"): the file `GET /snapshot` answers and `--restore`
//! reads.
//!
//! ```text
//! TICKETING-BACKUP 1\n
//! {"domain": …, "applied_index": …, "sha256": …, …}\n     (one line of JSON: Header)
//! the lock-state snapshot, `bytes` long (docs/cluster-protocol.md, "Snapshots")
//! ```
//! The snapshot is the applied state at one log index; the SHA-256 covers
//! it, and a file whose digest, length or snapshot does not check is refused.

use crate::locks::LockState;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The first line of a backup file.
pub const MAGIC: &str = "TICKETING-BACKUP 1";

/// What a backup says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The fencing domain it was taken from (32 hex digits).
    pub domain: String,
    /// The log index whose applied state it holds.
    pub applied_index: u64,
    /// The token high-water: the last token issued at that index.
    pub last_token: u64,
    /// The domain time (ms) at that index.
    pub domain_time_ms: u64,
    /// Keys held.
    pub held_keys: usize,
    /// The longest lease left at that index (ms of domain time).
    pub longest_lease_ms: u64,
    /// When it was taken (ms since the Unix epoch, the node's clock).
    pub created_unix_ms: u64,
    /// The snapshot's length in bytes.
    pub bytes: u64,
    /// The snapshot's SHA-256, hex.
    pub sha256: String,
}

/// The backup of `state` (the applied state at `applied_index` of `domain`).
pub fn encode(domain: &str, applied_index: u64, state: &LockState, data: &[u8], created_unix_ms: u64) -> Vec<u8> {
    let header = Header {
        domain: domain.to_owned(),
        applied_index,
        last_token: state.last_token(),
        domain_time_ms: state.domain_time(),
        held_keys: state.held_count(),
        longest_lease_ms: state.longest_lease_left(),
        created_unix_ms,
        bytes: data.len() as u64,
        sha256: hex::encode(Sha256::digest(data)),
    };
    let mut out = format!("{MAGIC}\n{}\n", serde_json::to_string(&header).unwrap_or_default()).into_bytes();
    out.extend_from_slice(data);
    out
}

/// Reads a backup file's bytes: its header and the snapshot, checked
/// (magic, header, length, SHA-256, and that the snapshot reads).
pub fn decode(file: &[u8]) -> Result<(Header, Vec<u8>), String> {
    let rest = file
        .strip_prefix(MAGIC.as_bytes())
        .and_then(|r| r.strip_prefix(b"\n"))
        .ok_or_else(|| format!("not a Ticketing backup (it does not start with {MAGIC:?})"))?;
    let end = rest.iter().position(|&b| b == b'\n').ok_or("the header line is missing")?;
    let header: Header = serde_json::from_slice(&rest[..end]).map_err(|e| format!("the header does not read: {e}"))?;
    let data = &rest[end + 1..];
    if data.len() as u64 != header.bytes {
        return Err(format!(
            "the snapshot has {} bytes, the header says {} (a truncated file?)",
            data.len(),
            header.bytes
        ));
    }
    if hex::encode(Sha256::digest(data)) != header.sha256 {
        return Err("the snapshot's SHA-256 does not match the header: the file is damaged".into());
    }
    let state = LockState::from_snapshot(data).map_err(|e| e.to_string())?;
    if state.last_token() != header.last_token || state.held_count() != header.held_keys {
        return Err("the snapshot does not match its header".into());
    }
    Ok((header, data.to_vec()))
}

/// The largest lock-state snapshot a restore takes: it is replicated as
/// one log entry, and an entry travels whole in a peer frame (at most
/// 16 MiB); half of that leaves room for the entries beside it (about
/// 130 000 held keys of 30-byte keys).
pub const MAX_RESTORE_BYTES: usize = crate::cluster::wire::MAX_BODY / 2;

/// Reads and checks the backup file at `path`.
pub fn read(path: &std::path::Path) -> Result<(Header, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (header, data) = decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if data.len() > MAX_RESTORE_BYTES {
        return Err(format!(
            "{}: its lock state is {} bytes ({} held keys); a restore takes at most {MAX_RESTORE_BYTES} bytes",
            path.display(),
            data.len(),
            header.held_keys
        ));
    }
    Ok((header, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> LockState {
        let mut s = LockState::new();
        let key = ticketing_proto::Key::new("seat-1").unwrap();
        let owner = ticketing_proto::Owner::new("0123456789abcdef0123456789abcdef").unwrap();
        s.apply(&crate::locks::Command::Grant { key, owner, lease_s: 30, micros: 1_000_000, dt: 5_000 });
        s
    }

    #[test]
    fn a_backup_reads_back_and_any_damage_is_refused() {
        let s = state();
        let data = s.to_snapshot();
        let file = encode("00ff", 42, &s, &data, 7);
        let (h, back) = decode(&file).unwrap();
        assert_eq!((h.applied_index, h.held_keys, h.last_token, h.longest_lease_ms), (42, 1, s.last_token(), 30_000));
        assert_eq!(back, data);
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(decode(&flipped).unwrap_err().contains("SHA-256"));
        assert!(decode(&file[..file.len() - 1]).unwrap_err().contains("truncated"));
        assert!(decode(b"hello").unwrap_err().contains("not a Ticketing backup"));
    }

    #[test]
    fn a_restored_state_keeps_holders_tokens_and_the_lease_left() {
        let s = state();
        let mut r = LockState::restored(&s.to_snapshot(), 100).unwrap();
        assert_eq!(r.last_token(), s.last_token());
        assert_eq!(r.domain_time(), 100);
        let (_, h) = r.holders().next().unwrap();
        assert_eq!(h.end_dt(), 100 + 30_000, "the lease keeps its 30 s from the restore");
        // Restoring over a state that holds something changes nothing.
        let before = r.clone();
        r.apply(&crate::locks::Command::Restore { state: LockState::new().to_snapshot(), dt: 200 });
        assert_eq!(r.holders().count(), before.holders().count());
    }
}
