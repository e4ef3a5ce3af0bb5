"""Connections on the fabric (issue 19): a server in a namespace with a /dev/shm
of its own (a container's tmpfs, where shunt's own rings cannot reach it), its
client in another namespace, both under shunt on a fabric-enabled host: the
client's SYN says its process runs shunt, the server's hello (proof, nonce,
ring) is taken off by the client, and the bytes ride UCX's lanes
(docs/architecture.md, "Built: the connection paths").

netns.py's namespaces joined by a veth pair, `shunt fabric enable` for the test
(test_netns_accel's fixture). Checked, over IPv4 and IPv6:

- pyecho's bulk (8 MiB each way), pingpong (3 connections) and half-close (5;
  a client that takes its hello off only after the server closed stays on
  kernel TCP, reason fabric) workloads, every byte checked, on UCX's default lanes (shared memory: the
  log names sysv or posix) and forced onto its TCP lanes
  (SHUNT_FABRIC_LANES=tcp): both ends log the connection accelerated on the
  fabric, and nothing falls back;
- shunt_fd_accelerated answers 0 for the connection until both ends moved onto
  the fabric, 1 after; `shunt stat` shows both ends on path "fabric";
- a server that forks a child per connection (static_peer): by default its
  children send no hello (fabric_forked); with SHUNT_FABRIC_FORKED=1, on both lane
  settings: the hello goes before the child's first byte, and each connection is
  on the fabric with its server end in the child, bytes exact;
- a forking server whose parent keeps its copy 30 ms (on the fabric), 500 ms
  (no hello: kernel TCP) or whose child execs cat on the socket (no hello);
- a server without shunt: the client marked its socket and waits for a hello
  that never comes; its bytes are exact and its reason is today's;
- both ends in edge-triggered epoll loops: 1 MiB echoed exact;
- redis-server (an epoll loop) under shunt with redis-cli and redis-benchmark:
  every connection on the fabric at both ends, a 3 MiB value exact;
- PostgreSQL (a backend forked per connection) with psql and pgbench, as
  nobody: every backend's connection on the fabric, 6.4 MB of rows exact;
- a server busy elsewhere (no call into shunt) for 6 s while its client
  attaches and sends: every byte right, no reset;
- the veth taken down for 2 s mid-transfer: the transfer completes exact;
- kill -9 of either end mid-transfer: the other ends as kernel TCP's does
  (an exact prefix, then EOF, ECONNRESET or EPIPE), nothing hangs.

Needs root, ip (iproute2), bpf and UCX: missing under CI is a failure.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from echopeers import CLIENT_TIMEOUT, check_client, check_server_log, client_args, listening_port
from netns import Namespaces, need_namespaces
from shunttest import PROGRAMS, PYTHON, need_tool
from test_netns import HOLD, REASON, Ends, host_port, result_of
from test_netns_accel import fabric  # noqa: F401  (the fixture)

FAMILIES = [4, 6]
MIB = 1 << 20
PACED = 16 * MIB
ACCEL = re.compile(r"accelerated \((client|server), fabric, lanes (\S*)\)")
LEFT = re.compile(r"fabric: left for kernel TCP before (.*)$", re.M)
OWN_SHM = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o mode=1777 none /dev/shm && exec "$@"', "sh"]


@pytest.fixture
def nets(tmp_path):
    need_namespaces()
    with Namespaces(["a", "b"], links=[("a", "b")], logdir=tmp_path) as n:
        yield n


class FabricEnds(Ends):
    def accelerated(self, side):
        """(role, lanes) of each connection the side's logs call accelerated on the fabric."""
        return ACCEL.findall("\n".join(self.log(side)))

    def reasons(self, side):
        return Counter(re.findall(r"kernel TCP: (.*)$", "\n".join(self.log(side)), re.M))

    def left(self, side):
        return LEFT.findall("\n".join(self.log(side)))

    def check_fabric(self, conns, lanes, late=False):
        """CONNS connections on the fabric at both ends, on lanes that match
        the regular expression LANES, and nothing fell back.  LATE (the
        half-close workload, where the client reads its first bytes, the
        hello among them, only after it sent everything): a client whose
        end came before the server's first call gets no hello (withdrawn at
        the server, no_listener at the client), one whose end came before
        its hello never moves (withdrawn at both), one that gets to its hello
        after the server closed finds the server's socket gone and stays on
        kernel TCP (reason fabric_gone, or fabric), and one whose move came after the
        server's last read is never met by it: only the reasons are checked
        then."""
        summary = "\n".join(self.log("client")[-20:] + self.log("server")[-20:])
        client_fell = self.reasons("client")
        if late:
            # a client whose end came before the server's first call gets no hello
            assert set(self.reasons("server")) <= {REASON["withdrawn"]}, "fell back:\n" + summary
            # (its server's socket closed: fabric_gone, or fabric where no copy of it could be
            # asked what it is, in another process out of this one's ptrace reach)
            assert set(client_fell) <= {REASON["fabric_gone"], REASON["fabric"], REASON["no_listener"],
                                        REASON["withdrawn"]}, (
                "fell back:\n" + summary)
            return
        assert not self.reasons("server"), "fell back:\n" + summary
        assert not client_fell, "fell back:\n" + summary
        for side in ("client", "server"):
            got = self.accelerated(side)
            assert len(got) == conns, "%s: want %d on the fabric:\n%s" % (side, conns, summary)
            assert all(role == side and re.search(lanes, ln) for role, ln in got), (got, summary)


def ends_with(shunt, builds, tmp_path, **settings):
    return FabricEnds(shunt, builds, "shunt", tmp_path, **settings)


def start_server(nets, ends, family, kind="py", own_shm=True):
    """The echo server in namespace a (with a /dev/shm of its own): the
    process, its address and its port."""
    host = nets.addr("a", family)
    argv = ends.echo(kind) + ["server", "--host", host, "--port", "0"]
    srv = nets.start("a", (OWN_SHM if own_shm else []) + argv, env=ends.env("server"), proc_name="server")
    return srv, host, listening_port(srv)


LANES = {"default": (None, r"sysv|posix"), "tcp": ("tcp", r"^tcp")}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("lanes", sorted(LANES))
@pytest.mark.parametrize("workload,conns", [("bulk", 1), ("small", 3), ("halfclose", 5)])
def test_echo_on_the_fabric(fabric, nets, shunt, builds, tmp_path, family, lanes, workload, conns):  # noqa: F811
    setting, want = LANES[lanes]
    ends = ends_with(shunt, builds, tmp_path, **({"SHUNT_FABRIC_LANES": setting} if setting else {}))
    srv, host, port = start_server(nets, ends, family)
    r = nets.run("b", ends.echo() + client_args(port, workload, host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, workload, expect_mapped=True)
    check_server_log(srv, workload)
    ends.check_fabric(conns, want, late=workload == "halfclose")


ACCEL_CLIENT = r'''
import ctypes, socket, sys
lib = ctypes.CDLL(None)
lib.shunt_fd_path.restype = ctypes.c_char_p
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("PATH", lib.shunt_fd_path(s.fileno()).decode(), flush=True)
said = [lib.shunt_fd_accelerated(s.fileno())]
for i in range(4):
    msg = bytes([65 + i]) * 100
    s.sendall(msg)
    got = b""
    while len(got) < 100:
        got += s.recv(100 - len(got))
    assert got == msg, got
    said.append(lib.shunt_fd_accelerated(s.fileno()))
lib.shunt_fd_counter.restype = ctypes.c_longlong
assert lib.shunt_fd_counter(s.fileno(), b"bytes_out") == -1   # no channel's counters (it crashed)
print("SAID", *said, flush=True)
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_fd_accelerated_says_fabric(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """shunt_fd_path in the client says "fabric" at once (its hello awaited);
    shunt_fd_accelerated: 0 before anything was exchanged
    (the hello not taken off yet), 1 once both ends moved (the client at
    its hello, the server once the client's ring came: by the third echo)."""
    ends = ends_with(shunt, builds, tmp_path)
    srv, host, port = start_server(nets, ends, family)
    r = nets.run("b", ends.argv([PYTHON, "-c", ACCEL_CLIENT, host, str(port)]), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT, check=True)
    path, said = r.stdout.decode().splitlines()[-2:]
    assert path == "PATH fabric", path   # awaiting its hello: on the fabric's path already
    said = said.split()
    assert said[0] == "SAID" and said[1] == "0" and said[-1] == "1", said
    assert len(ends.accelerated("client")) == 1, ends.log("client")


@pytest.mark.parametrize("family", FAMILIES)
def test_stat_shows_fabric(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """A held connection on the fabric: `shunt stat --json` shows each end on
    path "fabric" (the client's from namespace b, the server's from inside
    the server's own mount namespace, whose /dev/shm holds its table), with
    each other's addresses, the engine, its lanes, the proven peer's pid and
    its host (this one); the text says the same."""
    ends = ends_with(shunt, builds, tmp_path)
    srv, host, port = start_server(nets, ends, family)
    held = nets.start("b", ends.argv([PYTHON, "-c", HOLD, host, port]), env=ends.env("client"), proc_name="held")
    local = held.wait_for(r"^HELD (.*)$").group(1)

    def mine(argv, pid):
        r = subprocess.run(argv + [fabric.bin, "stat", "--json"], capture_output=True, timeout=30, check=True)
        conns = json.loads(r.stdout)["connections"]
        return [c for c in conns if any(h["pid"] == pid for h in c["holders"])]

    (c,) = mine(["ip", "netns", "exec", nets.ns("b")], held.pid)
    assert c["role"] == "client" and c["path"] == "fabric" and c["peer"] == host_port(host, port), c
    (sv,) = mine(["nsenter", "-t", str(srv.pid), "-m", "-n"], srv.pid)
    assert sv["role"] == "server" and sv["path"] == "fabric" and sv["peer"] == local, sv
    # the engine, its lanes by transport, the proven peer's process and host
    assert c["fabric"] == {"engine": "ucx", "lanes": c["fabric"]["lanes"], "peer_pid": srv.pid,
                           "peer_host": "this"}, c
    assert sv["fabric"] == {"engine": "ucx", "lanes": sv["fabric"]["lanes"], "peer_pid": held.pid,
                            "peer_host": "this"}, sv
    assert re.fullmatch(r"(sysv|posix)(,(sysv|posix))*", c["fabric"]["lanes"]), c
    text = subprocess.run(["ip", "netns", "exec", nets.ns("b"), fabric.bin, "stat"], capture_output=True,
                          timeout=30, check=True).stdout.decode()
    assert re.search(r"^%d\s+client\s.*\sfabric\s.*fabric: ucx lanes %s, peer pid %d on host this$" % (
        c["id"], c["fabric"]["lanes"], srv.pid), text, re.M), text


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("lanes", sorted(LANES))
def test_forking_server_child_on_the_fabric(fabric, nets, shunt, builds, tmp_path, family, lanes):  # noqa: F811
    """static_peer's server accepts, forks a child per connection and closes
    its own copy without a call on it: the hello goes before the child's
    first byte, with the child's own engine, and every connection is on the
    fabric at both ends, its server end in the child (a process other than
    the one that accepted); every byte checked."""
    setting, want = LANES[lanes]
    ends = ends_with(shunt, builds, tmp_path, SHUNT_FABRIC_FORKED="1",
                     **({"SHUNT_FABRIC_LANES": setting} if setting else {}))
    srv, host, port = start_server(nets, ends, family, kind="c")
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    check_server_log(srv, "small")
    ends.check_fabric(3, want)
    servers = re.findall(r"^shunt\[(\d+)\] info: .*accelerated \(server, fabric", "\n".join(ends.log("server")), re.M)
    assert len(set(servers)) == 3 and str(srv.pid) not in servers, (servers, srv.pid)
    accepted = re.findall(r"^shunt\[(\d+)\] info: .*fabric: the hello goes before the first byte",
                          "\n".join(ends.log("server")), re.M)
    assert accepted == [str(srv.pid)] * 3, (accepted, srv.pid)
    assert not ends.left("server"), ends.log("server")


@pytest.mark.parametrize("family", FAMILIES)
def test_forking_server_children_stay_tcp_by_default(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """With SHUNT_FABRIC_FORKED at its default (0), static_peer's children,
    which have no engine of their own, send no hello: their connections are
    kernel TCP (fabric_forked at the server, no_listener at the client), bytes
    exact (a child's engine costs about 12 ms, more than a short connection
    gains: benchmarks.md)."""
    ends = ends_with(shunt, builds, tmp_path)
    srv, host, port = start_server(nets, ends, family, kind="c")
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    check_server_log(srv, "small")
    assert ends.reasons("server") == Counter({REASON["fabric_forked"]: 3}), ends.log("server")
    assert ends.reasons("client") == Counter({REASON["no_listener"]: 3}), ends.log("client")
    assert not ends.accelerated("server") and not ends.accelerated("client")


FORKING_SERVER = r'''
import os, signal, socket, sys, time
host, how = sys.argv[1], sys.argv[2]
ls = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
ls.bind((host, 0))
ls.listen(16)
print("LISTENING %d" % ls.getsockname()[1], flush=True)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        ls.close()
        if how == "exec":   # inetd's way: the socket is the new program's stdin and stdout
            os.dup2(c.fileno(), 0)
            os.dup2(c.fileno(), 1)
            c.close()
            os.execvp("cat", ["cat"])
        while True:
            data = c.recv(65536)
            if not data:
                break
            c.sendall(data)
        c.close()
        os._exit(0)
    time.sleep({"late": 0.03, "keep": 0.5}.get(how, 0))   # the parent's copy, kept a while
    c.close()
'''


def forking_server(nets, ends, family, how):
    host = nets.addr("a", family)
    srv = nets.start("a", OWN_SHM + ends.argv([PYTHON, "-c", FORKING_SERVER, host, how]), env=ends.env("server"),
                     proc_name="server")
    return srv, host, listening_port(srv)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("how", ["late", "keep", "exec"])
def test_forking_server_who_says_hello(fabric, nets, shunt, builds, tmp_path, family, how):  # noqa: F811
    """A forking server whose parent holds its copy of the accepted socket
    a while (fabric_pending.h): 30 ms (late), the child's first byte waits
    for the parent to close it and the connection is on the fabric; 500 ms
    (keep), longer than a child waits, no hello goes and every connection
    is kernel TCP at both ends (reason fabric); the child makes the socket
    the stdin and stdout of `cat` and execs it (exec, inetd's way): no hello
    goes (the new image cannot take it over), kernel TCP.  Every byte
    checked by the client, echoed by the child or by cat."""
    ends = ends_with(shunt, builds, tmp_path, SHUNT_FABRIC_FORKED="1")
    srv, host, port = forking_server(nets, ends, family, how)
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    server = "\n".join(ends.log("server"))
    if how == "late":
        ends.check_fabric(3, LANES["default"][1])
        return
    assert not ends.accelerated("server") and not ends.accelerated("client"), server
    said = re.findall(r"fabric: no hello: another process held the socket too$", server, re.M)
    before_exec = re.findall(r"fabric: no hello, before exec$", server, re.M)
    assert (len(said), len(before_exec)) == ((3, 0) if how == "keep" else (0, 3)), server
    want = REASON["fabric_shared"] if how == "keep" else REASON["fabric_left"]
    assert ends.reasons("server") == Counter({want: 3}), server


@pytest.mark.parametrize("family", FAMILIES)
def test_server_without_shunt(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """The client under shunt marks its socket and awaits a hello; the
    server, without shunt, sends none: the client's first bytes are the
    program's, exact, and its connections are kernel TCP with today's
    reason (no_listener)."""
    ends = ends_with(shunt, builds, tmp_path)
    plain = Ends(shunt, builds, "plain", tmp_path)
    srv, host, port = start_server(nets, plain, family)
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    check_server_log(srv, "small")
    assert ends.reasons("client") == Counter({REASON["no_listener"]: 3}), ends.log("client")


@pytest.mark.parametrize("family", FAMILIES)
def test_redis_on_the_fabric(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """redis-server (an epoll loop) in a namespace with a /dev/shm of its own,
    redis-cli and redis-benchmark (an event loop too) in b, all under shunt:
    every connection accelerated on the fabric at both ends, epoll carried; a
    3 MiB random value set and read back exact (sha256), then a short
    benchmark."""
    need_tool("redis-server", "redis-cli", "redis-benchmark", package="redis-server, redis-tools")
    ends = ends_with(shunt, builds, tmp_path)
    host = nets.addr("a", family)
    srv = nets.start("a", OWN_SHM + ends.argv(["redis-server", "--bind", host, "--port", 6379, "--save", "",
                                               "--appendonly", "no", "--protected-mode", "no", "--dir", tmp_path]),
                     env=ends.env("server"), proc_name="redis")
    cli = ["redis-cli", "-h", host, "-p", "6379"]
    deadline = time.monotonic() + 20
    while nets.run("b", cli + ["ping"], timeout=10).stdout != b"PONG\n":   # without shunt: kernel TCP
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.describe()
        time.sleep(0.1)
    blob = os.urandom(3 * MIB)
    r = nets.run("b", ends.argv(cli + ["-x", "set", "blob"]), input=blob, env=ends.env("client"), timeout=60)
    assert r.stdout == b"OK\n", r
    r = nets.run("b", ends.argv(cli + ["--raw", "get", "blob"]), env=ends.env("client"), timeout=60)
    assert r.returncode == 0 and r.stdout.endswith(b"\n"), r.stderr
    assert hashlib.sha256(r.stdout[:-1]).hexdigest() == hashlib.sha256(blob).hexdigest(), len(r.stdout)
    r = nets.run("b", ends.argv(["redis-benchmark", "-h", host, "-p", "6379", "-n", "2000", "-c", "4", "-t",
                                 "set,get", "-d", "1000", "-q"]), env=ends.env("client"), timeout=60)
    assert r.returncode == 0 and r.stdout.count(b"requests per second") == 2, r
    server = "\n".join(ends.log("server"))
    hellos = len(re.findall(r"fabric: hello sent to a shunt client", server))
    # redis-cli twice and the benchmark's 4 clients at least (its later connections may go the
    # short-connection way: kernel TCP by design, no_listener / no_offer)
    assert hellos >= 2 + 4, server
    assert not ends.left("server") and not ends.left("client"), server
    assert set(ends.reasons("server")) <= {REASON["no_offer"]}, server   # the plain pings, short ones
    assert set(ends.reasons("client")) <= {REASON["no_listener"], REASON["short"]}, ends.log("client")
    # epoll carried: redis-cli's two and the benchmark's four at least on the fabric at both ends (a
    # connection closed right after its hello, the benchmark's first, never moves)
    assert len(ends.accelerated("server")) >= 6, server
    assert len(ends.accelerated("client")) >= 6, ends.log("client")
    assert "stream broke" not in server + "\n".join(ends.log("client")), server


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
NOBODY = (65534, 65534)


@pytest.fixture
def nobody_dir():
    """A directory nobody may use (pytest's own are root's alone), removed at the end."""
    d = Path(tempfile.mkdtemp(prefix="shunt-fabric-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_postgres_backends_on_the_fabric(fabric, nets, shunt, builds, nobody_dir, family):  # noqa: F811
    """PostgreSQL (its postmaster accepts and forks a backend per connection,
    then closes its copy) in a namespace with a /dev/shm of its own, psql and
    pgbench in b, all under shunt as one user (nobody: PostgreSQL refuses
    root, and the proof wants the same user at both ends): every backend's
    connection on the fabric at both ends, its server end in the backend;
    6.4 MB of rows read back exact; a short pgbench run with 4 clients."""
    from corpus import pg_bin
    need_tool("psql", package="postgresql-client")
    need_tool("setpriv", package="util-linux")
    ends = ends_with(shunt, builds, nobody_dir, SHUNT_FABRIC_FORKED="1")
    for side in ("server", "client"):
        ends.env(side)
        os.chown(nobody_dir / ("log-" + side), *NOBODY)
    data, sock = nobody_dir / "pgdata", nobody_dir / "pgsock"
    for d in (data, sock):
        d.mkdir()
        os.chown(d, *NOBODY)
    r = subprocess.run(AS_NOBODY + [pg_bin("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync",
                                    "-E", "UTF8", "--locale=C"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    with open(data / "pg_hba.conf", "a") as f:   # the client is in namespace b, not on loopback
        f.write("host all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n")
    host = nets.addr("a", family)
    srv = nets.start("a", OWN_SHM + AS_NOBODY + ends.argv([
        pg_bin("postgres"), "-D", data, "-k", sock, "-h", host, "-p", 5432, "-c", "fsync=off",
        "-c", "synchronous_commit=off", "-c", "max_connections=20", "-c", "shared_buffers=16MB"]),
        env=ends.env("server"), proc_name="postgres")
    deadline = time.monotonic() + 60
    while nets.run("b", [pg_bin("pg_isready"), "-h", host, "-p", "5432"], timeout=10).returncode != 0:
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.describe()
        time.sleep(0.2)

    def client(argv, **kw):
        r = nets.run("b", AS_NOBODY + ends.argv(argv), env=ends.env("client"), timeout=120, **kw)
        assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
        return r.stdout

    psql = ["psql", "-X", "-q", "-A", "-t", "-h", host, "-p", "5432", "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
    client(psql + ["-c", "create table t (x text); insert into t select repeat(md5(i::text), 100) "
                         "from generate_series(1, 2000) i"])
    got = client(psql + ["-c", "select x from t order by x"])
    want = "".join(x + "\n" for x in sorted(hashlib.md5(str(i).encode()).hexdigest() * 100
                                            for i in range(1, 2001))).encode()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(want).hexdigest(), len(got)
    pgbench = [pg_bin("pgbench"), "-h", host, "-p", "5432", "-U", "postgres"]
    client(pgbench + ["-i", "-q", "-s", "1", "postgres"])
    out = client(pgbench + ["-c", "4", "-j", "2", "-t", "200", "-S", "postgres"])
    assert b"number of transactions actually processed: 800/800" in out, out
    server = "\n".join(ends.log("server"))
    backends = re.findall(r"^shunt\[(\d+)\] info: .*accelerated \(server, fabric", server, re.M)
    # psql twice, pgbench -i once or more, the run's 4 clients (and its first connection)
    assert len(backends) >= 7 and str(srv.pid) not in backends, (backends, srv.pid, server[-3000:])
    assert len(set(backends)) == len(backends), backends   # a backend per connection
    assert len(ends.accelerated("client")) >= 7, ends.log("client")
    assert not ends.left("server") and not ends.left("client"), server
    assert "stream broke" not in server + "\n".join(ends.log("client")), server


def script_pair(nets, ends, script, host):
    """SCRIPT's server in namespace a (a /dev/shm of its own), its client in
    b, both under shunt: the server's process and the client's finished run."""
    srv = nets.start("a", OWN_SHM + ends.argv([PYTHON, "-c", script, "server", host, 0]), env=ends.env("server"),
                     proc_name="server")
    port = int(srv.wait_for(r"^LISTENING (\d+)$", timeout=30).group(1))
    r = nets.run("b", ends.argv([PYTHON, "-c", script, "client", host, port]), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT, check=True)
    return srv, r


ET_PEER = r'''
import select, socket, sys, hashlib
ET = select.EPOLLIN | select.EPOLLET
def drain(c, ep, into):
    while True:                      # edge-triggered: read until EAGAIN
        try:
            d = c.recv(65536)
        except BlockingIOError:
            return True
        if not d:
            return False
        into.append(d)
def send_all(c, data):
    view = memoryview(data)
    while view:
        try:
            view = view[c.send(view):]
        except BlockingIOError:
            select.select([], [c], [], 10)
role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
ep = select.epoll()
if role == "server":
    l = socket.socket(fam, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, 0)); l.listen(1)
    print("LISTENING", l.getsockname()[1], flush=True)
    c, _ = l.accept(); c.setblocking(False)
    ep.register(c.fileno(), ET)
    total = 0
    while True:
        ep.poll(20)
        got = []
        open_ = drain(c, ep, got)
        for d in got:
            send_all(c, d); total += len(d)
        if not open_:
            break
    c.shutdown(socket.SHUT_WR)
    print("SERVER", total, flush=True)
else:
    c = socket.create_connection((host, port)); c.setblocking(False)
    ep.register(c.fileno(), ET)
    data = bytes((i * 7 + i // 4096) % 251 for i in range(1 << 20))
    back = []
    send_all(c, data[:4096]); sent = 4096
    while not back:                  # its first answer, the hello before it: this end moves
        ep.poll(20)
        drain(c, ep, back)
    while sent < len(data):
        n = min(4096, len(data) - sent)
        send_all(c, data[sent:sent + n]); sent += n
        drain(c, ep, back)
    c.shutdown(socket.SHUT_WR)
    while True:
        ep.poll(20)
        if not drain(c, ep, back):
            break
    got = b"".join(back)
    print("CLIENT", len(got), hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), flush=True)
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_epoll_edge_triggered(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """Both ends in edge-triggered epoll loops that read until EAGAIN: 1 MiB
    echoed exact, then EOF both ways, the connection on the fabric at both
    ends (an edge lost would hang the loop until its 20 s timeout).  The
    client waits for its first answer before the rest: one that sent its
    1 MiB and its end before any answer came (a loaded machine) never moves,
    by design (test_client_shut_before_its_hello)."""
    ends = ends_with(shunt, builds, tmp_path)
    host = nets.addr("a", family)
    srv, r = script_pair(nets, ends, ET_PEER, host)
    assert r.stdout.decode().split() == ["CLIENT", str(1 << 20), "True"], r.stdout
    srv.wait_for(r"^SERVER %d$" % (1 << 20), timeout=30)
    assert len(ends.accelerated("client")) == 1 and len(ends.accelerated("server")) == 1, ends.log("server")
    assert not ends.reasons("client") and not ends.reasons("server"), ends.log("client")


LATE_PEER = r'''
import socket, sys, time, hashlib
role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
data = bytes((i * 13 + i // 1000) % 253 for i in range(1 << 20))
def recv_n(c, n):
    got = b""
    while len(got) < n:
        d = c.recv(n - len(got))
        if not d:
            break
        got += d
    return got
if role == "server":
    l = socket.socket(fam, socket.SOCK_STREAM)
    l.bind((host, 0)); l.listen(1)
    print("LISTENING", l.getsockname()[1], flush=True)
    c, _ = l.accept()
    assert recv_n(c, 5) == b"hello"
    c.sendall(b"world")
    time.sleep(6)                      # busy elsewhere: no call into shunt, its engine not driven
    got = recv_n(c, len(data))
    c.sendall(hashlib.sha256(got).hexdigest().encode())
    print("SERVER", len(got), flush=True)
else:
    c = socket.create_connection((host, port), timeout=30)
    c.sendall(b"hello")
    assert recv_n(c, 5) == b"world"    # the hello taken off here: the client attaches
    t = time.monotonic()
    c.sendall(data)                    # while the server does not drive its engine
    digest = recv_n(c, 64).decode()
    print("CLIENT", digest == hashlib.sha256(data).hexdigest(), flush=True)
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_server_busy_elsewhere(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """The client attaches after its first answer while the server sleeps
    6 s without a call into shunt (its engine driven only by UCX's own
    thread): on the default (shared-memory) lanes the client's move and its
    1 MiB go through, every byte right, no reset.  (Over UCX's TCP lanes the
    move's flush needs the server's progress: such a client is reset after
    the engine's 5 s bound; architecture.md, the limits.)"""
    ends = ends_with(shunt, builds, tmp_path)
    host = nets.addr("a", family)
    srv, r = script_pair(nets, ends, LATE_PEER, host)
    assert r.stdout.decode().split() == ["CLIENT", "True"], r.stdout
    srv.wait_for(r"^SERVER %d$" % (1 << 20), timeout=30)
    logs = "\n".join(ends.log("client") + ends.log("server"))
    assert "stream broke" not in logs and not ends.reasons("client") and not ends.reasons("server"), logs


SHUT_FIRST_PEER = r'''
import socket, sys, time, hashlib
role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
data = bytes((i * 11 + i // 999) % 241 for i in range(8000))   # (all in its socket with the link down)
def recv_all(c):
    got = b""
    while True:
        d = c.recv(65536)
        if not d:
            return got
        got += d
if role == "server":
    l = socket.socket(fam, socket.SOCK_STREAM)
    l.bind((host, 0)); l.listen(1)
    print("LISTENING", l.getsockname()[1], flush=True)
    c, _ = l.accept()
    first = c.recv(1)
    print("FIRST", flush=True)         # the link goes down now
    time.sleep(1.0)
    c.sendall(first)                   # its first byte, the hello before it: held by the link
    got = first + recv_all(c)
    time.sleep(2)                      # its socket open while the client checks its hello's proof
    c.sendall(got[1:])
    c.shutdown(socket.SHUT_WR)
    print("SERVER", len(got), flush=True)
    c.close()
else:
    c = socket.create_connection((host, port), timeout=30)
    c.sendall(data[:1])
    time.sleep(2.0)                    # the link is down: nothing of the server's came
    c.sendall(data[1:])
    c.shutdown(socket.SHUT_WR)         # its end before its hello
    back = recv_all(c)                 # the hello first, once the link is up
    print("CLIENT", len(back), hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest(), flush=True)
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_client_shut_before_its_hello(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """The server's hello goes (before its first byte) while the client,
    which has not seen it yet, sends everything and shuts down its writing
    side; the link is down meanwhile, so each end's bytes reach the other
    only after both did so.  The client never moves (its direction is
    kernel TCP's for good), every byte is echoed exact, and both ends say
    why they are kernel TCP (withdrawn, by design), where both used to stay
    on the fabric's books with no reason and neither moved (seen under load
    in test_epoll_edge_triggered, whose client sent its 1 MiB and its end
    before its first answer came)."""
    ends = ends_with(shunt, builds, tmp_path)
    srv = nets.start("a", OWN_SHM + ends.argv([PYTHON, "-c", SHUT_FIRST_PEER, "server", nets.addr("a", family), 0]),
                     env=ends.env("server"), proc_name="server")
    port = int(srv.wait_for(r"^LISTENING (\d+)$", timeout=30).group(1))
    client = nets.start("b", ends.argv([PYTHON, "-c", SHUT_FIRST_PEER, "client", nets.addr("a", family), port]),
                        env=ends.env("client"), proc_name="client")
    srv.wait_for(r"^FIRST$", timeout=30)
    with nets.outage("a", "b"):
        time.sleep(3)
    assert client.wait_for(r"^CLIENT .*$", timeout=60).group(0).split() == ["CLIENT", "8000", "True"]
    srv.wait_for(r"^SERVER 8000$", timeout=30)
    assert "hello sent" in "\n".join(ends.log("server")), ends.log("server")
    assert not ends.accelerated("client") and not ends.accelerated("server"), ends.log("client")
    assert ends.reasons("client") == Counter({REASON["withdrawn"]: 1}), ends.log("client")
    assert ends.reasons("server") == Counter({REASON["withdrawn"]: 1}), ends.log("server")


def paced(nets, ends, host, port):
    return nets.start("b", ends.argv([PYTHON, PROGRAMS / "paced_client.py", host, port, PACED, 65536, 2, 20]),
                      env=ends.env("client"), proc_name="paced")


@pytest.mark.parametrize("family", FAMILIES)
def test_link_down_mid_transfer(fabric, nets, shunt, builds, tmp_path, family):  # noqa: F811
    """The veth taken down for 2 s once 4 MiB went over the fabric, then up
    again: the transfer completes, every byte right (kernel TCP's answer,
    test_netns.py's reference); the engine's shared-memory lanes do not use
    the link, so the bytes may well go on meanwhile, and nothing mistakes
    the TCP companion's stall for the peer's end."""
    ends = ends_with(shunt, builds, tmp_path)
    srv, host, port = start_server(nets, ends, family)
    client = paced(nets, ends, host, port)
    client.wait_for(r"^SENT %d$" % (4 * MIB), timeout=30)
    with nets.outage("a", "b"):
        time.sleep(2)
    res = result_of(client)
    assert res["end"] == "ok" and res["sent"] == res["received"] == PACED, res
    assert res["sha_sent"] == res["sha_received"], res
    assert srv.wait_lines(r"^CONN ", 1) == ["CONN 1 RECV %d OK" % PACED], srv.describe()
    assert len(ends.accelerated("client")) == 1 and not ends.reasons("client"), ends.log("client")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("victim", ["server", "client"])
def test_peer_killed_mid_transfer(fabric, nets, shunt, builds, tmp_path, family, victim):  # noqa: F811
    """kill -9 of one end once 4 MiB went over the fabric: the other ends as
    kernel TCP's would (an exact prefix, then the end), never a hang, and a
    server that lost its client takes the next connection on the fabric."""
    ends = ends_with(shunt, builds, tmp_path)
    srv, host, port = start_server(nets, ends, family)
    client = paced(nets, ends, host, port)
    client.wait_for(r"^SENT %d$" % (4 * MIB), timeout=30)
    assert len(ends.accelerated("client")) == 1, ends.log("client")
    if victim == "server":
        os.kill(srv.pid, signal.SIGKILL)
        res = result_of(client)
        assert res["end"] in ("ECONNRESET", "EPIPE", "eof"), res
        assert 0 < res["received"] < res["sent"] < PACED, res
        return
    os.kill(client.pid, signal.SIGKILL)
    (line,) = srv.wait_lines(r"^CONN 1 ", 1, timeout=30)
    assert "BAD" not in line, line
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client2"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    assert len(ACCEL.findall("\n".join(ends.log("client2")))) == 3, ends.log("client2")
