//! Tests of the peer wire: every message round-trips, malformed input is a
//! clear error, the frame reader, the handshake and its version check.

use super::*;
use crate::cluster::types::{DomainId, NodeId, NodeInfo, TypeConfig};
use openraft::error::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use std::time::Duration;
use ticketing_proto::auth::Secret;
use tokio::io::{duplex, split, BufReader};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::cluster::types::Batch;
use crate::locks::{Command, FreeReason};
use openraft::error::Fatal;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, StoredMembership, Vote};
use openraft::{StorageError, StorageIOError};
use std::collections::{BTreeMap, BTreeSet};
use ticketing_proto::{Key, Owner, Token};

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, NodeId(11)), index)
}

fn membership() -> Membership<NodeId, NodeInfo> {
    let nodes = BTreeMap::from([
        (NodeId(11), NodeInfo { peer: "127.0.0.1:1".into(), client: "127.0.0.1:2".into(), admin: None }),
        (
            NodeId(12),
            NodeInfo { peer: "127.0.0.1:3".into(), client: "127.0.0.1:4".into(), admin: Some("127.0.0.1:5".into()) },
        ),
    ]);
    Membership::new(vec![BTreeSet::from([NodeId(11), NodeId(12)])], nodes)
}

fn entries() -> Vec<Entry<TypeConfig>> {
    let key = || Key::new("orders/42").unwrap();
    let owner = || Owner::new("worker-7").unwrap();
    let commands = [
        Command::Grant { key: key(), owner: owner(), lease_s: 30, micros: 1_700_000_000_000_000, dt: 5 },
        Command::Free {
            reason: FreeReason::Release,
            key: key(),
            owner: owner(),
            token: Token::new(9).unwrap(),
            next: vec![crate::locks::NextHolder::exclusive(Owner::new("w8").unwrap(), 1)],
            micros: 1,
            dt: 6,
        },
        Command::Free {
            reason: FreeReason::Expiry,
            key: key(),
            owner: owner(),
            token: Token::new(10).unwrap(),
            next: vec![],
            micros: 2,
            dt: 7,
        },
        Command::Tick { dt: u64::MAX },
    ];
    // One entry per command, then one batch of all of them (docs/cluster-protocol.md, "Log entries").
    let mut out: Vec<Entry<TypeConfig>> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| Entry { log_id: log_id(3, i as u64 + 1), payload: EntryPayload::Normal(Batch(vec![c.clone()])) })
        .collect();
    out.push(Entry { log_id: log_id(3, 5), payload: EntryPayload::Normal(Batch(commands.to_vec())) });
    out.push(Entry { log_id: log_id(3, 6), payload: EntryPayload::Membership(membership()) });
    out.push(Entry { log_id: log_id(3, 7), payload: EntryPayload::Blank });
    out
}

fn fatal() -> RaftError<NodeId> {
    let io = std::io::Error::other("disk on fire");
    RaftError::Fatal(Fatal::StorageError(StorageError::from(StorageIOError::read_state_machine(&io))))
}

/// One envelope of every kind, with real openraft values.
fn samples() -> Vec<Envelope> {
    let vote = Vote::new_committed(3, NodeId(11));
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(3, 6)),
        last_membership: StoredMembership::new(Some(log_id(3, 5)), membership()),
        snapshot_id: "3-6-1".into(),
    };
    let status = |admin| PeerStatus {
        node_id: NodeId(12),
        domain: None,
        client: "127.0.0.1:4".into(),
        admin,
        initialized: true,
        role: "follower".into(),
        leader: Some(NodeId(11)),
    };
    let bodies = vec![
        Body::AppendReq(AppendEntriesRequest {
            vote,
            prev_log_id: Some(log_id(2, 0)),
            entries: entries(),
            leader_commit: Some(log_id(3, 2)),
        }),
        Body::AppendReq(AppendEntriesRequest { vote, prev_log_id: None, entries: vec![], leader_commit: None }),
        Body::VoteReq(VoteRequest::new(vote, Some(log_id(3, 6)))),
        Body::SnapshotReq(InstallSnapshotRequest {
            vote,
            meta,
            offset: 1 << 40,
            data: (0..=255u8).cycle().take(1000).collect(),
            done: true,
        }),
        Body::JoinReq(JoinRequest {
            node_id: NodeId(13),
            node: NodeInfo { peer: "p".into(), client: "c".into(), admin: None },
        }),
        Body::StatusReq,
        Body::BootstrapReq(DomainId(u128::MAX)),
        Body::AppendResp(Ok(AppendEntriesResponse::PartialSuccess(Some(log_id(3, 4))))),
        Body::AppendResp(Ok(AppendEntriesResponse::HigherVote(vote))),
        Body::AppendResp(Err(fatal())),
        Body::VoteResp(Ok(VoteResponse { vote, vote_granted: true, last_log_id: None })),
        Body::VoteResp(Err(RaftError::Fatal(Fatal::Stopped))),
        Body::SnapshotResp(Ok(InstallSnapshotResponse { vote })),
        Body::SnapshotResp(Err(RaftError::Fatal(Fatal::Panicked))),
        Body::JoinResp(JoinAnswer::Accepted(DomainId(7))),
        Body::JoinResp(JoinAnswer::Refused("no".into())),
        Body::StatusResp(status(None)),
        Body::StatusResp(status(Some("127.0.0.1:9".into()))),
        Body::BootstrapResp(BootstrapAnswer::AlreadyInDomain(DomainId(1))),
        Body::Refused(Refusal::WrongTarget { actual: NodeId(1) }),
        Body::Refused(Refusal::BadVersion),
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| Envelope {
            v: VERSION,
            id: i as u64 * 1_000_003,
            to: NodeId(12),
            domain: (i % 2 == 0).then_some(DomainId(0x0123_4567_89ab_cdef_0011_2233_4455_6677)),
            body,
        })
        .collect()
}

#[test]
fn every_message_round_trips() {
    for env in samples() {
        let bytes = encode(&env).unwrap();
        let n = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(n, bytes.len() - 4);
        let back = decode_body(&bytes[4..]).unwrap_or_else(|e| panic!("{e}: {env:?}"));
        assert_eq!(format!("{back:?}"), format!("{env:?}"));
    }
}

#[test]
fn frame_layout() {
    let env = Envelope { v: VERSION, id: 7, to: NodeId(42), domain: Some(DomainId(5)), body: Body::StatusReq };
    // v, id, to (varints), domain: Some + u128 varint, body: variant 4 (StatusReq).
    assert_eq!(encode(&env).unwrap(), [0, 0, 0, 6, VERSION, 7, 42, 1, 5, 4]);
    let env = Envelope { v: VERSION, id: 300, to: NodeId(1), domain: None, body: Body::StatusReq };
    assert_eq!(encode(&env).unwrap(), [0, 0, 0, 6, VERSION, 0xac, 0x02, 1, 0, 4]);
}

#[test]
fn snapshot_data_travels_as_raw_bytes() {
    let env = samples().into_iter().find(|e| matches!(e.body, Body::SnapshotReq(_))).unwrap();
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let bytes = encode(&env).unwrap();
    // A varint length (1000 = e8 07), then the bytes as they are.
    let mut raw = vec![0xe8, 0x07];
    raw.extend_from_slice(&data);
    assert!(bytes.windows(raw.len()).any(|w| w == raw), "the chunk is not one raw run of bytes");
    assert!(bytes.len() < data.len() + 200, "{} bytes for a 1000-byte chunk", bytes.len());
}

#[test]
fn binary_frames_are_smaller_than_json() {
    for env in samples() {
        let binary = encode(&env).unwrap().len() - 4;
        let json = serde_json::to_vec(&env).unwrap().len();
        assert!(binary < json, "{binary} >= {json} for {env:?}");
    }
}

#[test]
fn truncated_trailing_and_garbage_bodies_are_errors() {
    for env in samples() {
        let bytes = encode(&env).unwrap();
        let body = &bytes[4..];
        for cut in 0..body.len() {
            assert!(
                matches!(decode_body(&body[..cut]), Err(WireError::Protocol(_))),
                "a body cut at {cut} of {} decoded: {env:?}",
                body.len()
            );
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert!(matches!(decode_body(&longer), Err(WireError::Protocol(Violation::TrailingBytes(_)))));
    }
    // Deterministic garbage: never a panic (an error, or some envelope).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for len in 0..2000usize {
        let junk: Vec<u8> = (0..len % 97)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = decode_body(&junk);
    }
    // A JSON frame of peer protocol 1 is refused, not misread.
    let old = br#"{"v":1,"id":7,"to":42,"domain":null,"body":"StatusReq"}"#;
    assert!(matches!(decode_body(old), Err(WireError::Protocol(_))));
}

#[test]
fn a_deeply_nested_error_is_refused_not_a_stack_overflow() {
    // openraft's AnyError nests through `source` without bound; the error
    // text is JSON, whose decoder stops at 128 levels.
    let depth = 200_000;
    let mut json = String::from(
        r#"{"Fatal":{"StorageError":{"IO":{"source":{"subject":"Store","verb":"Read","backtrace":null,"source":"#,
    );
    for _ in 0..depth {
        json.push_str(r#"{"typ":null,"msg":"x","context":[],"backtrace":null,"source":"#);
    }
    json.push_str("null");
    json.push_str(&"}".repeat(depth + 5));
    let env = Envelope { v: VERSION, id: 1, to: NodeId(1), domain: None, body: Body::StatusReq };
    let mut body = encode(&env).unwrap()[4..].to_vec();
    // Body variant 6 = AppendResp, Result variant 1 = Err, then the text as bytes.
    body.pop();
    body.extend_from_slice(&[6, 1]);
    let mut n = json.len();
    while n >= 0x80 {
        body.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    body.push(n as u8);
    body.extend_from_slice(json.as_bytes());
    assert!(body.len() <= MAX_BODY);
    // (postcard does not keep a custom error's text.)
    let err = decode_body(&body).unwrap_err();
    assert!(matches!(&err, WireError::Protocol(Violation::BadMessage(_))), "{err:?}");
    // The same frame without the nesting decodes.
    let flat = r#"{"Fatal":"Panicked"}"#;
    let mut ok = encode(&env).unwrap()[4..].to_vec();
    ok.pop();
    ok.extend_from_slice(&[6, 1, flat.len() as u8]);
    ok.extend_from_slice(flat.as_bytes());
    let back = decode_body(&ok);
    assert!(
        matches!(&back, Ok(Envelope { body: Body::AppendResp(Err(RaftError::Fatal(Fatal::Panicked))), .. })),
        "{back:?} {:?}",
        serde_json::to_string(&RaftError::<NodeId>::Fatal(Fatal::Panicked))
    );
}

#[tokio::test]
async fn bad_frames_are_errors() {
    let mut zero: &[u8] = &[0, 0, 0, 0];
    assert!(matches!(read_frame(&mut zero).await, Err(WireError::Protocol(_))));
    let mut huge: &[u8] = &[0x01, 0x00, 0x00, 0x01];
    assert!(matches!(read_frame(&mut huge).await, Err(WireError::Protocol(_))));
    let mut junk: &[u8] = &[0, 0, 0, 3, 0xff, 0xff, 0xff];
    assert!(matches!(read_frame(&mut junk).await, Err(WireError::Protocol(_))));
    let mut empty: &[u8] = &[];
    assert!(matches!(read_frame(&mut empty).await, Ok(None)));
    let mut cut: &[u8] = &[0, 0, 0, 9, 2];
    assert!(matches!(read_frame(&mut cut).await, Err(WireError::Protocol(_))));
    // The same through the connection reader.
    let t = Duration::from_secs(5);
    for (bytes, clean_end) in [
        (&[0u8, 0, 0, 0][..], false),
        (&[0x01, 0x00, 0x00, 0x01], false),
        (&[0, 0, 0, 3, 0xff, 0xff, 0xff], false),
        (&[0, 0, 0, 9, 2], false),
        (&[0, 0], false),
        (&[], true),
    ] {
        let got = FrameReader::new(bytes).next(t).await;
        if clean_end {
            assert!(matches!(got, Ok(None)), "{bytes:?}: {got:?}");
        } else {
            assert!(matches!(got, Err(WireError::Protocol(_))), "{bytes:?}: {got:?}");
        }
    }
}

#[tokio::test]
async fn the_reader_splits_batches_and_joins_pieces() {
    let envs = samples();
    let mut stream = Vec::new();
    for env in &envs {
        encode_into(env, &mut stream).unwrap();
    }
    // All frames in one read.
    let mut reader = FrameReader::new(&stream[..]);
    for env in &envs {
        let got = reader.next(Duration::from_secs(5)).await.unwrap().unwrap();
        assert_eq!(format!("{got:?}"), format!("{env:?}"));
    }
    assert!(reader.next(Duration::from_secs(5)).await.unwrap().is_none());
    // One byte at a time, the reader's future dropped over and over
    // (cancel safety): every frame still arrives whole.
    let (mut a, b) = duplex(1);
    let writer = tokio::spawn(async move {
        a.write_all(&stream).await.unwrap();
    });
    let mut reader = FrameReader::new(b);
    let mut got = Vec::new();
    let mut cancelled = 0;
    while got.len() < envs.len() {
        match tokio::time::timeout(Duration::from_micros(50), reader.next(Duration::from_secs(30))).await {
            Ok(frame) => got.push(frame.unwrap().unwrap()),
            Err(_) => cancelled += 1,
        }
        assert!(cancelled < 10_000_000);
    }
    writer.await.unwrap();
    for (g, e) in got.iter().zip(&envs) {
        assert_eq!(format!("{g:?}"), format!("{e:?}"));
    }
    assert!(reader.next(Duration::from_secs(5)).await.unwrap().is_none());
}

#[tokio::test]
async fn an_endless_frame_times_out() {
    let (mut a, b) = duplex(64);
    let mut reader = FrameReader::new(b);
    // A length prefix of 1000 bytes, then only 3 of them, then silence.
    a.write_all(&[0, 0, 0x03, 0xe8, 2, 7, 1]).await.unwrap();
    let r = reader.next(Duration::from_millis(100)).await;
    assert!(matches!(r, Err(WireError::Timeout)), "{r:?}");
    drop(a);
    // An idle connection is not a frame: only the started frame is timed.
    let (a2, b2) = duplex(64);
    let mut reader = FrameReader::new(b2);
    let idle = tokio::time::timeout(Duration::from_millis(200), reader.next(Duration::from_millis(50))).await;
    assert!(idle.is_err(), "waiting for the first byte is not limited");
    drop(a2);
}

#[tokio::test]
async fn an_oversized_length_is_refused_before_its_body() {
    // Only the prefix is ever sent: the reader must not wait for 16 MiB.
    let (mut a, b) = duplex(64);
    a.write_all(&(MAX_BODY as u32 + 1).to_be_bytes()).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), FrameReader::new(b).next(Duration::from_secs(60))).await;
    assert!(matches!(&r, Ok(Err(WireError::Protocol(Violation::FrameLength(_))))), "{r:?}");
    drop(a);
}

/// A handshake between an acceptor with `server_token` and a dialer with
/// `client_token` (`None`: no token, as with peer TLS alone or the opt-out).
async fn pair(
    server_token: Option<&'static [u8]>,
    client_token: Option<&'static [u8]>,
    server_domain: Option<DomainId>,
    client_domain: Option<DomainId>,
) -> (Result<bool, WireError>, Result<(NodeId, Option<DomainId>, bool), WireError>) {
    let (a, b) = duplex(4096);
    let (ar, mut aw) = split(a);
    let (br, mut bw) = split(b);
    let server = tokio::spawn(async move {
        let mut ar = BufReader::new(ar);
        let tokens: Option<Vec<Secret>> = server_token.map(|t| vec![Secret::new(t.to_vec())]);
        accept_handshake(&mut ar, &mut aw, tokens.as_deref(), NodeId(99), server_domain, Duration::from_secs(2)).await
    });
    let mut br = BufReader::new(br);
    let c = dial_handshake(&mut br, &mut bw, client_token, client_domain).await;
    drop(bw);
    drop(br);
    // `true`: the link has frame tags.
    (server.await.unwrap().map(|m| m.is_some()), c.map(|(id, d, m)| (id, d, m.is_some())))
}

#[tokio::test]
async fn handshake_paths() {
    let (s, c) = pair(Some(b"t"), Some(b"t"), Some(DomainId(1)), None).await;
    assert_eq!(s, Ok(true));
    assert_eq!(c, Ok((NodeId(99), Some(DomainId(1)), true)));
    // No token on either side (peer TLS alone, or the opt-out): accepted, no tags.
    let (s, c) = pair(None, None, None, Some(DomainId(3))).await;
    assert_eq!((s, c), (Ok(false), Ok((NodeId(99), None, false))));
    let (s, c) = pair(Some(b"t"), Some(b"u"), None, None).await;
    assert_eq!(s, Err(WireError::Refused(HandshakeRefusal::AuthFailed)));
    let by_acceptor = HandshakeRefusal::ByPeer { code: RefusalCode::AuthFailed, detail: String::new() };
    assert_eq!(c, Err(WireError::Refused(by_acceptor)));
    let (_, c) = pair(Some(b"t"), Some(b"t"), Some(DomainId(1)), Some(DomainId(2))).await;
    let wrong = HandshakeRefusal::WrongDomain { ours: DomainId(2), theirs: DomainId(1) };
    assert_eq!(c, Err(WireError::Refused(wrong)));
}

#[tokio::test]
async fn a_token_side_refuses_a_side_without_one() {
    // A dialer without a token is refused by an acceptor with one…
    let (s, c) = pair(Some(b"t"), None, None, None).await;
    assert_eq!(s, Err(WireError::Refused(HandshakeRefusal::AuthFailed)));
    let by_acceptor = HandshakeRefusal::ByPeer { code: RefusalCode::AuthFailed, detail: String::new() };
    assert_eq!(c, Err(WireError::Refused(by_acceptor)));
    // …and a dialer with a token refuses an acceptor without one (its proof is zeros).
    let (_, c) = pair(None, Some(b"t"), None, None).await;
    assert_eq!(c, Err(WireError::Refused(HandshakeRefusal::BadProof)));
}

#[tokio::test]
async fn the_empty_key_opens_nothing() {
    // Anyone can compute an HMAC under the empty key: an acceptor that checks
    // tokens but has none (a node without peer auth, which never starts)
    // accepts no peer, and an acceptor with a token refuses that MAC too.
    for tokens in [vec![], vec![Secret::from("t")]] {
        let (a, b) = duplex(4096);
        let (ar, mut aw) = split(a);
        let (br, mut bw) = split(b);
        let server = tokio::spawn(async move {
            let mut ar = BufReader::new(ar);
            accept_handshake(&mut ar, &mut aw, Some(&tokens), NodeId(5), None, Duration::from_secs(2)).await
        });
        let mut br = BufReader::new(br);
        let c = dial_handshake(&mut br, &mut bw, Some(b""), None).await.map(|(id, d, _)| (id, d));
        let by_acceptor = HandshakeRefusal::ByPeer { code: RefusalCode::AuthFailed, detail: String::new() };
        assert_eq!(c, Err(WireError::Refused(by_acceptor)));
        assert_eq!(server.await.unwrap().map(|_| ()), Err(WireError::Refused(HandshakeRefusal::AuthFailed)));
    }
}

#[tokio::test]
async fn another_peer_protocol_version_is_refused_with_a_reason() {
    // A dialer of this version meets an acceptor of version 1 (JSON frames).
    let (a, b) = duplex(4096);
    let (ar, mut aw) = split(a);
    let old_acceptor = tokio::spawn(async move {
        let mut ar = BufReader::new(ar);
        aw.write_all(format!("TICKETING-PEER 1 {}\n", "ab".repeat(32)).as_bytes()).await.unwrap();
        let mut line = String::new();
        ar.read_line(&mut line).await.unwrap();
        line
    });
    let (br, mut bw) = split(b);
    let mut br = BufReader::new(br);
    let got = dial_handshake(&mut br, &mut bw, Some(b"t"), None).await;
    assert_eq!(got.as_ref().err(), Some(&WireError::Refused(HandshakeRefusal::WrongVersion { theirs: "1".into() })));
    assert!(got.unwrap_err().to_string().contains("wrong_version"));
    // The old acceptor is told why (it logs the line it got instead of AUTH).
    assert_eq!(old_acceptor.await.unwrap(), format!("E wrong_version: this node speaks peer protocol {VERSION}\n"));

    // An acceptor of this version meets a dialer that refuses its greeting…
    let (a, b) = duplex(4096);
    let (ar, mut aw) = split(a);
    let (br, mut bw) = split(b);
    let acceptor = tokio::spawn(async move {
        let mut ar = BufReader::new(ar);
        accept_handshake(&mut ar, &mut aw, None, NodeId(1), None, Duration::from_secs(5)).await
    });
    let mut br = BufReader::new(br);
    let mut greeting = String::new();
    br.read_line(&mut greeting).await.unwrap();
    assert!(greeting.starts_with("TICKETING-PEER 3 "), "{greeting}");
    bw.write_all(b"E wrong_version: this node speaks peer protocol 3\n").await.unwrap();
    let got = acceptor.await.unwrap();
    let by_dialer =
        HandshakeRefusal::ByPeer { code: RefusalCode::WrongVersion, detail: "this node speaks peer protocol 3".into() };
    assert_eq!(got.as_ref().err(), Some(&WireError::Refused(by_dialer)));

    // …or closes at it without a word (what a version-1 node does).
    let (a, b) = duplex(4096);
    let (ar, mut aw) = split(a);
    let acceptor = tokio::spawn(async move {
        let mut ar = BufReader::new(ar);
        accept_handshake(&mut ar, &mut aw, None, NodeId(1), None, Duration::from_secs(5)).await
    });
    let mut b = BufReader::new(b);
    let mut greeting = String::new();
    b.read_line(&mut greeting).await.unwrap();
    drop(b);
    let got = acceptor.await.unwrap();
    assert_eq!(got.as_ref().err(), Some(&WireError::Protocol(Violation::NoAuth)));
    assert!(got.unwrap_err().to_string().contains("peer protocol version"));
}

#[tokio::test]
async fn during_a_rotation_both_tokens_are_accepted_and_the_proof_uses_the_match() {
    for dialer in [&b"old"[..], b"new"] {
        let (a, b) = duplex(4096);
        let (ar, mut aw) = split(a);
        let (br, mut bw) = split(b);
        let server = tokio::spawn(async move {
            let mut ar = BufReader::new(ar);
            let tokens = [Secret::from("new"), Secret::from("old")];
            accept_handshake(&mut ar, &mut aw, Some(&tokens), NodeId(7), None, Duration::from_secs(2)).await
        });
        let mut br = BufReader::new(br);
        let dialed = dial_handshake(&mut br, &mut bw, Some(dialer), None).await;
        assert_eq!(dialed.map(|(id, d, m)| (id, d, m.is_some())), Ok((NodeId(7), None, true)));
        assert_eq!(server.await.unwrap().map(|m| m.is_some()), Ok(true));
    }
}

#[tokio::test]
async fn tagged_frames_round_trip_and_a_bad_tag_is_a_violation() {
    use ticketing_proto::auth::FrameMac;
    let (s, c) = (ticketing_proto::Hex32([1; 32]), ticketing_proto::Hex32([2; 32]));
    let (mut send, _) = FrameMac::pair(b"t", &s, &c);
    let (recv, _) = FrameMac::pair(b"t", &s, &c);
    let mut stream = Vec::new();
    for id in 1..=3 {
        let start = stream.len();
        let env = Envelope { v: VERSION, id, to: NodeId(9), domain: None, body: Body::StatusReq };
        encode_into(&env, &mut stream).unwrap();
        super::seal(&mut stream, start, Some(&mut send));
    }
    let mut reader = FrameReader::new(&stream[..]).with_mac(Some(recv));
    for id in 1..=3 {
        assert_eq!(reader.next(Duration::from_secs(1)).await.unwrap().unwrap().id, id);
    }
    // The second frame replayed after the third: its tag does not open.
    let (mut send, _) = FrameMac::pair(b"t", &s, &c);
    let (recv, _) = FrameMac::pair(b"t", &s, &c);
    let mut frames = Vec::new();
    for id in 1..=2 {
        let mut f = Vec::new();
        encode_into(&Envelope { v: VERSION, id, to: NodeId(9), domain: None, body: Body::StatusReq }, &mut f).unwrap();
        super::seal(&mut f, 0, Some(&mut send));
        frames.push(f);
    }
    let replay: Vec<u8> = [frames[0].clone(), frames[1].clone(), frames[1].clone()].concat();
    let mut reader = FrameReader::new(&replay[..]).with_mac(Some(recv));
    reader.next(Duration::from_secs(1)).await.unwrap();
    reader.next(Duration::from_secs(1)).await.unwrap();
    assert_eq!(reader.next(Duration::from_secs(1)).await.unwrap_err(), WireError::Protocol(Violation::BadTag));
}
