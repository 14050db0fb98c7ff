//! The client `Session` driven by arbitrary server bytes. The first byte
//! chooses whether the harness completes a valid handshake first (so the
//! fuzzer reaches the ready state, which needs an HMAC it cannot guess);
//! the rest is a script: each step is one op byte, then its argument.
//!   0: feed the next `n` bytes (n = next byte) as server input
//!   1: send an acquire (`A`, or by the argument's top bits a counted `S`
//!      or a multi-key `K`)  2: send a release  3: advance time by `n`×50 ms
//!   4: cancel an op        5: close               6: the socket closed
//! After every step the outputs are drained, as the driver does. Checked:
//! no panic, and nothing is ever transmitted after the session closed.
#![no_main]
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ticketing_proto::auth::{self, Label};
use ticketing_proto::op::OpId;
use ticketing_proto::session::{CloseReason, Request, Session, SessionConfig, SessionEvent};
use ticketing_proto::{Hex32, Key, KeySet, Owner, Token};

const TOKEN: &[u8] = b"secret";

fn drain(s: &mut Session, closed: &mut bool) {
    while let Some(b) = s.poll_transmit() {
        assert!(!*closed, "transmit after close: {b:?}");
    }
    while let Some(e) = s.poll_event() {
        if matches!(e, SessionEvent::Closed(_)) {
            *closed = true;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else { return };
    let t0 = Instant::now();
    let mut now = t0;
    let cnonce = Hex32([7; 32]);
    let mut s = Session::new(now, SessionConfig::default(), TOKEN, cnonce);
    let mut closed = false;
    if mode & 1 == 1 {
        let snonce = Hex32([3; 32]);
        s.handle_input(now, format!("TICKETING 1 {}\n", snonce.to_hex_string()).as_bytes());
        let smac = auth::mac(TOKEN, Label::Server, &snonce, &cnonce);
        let role = if mode & 2 == 2 { "follower" } else { "leader" };
        s.handle_input(now, format!("OK {role} {}\n", smac.to_hex_string()).as_bytes());
        drain(&mut s, &mut closed);
    }
    let mut op = 0u64;
    let key = Key::new("k".to_owned()).unwrap();
    let owner = Owner::new("o".to_owned()).unwrap();
    while let Some((&step, tail)) = rest.split_first() {
        rest = tail;
        let arg = rest.first().copied().unwrap_or(0);
        match step % 7 {
            0 => {
                let n = (arg as usize).min(rest.len().saturating_sub(1));
                let chunk = &rest[1.min(rest.len())..1.min(rest.len()) + n];
                s.handle_input(now, chunk);
                rest = &rest[(1 + n).min(rest.len())..];
            }
            1 => {
                op += 1;
                let (wait, lease) = (arg % 4, 1 + arg % 10);
                let owner = owner.clone();
                let req = match arg >> 6 {
                    1 => Request::AcquireShared { key: key.clone(), owner, wait, lease, n: 1 + u16::from(arg & 3) },
                    2 => {
                        let keys = KeySet::new(vec![key.clone(), Key::new("k2".to_owned()).unwrap()]).unwrap();
                        Request::AcquireAll { keys, owner, wait, lease }
                    }
                    _ => Request::Acquire { key: key.clone(), owner, wait, lease },
                };
                let _ = s.send(now, OpId(op), req);
                rest = &rest[1.min(rest.len())..];
            }
            2 => {
                op += 1;
                let token = Token::new(1 + u64::from(arg)).unwrap();
                let _ = s.send(now, OpId(op), Request::Release { key: key.clone(), owner: owner.clone(), token });
                rest = &rest[1.min(rest.len())..];
            }
            3 => {
                now += Duration::from_millis(u64::from(arg) * 50);
                s.handle_timeout(now);
                rest = &rest[1.min(rest.len())..];
            }
            4 => {
                let _ = s.cancel(OpId(u64::from(arg) % (op + 1)));
                rest = &rest[1.min(rest.len())..];
            }
            5 => s.close(CloseReason::Cancelled),
            _ => s.handle_closed(),
        }
        drain(&mut s, &mut closed);
        if let Some(t) = s.poll_timeout() {
            assert!(t >= t0, "a timer before the session began");
        }
    }
});
