"""Both ends under shunt: echo servers and clients that are all intercepted.

python3 tests/programs/pyecho.py and the dynamic build of
tests/programs/static_peer.c, each run as ``build/shunt run -- ...``, in
every server/client combination, with the workloads of
test_uninterceptable.py (bulk several MiB, small ping-pong messages over
sequential connections, send-all-then-half-close over sequential
connections).  Client and server both verify the data.

Each test runs with the library's default settings (the shared-memory fast
path between two shunt'd processes, when enabled) and with SHUNT_ACCEL=0
(passthrough to the kernel).
"""

import subprocess
import textwrap

import pytest

from echopeers import (CLIENT_TIMEOUT, SIDES, WORKLOADS, check_client, check_server_log,
                       client_args, listening_port, server_args, side_argv)
from shunttest import PYTHON, base_env, stop_process

ACCEL = {"default": {}, "accel0": {"SHUNT_ACCEL": "0"}}


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("client", SIDES)
@pytest.mark.parametrize("server", SIDES)
@pytest.mark.parametrize("accel", sorted(ACCEL))
def test_both_ends_shunted(shunt, builds, start_server, accel, server, client, workload):
    env = base_env(**ACCEL[accel])
    srv = start_server(shunt.cmd(side_argv(builds, server) + server_args()), env=env,
                       name="shunted-%s-server" % server)
    port = listening_port(srv)
    assert srv.wait_for(r"^LIBSHUNT_MAPPED (\w+)$").group(1) == "yes", srv.describe()
    r = shunt.run(side_argv(builds, client) + client_args(port, workload), env=env,
                  timeout=CLIENT_TIMEOUT)
    check_client(r, workload, expect_mapped=True)
    check_server_log(srv, workload)


HALF_SERVER = textwrap.dedent('''
    import socket, sys
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    print("LISTENING", ls.getsockname()[1], flush=True)
    c, _ = ls.accept()
    c.settimeout(20)
    n = 0
    while n < 1000:
        d = c.recv(65536)
        if not d:
            break
        n += len(d)
    print("got", n, flush=True)
    print("then", c.recv(100), flush=True)   # the client's FIN: b""
    c.sendall(b"reply after your FIN")
    c.close()
    print("done", flush=True)
''')

HALF_CLIENT = textwrap.dedent('''
    import socket, sys
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
    s.sendall(b"x" * 1000)
    s.shutdown(socket.SHUT_WR)
    buf = b""
    while True:
        d = s.recv(100)
        if not d:
            break
        buf += d
    print("received", buf, flush=True)
''')


@pytest.mark.parametrize("accel", sorted(ACCEL))
def test_half_close_then_reply(shunt, start_server, accel):
    """After the client's shutdown(SHUT_WR) the server reads EOF and can
    still send: the client receives the reply, then EOF."""
    env = base_env(**ACCEL[accel])
    srv = start_server(shunt.cmd([PYTHON, "-c", HALF_SERVER]), env=env, name="half-server")
    port = listening_port(srv)
    r = shunt.run([PYTHON, "-c", HALF_CLIENT, str(port)], env=env, timeout=60)
    try:
        srv.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("server did not finish:\n" + srv.describe())
    assert srv.stdout().splitlines()[1:] == ["got 1000", "then b''", "done"], srv.describe()
    assert r.returncode == 0 and r.stdout == b"received b'reply after your FIN'\n", (r.stdout, r.stderr)


@pytest.mark.parametrize("accel", sorted(ACCEL))
def test_many_concurrent_clients(shunt, builds, start_server, accel):
    """Eight shunt'd clients at once (mixed python and C, mixed workloads)
    against one shunt'd forking C server."""
    env = base_env(**ACCEL[accel])
    srv = start_server(shunt.cmd(side_argv(builds, "c") + server_args()), env=env,
                       name="c-server")
    port = listening_port(srv)
    jobs = []
    try:
        for i in range(8):
            side = SIDES[i % 2]
            workload = sorted(WORKLOADS)[i % 3]
            p = subprocess.Popen(shunt.cmd(side_argv(builds, side) + client_args(port, workload)),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env, start_new_session=True)
            jobs.append((p, workload))
        total_conns = 0
        for p, workload in jobs:
            try:
                out, err = p.communicate(timeout=CLIENT_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail("client %s timed out" % (p.args,))
            check_client(subprocess.CompletedProcess(p.args, p.returncode, out, err),
                         workload, expect_mapped=True)
            total_conns += WORKLOADS[workload][3]
    finally:
        for p, _ in jobs:
            stop_process(p, grace=1.0)
    lines = srv.wait_lines(r"^CONN \d+ ", total_conns, timeout=30)
    assert all(line.endswith(" OK") for line in lines), srv.describe()
