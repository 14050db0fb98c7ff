//! The serialized form of a [`Command`] (a Raft log entry's batch,
//! docs/cluster-protocol.md "Log entries"): four variants, `Grant`,
//! `Release`, `Expire` and `Tick`, in this order (postcard encodes the
//! variant's index). In memory a release and an expiry are one
//! [`Command::Free`] with a [`FreeReason`]; on the wire they stay the two
//! variants peer protocol 2 has always had, so the encoding — and every
//! log entry and peer written before — is unchanged.

use super::{Command, FreeReason, NextHolder};
use serde::{Deserialize, Serialize};
use ticketing_proto::{Key, Owner, Token};

/// A command as it is serialized (owned: what is read).
#[derive(Deserialize)]
pub enum WireCommand {
    /// [`Command::Grant`].
    Grant { key: Key, owner: Owner, lease_s: u8, micros: u64, dt: u64 },
    /// [`Command::Free`] with [`FreeReason::Release`].
    Release { key: Key, owner: Owner, token: Token, next: Option<NextHolder>, micros: u64, dt: u64 },
    /// [`Command::Free`] with [`FreeReason::Expiry`].
    Expire { key: Key, owner: Owner, token: Token, next: Option<NextHolder>, micros: u64, dt: u64 },
    /// [`Command::Tick`].
    Tick { dt: u64 },
}

/// A command as it is serialized (borrowed: what is written, without copies).
#[derive(Serialize)]
pub enum WireCommandRef<'a> {
    /// See [`WireCommand::Grant`].
    Grant { key: &'a Key, owner: &'a Owner, lease_s: u8, micros: u64, dt: u64 },
    /// See [`WireCommand::Release`].
    Release { key: &'a Key, owner: &'a Owner, token: Token, next: &'a Option<NextHolder>, micros: u64, dt: u64 },
    /// See [`WireCommand::Expire`].
    Expire { key: &'a Key, owner: &'a Owner, token: Token, next: &'a Option<NextHolder>, micros: u64, dt: u64 },
    /// See [`WireCommand::Tick`].
    Tick { dt: u64 },
}

impl<'a> From<&'a Command> for WireCommandRef<'a> {
    fn from(cmd: &'a Command) -> WireCommandRef<'a> {
        match cmd {
            Command::Grant { key, owner, lease_s, micros, dt } => {
                WireCommandRef::Grant { key, owner, lease_s: *lease_s, micros: *micros, dt: *dt }
            }
            Command::Free { reason: FreeReason::Release, key, owner, token, next, micros, dt } => {
                WireCommandRef::Release { key, owner, token: *token, next, micros: *micros, dt: *dt }
            }
            Command::Free { reason: FreeReason::Expiry, key, owner, token, next, micros, dt } => {
                WireCommandRef::Expire { key, owner, token: *token, next, micros: *micros, dt: *dt }
            }
            Command::Tick { dt } => WireCommandRef::Tick { dt: *dt },
        }
    }
}

impl From<WireCommand> for Command {
    fn from(w: WireCommand) -> Command {
        match w {
            WireCommand::Grant { key, owner, lease_s, micros, dt } => {
                Command::Grant { key, owner, lease_s, micros, dt }
            }
            WireCommand::Release { key, owner, token, next, micros, dt } => {
                Command::Free { reason: FreeReason::Release, key, owner, token, next, micros, dt }
            }
            WireCommand::Expire { key, owner, token, next, micros, dt } => {
                Command::Free { reason: FreeReason::Expiry, key, owner, token, next, micros, dt }
            }
            WireCommand::Tick { dt } => Command::Tick { dt },
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
            |reason| Command::Free { reason, key: k("k"), owner: o("o"), token: t, next: None, micros: 1, dt: 2 };
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
}
