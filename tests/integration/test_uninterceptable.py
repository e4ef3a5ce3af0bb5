"""Intercepted programs talk to programs that cannot be intercepted.

Peers that LD_PRELOAD cannot reach, built into a temporary directory:
  * go      tests/programs/goecho (Go, stdlib only, CGO_ENABLED=0: raw
            system calls, no libc, static);
  * static  tests/programs/static_peer.c built with ``cc -static``.

The intercepted side runs as ``build/shunt run -- ...``:
  * py      python3 tests/programs/pyecho.py
  * c       tests/programs/static_peer.c built as an ordinary dynamic
            executable (so its libc calls go through libshunt.so).

All speak one protocol (see pyecho.py): the client streams a known
pattern, the server echoes it and verifies it, the client verifies the
echo; every connection ends with a half-close from the client.  Each pair
is tested in both directions (uninterceptable server / shunt'd client and
shunt'd server / uninterceptable client) with three workloads: bulk (several
MiB, sending and receiving at once), small messages (ping-pong of 1..200
byte messages over 3 sequential connections) and halfclose (send all, shut
down the write side, only then read the echo; 5 sequential connections).
"""

import socket

import pytest

from echopeers import (CLIENT_TIMEOUT, PEERS, SIDES, WORKLOADS, check_client, check_server_log, client_args,
                       listening_port, peer_argv, server_args, side_argv)
from shunttest import elf_interpreter, needs_ipv6, run_cmd


# ------------------------------------------------------------------ tests

@pytest.mark.parametrize("kind", PEERS)
def test_peer_is_static(builds, kind):
    """The uninterceptable peers really have no ELF interpreter (no ld.so,
    so LD_PRELOAD cannot apply)."""
    path = builds.get(kind)
    assert elf_interpreter(path) is None, "%s is dynamically linked" % path


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("kind", PEERS)
def test_peer_server_shunted_client(shunt, builds, start_server, kind, side, workload):
    srv = start_server(peer_argv(builds, kind) + server_args(), name="%s-server" % kind)
    port = listening_port(srv)
    r = shunt.run(side_argv(builds, side) + client_args(port, workload), timeout=CLIENT_TIMEOUT)
    check_client(r, workload, expect_mapped=True)
    check_server_log(srv, workload)


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("kind", PEERS)
def test_shunted_server_peer_client(shunt, builds, start_server, kind, side, workload):
    srv = start_server(shunt.cmd(side_argv(builds, side) + server_args()),
                       name="shunted-%s-server" % side)
    port = listening_port(srv)
    assert srv.wait_for(r"^LIBSHUNT_MAPPED (\w+)$").group(1) == "yes"
    found = srv.processes_with_libshunt()
    assert found, "libshunt.so not in /proc/%d/maps:\n%s" % (srv.pid, srv.describe())
    r = run_cmd(peer_argv(builds, kind) + client_args(port, workload), timeout=CLIENT_TIMEOUT)
    check_client(r, workload, expect_mapped=False)
    check_server_log(srv, workload)


@pytest.mark.parametrize("kind", PEERS)
def test_uninterceptable_program_launched_by_shunt(shunt, builds, start_server, kind):
    """`shunt run` on a program that cannot be intercepted: it runs
    normally (LD_PRELOAD has no effect on it) as server and as client,
    against a shunt'd python peer."""
    srv = start_server(shunt.cmd(peer_argv(builds, kind) + server_args()),
                       name="%s-server-via-shunt" % kind)
    port = listening_port(srv)
    assert srv.wait_for(r"^LIBSHUNT_MAPPED (\w+)$").group(1) == "no"
    r = shunt.run(side_argv(builds, "py") + client_args(port, "small"), timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    check_server_log(srv, "small")

    pysrv = start_server(shunt.cmd(side_argv(builds, "py") + server_args()), name="py-server")
    pyport = listening_port(pysrv)
    r = shunt.run(peer_argv(builds, kind) + client_args(pyport, "bulk"), timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=False)
    check_server_log(pysrv, "bulk")


@needs_ipv6
@pytest.mark.parametrize("direction", ["peer-server", "shunted-server"])
@pytest.mark.parametrize("kind", PEERS)
def test_ipv6_loopback(shunt, builds, start_server, kind, direction):
    if direction == "peer-server":
        srv = start_server(peer_argv(builds, kind) + server_args("::1"), name="v6-server")
        port = listening_port(srv)
        r = shunt.run(side_argv(builds, "py") + client_args(port, "bulk", "::1"), timeout=CLIENT_TIMEOUT)
        check_client(r, "bulk", expect_mapped=True)
    else:
        srv = start_server(shunt.cmd(side_argv(builds, "c") + server_args("::1")),
                           name="v6-shunted-server")
        port = listening_port(srv)
        r = run_cmd(peer_argv(builds, kind) + client_args(port, "bulk", "::1"), timeout=CLIENT_TIMEOUT)
        check_client(r, "bulk", expect_mapped=False)
    check_server_log(srv, "bulk")


@pytest.mark.parametrize("kind", PEERS)
def test_server_check_detects_corruption(builds, start_server, kind):
    """The servers' pattern check is not vacuous: a stream with one wrong
    byte is reported BAD at the right offset (plain client, no shunt)."""
    srv = start_server(peer_argv(builds, kind) + server_args(), name="%s-server" % kind)
    port = listening_port(srv)
    table = bytes((((j * 2654435761) & 0xFFFFFFFF) >> 16) & 0xFF for j in range(65521))
    data = bytearray(table * 2)
    data[70000] ^= 0x01
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        got = bytearray()
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    assert got == data
    line = srv.wait_lines(r"^CONN 1 ", 1)[0]
    assert line == "CONN 1 RECV %d BAD 70000" % len(data), line
