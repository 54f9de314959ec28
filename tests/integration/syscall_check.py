#!/usr/bin/env python3
"""syscall_check.py STRACE_OUT...: checks that every system call an strace
-f log shows is allowed by the units' filter, SystemCallFilter=@system-service
then ~@privileged, as `systemd-analyze syscall-filter` defines the groups on
this machine.  Prints the calls seen (count) and exits 0, or the calls the
filter would refuse and exits 1."""
import re
import subprocess
import sys


def expand(group, seen=None):
    seen = set() if seen is None else seen
    out = subprocess.run(['systemd-analyze', 'syscall-filter', group],
                         capture_output=True, text=True, check=True).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        word = line.strip()
        if not word or word.startswith('#'):
            continue
        if word.startswith('@'):
            if word not in seen:
                seen.add(word)
                calls |= expand(word, seen)
        else:
            calls.add(word)
    return calls


allowed = expand('@system-service') - expand('@privileged')
used = set()
for path in sys.argv[1:]:
    for line in open(path, errors='replace'):
        m = re.match(r'\d+\s+(?:<\.\.\. )?([a-z_0-9]+)[( ]', line)
        if m and m.group(1) not in ('exited', 'killed', 'resumed'):
            used.add(m.group(1))
refused = sorted(used - allowed)
if refused:
    print('refused by the filter: ' + ' '.join(refused))
    sys.exit(1)
print(f'{len(used)} system calls, all allowed: ' + ' '.join(sorted(used)))
