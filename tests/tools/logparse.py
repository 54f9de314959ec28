#!/usr/bin/env python3
"""logparse.py: reads Tether's log lines back into their fields (docs/0008).

usage: logparse.py [--format logfmt|json] FILE...

Every line of every FILE must be one well-formed line of the format (strict:
the grammar common/log.c writes, nothing more), starting with time, level,
component and msg.  Prints each line as one JSON object of its fields (so
tests can query them with jq) and exits 0; on the first line that does not
parse, names the file, the line number and why on stderr and exits 1.

logfmt values come back as the exact bytes logged; a byte that was not
valid UTF-8 (logged as \\xNN) is returned as U+DC80+NN (Python's
surrogateescape), so the printed JSON stays valid and distinct.
"""
import json
import re
import sys

KEY = re.compile(rb"[A-Za-z0-9_.-]+")
BARE = re.compile(rb"[\x21\x23-\x3c\x3e-\x5b\x5d-\x7e]+")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
HEAD = ["time", "level", "component", "msg"]
LEVELS = {"debug", "info", "warn", "error"}
SHORT = {ord('"'): b'"', ord("\\"): b"\\", ord("n"): b"\n", ord("r"): b"\r",
         ord("t"): b"\t"}


class Bad(Exception):
    pass


def escaped_cp(c):
    """Code points the encoder never writes raw (log.c: cp_escaped)."""
    return (c < 0x20 or 0x7f <= c <= 0x9f or c in (0x2028, 0x2029, 0x200e,
            0x200f, 0xfeff) or 0x202a <= c <= 0x202e or 0x2066 <= c <= 0x2069)


def quoted(s, i):
    """The value of a quoted string whose opening quote is at s[i - 1]."""
    out = bytearray()
    while True:
        if i >= len(s):
            raise Bad("unterminated quoted value")
        c = s[i]
        if c == ord('"'):
            return bytes(out), i + 1
        if c == ord("\\"):
            e = s[i + 1:i + 2]
            if not e:
                raise Bad("backslash at the end")
            if e[0] in SHORT:
                out += SHORT[e[0]]
                i += 2
            elif e == b"x" and re.fullmatch(rb"[0-9a-f]{2}", s[i + 2:i + 4]):
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
            elif e == b"u" and re.fullmatch(rb"[0-9a-f]{4}", s[i + 2:i + 6]):
                out += chr(int(s[i + 2:i + 6], 16)).encode("utf-8", "surrogatepass")
                i += 6
            else:
                raise Bad("unknown escape \\%r" % e)
            continue
        if 0x20 <= c < 0x7f:
            out.append(c)
            i += 1
            continue
        # Raw bytes >= 0x80: one valid UTF-8 character that needs no escape.
        for n in (2, 3, 4):
            try:
                ch = s[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1 and not escaped_cp(ord(ch)):
                out += s[i:i + n]
                i += n
                break
        else:
            raise Bad("raw byte 0x%02x inside a value" % c)


def parse_logfmt(raw):
    if not raw.endswith(b"\n") or b"\n" in raw[:-1] or b"\r" in raw:
        raise Bad("not one line")
    s = raw[:-1]
    fields, i = [], 0
    while i < len(s):
        if fields:
            if s[i:i + 1] != b" ":
                raise Bad("no space between fields at byte %d" % i)
            i += 1
        m = KEY.match(s, i)
        if not m or s[m.end():m.end() + 1] != b"=":
            raise Bad("no KEY= at byte %d" % i)
        key, i = m.group().decode(), m.end() + 1
        if s[i:i + 1] == b'"':
            val, i = quoted(s, i + 1)
        else:
            m = BARE.match(s, i)
            if not m:
                raise Bad("empty or bad bare value for %s" % key)
            val, i = m.group(), m.end()
        if i < len(s) and s[i:i + 1] != b" ":
            raise Bad("junk after the value of %s" % key)
        fields.append((key, val.decode("utf-8", "surrogateescape")))
    return fields


def parse_json(raw):
    if not raw.endswith(b"\n") or b"\n" in raw[:-1] or b"\r" in raw:
        raise Bad("not one line")
    try:
        pairs = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda p: p)
    except (UnicodeDecodeError, ValueError) as e:
        raise Bad("not JSON: %s" % e)
    if not isinstance(pairs, list):
        raise Bad("not a JSON object")
    return pairs


def check_head(fields):
    keys = [k for k, _ in fields]
    if keys[:4] != HEAD:
        raise Bad("does not start with time level component msg")
    if len(set(keys)) != len(keys):
        raise Bad("a key appears twice")
    d = dict(fields)
    if not TIME.match(str(d["time"])) or d["level"] not in LEVELS:
        raise Bad("bad time or level")


def main(argv):
    fmt = "logfmt"
    if argv[:1] == ["--format"] and len(argv) >= 2:
        fmt, argv = argv[1], argv[2:]
    if fmt not in ("logfmt", "json") or not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    parse = parse_logfmt if fmt == "logfmt" else parse_json
    for path in argv:
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    fields = parse(raw)
                    check_head(fields)
                except Bad as e:
                    print("%s:%d: %s: %r" % (path, n, e, raw), file=sys.stderr)
                    return 1
                print(json.dumps(dict(fields)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
