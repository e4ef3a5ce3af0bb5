#!/usr/bin/env python3
"""Echo server / verifying client in Python (stdlib only).

Run under ``build/shunt run -- python3 tests/programs/pyecho.py ...`` it is the
intercepted side of the tests in tests/integration/test_uninterceptable.py;
its peers are tests/programs/goecho and tests/programs/static_peer.c, which
speak the same protocol:

* byte ``i`` of the client's stream on a connection is
  ``TABLE[i % 65521]`` with ``TABLE[j] = ((j * 2654435761) mod 2**32) >> 16 & 0xff``;
* the server echoes everything, verifies the pattern and, when the client
  half-closes, shuts down its write side and prints
  ``CONN <n> RECV <bytes> OK`` (or ``... BAD <offset>``);
* the client sends N bytes, half-closes, reads to EOF and checks that exactly
  what it sent came back; it prints ``CLIENT OK conns=K bytes=N mode=M``.

Both roles first print ``LIBSHUNT_MAPPED yes`` or ``LIBSHUNT_MAPPED no``,
telling whether libshunt.so appears in /proc/self/maps.

Usage::

    pyecho.py server [--host 127.0.0.1] [--port 0]
    pyecho.py client --port P [--host H] [--bytes N]
        [--mode bulk|pingpong|halfclose] [--chunk C] [--conns K] [--timeout S]
"""

import argparse
import socket
import sys
import threading

PERIOD = 65521
TABLE = bytes((((j * 2654435761) & 0xFFFFFFFF) >> 16) & 0xFF for j in range(PERIOD))
TABLE3 = TABLE * 3

_out_lock = threading.Lock()


def say(line):
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def pattern(off, n):
    """The n bytes of the stream starting at offset off."""
    start = off % PERIOD
    if n <= 2 * PERIOD:
        return TABLE3[start:start + n]
    reps = (start + n) // PERIOD + 1
    return (TABLE * reps)[start:start + n]


class Checker:
    """Verifies a received stream chunk by chunk against the pattern."""

    def __init__(self):
        self.off = 0
        self.bad = None

    def feed(self, data):
        if self.bad is None and data != pattern(self.off, len(data)):
            want = pattern(self.off, len(data))
            i = next(k for k in range(len(data)) if data[k] != want[k])
            self.bad = self.off + i
        self.off += len(data)


def received(sock, size=65536):
    """The pieces SOCK receives, until EOF."""
    while True:
        data = sock.recv(size)
        if not data:
            return
        yield data


def libshunt_mapped():
    try:
        with open("/proc/self/maps") as f:
            return "libshunt.so" in f.read()
    except OSError:
        return False


def family_of(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# ---------------------------------------------------------------- server

def serve(conn, n):
    chk = Checker()
    try:
        with conn:
            conn.settimeout(120)
            for data in received(conn):
                chk.feed(data)
                conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
    except OSError as e:
        say("CONN %d ERROR %s" % (n, e))
        return
    if chk.bad is not None:
        say("CONN %d RECV %d BAD %d" % (n, chk.off, chk.bad))
    else:
        say("CONN %d RECV %d OK" % (n, chk.off))


def run_server(args):
    ls = socket.socket(family_of(args.host), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.host, args.port))
    ls.listen(64)
    say("LISTENING %d" % ls.getsockname()[1])
    n = 0
    while True:
        conn, _ = ls.accept()
        n += 1
        threading.Thread(target=serve, args=(conn, n), daemon=True).start()


# ---------------------------------------------------------------- client

class Fail(Exception):
    pass


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise Fail("early EOF after %d of %d bytes" % (got, n))
        got += k
    return bytes(buf)


def expect_eof(sock):
    data = sock.recv(1)
    if data:
        raise Fail("extra data after the echo")


def client_bulk(sock, nbytes, chunk):
    errors = []

    def writer():
        try:
            off = 0
            while off < nbytes:
                k = min(chunk, nbytes - off)
                sock.sendall(pattern(off, k))
                off += k
            sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            errors.append("write: %s" % e)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    chk = Checker()
    for data in received(sock):
        chk.feed(data)
        if chk.off > nbytes:
            raise Fail("received more than sent")
        if chk.bad is not None:
            raise Fail("echo mismatch at offset %d" % chk.bad)
    t.join(30)
    if errors:
        raise Fail(errors[0])
    if chk.off != nbytes:
        raise Fail("echoed %d bytes, sent %d" % (chk.off, nbytes))


def client_pingpong(sock, nbytes, chunk):
    off = 0
    i = 0
    while off < nbytes:
        k = min(1 + (i * 37) % chunk, nbytes - off)
        msg = pattern(off, k)
        sock.sendall(msg)
        if recv_exact(sock, k) != msg:
            raise Fail("echo mismatch in message %d at offset %d" % (i, off))
        off += k
        i += 1
    sock.shutdown(socket.SHUT_WR)
    expect_eof(sock)


def client_halfclose(sock, nbytes):
    msg = pattern(0, nbytes)
    sock.sendall(msg)
    sock.shutdown(socket.SHUT_WR)
    if recv_exact(sock, nbytes) != msg:
        raise Fail("echo mismatch")
    expect_eof(sock)


def run_client(args):
    for i in range(1, args.conns + 1):
        try:
            with socket.create_connection((args.host, args.port), timeout=args.timeout) as s:
                if args.mode == "bulk":
                    client_bulk(s, args.bytes, args.chunk)
                elif args.mode == "pingpong":
                    client_pingpong(s, args.bytes, args.chunk)
                else:
                    client_halfclose(s, args.bytes)
        except (Fail, OSError) as e:
            sys.stderr.write("CLIENT FAIL conn %d: %s\n" % (i, e))
            return 1
    say("CLIENT OK conns=%d bytes=%d mode=%s" % (args.conns, args.bytes, args.mode))
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--mode", choices=["bulk", "pingpong", "halfclose"], default="bulk")
    p.add_argument("--chunk", type=int, default=65536)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    say("LIBSHUNT_MAPPED %s" % ("yes" if libshunt_mapped() else "no"))
    if args.role == "server":
        run_server(args)
        return 0
    if args.port <= 0 or args.chunk <= 0:
        p.error("client needs --port and a positive --chunk")
    return run_client(args)


if __name__ == "__main__":
    sys.exit(main())
