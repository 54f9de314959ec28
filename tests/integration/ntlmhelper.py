#!/usr/bin/env python3
"""ntlmhelper.py NT_HASH_HEX USER DOMAIN LOG: a squid NTLM authenticator
(squid's helper protocol: "YR <type1>" -> "TT <type2>", "KK <type3>" ->
"AF <user>" or "NA <reason>") that, unlike squid's ntlm_fake_auth, checks the
client's NTLMv2 response against one known account: NT_HASH_HEX is
MD4(UTF-16LE(password)) (the test computes it with openssl), USER and
DOMAIN the account.  Its challenge carries target info with a timestamp,
as Windows servers send.  Each verdict is a line in LOG.
"""
import base64
import hashlib
import hmac
import os
import struct
import sys
import time

nt_hash = bytes.fromhex(sys.argv[1])
want_user, want_domain, logpath = sys.argv[2], sys.argv[3], sys.argv[4]
challenge = None


def log(line):
    with open(logpath, 'a') as f:
        f.write(line + '\n')


def av(av_id, value):
    return struct.pack('<HH', av_id, len(value)) + value


def type2():
    global challenge
    challenge = os.urandom(8)
    filetime = int((time.time() + 11644473600) * 10000000)
    info = (av(2, want_domain.encode('utf-16-le')) + av(1, b'P\0R\0O\0X\0Y\0') +
            av(7, struct.pack('<Q', filetime)) + av(0, b''))
    flags = 0x00000001 | 0x00000004 | 0x00000200 | 0x00008000 | 0x00080000 | 0x00800000
    head = b'NTLMSSP\0' + struct.pack('<I', 2) + struct.pack('<HHI', 0, 0, 48)
    head += struct.pack('<I', flags) + challenge + b'\0' * 8
    head += struct.pack('<HHI', len(info), len(info), 48)
    return head + info


def field(msg, at):
    length, _, off = struct.unpack_from('<HHI', msg, at)
    return msg[off:off + length]


def verify(msg):
    if msg[:8] != b'NTLMSSP\0' or struct.unpack_from('<I', msg, 8)[0] != 3:
        return False, 'not a type-3 message'
    nt = field(msg, 20)
    domain = field(msg, 28).decode('utf-16-le')
    user = field(msg, 36).decode('utf-16-le')
    if user.lower() != want_user.lower() or domain.lower() != want_domain.lower():
        return False, 'unknown account %s\\%s' % (domain, user)
    if len(nt) <= 24:
        return False, 'not an NTLMv2 response'
    key = hmac.new(nt_hash, (user.upper() + domain).encode('utf-16-le'),
                   hashlib.md5).digest()
    proof = hmac.new(key, challenge + nt[16:], hashlib.md5).digest()
    if not hmac.compare_digest(proof, nt[:16]):
        return False, 'wrong password for %s\\%s' % (domain, user)
    return True, '%s\\%s' % (domain, user)


for line in sys.stdin:
    parts = line.split()
    if len(parts) == 2 and parts[0] == 'YR':
        reply = 'TT ' + base64.b64encode(type2()).decode()
    elif len(parts) == 2 and parts[0] == 'KK' and challenge is not None:
        try:
            ok, what = verify(base64.b64decode(parts[1]))
        except (ValueError, struct.error, UnicodeDecodeError) as e:
            ok, what = False, 'malformed type 3: %s' % e
        log(('accepted ' if ok else 'refused ') + what)
        reply = 'AF ' + want_user if ok else 'NA ' + what
    else:
        reply = 'BH unexpected ' + (parts[0] if parts else 'empty line')
    sys.stdout.write(reply + '\n')
    sys.stdout.flush()
