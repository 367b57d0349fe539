"""Prints N distinct free TCP ports on 127.0.0.1 (default 1), one per line.

They are taken below the kernel's ephemeral range (32768 and up), which the kernel hands out
for port 0 and for every outgoing connection: there, a port found free could be taken by
another connection before the component bound it. See free_port in crates/test-support/src/ports.rs.
"""
import os
import random
import socket
import sys

wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 1
# Test binaries run side by side are given ranges of their own (port_range in ports.rs, whose
# rule this follows).
setting = os.environ.get("CAPMS_TEST_PORTS", "20000-32000")
try:
    low, high = (int(p) for p in setting.split("-"))
except ValueError:
    low = high = 0
if not 20000 <= low < high <= 32000:
    sys.exit(f"CAPMS_TEST_PORTS={setting!r}: expected LOW-HIGH within 20000-32000, LOW < HIGH")
found = []
while len(found) < wanted:
    port = random.randrange(low, high)
    if port in found:
        continue
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    found.append(port)
print("\n".join(map(str, found)))
