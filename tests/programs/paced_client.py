#!/usr/bin/env python3
"""A paced echo client for failure tests (a link taken down, a peer killed):
it speaks tests/programs/pyecho.py's protocol and says how the connection ended.

    paced_client.py HOST PORT BYTES CHUNK PAUSE_MS TIMEOUT

One connection: a writer thread sends BYTES of pyecho's pattern in CHUNK pieces
with PAUSE_MS between them (so a test can act mid-transfer), printing
``SENT <bytes>`` after each MiB, then shuts down its write side; the reader checks
every byte echoed against the pattern. Every socket call has TIMEOUT seconds.
Last line, always:

    RESULT <end> sent=<bytes> received=<bytes> sha_sent=<hex> sha_received=<hex>

where <end> is ``ok`` (everything echoed, then EOF), ``eof`` (EOF early),
``ECONNRESET``, ``EPIPE``, ``timeout``, or another errno name (the first error of
either direction). Exit status 0, or 1 if a byte echoed was wrong (a line
``BAD <offset>`` says where): wrong bytes are never a way for a connection to end.
"""

import errno
import hashlib
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pyecho import Checker, pattern, received, say  # noqa: E402

MIB = 1 << 20


def end_of(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__


def main():
    host, port, nbytes, chunk, pause_ms, timeout = sys.argv[1:7]
    port, nbytes, chunk, timeout = int(port), int(nbytes), int(chunk), float(timeout)
    pause = float(pause_ms) / 1000
    sock = socket.create_connection((host, port), timeout=timeout)
    say("CONNECTED %s" % (sock.getsockname(),))
    sent_sha = hashlib.sha256()
    state = {"sent": 0, "error": None}

    def writer():
        try:
            while state["sent"] < nbytes:
                k = min(chunk, nbytes - state["sent"])
                data = pattern(state["sent"], k)
                sock.sendall(data)
                sent_sha.update(data)
                before = state["sent"]
                state["sent"] += k
                if state["sent"] // MIB != before // MIB:
                    say("SENT %d" % state["sent"])
                time.sleep(pause)
            sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            state["error"] = state["error"] or end_of(e)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    chk = Checker()
    got_sha = hashlib.sha256()
    end = None
    try:
        for data in received(sock):
            chk.feed(data)
            got_sha.update(data)
            if chk.bad is not None:
                break
    except OSError as e:
        end = end_of(e)
    t.join(timeout + 5)
    if chk.bad is not None:
        say("BAD %d" % chk.bad)
    if end is None:
        end = state["error"] or ("ok" if chk.off == nbytes == state["sent"] else "eof")
    say("RESULT %s sent=%d received=%d sha_sent=%s sha_received=%s"
        % (end, state["sent"], chk.off, sent_sha.hexdigest(), got_sha.hexdigest()))
    return 1 if chk.bad is not None else 0


if __name__ == "__main__":
    sys.exit(main())
