//! The fields of the peer envelope whose bytes are not their type's own
//! serde encoding (docs/cluster-protocol.md §2).

/// Byte vectors as serde bytes (postcard: a varint length, then the bytes
/// as they are), not as a sequence of numbers.
pub(super) mod raw_bytes {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64 * 1024));
                while let Some(b) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// An `InstallSnapshotRequest` whose data travels as raw bytes.
pub(super) mod snapshot_chunk {
    use crate::cluster::types::{NodeId, NodeInfo, TypeConfig};
    use openraft::raft::InstallSnapshotRequest;
    use openraft::{SnapshotMeta, Vote};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct ChunkRef<'a> {
        vote: &'a Vote<NodeId>,
        meta: &'a SnapshotMeta<NodeId, NodeInfo>,
        offset: u64,
        #[serde(with = "super::raw_bytes")]
        data: &'a [u8],
        done: bool,
    }

    #[derive(Deserialize)]
    struct Chunk {
        vote: Vote<NodeId>,
        meta: SnapshotMeta<NodeId, NodeInfo>,
        offset: u64,
        #[serde(deserialize_with = "super::raw_bytes::deserialize")]
        data: Vec<u8>,
        done: bool,
    }

    pub fn serialize<S: Serializer>(r: &InstallSnapshotRequest<TypeConfig>, s: S) -> Result<S::Ok, S::Error> {
        ChunkRef { vote: &r.vote, meta: &r.meta, offset: r.offset, data: &r.data, done: r.done }.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<InstallSnapshotRequest<TypeConfig>, D::Error> {
        let c = Chunk::deserialize(d)?;
        Ok(InstallSnapshotRequest { vote: c.vote, meta: c.meta, offset: c.offset, data: c.data, done: c.done })
    }
}

/// A `Result` whose error travels as JSON text inside the binary frame:
/// openraft's errors carry `AnyError`s that nest without bound, and a
/// crafted frame must not overflow the stack (serde_json stops at 128
/// levels). Errors are rare; the `Ok` side stays binary.
pub(super) mod json_err {
    use serde::de::{DeserializeOwned, Error};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    enum WireRef<'a, T> {
        Ok(&'a T),
        Err(#[serde(with = "super::raw_bytes")] &'a [u8]),
    }

    #[derive(Deserialize)]
    enum Wire<T> {
        Ok(T),
        Err(#[serde(deserialize_with = "super::raw_bytes::deserialize")] Vec<u8>),
    }

    pub fn serialize<T: Serialize, E: Serialize, S: Serializer>(r: &Result<T, E>, s: S) -> Result<S::Ok, S::Error> {
        match r {
            Ok(t) => WireRef::Ok(t).serialize(s),
            Err(e) => {
                let text = serde_json::to_vec(e).map_err(S::Error::custom)?;
                WireRef::<T>::Err(&text).serialize(s)
            }
        }
    }

    pub fn deserialize<'de, T, E, D>(d: D) -> Result<Result<T, E>, D::Error>
    where
        T: Deserialize<'de>,
        E: DeserializeOwned,
        D: Deserializer<'de>,
    {
        match Wire::<T>::deserialize(d)? {
            Wire::Ok(t) => Ok(Ok(t)),
            Wire::Err(text) => serde_json::from_slice(&text).map(Err).map_err(D::Error::custom),
        }
    }
}
