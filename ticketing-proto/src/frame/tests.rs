//! Byte-level tests of the frame codec.

use super::*;

fn client(line: &[u8]) -> Result<Option<(ClientFrame, usize)>, FrameError> {
    decode_client(line)
}

fn k(s: &str) -> Key {
    Key::new(s.to_owned()).unwrap()
}

fn o(s: &str) -> Owner {
    Owner::new(s.to_owned()).unwrap()
}

#[test]
fn acquire_round_trip_bytes() {
    let f = ClientFrame::Acquire { id: RequestId(7), key: k("seat-1"), owner: o("ab12"), wait: 5, lease: 30 };
    assert_eq!(&f.to_bytes()[..], b"A 7 seat-1 ab12 5 30\n");
    assert_eq!(client(b"A 7 seat-1 ab12 5 30\n").unwrap(), Some((f, 21)));
}

#[test]
fn release_and_ping_bytes() {
    let r = ClientFrame::Release { id: RequestId(0), key: k("k"), owner: o("o"), token: Token::new(9).unwrap() };
    assert_eq!(&r.to_bytes()[..], b"R 0 k o 9\n");
    assert_eq!(client(b"R 0 k o 9\n").unwrap().unwrap().0, r);
    assert_eq!(&ClientFrame::Ping { id: RequestId(18446744073709551615) }.to_bytes()[..], b"P 18446744073709551615\n");
    assert_eq!(client(b"P 3\n").unwrap().unwrap().0, ClientFrame::Ping { id: RequestId(3) });
}

#[test]
fn incomplete_is_not_an_error() {
    assert_eq!(client(b"").unwrap(), None);
    assert_eq!(client(b"A 1 k o 0").unwrap(), None);
    assert_eq!(client(&[b'x'; 511]).unwrap(), None);
}

#[test]
fn too_large_versus_legal_512() {
    assert_eq!(client(&[b'x'; 512]), Err(FrameError::TooLarge));
    // 512 bytes including LF is legal size: a 250-byte key and 64-byte owner fit.
    let mut line = b"A 1 ".to_vec();
    line.extend(std::iter::repeat_n(b'k', 250));
    line.push(b' ');
    line.extend(std::iter::repeat_n(b'o', 64));
    line.extend(b" 255 250\n");
    assert!(line.len() < 512);
    assert!(client(&line).unwrap().is_some());
    // exactly 512 with the LF: size is fine, content decides (here: unknown type).
    let mut exact = vec![b'x'; 511];
    exact.push(b'\n');
    assert!(matches!(client(&exact), Err(FrameError::BadFrame(_))));
    let mut over = vec![b'x'; 512];
    over.push(b'\n');
    assert_eq!(client(&over), Err(FrameError::TooLarge));
}

#[test]
fn malformed_cases_are_bad_frame() {
    let cases: &[&[u8]] = &[
        b"\n",
        b"A 1 k o 0 5\r\n",
        b"A 1 k o 0  5\n",
        b"A 1 k o 0 5 \n",
        b" A 1 k o 0 5\n",
        b"A\t1 k o 0 5\n",
        b"A 01 k o 0 5\n",
        b"A -1 k o 0 5\n",
        b"A +1 k o 0 5\n",
        b"A 1 k o 00 5\n",
        b"A 1 k o 256 5\n",
        b"A 1 k o 0 0\n",
        b"A 1 k o 0 251\n",
        b"A 1 k o 0 05\n",
        b"A 1 k o 0\n",
        b"A 1 k o 0 5 6\n",
        b"A 18446744073709551616 k o 0 5\n",
        b"A 1 k\x80 o 0 5\n",
        b"A 1 k o\x7f 0 5\n",
        b"R 1 k o 0\n",
        b"R 1 k o 9223372036854775808\n",
        b"R 1 k o 01\n",
        b"R 1 k o\n",
        b"P\n",
        b"P 1 2\n",
        b"P x\n",
        b"Q 1\n",
        b"a 1 k o 0 5\n",
        b"AUTH 00 11\n",
        b"AUTH\n",
    ];
    for case in cases {
        assert!(matches!(client(case), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(case));
    }
    let long_key = format!("A 1 {} o 0 5\n", "k".repeat(251));
    assert!(matches!(client(long_key.as_bytes()), Err(FrameError::BadFrame(_))));
    let long_owner = format!("A 1 k {} 0 5\n", "o".repeat(65));
    assert!(matches!(client(long_owner.as_bytes()), Err(FrameError::BadFrame(_))));
    let upper = format!("AUTH {} {}\n", "A".repeat(64), "0".repeat(64));
    assert!(matches!(client(upper.as_bytes()), Err(FrameError::BadFrame(_))));
    assert!(matches!(client(b"\0\n"), Err(FrameError::BadFrame(_))));
}

#[test]
fn limits_accepted() {
    assert!(client(b"A 0 k o 255 250\n").unwrap().is_some());
    assert!(client(b"A 1 k o 0 1\n").unwrap().is_some());
    assert!(client(b"R 1 k o 9223372036854775807\n").unwrap().is_some());
    assert!(client(b"R 1 ~!#$ o 1\n").unwrap().is_some());
}

#[test]
fn auth_frame() {
    let line = format!("AUTH {} {}\n", "ab".repeat(32), "01".repeat(32));
    let (f, n) = client(line.as_bytes()).unwrap().unwrap();
    assert_eq!(n, line.len());
    assert_eq!(f, ClientFrame::Auth { cnonce: Hex32([0xab; 32]), cmac: Hex32([0x01; 32]) });
    assert_eq!(f.to_bytes(), line.as_bytes());
}

#[test]
fn server_frames_bytes() {
    let t = Token::new(1700000000000000).unwrap();
    let cases: Vec<(ServerFrame, &[u8])> = vec![
        (
            ServerFrame::Granted { id: RequestId(1), key: k("k"), owner: o("o"), token: t, waited_ms: 12 },
            b"A 1 k o 1700000000000000 12\n",
        ),
        (ServerFrame::Timeout { id: RequestId(2), key: k("k") }, b"T 2 k\n"),
        (ServerFrame::Busy { id: RequestId(3), key: k("k") }, b"B 3 k\n"),
        (ServerFrame::Forbidden { id: RequestId(3), key: k("k") }, b"F 3 k\n"),
        (ServerFrame::Released { id: RequestId(4), key: k("k") }, b"R 4 k\n"),
        (ServerFrame::NotHolder { id: RequestId(5), key: k("k") }, b"N 5 k\n"),
        (ServerFrame::Pong { id: RequestId(6) }, b"P 6\n"),
        (ServerFrame::Moved { addr: Addr::new("10.0.0.1:5225").unwrap() }, b"M 10.0.0.1:5225\n"),
        (ServerFrame::Leader { addr: Addr::new("h:1").unwrap() }, b"L h:1\n"),
        (ServerFrame::error(ErrorCode::BadFrame), b"E bad_frame\n"),
        (
            ServerFrame::Error { code: ErrorCode::Internal, text: Some("oops it broke".into()) },
            b"E internal oops it broke\n",
        ),
        (ServerFrame::Ok { role: Role::Follower, smac: Hex32([0xff; 32]) }, b""),
        (ServerFrame::Greeting { snonce: Hex32([0; 32]) }, b""),
    ];
    for (frame, bytes) in cases {
        let enc = frame.to_bytes();
        if !bytes.is_empty() {
            assert_eq!(&enc[..], bytes);
        }
        assert_eq!(decode_server(&enc).unwrap(), Some((frame, enc.len())));
    }
    assert_eq!(
        decode_server(b"E what ever\n").unwrap().unwrap().0,
        ServerFrame::Error { code: ErrorCode::Other("what".into()), text: Some("ever".into()) }
    );
}

#[test]
fn server_malformed() {
    for case in [
        &b"A 1 k o 0 5\n"[..],
        b"A 1 k o 5 4294967296\n",
        b"TICKETING 2 00\n",
        b"OK boss 00\n",
        b"E\n",
        b"E \n",
        b"E x \n",
        b"T 1\n",
        b"M\n",
        b"Z\n",
    ] {
        assert!(matches!(decode_server(case), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(case));
    }
}

#[test]
fn error_text_is_sanitized_and_bounded() {
    let f = ServerFrame::Error { code: ErrorCode::Internal, text: Some(format!("a\tb  c \n{}", "x".repeat(900))) };
    let enc = f.to_bytes();
    assert!(enc.len() <= MAX_FRAME);
    assert!(enc.starts_with(b"E internal a?b c ?xxx"));
    assert!(decode_server(&enc).unwrap().is_some());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn field(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(0x21u8..=0x7E, 1..=max).prop_map(|v| String::from_utf8(v).unwrap())
    }

    fn client_frame() -> impl Strategy<Value = ClientFrame> {
        prop_oneof![
            (any::<u64>(), field(250), field(64), any::<u8>(), 1u8..=250).prop_map(|(id, key, owner, wait, lease)| {
                ClientFrame::Acquire { id: RequestId(id), key: k(&key), owner: o(&owner), wait, lease }
            }),
            (any::<u64>(), field(250), field(64), 1u64..TOKEN_LIMIT).prop_map(|(id, key, owner, t)| {
                ClientFrame::Release {
                    id: RequestId(id),
                    key: k(&key),
                    owner: o(&owner),
                    token: Token::new(t).unwrap(),
                }
            }),
            any::<u64>().prop_map(|id| ClientFrame::Ping { id: RequestId(id) }),
            (any::<u64>(), field(250), field(64)).prop_map(|(id, key, owner)| ClientFrame::Query {
                id: RequestId(id),
                key: k(&key),
                owner: o(&owner)
            }),
            (any::<[u8; 32]>(), any::<[u8; 32]>())
                .prop_map(|(a, b)| ClientFrame::Auth { cnonce: Hex32(a), cmac: Hex32(b) }),
        ]
    }

    fn server_frame() -> impl Strategy<Value = ServerFrame> {
        prop_oneof![
            (any::<u64>(), field(250), field(64), 1u64..TOKEN_LIMIT, any::<u32>()).prop_map(
                |(id, key, owner, t, w)| ServerFrame::Granted {
                    id: RequestId(id),
                    key: k(&key),
                    owner: o(&owner),
                    token: Token::new(t).unwrap(),
                    waited_ms: w
                }
            ),
            (any::<u64>(), field(250)).prop_map(|(id, key)| ServerFrame::Timeout { id: RequestId(id), key: k(&key) }),
            (any::<u64>(), field(250), field(64), 1u64..TOKEN_LIMIT, any::<u32>()).prop_map(
                |(id, key, owner, t, r)| ServerFrame::Held {
                    id: RequestId(id),
                    key: k(&key),
                    owner: o(&owner),
                    token: Token::new(t).unwrap(),
                    remaining_ms: r
                }
            ),
            (any::<u64>(), field(250)).prop_map(|(id, key)| ServerFrame::NotHolder { id: RequestId(id), key: k(&key) }),
            field(255).prop_map(|a| ServerFrame::Leader { addr: Addr::new(a).unwrap() }),
            "[a-z_]{1,20}( [!-~]{1,10}( [!-~]{1,10}){0,3})?".prop_map(|s| {
                let mut it = s.splitn(2, ' ');
                let code = ErrorCode::parse(it.next().unwrap().as_bytes());
                ServerFrame::Error { code, text: it.next().map(str::to_owned) }
            }),
        ]
    }

    proptest! {
        #[test]
        fn client_round_trip(f in client_frame()) {
            let enc = f.to_bytes();
            prop_assert!(enc.len() <= MAX_FRAME);
            prop_assert_eq!(decode_client(&enc).unwrap(), Some((f, enc.len())));
        }

        #[test]
        fn server_round_trip(f in server_frame()) {
            let enc = f.to_bytes();
            prop_assert!(enc.len() <= MAX_FRAME);
            prop_assert_eq!(decode_server(&enc).unwrap(), Some((f, enc.len())));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let c = decode_client(&bytes);
            let s = decode_server(&bytes);
            if let Ok(Some((_, n))) = c { prop_assert!(n <= MAX_FRAME && bytes[n - 1] == b'\n'); }
            if let Ok(Some((_, n))) = s { prop_assert!(n <= MAX_FRAME && bytes[n - 1] == b'\n'); }
        }
    }
}

#[test]
fn line_fields_splits_one_line_by_the_line_rules() {
    let (f, used) = line_fields(b"OK - 42 ab\nnext").unwrap().unwrap();
    assert_eq!(f, vec![&b"OK"[..], b"-", b"42", b"ab"]);
    assert_eq!(used, 11);
    assert_eq!(line_fields(b"OK 1").unwrap(), None, "incomplete");
    assert!(matches!(line_fields(b"OK  1\n"), Err(FrameError::BadFrame(_))), "double space");
    assert!(matches!(line_fields(b"OK 1\r\n"), Err(FrameError::BadFrame(_))), "CR");
    assert_eq!(line_fields(&[b'x'; MAX_FRAME]), Err(FrameError::TooLarge));
}

#[test]
fn error_text_with_stray_spaces_is_malformed() {
    // Found by the decode_server fuzz target: these were accepted.
    for line in [&b"E no_leader some text \n"[..], b"E no_leader some  text\n", b"E no_leader  text\n"] {
        assert!(matches!(decode_server(line), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(line));
    }
    assert!(decode_server(b"E no_leader\n").unwrap().is_some());
    assert!(decode_server(b"E no_leader some text\n").unwrap().is_some());
}

#[test]
fn query_and_held_bytes() {
    let q = ClientFrame::Query { id: RequestId(12), key: k("seat-1"), owner: o("ab12") };
    assert_eq!(&q.to_bytes()[..], b"Q 12 seat-1 ab12\n");
    assert_eq!(client(b"Q 12 seat-1 ab12\n").unwrap(), Some((q, 17)));
    let h = ServerFrame::Held {
        id: RequestId(12),
        key: k("seat-1"),
        owner: o("ab12"),
        token: Token::new(1700000000000001).unwrap(),
        remaining_ms: 4321,
    };
    assert_eq!(&h.to_bytes()[..], b"H 12 seat-1 ab12 1700000000000001 4321\n");
    assert_eq!(decode_server(b"H 12 seat-1 ab12 1700000000000001 4321\n").unwrap(), Some((h, 39)));
    let zero = ServerFrame::Held {
        id: RequestId(0),
        key: k("k"),
        owner: o("o"),
        token: Token::new(1).unwrap(),
        remaining_ms: 0,
    };
    assert_eq!(&zero.to_bytes()[..], b"H 0 k o 1 0\n");
    // N answers a query as it answers a release: the same bytes.
    assert_eq!(&ServerFrame::NotHolder { id: RequestId(12), key: k("seat-1") }.to_bytes()[..], b"N 12 seat-1\n");
}

#[test]
fn query_and_held_malformed() {
    for case in [&b"Q 1 k\n"[..], b"Q 1 k o x\n", b"Q 01 k o\n", b"Q 1 k  o\n", b"Q 1 k o \n", b"H 1 k o 1 0\n"] {
        assert!(matches!(client(case), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(case));
    }
    for case in [
        &b"H 1 k o 1\n"[..],
        b"H 1 k o 0 5\n",
        b"H 1 k o 9223372036854775808 5\n",
        b"H 1 k o 1 4294967296\n",
        b"H 1 k o 1 05\n",
        b"H 1 k o 1 -5\n",
        b"Q 1 k o\n",
    ] {
        assert!(matches!(decode_server(case), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(case));
    }
}

fn t(n: u64) -> Token {
    Token::new(n).unwrap()
}

#[test]
fn counted_acquire_and_its_answer_bytes() {
    let s =
        ClientFrame::AcquireShared { id: RequestId(4), key: k("seats"), owner: o("ab"), wait: 5, lease: 30, n: 65535 };
    assert_eq!(&s.to_bytes()[..], b"S 4 seats ab 5 30 65535\n");
    assert_eq!(client(b"S 4 seats ab 5 30 65535\n").unwrap(), Some((s, 24)));
    let g = ServerFrame::GrantedShared {
        id: RequestId(4),
        key: k("seats"),
        owner: o("ab"),
        token: t(77),
        waited_ms: 12,
        slot: 3,
    };
    assert_eq!(&g.to_bytes()[..], b"G 4 seats ab 77 12 3\n");
    assert_eq!(decode_server(b"G 4 seats ab 77 12 3\n").unwrap(), Some((g, 21)));
    let top = ServerFrame::GrantedShared {
        id: RequestId(0),
        key: k("k"),
        owner: o("o"),
        token: t(1),
        waited_ms: 0,
        slot: 65534,
    };
    assert_eq!(decode_server(b"G 0 k o 1 0 65534\n").unwrap().unwrap().0, top);
}

#[test]
fn malformed_counted_frames_are_refused() {
    for line in [
        &b"S 1 k o 5 30 0\n"[..], // n = 0
        b"S 1 k o 5 30 65536\n",  // n over 65535
        b"S 1 k o 5 30 07\n",     // leading zero
        b"S 1 k o 5 30\n",        // n missing
        b"S 1 k o 5 30 2 2\n",    // a field too many
        b"S 1 k o 256 30 2\n",    // wait out of range
        b"S 1 k o 5 0 2\n",       // lease out of range
        b"S 1 k o 5 30 -1\n",
    ] {
        assert!(matches!(client(line), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(line));
    }
    for line in [
        &b"G 1 k o 7 0 65535\n"[..], // no n leaves slot 65535 free
        b"G 1 k o 7 0\n",
        b"G 1 k o 0 0 1\n", // token 0
        b"G 1 k o 7 0 1 1\n",
    ] {
        assert!(matches!(decode_server(line), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn multi_key_acquire_bytes() {
    let keys = KeySet::new(vec![k("seat-2"), k("seat-1")]).unwrap();
    let f = ClientFrame::AcquireAll { id: RequestId(9), owner: o("ab"), wait: 0, lease: 10, keys };
    assert_eq!(&f.to_bytes()[..], b"K 9 ab 0 10 seat-2 seat-1\n");
    assert_eq!(f.encoded_len(), 26);
    assert_eq!(client(b"K 9 ab 0 10 seat-2 seat-1\n").unwrap(), Some((f, 26)));
    // 16 keys is the most.
    let sixteen: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let line = format!("K 1 o 1 1 {}\n", sixteen.join(" "));
    let Some((ClientFrame::AcquireAll { keys, .. }, _)) = client(line.as_bytes()).unwrap() else { panic!() };
    assert_eq!(keys.len(), 16);
    assert_eq!(keys.first(), &k("k0"));
}

#[test]
fn malformed_multi_key_frames_are_refused() {
    let seventeen: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
    let long = format!("K 1 o 1 1 {}\n", seventeen.join(" "));
    for line in [
        &b"K 1 o 1 1 a\n"[..], // one key
        b"K 1 o 1 1\n",        // none
        b"K 1 o 1 1 a a\n",    // twice the same
        b"K 1 o 1 1 a b a\n",
        b"K 1 o 256 1 a b\n", // wait out of range
        b"K 1 o 1 251 a b\n", // lease out of range
        b"K 01 o 1 1 a b\n",
        b"K 1 o 1 1 a  b\n", // double space
        long.as_bytes(),
    ] {
        assert!(matches!(client(line), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(line));
    }
    // Longer than 512 bytes: too large, however valid its keys.
    let big: Vec<String> = (0..3).map(|i| format!("{i}{}", "k".repeat(200))).collect();
    let huge = format!("K 1 o 1 1 {}\n", big.join(" "));
    assert_eq!(client(huge.as_bytes()), Err(FrameError::TooLarge));
    let set = KeySet::new(big.iter().map(|s| k(s)).collect()).unwrap();
    let f = ClientFrame::AcquireAll { id: RequestId(1), owner: o("o"), wait: 1, lease: 1, keys: set };
    assert!(f.encoded_len() > MAX_FRAME, "a client sees that it does not fit");
}

#[test]
fn key_sets_hold_two_to_sixteen_distinct_keys() {
    assert!(KeySet::new(vec![k("a")]).is_err());
    assert!(KeySet::new(vec![k("a"), k("a")]).is_err());
    assert!(KeySet::new((0..17).map(|i| k(&format!("k{i}"))).collect()).is_err());
    assert_eq!(KeySet::new((0..16).map(|i| k(&format!("k{i}"))).collect()).unwrap().len(), 16);
}
