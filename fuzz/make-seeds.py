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

frames = literals('ticketing-proto/src/frame/tests.rs', 'ticketing-proto/src/session.rs',
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
envs = [
    b'{"v":1,"id":7,"to":42,"domain":"00000000000000000000000000000005","body":"StatusReq"}',
    b'{"v":1,"id":5,"to":1,"domain":null,"body":"StatusReq"}',
    b'{"v":1,"id":6,"to":2,"domain":null,"body":{"BootstrapReq":"00000000000000000000000000000005"}}',
    b'{"v":1,"id":8,"to":3,"domain":null,"body":{"JoinReq":{"node_id":9,"node":{"peer":"127.0.0.1:5226","client":"127.0.0.1:5225"}}}}',
    b'{"v":2,"id":9,"to":3,"domain":null,"body":"StatusReq"}',
    b'{"v":1,"id":10,"to":3,"domain":null,"body":{"Refused":"WrongDomain"}}',
]
write('peer_frame', [frame(e) for e in envs] + [b'\0\0\0\0', b'\x01\0\0\x01', b'\0\0\0\x03abc', frame(envs[0]) + frame(envs[1])])
