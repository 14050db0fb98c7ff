#!/usr/bin/env python3
"""Writes the seed corpora fuzz/seeds/<target>/ from the unit tests' byte
literals (b"..." in the listed test files) plus a few hand-made sessions.
Run again after adding wire tests: python3 fuzz/make-seeds.py"""
import hashlib, os, re, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIT = re.compile(rb'b"((?:[^"\\]|\\.)*)"')

def unescape(s):
    out, i = bytearray(), 0
    while i < len(s):
        c = s[i]
        if c == 0x5C:  # backslash
            n = s[i + 1:i + 2]
            if n == b'x':
                out.append(int(s[i + 2:i + 4], 16)); i += 4; continue
            out += {b'n': b'\n', b'r': b'\r', b't': b'\t', b'0': b'\0', b'\\': b'\\', b'"': b'"', b"'": b"'"}.get(n, b'')
            i += 2; continue
        out.append(c); i += 1
    return bytes(out)

def literals(*paths):
    found = []
    for p in paths:
        with open(os.path.join(ROOT, p), 'rb') as f:
            for m in LIT.finditer(f.read()):
                b = unescape(m.group(1))
                if b and b not in found:
                    found.append(b)
    return found

def write(target, seeds):
    d = os.path.join(HERE, 'seeds', target)
    os.makedirs(d, exist_ok=True)
    for s in seeds:
        with open(os.path.join(d, hashlib.sha1(s).hexdigest()[:16]), 'wb') as f:
            f.write(s)
    print(f'{target}: {len(seeds)} seeds')

frames = literals('ticketing-proto/src/frame/tests.rs', 'ticketing-proto/src/session/tests.rs',
                  'ticketing-server/tests/handshake.rs', 'ticketing-server/tests/malformed.rs')
client_lines = [b for b in frames if b[:1] in (b'A', b'R', b'P', b'Q', b' ', b'a', b'\n', b'\0')]
server_lines = [b for b in frames if b[:1] in (b'A', b'T', b'B', b'R', b'N', b'P', b'M', b'L', b'E', b'O', b'H')]
auth = b'AUTH ' + b'11' * 32 + b' ' + b'00' * 32 + b'\n'
write('decode_client', frames + [auth])
write('decode_server', frames + [b'TICKETING 1 ' + b'03' * 32 + b'\n', b'OK leader ' + b'ab' * 32 + b'\n'])
# session: mode byte 1 (harness handshake, leader), then steps; op 0 = feed n bytes.
def feed(b):
    out = b''
    while b:
        out += bytes([0, min(len(b), 255)]) + b[:255]; b = b[255:]
    return out
sess = [b'\x01' + bytes([1, 5]) + feed(l) for l in server_lines] + [b'\x00' + feed(l) for l in server_lines[:10]]
sess += [b'\x01' + bytes([1, 2, 3, 40, 2, 7, 3, 100, 4, 1, 5]), b'\x03' + bytes([1, 0, 6])]
write('session', sess)
write('server_conn', [auth + l for l in client_lines] + [auth, b'AUTH x\n', auth + b'A 1 k o 1 5\nA 2 k p 2 5\nR 3 k o 1\nP 4\n'])
write('peer_handshake', [b'AUTH ' + b'11' * 32 + b' ' + b'00' * 32 + b'\n', b'AUTH\n', b'E wrong_domain\n', b'x' * 600])
def frame(j):
    return struct.pack('>I', len(j)) + j
def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7f) | 0x80); n >>= 7
    out.append(n)
    return bytes(out)
def text(t):
    return varint(len(t)) + t
def env(id, to, domain, body):
    """A peer protocol 2 envelope (postcard): v, id, to, domain, body."""
    return bytes([2]) + varint(id) + varint(to) + (b'\0' if domain is None else b'\1' + varint(domain)) + body
# Body variants: AppendReq 0 ... StatusReq 4, BootstrapReq 5, AppendResp 6, JoinResp 9, Refused 12.
envs = [
    env(7, 42, 5, varint(4)),
    env(5, 1, None, varint(4)),
    env(6, 2, None, varint(5) + varint(5)),
    env(8, 3, None, varint(3) + varint(9) + text(b'127.0.0.1:5226') + text(b'127.0.0.1:5225') + b'\0'),
    env(10, 3, None, varint(12) + varint(1)),
    env(11, 3, 2**127, varint(9) + varint(1)),
    env(12, 3, None, varint(6) + b'\0' + varint(2)),
    env(13, 3, None, varint(6) + b'\1' + text(b'{"Fatal":"Panicked"}')),
]
# Peer protocol 1 (JSON) frames: refused.
old = [b'{"v":1,"id":5,"to":1,"domain":null,"body":"StatusReq"}']
write('peer_frame', [frame(e) for e in envs + old] + [b'\0\0\0\0', b'\x01\0\0\x01', b'\0\0\0\x03abc', frame(envs[0]) + frame(envs[1])])
# leader: grace byte, then (op, arg) pairs: 0/1 acquire, 2 release, 3 query,
# 4/5 commit, 6 fail, 7 time, 8 EOF/close, 9 leadership (fuzz_targets/leader.rs).
write('leader', [
    bytes([0, 0, 0x00, 0x10, 4, 0, 0, 0x30, 2, 0, 4, 0, 4, 0, 7, 200]),
    bytes([0, 0, 0, 0x21, 0x30, 0x22, 4, 0, 7, 60, 4, 0, 7, 60, 4, 0, 3, 0]),
    bytes([1, 0, 0, 0x30, 0, 0x31, 7, 30, 7, 30, 4, 0, 4, 0, 2, 0, 4, 0]),
    bytes([0, 0, 0, 0, 0, 6, 1, 9, 2, 4, 0, 0, 0, 8, 1, 7, 255, 4, 0]),
    bytes([2, 0, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 7, 100, 7, 100, 4, 0, 4, 0]),
])
