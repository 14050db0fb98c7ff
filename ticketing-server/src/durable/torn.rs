//! A torn tail in the newest chunk of the log (docs/deployment.md, "The
//! data dir"). A power cut can leave the last write half on disk in more
//! ways than `raft-log` drops by itself (a record cut short, or zeros to
//! the end of the file): pages of one write reach the disk out of order, so
//! a record can fail its checksum with zeros inside it (a hole) and the
//! rest of that write after it, or fail it with no record after it. None
//! of it was acknowledged: an answer waits for the fdatasync after the
//! write, which did not end.
//!
//! The rule: in the NEWEST chunk file, the first record that fails to
//! decode starts a torn tail when it lies within [`TAIL_LIMIT`] of the end
//! of the file (at most what one flush writes) and either no valid record
//! follows it, or a run of zero bytes lies in it or after it (the signature
//! of pages a write extended the file with and never filled). The tail is
//! then cut off, logged with the path, the offset and its length. Damage
//! anywhere else — an older chunk, further from the end, or a bad record
//! followed by valid ones without a hole — is corruption: the server
//! refuses the data dir (exit 2) and changes nothing.

use super::journal::JournalTypes;
use raft_log::codeq::Decode;
use std::io;
use std::path::{Path, PathBuf};

type Record = raft_log::WALRecord<raft_log::RaftWalTypes<JournalTypes>>;

/// The farthest from the end of the newest chunk a torn tail may start:
/// more than any one flush of the journal writes.
pub const TAIL_LIMIT: usize = 256 << 10;

/// Zero bytes in a row that count as a hole.
const HOLE: usize = 16;

/// What the newest chunk's end holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Every record decodes.
    Intact,
    /// A torn tail starts at this offset: cut the file there.
    Torn(usize),
    /// A damaged record that is not a torn tail, at this offset.
    Damaged(usize),
}

/// The offset of the first record of `bytes` (a chunk file) that does not decode.
fn first_damage(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < bytes.len() {
        let mut r = &bytes[at..];
        let before = r.len();
        match Record::decode(&mut r) {
            Ok(_) if r.len() < before => at += before - r.len(),
            _ => return Some(at),
        }
    }
    None
}

/// Judges the end of a chunk file's `bytes` by the rule of the module's docs.
pub fn judge(bytes: &[u8]) -> Tail {
    let Some(x) = first_damage(bytes) else { return Tail::Intact };
    if bytes.len() - x > TAIL_LIMIT {
        return Tail::Damaged(x);
    }
    let rest = &bytes[x..];
    let hole = rest.windows(HOLE).any(|w| w.iter().all(|b| *b == 0));
    let valid_after = (x + 1..bytes.len()).any(|y| {
        let mut r = &bytes[y..];
        Record::decode(&mut r).is_ok()
    });
    if hole || !valid_after {
        Tail::Torn(x)
    } else {
        Tail::Damaged(x)
    }
}

/// The newest chunk file of the log in `log_dir` (`r-<offset>.wal`, the
/// greatest name), if any.
fn newest_chunk(log_dir: &Path) -> io::Result<Option<PathBuf>> {
    let mut chunks: Vec<PathBuf> = std::fs::read_dir(log_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    chunks.sort();
    Ok(chunks.pop())
}

/// Cuts a torn tail off the newest chunk in `log_dir` (then fsynced);
/// `Some((chunk, offset, bytes cut))` if it did.
pub fn cut_torn_tail(log_dir: &Path) -> io::Result<Option<(PathBuf, usize, usize)>> {
    let Some(chunk) = newest_chunk(log_dir)? else { return Ok(None) };
    let bytes = std::fs::read(&chunk)?;
    match judge(&bytes) {
        Tail::Torn(at) => {
            let f = std::fs::OpenOptions::new().write(true).open(&chunk)?;
            f.set_len(at as u64)?;
            f.sync_all()?;
            Ok(Some((chunk, at, bytes.len() - at)))
        }
        Tail::Intact | Tail::Damaged(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft_log::codeq::Encode;
    use raft_log::RaftLogAction;

    /// The bytes of `n` append records, and where each starts.
    fn records(n: u64) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut starts = Vec::new();
        for i in 0..n {
            starts.push(out.len());
            let rec: Record = raft_log::WALRecord::Action(RaftLogAction::Append(((1, 0), i + 1), vec![7u8; 40]));
            rec.encode(&mut out).unwrap();
        }
        (out, starts)
    }

    #[test]
    fn a_damaged_last_record_or_a_hole_is_a_torn_tail_anything_else_is_damage() {
        let (good, starts) = records(10);
        assert_eq!(judge(&good), Tail::Intact);
        let last = starts[9];
        // The last record with a byte changed: nothing valid follows it.
        let mut flip = good.clone();
        flip[last + 20] ^= 0x5a;
        assert_eq!(judge(&flip), Tail::Torn(last));
        // The last two records: a hole in the first, the second intact.
        let mut hole = good.clone();
        let second_last = starts[8];
        hole[second_last + 8..second_last + 40].iter_mut().for_each(|b| *b = 0);
        assert_eq!(judge(&hole), Tail::Torn(second_last));
        // A byte changed in an earlier record, valid records after it: corruption.
        let mut rot = good.clone();
        rot[starts[3] + 20] ^= 0x5a;
        assert_eq!(judge(&rot), Tail::Damaged(starts[3]));
        // Cut short: raft-log's own case, a torn tail here too.
        assert_eq!(judge(&good[..good.len() - 3]), Tail::Torn(last));
    }

    #[test]
    fn damage_far_from_the_end_is_never_a_torn_tail() {
        let (mut bytes, starts) = records(2);
        bytes[starts[1] + 20] ^= 0x5a;
        let damaged = starts[1];
        bytes.extend(std::iter::repeat_n(0u8, TAIL_LIMIT + 1));
        assert_eq!(judge(&bytes), Tail::Damaged(damaged));
    }
}
