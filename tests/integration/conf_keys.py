#!/usr/bin/env python3
"""conf_keys.py HELPFILE EXAMPLEFILE: checks that a config example lists
exactly the keys `--help` lists (besides --config and --help), and that each
key's value in the example is the default --help shows.  Prints what differs
and exits 1, or prints the number of keys and exits 0."""
import re
import sys

help_text = open(sys.argv[1]).read().splitlines()
example = open(sys.argv[2]).read().splitlines()

entries = {}
cur = None
for line in help_text:
    m = re.match(r'  --([a-z0-9-]+)(?:\[=BOOL\]| \S+)?(?:\s+(.*))?$', line)
    if m:
        cur = m.group(1)
        entries[cur] = m.group(2) or ''
    elif cur and line.startswith(' ' * 8) and line.strip():
        entries[cur] += ' ' + line.strip()
    else:
        cur = None
entries.pop('config', None)
entries.pop('help', None)

keys = {}
for n, line in enumerate(example, 1):
    m = re.match(r'([a-z0-9-]+)\s*=\s*(.*?)\s*$', line)
    if m:
        if m.group(1) in keys:
            sys.exit(f'{sys.argv[2]}:{n}: {m.group(1)} listed twice')
        keys[m.group(1)] = m.group(2)

bad = []
for k in sorted(set(entries) - set(keys)):
    bad.append(f'--{k} is in --help but not in {sys.argv[2]}')
for k in sorted(set(keys) - set(entries)):
    bad.append(f'{k} is in {sys.argv[2]} but not in --help')
for k in sorted(set(keys) & set(entries)):
    m = re.search(r'\(default ([^)]*)\)\s*$', entries[k])
    if m and re.fullmatch(r'[A-Za-z0-9.:/_-]+', m.group(1)) and \
            'DATA_DIR' not in m.group(1) and keys[k] != m.group(1):
        bad.append(f'{k}: example says "{keys[k]}", --help says default {m.group(1)}')
if bad:
    print('\n'.join(bad))
    sys.exit(1)
print(len(keys))
