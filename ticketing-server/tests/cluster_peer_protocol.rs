//! The peer port (docs/cluster-protocol.md) seen from outside: the handshake with the peer
//! token and labels, `OK <domain> <node_id> <smac>`, length-prefixed binary
//! (postcard) envelopes, rejection of a message for another NodeId, of another
//! domain, of a peer-protocol-1 JSON frame, and of bad frames.

mod cluster_common;
use cluster_common::*;
use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::time::Duration;
use ticketing_proto::auth::{mac, nonce, verify, Label};
use ticketing_proto::Hex32;
use ticketing_server::cluster::types::{DomainId, NodeId};
use ticketing_server::cluster::wire::{encode, Body, Envelope, Refusal, VERSION};

fn frame(s: &mut TcpStream, id: u64, to: u64, domain: Option<DomainId>) {
    let env = Envelope { v: VERSION, id, to: NodeId(to), domain, body: Body::StatusReq };
    s.write_all(&encode(&env).unwrap()).unwrap();
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

    // Status for another NodeId: refused; for this one: answered, id echoed, pipelined.
    frame(&mut s, 5, id ^ 1, None);
    frame(&mut s, 6, id, None);
    let mut answers = [peer_read_frame(&mut r), peer_read_frame(&mut r)];
    answers.sort_by_key(|a| a.id);
    assert_eq!(answers[0].id, 5);
    assert!(matches!(answers[0].body, Body::Refused(Refusal::WrongTarget { actual }) if actual.0 == id));
    assert_eq!(answers[1].id, 6);
    let Body::StatusResp(st) = &answers[1].body else { panic!("{:?}", answers[1]) };
    assert_eq!(st.node_id.0, id);
    assert_eq!(st.domain.map(|d| d.to_string()).as_deref(), Some(f[1]));
    assert_eq!(st.client, c.nodes[1].client_addr());

    // Another domain: refused.
    frame(&mut s, 7, id, Some(DomainId(0xabab_abab_abab_abab_abab_abab_abab_abab)));
    assert!(matches!(peer_read_frame(&mut r).body, Body::Refused(Refusal::WrongDomain)));

    // A zero-length frame ends the connection.
    s.write_all(&[0, 0, 0, 0]).unwrap();
    assert!(peer_closed(&mut r));

    // A JSON frame of peer protocol 1 is not an envelope: the connection ends, no answer.
    let (mut s, mut r) = peer_authed(port);
    let json = format!(r#"{{"v":1,"id":6,"to":{id},"domain":null,"body":"StatusReq"}}"#);
    s.write_all(&(json.len() as u32).to_be_bytes()).unwrap();
    s.write_all(json.as_bytes()).unwrap();
    assert!(peer_closed(&mut r));

    // The cluster still works.
    let leader = c.wait_leader(Duration::from_secs(5)).unwrap();
    assert!(granted_token(&acquire_once(c.nodes[leader].client, "k", "o", 0, 5)).is_some());
}
