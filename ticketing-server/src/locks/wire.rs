//! The serialized form of a [`Command`] (a Raft log entry's batch,
//! docs/cluster-protocol.md "Log entries"): the variants `Grant`,
//! `Release`, `Expire`, `Tick`, then `GrantShared`, `GrantAll` and
//! `FreeMany`, then `Restore`, in this order (postcard encodes the variant's index). In
//! memory a release and an expiry are one [`Command::Free`] with a
//! [`FreeReason`]; on the wire one that hands over to at most one exclusive
//! waiter stays the `Release`/`Expire` of peer protocol 2, so the encoding —
//! and every log entry and peer written before — is unchanged, and a node
//! of an earlier build reads every entry that uses no counted or multi-key
//! grant. The new variants come after the old ones, so their indexes are new.

use super::{Command, FreeReason, GrantKind, NextHolder};
use serde::{Deserialize, Serialize};
use ticketing_proto::{Key, Owner, Token};

/// The next holder as `Release` and `Expire` have always written it: an
/// exclusive waiter of the key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NextExclusive {
    owner: Owner,
    lease_s: u8,
}

/// A command as it is serialized (owned: what is read).
#[derive(Deserialize)]
pub enum WireCommand {
    /// [`Command::Grant`].
    Grant { key: Key, owner: Owner, lease_s: u8, micros: u64, dt: u64 },
    /// [`Command::Free`] with [`FreeReason::Release`], handing over to at most one exclusive waiter.
    Release { key: Key, owner: Owner, token: Token, next: Option<NextExclusive>, micros: u64, dt: u64 },
    /// [`Command::Free`] with [`FreeReason::Expiry`], handing over to at most one exclusive waiter.
    Expire { key: Key, owner: Owner, token: Token, next: Option<NextExclusive>, micros: u64, dt: u64 },
    /// [`Command::Tick`].
    Tick { dt: u64 },
    /// [`Command::GrantShared`].
    GrantShared { key: Key, owner: Owner, n: u16, lease_s: u8, micros: u64, dt: u64 },
    /// [`Command::GrantAll`].
    GrantAll { keys: Vec<Key>, owner: Owner, lease_s: u8, micros: u64, dt: u64 },
    /// [`Command::Free`] in every other case: several next holders, or a counted or multi-key one.
    FreeMany { reason: FreeReason, key: Key, owner: Owner, token: Token, next: Vec<NextHolder>, micros: u64, dt: u64 },
    /// [`Command::Restore`].
    Restore { state: Vec<u8>, dt: u64 },
}

/// A command as it is serialized (borrowed: what is written, without copies).
#[derive(Serialize)]
pub enum WireCommandRef<'a> {
    /// See [`WireCommand::Grant`].
    Grant { key: &'a Key, owner: &'a Owner, lease_s: u8, micros: u64, dt: u64 },
    /// See [`WireCommand::Release`].
    Release { key: &'a Key, owner: &'a Owner, token: Token, next: Option<NextExclusive>, micros: u64, dt: u64 },
    /// See [`WireCommand::Expire`].
    Expire { key: &'a Key, owner: &'a Owner, token: Token, next: Option<NextExclusive>, micros: u64, dt: u64 },
    /// See [`WireCommand::Tick`].
    Tick { dt: u64 },
    /// See [`WireCommand::GrantShared`].
    GrantShared { key: &'a Key, owner: &'a Owner, n: u16, lease_s: u8, micros: u64, dt: u64 },
    /// See [`WireCommand::GrantAll`].
    GrantAll { keys: &'a [Key], owner: &'a Owner, lease_s: u8, micros: u64, dt: u64 },
    /// See [`WireCommand::FreeMany`].
    FreeMany {
        reason: FreeReason,
        key: &'a Key,
        owner: &'a Owner,
        token: Token,
        next: &'a [NextHolder],
        micros: u64,
        dt: u64,
    },
    /// See [`WireCommand::Restore`].
    Restore { state: &'a [u8], dt: u64 },
}

/// `next` in the form `Release`/`Expire` can carry, if it has that form.
fn as_exclusive(next: &[NextHolder]) -> Option<Option<NextExclusive>> {
    match next {
        [] => Some(None),
        [NextHolder { owner, lease_s, kind: GrantKind::Exclusive }] => {
            Some(Some(NextExclusive { owner: owner.clone(), lease_s: *lease_s }))
        }
        _ => None,
    }
}

impl<'a> From<&'a Command> for WireCommandRef<'a> {
    fn from(cmd: &'a Command) -> WireCommandRef<'a> {
        match cmd {
            Command::Grant { key, owner, lease_s, micros, dt } => {
                WireCommandRef::Grant { key, owner, lease_s: *lease_s, micros: *micros, dt: *dt }
            }
            Command::GrantShared { key, owner, n, lease_s, micros, dt } => {
                WireCommandRef::GrantShared { key, owner, n: *n, lease_s: *lease_s, micros: *micros, dt: *dt }
            }
            Command::GrantAll { keys, owner, lease_s, micros, dt } => {
                WireCommandRef::GrantAll { keys, owner, lease_s: *lease_s, micros: *micros, dt: *dt }
            }
            Command::Free { reason, key, owner, token, next, micros, dt } => {
                let (token, micros, dt) = (*token, *micros, *dt);
                match (reason, as_exclusive(next)) {
                    (FreeReason::Release, Some(next)) => {
                        WireCommandRef::Release { key, owner, token, next, micros, dt }
                    }
                    (FreeReason::Expiry, Some(next)) => WireCommandRef::Expire { key, owner, token, next, micros, dt },
                    (reason, None) => WireCommandRef::FreeMany { reason: *reason, key, owner, token, next, micros, dt },
                }
            }
            Command::Tick { dt } => WireCommandRef::Tick { dt: *dt },
            Command::Restore { state, dt } => WireCommandRef::Restore { state, dt: *dt },
        }
    }
}

fn from_exclusive(next: Option<NextExclusive>) -> Vec<NextHolder> {
    next.map(|n| NextHolder::exclusive(n.owner, n.lease_s)).into_iter().collect()
}

impl From<WireCommand> for Command {
    fn from(w: WireCommand) -> Command {
        match w {
            WireCommand::Grant { key, owner, lease_s, micros, dt } => {
                Command::Grant { key, owner, lease_s, micros, dt }
            }
            WireCommand::GrantShared { key, owner, n, lease_s, micros, dt } => {
                Command::GrantShared { key, owner, n, lease_s, micros, dt }
            }
            WireCommand::GrantAll { keys, owner, lease_s, micros, dt } => {
                Command::GrantAll { keys, owner, lease_s, micros, dt }
            }
            WireCommand::Release { key, owner, token, next, micros, dt } => {
                let next = from_exclusive(next);
                Command::Free { reason: FreeReason::Release, key, owner, token, next, micros, dt }
            }
            WireCommand::Expire { key, owner, token, next, micros, dt } => {
                let next = from_exclusive(next);
                Command::Free { reason: FreeReason::Expiry, key, owner, token, next, micros, dt }
            }
            WireCommand::FreeMany { reason, key, owner, token, next, micros, dt } => {
                Command::Free { reason, key, owner, token, next, micros, dt }
            }
            WireCommand::Tick { dt } => Command::Tick { dt },
            WireCommand::Restore { state, dt } => Command::Restore { state, dt },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fields::{k, o};

    /// The bytes peer protocol 2 has always written for each variant: a
    /// release and an expiry keep their variant indexes 1 and 2.
    #[test]
    fn the_encoding_is_that_of_the_four_variants() {
        let t = Token::new(9).unwrap();
        let free =
            |reason| Command::Free { reason, key: k("k"), owner: o("o"), token: t, next: vec![], micros: 1, dt: 2 };
        let cases = [
            (
                Command::Grant { key: k("k"), owner: o("o"), lease_s: 5, micros: 1, dt: 2 },
                vec![0, 1, b'k', 1, b'o', 5, 1, 2],
            ),
            (free(FreeReason::Release), vec![1, 1, b'k', 1, b'o', 9, 0, 1, 2]),
            (free(FreeReason::Expiry), vec![2, 1, b'k', 1, b'o', 9, 0, 1, 2]),
            (Command::Tick { dt: 300 }, vec![3, 0xac, 0x02]),
        ];
        for (cmd, bytes) in cases {
            assert_eq!(postcard::to_allocvec(&cmd).unwrap(), bytes, "{cmd:?}");
            assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        }
        let json = serde_json::to_string(&free(FreeReason::Expiry)).unwrap();
        assert_eq!(json, r#"{"Expire":{"key":"k","owner":"o","token":9,"next":null,"micros":1,"dt":2}}"#);
    }

    /// A restore is variant 7, its state a length and the bytes; every
    /// earlier variant keeps its index.
    #[test]
    fn a_restore_is_variant_seven() {
        let cmd = Command::Restore { state: vec![0xde, 0xad], dt: 2 };
        let bytes = vec![7, 2, 0xde, 0xad, 2];
        assert_eq!(postcard::to_allocvec(&cmd).unwrap(), bytes);
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
        let json = serde_json::to_string(&cmd).unwrap();
        assert_eq!(serde_json::from_str::<Command>(&json).unwrap(), cmd);
    }

    /// The counted and multi-key forms have variants 4, 5 and 6; a hand-over
    /// to one exclusive waiter still is the old `Release` (variant 1).
    #[test]
    fn the_new_forms_have_their_own_variants() {
        let t = Token::new(9).unwrap();
        let shared = Command::GrantShared { key: k("k"), owner: o("o"), n: 300, lease_s: 5, micros: 1, dt: 2 };
        assert_eq!(postcard::to_allocvec(&shared).unwrap(), vec![4, 1, b'k', 1, b'o', 0xac, 0x02, 5, 1, 2]);
        let all = Command::GrantAll { keys: vec![k("a"), k("b")], owner: o("o"), lease_s: 5, micros: 1, dt: 2 };
        assert_eq!(postcard::to_allocvec(&all).unwrap(), vec![5, 2, 1, b'a', 1, b'b', 1, b'o', 5, 1, 2]);
        let one = Command::Free {
            reason: FreeReason::Release,
            key: k("k"),
            owner: o("o"),
            token: t,
            next: vec![NextHolder::exclusive(o("w"), 3)],
            micros: 1,
            dt: 2,
        };
        assert_eq!(postcard::to_allocvec(&one).unwrap(), vec![1, 1, b'k', 1, b'o', 9, 1, 1, b'w', 3, 1, 2]);
        let many = Command::Free {
            reason: FreeReason::Expiry,
            key: k("k"),
            owner: o("o"),
            token: t,
            next: vec![
                NextHolder { owner: o("w"), lease_s: 3, kind: GrantKind::Shared { n: 2 } },
                NextHolder { owner: o("v"), lease_s: 4, kind: GrantKind::All { keys: vec![k("k"), k("z")] } },
            ],
            micros: 1,
            dt: 2,
        };
        let bytes = postcard::to_allocvec(&many).unwrap();
        assert_eq!(&bytes[..2], &[6, 1], "FreeMany, reason Expiry");
        for cmd in [shared, all, one, many] {
            let bytes = postcard::to_allocvec(&cmd).unwrap();
            assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), cmd);
            let json = serde_json::to_vec(&cmd).unwrap();
            assert_eq!(serde_json::from_slice::<Command>(&json).unwrap(), cmd);
        }
    }
}
