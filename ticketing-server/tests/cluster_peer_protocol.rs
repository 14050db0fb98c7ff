//! The peer port (docs/cluster-protocol.md) seen from outside: the handshake with the peer
//! token and labels, `OK <domain> <node_id> <smac>`, length-prefixed binary
//! (postcard) envelopes, rejection of a message for another NodeId, of another
//! domain, of a peer-protocol-1 JSON frame, and of bad frames.

mod cluster_common;
use cluster_common::*;
use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::time::Duration;
use ticketing_proto::auth::{mac, nonce, verify, FrameMac, Label, FRAME_TAG_LEN};
use ticketing_proto::Hex32;
use ticketing_server::cluster::types::{DomainId, NodeId};
use ticketing_server::cluster::wire::{decode_body, encode, seal, Body, Envelope, Refusal, VERSION};

fn status_req(id: u64, to: u64, domain: Option<DomainId>) -> Envelope {
    Envelope { v: VERSION, id, to: NodeId(to), domain, body: Body::StatusReq }
}

fn frame(s: &mut TcpStream, mac: &mut FrameMac, id: u64, to: u64, domain: Option<DomainId>) {
    let mut bytes = encode(&status_req(id, to, domain)).unwrap();
    seal(&mut bytes, 0, Some(mac));
    s.write_all(&bytes).unwrap();
}

/// One tagged frame from the node.
fn read_tagged(r: &mut std::io::BufReader<TcpStream>, mac: &mut FrameMac) -> Envelope {
    use std::io::Read;
    let mut frame = vec![0u8; 4];
    r.read_exact(&mut frame).unwrap();
    let n = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    frame.resize(4 + n, 0);
    r.read_exact(&mut frame[4..]).unwrap();
    let mut tag = [0u8; FRAME_TAG_LEN];
    r.read_exact(&mut tag).unwrap();
    assert!(mac.open(&frame, &tag), "bad tag from the node");
    decode_body(&frame[4..]).unwrap()
}

#[test]
fn peer_handshake_target_check_and_bad_frames() {
    let mut c = Cluster::new("peerproto", 3);
    c.start_all();
    c.wait_leader(Duration::from_secs(20)).expect("a leader");
    let port = c.nodes[1].peer;

    // Wrong peer token.
    let (mut s, mut r, snonce) = peer_connect(port);
    let cnonce = nonce(&mut rand_core::OsRng);
    let bad = mac(b"wrong", Label::PeerClient, &snonce, &cnonce);
    s.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), bad.to_hex_string()).as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "E auth_failed\n");

    // The right token; the client label is not accepted as the server's.
    let (mut s, mut r, snonce) = peer_connect(port);
    let cnonce = nonce(&mut rand_core::OsRng);
    let good = mac(PEER_TOKEN.as_bytes(), Label::PeerClient, &snonce, &cnonce);
    s.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), good.to_hex_string()).as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let f: Vec<&str> = line.trim_end().split(' ').collect();
    assert_eq!(f.len(), 4, "{line}");
    assert_eq!(f[0], "OK");
    assert_eq!(f[1].len(), 32, "a domain id: {line}");
    let id: u64 = f[2].parse().unwrap();
    let smac = Hex32::parse(f[3].as_bytes()).unwrap();
    assert!(verify(PEER_TOKEN.as_bytes(), Label::PeerServer, &snonce, &cnonce, &smac));
    assert!(!verify(PEER_TOKEN.as_bytes(), Label::PeerClient, &snonce, &cnonce, &smac));
    // Every frame after the handshake carries its tag (docs/cluster-protocol.md, "Frame integrity").
    let (mut send, mut recv) = FrameMac::pair(PEER_TOKEN.as_bytes(), &snonce, &cnonce);

    // Status for another NodeId: refused; for this one: answered, id echoed, pipelined.
    frame(&mut s, &mut send, 5, id ^ 1, None);
    frame(&mut s, &mut send, 6, id, None);
    let mut answers = [read_tagged(&mut r, &mut recv), read_tagged(&mut r, &mut recv)];
    answers.sort_by_key(|a| a.id);
    assert_eq!(answers[0].id, 5);
    assert!(matches!(answers[0].body, Body::Refused(Refusal::WrongTarget { actual }) if actual.0 == id));
    assert_eq!(answers[1].id, 6);
    let Body::StatusResp(st) = &answers[1].body else { panic!("{:?}", answers[1]) };
    assert_eq!(st.node_id.0, id);
    assert_eq!(st.domain.map(|d| d.to_string()).as_deref(), Some(f[1]));
    assert_eq!(st.client, c.nodes[1].client_addr());

    // Another domain: refused.
    frame(&mut s, &mut send, 7, id, Some(DomainId(0xabab_abab_abab_abab_abab_abab_abab_abab)));
    assert!(matches!(read_tagged(&mut r, &mut recv).body, Body::Refused(Refusal::WrongDomain)));

    // A zero-length frame ends the connection.
    s.write_all(&[0, 0, 0, 0]).unwrap();
    assert!(peer_closed(&mut r));

    // A JSON frame of peer protocol 1 is not an envelope: the connection ends, no answer.
    let (mut s, mut r) = peer_authed(port);
    let json = format!(r#"{{"v":1,"id":6,"to":{id},"domain":null,"body":"StatusReq"}}"#);
    s.write_all(&(json.len() as u32).to_be_bytes()).unwrap();
    s.write_all(json.as_bytes()).unwrap();
    // (and a tag's worth of bytes: the node reads a whole frame first)
    s.write_all(&[0u8; FRAME_TAG_LEN]).unwrap();
    assert!(peer_closed(&mut r));

    // The cluster still works.
    let leader = c.wait_leader(Duration::from_secs(5)).unwrap();
    assert!(granted_token(&acquire_once(c.nodes[leader].client, "k", "o", 0, 5)).is_some());
}

/// A frame that is forged (its tag altered, or its body), replayed or sent
/// without a tag closes the link, counted as a bad frame; the node goes on.
#[test]
fn forged_and_replayed_peer_frames_close_the_link() {
    let mut c = Cluster::new("peerintegrity", 3);
    c.start_all();
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader");
    let node = 1;
    let port = c.nodes[node].peer;
    let id = status(c.nodes[node].admin).and_then(|s| s["node_id"].as_u64()).expect("node id");
    let bad_frames = || metric(c.nodes[node].admin, "ticketing_peer_bad_frames_total").unwrap_or(0);
    let before = bad_frames();

    // Replayed: a good frame, answered; the same bytes again close the link.
    let mut link = peer_link(port);
    let bytes = link.sealed(&status_req(1, id, None));
    link.s.write_all(&bytes).unwrap();
    assert!(matches!(link.read().body, Body::StatusResp(_)));
    link.s.write_all(&bytes).unwrap();
    assert!(peer_closed(&mut link.r), "a replayed frame was accepted");

    // Forged tag: one bit of the tag flipped.
    let mut link = peer_link(port);
    let mut bytes = link.sealed(&status_req(2, id, None));
    *bytes.last_mut().unwrap() ^= 1;
    link.s.write_all(&bytes).unwrap();
    assert!(peer_closed(&mut link.r), "a frame with a forged tag was accepted");

    // Forged body: another envelope under a good frame's tag.
    let mut link = peer_link(port);
    let good = link.sealed(&status_req(3, id, None));
    let mut other = encode(&status_req(4, id, None)).unwrap();
    other.extend_from_slice(&good[good.len() - FRAME_TAG_LEN..]);
    link.s.write_all(&other).unwrap();
    assert!(peer_closed(&mut link.r), "an altered frame was accepted");

    // No tag at all (frames as peer protocol 2 sent them): the next frame's
    // bytes are taken for the first one's tag, and fail.
    let mut link = peer_link(port);
    for n in 5..8 {
        link.s.write_all(&encode(&status_req(n, id, None)).unwrap()).unwrap();
    }
    assert!(peer_closed(&mut link.r), "an untagged frame was accepted");

    let end = std::time::Instant::now() + Duration::from_secs(10);
    while bad_frames() < before + 4 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(bad_frames() >= before + 4, "bad frames counted: {}", bad_frames() - before);
    // The cluster's own links are untouched: it still grants.
    assert!(granted_token(&acquire_once(c.nodes[leader].client, "after-forgery", "o", 0, 5)).is_some());
}

fn metric(admin: u16, name: &str) -> Option<u64> {
    ticketing_testkit::metric(admin, name).map(|v| v as u64)
}
