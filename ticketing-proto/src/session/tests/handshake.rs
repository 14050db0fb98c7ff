//! The handshake: the proofs, its timeout and the errors during it.

use super::*;

#[test]
fn handshake_ok_and_token_never_on_wire() {
    let mut h = Harness::ready("leader", TOKEN);
    assert_eq!(h.events, vec![SessionEvent::Ready { role: Role::Leader }]);
    assert!(h.s.is_ready());
    h.acquire(2, 1, "k", "o1", 5);
    let wire = h.take_wire();
    assert_eq!(wire, "A 1 k o1 5 10\n");
    assert!(!wire.contains("secret"));
}

#[test]
fn wrong_smac_is_auth_failed_and_nothing_can_be_sent() {
    let mut h = Harness::ready("leader", b"other-token");
    let c = h.closed().unwrap();
    assert_eq!(c.reason, CloseReason::AuthFailed);
    assert!(c.reason.backoff_to_cap());
    assert_eq!(
        h.s.send(h.at(2), OpId(1), Request::Release { key: k("k"), owner: o("o"), token: Token::new(5).unwrap() }),
        Err(SendError::Closed)
    );
    h.drain();
    assert!(h.wire.is_empty());
}

#[test]
fn send_before_ready_is_refused() {
    let mut h = Harness::new();
    let r = h.s.send(h.t0, OpId(1), Request::Acquire { key: k("k"), owner: o("o"), wait: 0, lease: 1 });
    assert_eq!(r, Err(SendError::NotReady));
}

#[test]
fn handshake_timeout_and_errors_during_handshake() {
    let mut h = Harness::new();
    h.timeout(4999);
    assert!(h.closed().is_none());
    h.timeout(5000);
    assert_eq!(h.closed().unwrap().reason, CloseReason::HandshakeTimeout);

    let mut h = Harness::new();
    h.input(0, b"E not_active\n");
    assert_eq!(h.closed().unwrap().reason, CloseReason::NotActive);
    assert!(h.closed().unwrap().reason.backoff_to_cap());

    let mut h = Harness::new();
    h.input(0, b"OK leader 0000000000000000000000000000000000000000000000000000000000000000\n");
    assert_eq!(h.closed().unwrap().reason, CloseReason::Protocol("expected the greeting"));
}
