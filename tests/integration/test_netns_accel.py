"""Connections between network namespaces accelerated with shunt's own rings
when the host is fabric-enabled (issue 19 item 3; docs/architecture.md,
"Between namespaces and hosts").

netns.py's namespaces joined by veth pairs, both ends under `build/shunt run`
(each side's log in a folder of its own), `shunt fabric enable` for the test and
`shunt fabric disable` after it, always. Checked, over IPv4 and IPv6:

- echo across namespaces: the connection is accelerated at both ends (both logs
  name the same channel, "across namespaces"), every byte echoed checked (8 MiB
  each way); a shunt'd decoy listener on the same port in the client's own
  namespace gets nothing; `shunt stat --json` shows a held connection on `shm` in
  each namespace;
- static_peer's forking server, three request/answer connections, each
  accelerated and checked;
- redis-server and redis-cli / redis-benchmark across namespaces: accelerated,
  a 3 MiB random value back with its sha256;
- a client without shunt: kernel TCP, `no_offer` at the server; fabric disabled:
  today's behaviour exactly, `not_loopback` / `no_offer`; a server whose
  namespace has a /dev/shm of its own (a container's) with SHUNT_FABRIC=0: kernel
  TCP, `no_listener` at the client, `no_offer` at the server (with the engine on,
  test_fabric_conn.py); the process mark's value never reaches the program, and
  a SYN with it gets the server's hello;
- a program that sets TCP_SAVE_SYN on its listener reads its own saved SYNs and
  reads back its own value before and after a connection (reason `saved_syn`);
  one that does not set it finds none and reads 0, as without shunt;
- two client namespaces with identical addresses (b1, b2) connecting at once to
  two server namespaces with identical addresses (a1, a2): each connection pairs
  with its own server (channels per pair), every byte checked;
- a listener shunt saved SYNs on, passed by exec to a program without shunt:
  TCP_SAVE_SYN reads 0 there and the next connection has no saved SYN, as when
  nothing ran under shunt (the reference);
- kill -9 of the server, or of the client, mid-transfer: the other end ends as
  kernel TCP's does, after an exact prefix, nothing hangs.

Needs root, ip (iproute2), bpf: missing under CI is a failure (netns.py).
"""

import json
import os
import re
import signal
import subprocess
from collections import Counter

import pytest

from echopeers import CLIENT_TIMEOUT, check_client, check_server_log, client_args, listening_port
from netns import Namespaces, need_namespaces
from shunttest import PROGRAMS, PYTHON, missing
from test_netns import HOLD, REASON, Ends, ends_of, host_port, no_connection, redis_session, result_of, start_echo

FAMILIES = [4, 6]
MIB = 1 << 20
ACCEL_CLIENT = re.compile(r"accelerated \(client, channel (\S+?), across namespaces\)")
ACCEL_SERVER = re.compile(r"accelerated \(server, channel (\S+?), \d+ bytes of TCP prefix, across namespaces\)")


def fabric_cmd(shunt, what):
    return subprocess.run([shunt.bin, "fabric", what], capture_output=True, text=True, timeout=30)


@pytest.fixture
def fabric(shunt):
    """`shunt fabric enable` for the test; disabled after it, whatever happened."""
    need_namespaces()
    r = fabric_cmd(shunt, "enable")
    try:
        if r.returncode != 0:
            missing("shunt fabric enable failed: %s%s" % (r.stdout, r.stderr))
        yield shunt
    finally:
        d = fabric_cmd(shunt, "disable")
        assert d.returncode == 0, d.stderr
        assert not os.path.exists("/run/shunt/fabric")


@pytest.fixture
def nets(tmp_path):
    need_namespaces()
    with Namespaces(["a", "b"], links=[("a", "b")], logdir=tmp_path) as n:
        yield n


class CrossEnds(Ends):
    def pairs(self, client_side="client", server_side="server"):
        """Channels accelerated across namespaces: (client's, server's)."""
        c = set(ACCEL_CLIENT.findall("\n".join(self.log(client_side))))
        s = set(ACCEL_SERVER.findall("\n".join(self.log(server_side))))
        return c, s

    def reasons(self, side):
        return Counter(re.findall(r"kernel TCP: (.*)$", "\n".join(self.log(side)), re.M))

    def check_cross(self, conns, client_side="client", server_side="server"):
        """CONNS connections whose both ends logged the same channel across
        namespaces, and no fallback at either end."""
        c, s = self.pairs(client_side, server_side)
        summary = "\n".join(self.log(client_side)[-20:] + self.log(server_side)[-20:])
        assert not self.reasons(client_side) and not self.reasons(server_side), "fell back:\n" + summary
        assert len(c) == len(s) == len(c & s) == conns, "want %d pairs, got %s %s:\n%s" % (conns, c, s, summary)
        return c


@pytest.fixture
def ends(shunt, builds, tmp_path):
    return CrossEnds(shunt, builds, "shunt", tmp_path)


# ------------------------------------------------------------------ accelerated

@pytest.mark.parametrize("family", FAMILIES)
def test_echo_accelerated(fabric, nets, ends, family):
    """Server in a, client in b: 8 MiB each way through the ring, checked;
    the decoy in b on the same port gets nothing."""
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host)
    decoy, _ = start_echo(nets, ends, "b", "::", port, side="decoy")
    r = nets.run("b", ends.echo() + client_args(port, "bulk", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=True)
    check_server_log(srv, "bulk")
    no_connection(decoy)
    ends.check_cross(1)
    assert not ACCEL_SERVER.search("\n".join(ends.log("decoy")))


@pytest.mark.parametrize("family", FAMILIES)
def test_stat_shows_shm(fabric, nets, ends, family):
    """A held connection: `shunt stat --json` in each namespace shows its end
    on shm, the client's and the server's with each other's addresses, each
    paired through the host's registry with the other as its peer, the same
    channel and its counters; the text says shm+host."""
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host)
    held = nets.start("b", ends.argv([PYTHON, "-c", HOLD, host, port]), env=ends.env("client"), proc_name="held")
    local = held.wait_for(r"^HELD (.*)$").group(1)

    def mine(name, pid):
        r = nets.run(name, [fabric.bin, "stat", "--json"], timeout=30, check=True)
        conns = json.loads(r.stdout)["connections"]
        return [c for c in conns if any(h["pid"] == pid for h in c["holders"])]

    (c,) = mine("b", held.pid)
    assert c["role"] == "client" and c["path"] == "shm" and c["peer"] == host_port(host, port), c
    (s,) = [x for x in mine("a", srv.pid) if x["role"] == "server"]
    assert s["path"] == "shm" and s["local"] == host_port(host, port) and s["peer"] == local, s
    # paired through the host's registry: each end's channel, peer and counters
    for end, peer in ((c, s), (s, c)):
        assert end.get("pairing") == "host" and end["peer_id"] == peer["id"], end
        assert end["channel"] == peer["channel"] and end["counters"]["source"] == "channel", end
    text = nets.run("b", [fabric.bin, "stat"], timeout=30, check=True).stdout.decode()
    assert re.search(r"^%d\s+client\s.*\sshm\+host\s" % c["id"], text, re.M), text
    ends.check_cross(1, client_side="client")


@pytest.mark.parametrize("family", FAMILIES)
def test_forking_server(fabric, nets, ends, family):
    """static_peer's server forks a child per connection: three pingpong
    connections from b (each waits for its answers, so the server accepts
    before the client could withdraw), each accelerated and checked."""
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host, kind="c")
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    check_server_log(srv, "small")
    ends.check_cross(3)


@pytest.mark.parametrize("family", FAMILIES)
def test_redis(fabric, nets, ends, family, tmp_path):
    """redis-server in a, redis-cli and redis-benchmark in b, all under shunt:
    accelerated, and a 3 MiB random value comes back whole."""
    redis_session(nets, ends, "a", "b", nets.addr("a", family), tmp_path)
    c, s = ends.pairs()
    # redis-cli twice, and the benchmark's 4 clients (and its config query) at least
    assert len(c & s) >= 6, (len(c), len(s), "\n".join(ends.log("server")[-20:]))
    assert not ends.reasons("client"), ends.reasons("client")
    # the pings were plain clients: no_offer, nothing else
    assert set(ends.reasons("server")) <= {REASON["no_offer"]}, ends.reasons("server")


# ------------------------------------------------------------------ not accelerated

@pytest.mark.parametrize("family", FAMILIES)
def test_client_without_shunt(fabric, nets, ends, family):
    """Fabric on, the client not under shunt: kernel TCP, bytes exact,
    no_offer at the server."""
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host)
    plain = Ends(ends.shunt, ends.builds, "plain", ends.dir)
    r = nets.run("b", plain.echo() + client_args(port, "bulk", host=host), env=plain.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=False)
    check_server_log(srv, "bulk")
    assert ends.reasons("server") == Counter({REASON["no_offer"]: 1}), ends.log("server")
    assert not ends.pairs()[1]


@pytest.mark.parametrize("family", FAMILIES)
def test_fabric_disabled_is_today(nets, ends, shunt, family):
    """Fabric off (disabled first, whatever it was): both ends under shunt,
    kernel TCP with not_loopback / no_offer, as before this change."""
    need_namespaces()
    assert fabric_cmd(shunt, "disable").returncode == 0
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host)
    r = nets.run("b", ends.echo() + client_args(port, "bulk", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=True)
    check_server_log(srv, "bulk")
    ends.check_fell_back(1)
    assert "offered to other namespaces" not in "\n".join(ends.log("server"))


def server_with_own_shm(nets, ends, family):
    """The echo server in namespace a with a /dev/shm of its own (a
    container's tmpfs): (its address, the process, its port)."""
    host = nets.addr("a", family)
    own_shm = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o mode=1777 none /dev/shm && exec "$@"', "sh"]
    srv = nets.start("a", own_shm + ends.echo() + ["server", "--host", host, "--port", "0"], env=ends.env("server"),
                     proc_name="server")
    return host, srv, listening_port(srv)


@pytest.mark.parametrize("family", FAMILIES)
def test_private_dev_shm_falls_back(fabric, nets, ends_of, family):
    """Fabric enabled on the host, both ends under shunt with SHUNT_FABRIC=0
    (no engine), and the server's namespace has a /dev/shm of its own (a
    container's tmpfs): the registries are not shared, so nothing pairs:
    kernel TCP, bytes exact, no_listener at the client (nobody it can see
    lists that address) and no_offer at the server: without the engine the
    client does not mark its socket (only a process that takes a hello off
    may say it runs shunt).  With the engine on, the same pair rides it
    (test_fabric_conn.py)."""
    ends = ends_of("shunt", SHUNT_FABRIC="0")
    ends.__class__ = CrossEnds
    host, srv, port = server_with_own_shm(nets, ends, family)
    r = nets.run("b", ends.echo() + client_args(port, "bulk", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=True)
    check_server_log(srv, "bulk")
    assert ends.reasons("client") == Counter({REASON["no_listener"]: 1}), ends.log("client")
    assert ends.reasons("server") == Counter({REASON["no_offer"]: 1}), ends.log("server")
    assert ends.pairs() == (set(), set())
    # the server listed its listener, in its own /dev/shm only
    assert "offered to other namespaces (" in "\n".join(ends.log("server"))


def hellos(ends):
    """Hellos the server sent (each to a SYN whose flag says its client runs shunt)."""
    return len(re.findall(r"fabric: hello sent to a shunt client", "\n".join(ends.log("server"))))


LOWAT_CLIENT = r'''
import socket, sys
TCP_NOTSENT_LOWAT = 25
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
for own in (0, 12345):
    s = socket.socket(fam, socket.SOCK_STREAM)
    if own:
        s.setsockopt(6, TCP_NOTSENT_LOWAT, own)
    s.connect((sys.argv[1], int(sys.argv[2])))
    s.sendall(b"lowat")
    assert s.recv(5) == b"lowat"
    print("LOWAT %d %d" % (own, s.getsockopt(6, TCP_NOTSENT_LOWAT)), flush=True)
    s.close()
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_process_mark_is_the_programs_never(fabric, nets, ends, family):
    """A client under shunt connecting where no listener of this host's
    /dev/shm is listed marks its socket as a shunt process's (a
    TCP_NOTSENT_LOWAT only shunt uses, consumed by fabric's program at
    connect): the program reads TCP_NOTSENT_LOWAT 0 after connect, as
    without shunt, and one that set its own value (12345) reads it back,
    and that socket goes unmarked.  The server (a container with its own
    /dev/shm) sees the first SYN flagged (it sends its hello, which the
    client takes off) and the second not (no_offer)."""
    host, _, port = server_with_own_shm(nets, ends, family)
    r = nets.run("b", ends.argv([PYTHON, "-c", LOWAT_CLIENT, host, str(port)]), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT, check=True)
    assert r.stdout.decode().split() == ["LOWAT", "0", "0", "LOWAT", "12345", "12345"], r.stdout
    assert ends.reasons("server") == Counter({REASON["no_offer"]: 1}), ends.log("server")
    assert hellos(ends) == 1, ends.log("server")
    assert ends.reasons("client") == Counter({REASON["no_listener"]: 1}), ends.log("client")


UNREACHABLE_CLIENT = r'''
import errno, socket, sys
TCP_NOTSENT_LOWAT = 25
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
nowhere = "fd99::1" if fam == socket.AF_INET6 else "10.99.0.1"   # no route in this namespace
for blocking in (True, False):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setblocking(blocking)
    e = s.connect_ex((nowhere, 80))
    assert e in (errno.ENETUNREACH, errno.EHOSTUNREACH), errno.errorcode.get(e, e)
    print("FAILED %d" % s.getsockopt(6, TCP_NOTSENT_LOWAT), flush=True)
    s.setblocking(True)
    s.connect((sys.argv[1], int(sys.argv[2])))   # the same socket, again: marked again
    s.sendall(b"again")
    assert s.recv(5) == b"again"
    print("AGAIN %d" % s.getsockopt(6, TCP_NOTSENT_LOWAT), flush=True)
    s.close()
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_mark_taken_off_when_connect_fails_at_once(fabric, nets, ends, family):
    """A marked connect that fails before a SYN could go (no route: the
    fabric program never saw it) takes the mark off again: the program
    reads TCP_NOTSENT_LOWAT 0, as without shunt, blocking or not; the same
    socket's next connect is marked and consumed as any (0 again, and the
    server sees the flag: it sends its hello, which the client takes off)."""
    host, _, port = server_with_own_shm(nets, ends, family)
    r = nets.run("b", ends.argv([PYTHON, "-c", UNREACHABLE_CLIENT, host, str(port)]), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT, check=True)
    assert r.stdout.decode().split() == ["FAILED", "0", "AGAIN", "0"] * 2, r.stdout
    assert hellos(ends) == 2, ends.log("server")
    assert not ends.reasons("server"), ends.log("server")


# ------------------------------------------------------------------ the program's own saved SYNs

SAVE_SYN_SERVER = r'''
import socket, struct, sys
TCP_SAVE_SYN, TCP_SAVED_SYN = 27, 28
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
def listener(own):
    l = socket.socket(fam, socket.SOCK_STREAM)
    if own:
        l.setsockopt(6, TCP_SAVE_SYN, 1)
    l.bind((sys.argv[1], 0))
    l.listen(8)
    return l
mine, theirs = listener(True), listener(False)
print("PORTS %d %d" % (mine.getsockname()[1], theirs.getsockname()[1]), flush=True)
def one(l, want):
    assert l.getsockopt(6, TCP_SAVE_SYN) == want, ("before", l.getsockopt(6, TCP_SAVE_SYN), want)
    c, _ = l.accept()
    syn = c.getsockopt(6, TCP_SAVED_SYN, 1024)
    assert l.getsockopt(6, TCP_SAVE_SYN) == want, ("after", l.getsockopt(6, TCP_SAVE_SYN), want)
    assert c.getsockopt(6, TCP_SAVE_SYN) == want, ("accepted", c.getsockopt(6, TCP_SAVE_SYN), want)
    data = c.recv(5)
    c.sendall(data)
    c.close()
    print("SYN %d %s" % (len(syn), data.decode()), flush=True)
one(mine, 1)
one(theirs, 0)
theirs.setsockopt(6, TCP_SAVE_SYN, 0)   # the program says 0: shunt's stays, the program reads 0
one(theirs, 0)
theirs.setsockopt(6, TCP_SAVE_SYN, 1)   # now the program wants them: its own from here on
one(theirs, 1)
print("DONE", flush=True)
'''

SAVE_SYN_CLIENT = r'''
import socket, sys
for port in sys.argv[2:]:
    s = socket.create_connection((sys.argv[1], int(port)), timeout=20)
    s.sendall(b"hello")
    assert s.recv(5) == b"hello"
    s.close()
print("CLIENT DONE", flush=True)
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_program_saves_syn(fabric, nets, ends, family):
    """The program's TCP_SAVE_SYN is its own under shunt: its listener's
    SYNs are its to read (and that listener is not paired across namespaces:
    saved_syn); a listener where it did not ask hands out none and answers 0,
    before and after a connection."""
    host = nets.addr("a", family)
    srv = nets.start("a", ends.argv([PYTHON, "-c", SAVE_SYN_SERVER, host]), env=ends.env("server"), proc_name="syn")
    mine, theirs = srv.wait_for(r"^PORTS (\d+) (\d+)$").groups()
    r = nets.run("b", ends.argv([PYTHON, "-c", SAVE_SYN_CLIENT, host, mine, theirs, theirs, theirs]),
                 env=ends.env("client"), timeout=60)
    assert r.returncode == 0 and b"CLIENT DONE" in r.stdout, r.stderr.decode()
    srv.wait_for(r"^DONE$", timeout=30)
    lines = srv.wait_lines(r"^SYN ", 4)
    sizes = [int(l.split()[1]) for l in lines]
    assert sizes[0] > 0 and sizes[1] == 0 and sizes[2] == 0 and sizes[3] > 0, lines
    assert all(l.endswith(" hello") for l in lines), lines
    reasons = ends.reasons("server")
    # the program's listener: saved_syn; the other: accelerated twice, then the program's (saved_syn)
    assert reasons == Counter({REASON["saved_syn"]: 2}), (reasons, ends.log("server"))
    assert len(ends.pairs()[1]) == 2, ends.log("server")


# ------------------------------------------------------------------ a listener that goes on without shunt

EXEC_SERVER = r'''
import os, socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
l = socket.socket(fam, socket.SOCK_STREAM)
l.bind((sys.argv[1], 0))
l.listen(8)
l.set_inheritable(True)
print("PORT %d" % l.getsockname()[1], flush=True)
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}   # a program without shunt
os.execve(sys.executable, [sys.executable, "-c", sys.argv[2], str(l.fileno()), sys.argv[1]], env)
'''

EXEC_AFTER = r'''
import socket, sys
TCP_SAVE_SYN, TCP_SAVED_SYN = 27, 28
fam = socket.AF_INET6 if ":" in sys.argv[2] else socket.AF_INET
l = socket.socket(fam, socket.SOCK_STREAM, 0, int(sys.argv[1]))
print("SAVE %d" % l.getsockopt(6, TCP_SAVE_SYN), flush=True)
c, _ = l.accept()
print("SYN %d" % len(c.getsockopt(6, TCP_SAVED_SYN, 1024)), flush=True)
data = c.recv(5)
c.sendall(data)
c.close()
print("DONE %s" % data.decode(), flush=True)
'''


@pytest.mark.parametrize("family", FAMILIES)
def test_listener_exec_without_shunt(fabric, nets, ends_of, family):
    """A listener shunt saved SYNs on, passed by exec to a program without
    shunt: that program reads TCP_SAVE_SYN 0 and finds no saved SYN on the
    connection it accepts, as it does when the first program ran without shunt
    too (the reference); the client under shunt connects over kernel TCP,
    its bytes echoed."""
    host = nets.addr("a", family)
    seen = {}
    for mode in ("plain", "shunt"):
        e = ends_of(mode)
        srv = nets.start("a", e.argv([PYTHON, "-c", EXEC_SERVER, host, EXEC_AFTER]), env=e.env("server"),
                         proc_name="exec-" + mode)
        port = srv.wait_for(r"^PORT (\d+)$").group(1)
        save = srv.wait_for(r"^SAVE (\d+)$").group(1)
        r = nets.run("b", e.argv([PYTHON, "-c", SAVE_SYN_CLIENT, host, port]), env=e.env("client"), timeout=60)
        assert r.returncode == 0 and b"CLIENT DONE" in r.stdout, r.stderr.decode()
        syn = srv.wait_for(r"^SYN (\d+)$").group(1)
        srv.wait_for(r"^DONE hello$", timeout=30)
        seen[mode] = (save, syn)
        if e.shunted:
            log, client_log = "\n".join(e.log("server")), "\n".join(e.log("client"))
    assert seen["shunt"] == seen["plain"] == ("0", "0"), seen
    assert "offered to other namespaces (" in log, log          # shunt did save them before the exec
    assert "no longer offered to other namespaces: exec" in log, log
    assert not ACCEL_CLIENT.search(client_log), client_log


# ------------------------------------------------------------------ identical address plans

def test_identical_namespaces_pair_with_their_own(fabric, shunt, builds, tmp_path):
    """a1-b1 and a2-b2 on separate veth pairs with the same addresses
    (10.77.1.1 and .2 on both): servers on the same address and port in a1
    and a2, clients in b1 and b2 at once; each client's channel is its own
    server's, every byte checked."""
    need_namespaces()
    with Namespaces(["a1", "b1", "a2", "b2"], links=[("a1", "b1", 1), ("a2", "b2", 1)], logdir=tmp_path) as n:
        assert n.addr("a1", 4) == n.addr("a2", 4) == "10.77.1.1"
        e = CrossEnds(shunt, builds, "shunt", tmp_path)
        host = n.addr("a1", 4)
        s1, port = start_echo(n, e, "a1", host, side="server1")
        s2, _ = start_echo(n, e, "a2", host, port, side="server2")
        clients = [n.start(b, e.echo() + client_args(port, "bulk", host=host), env=e.env("client" + b[1]),
                           proc_name="client" + b[1]) for b in ("b1", "b2")]
        for c in clients:
            c.proc.wait(timeout=CLIENT_TIMEOUT)
            assert c.proc.returncode == 0 and "CLIENT OK conns=1" in c.stdout(), c.describe()
        check_server_log(s1, "bulk")
        check_server_log(s2, "bulk")
        one = e.check_cross(1, "client1", "server1")
        two = e.check_cross(1, "client2", "server2")
        assert one != two


# ------------------------------------------------------------------ a peer killed

PACED = 256 * MIB


def paced(nets, ends, name, host, port):
    return nets.start(name, ends.argv([PYTHON, PROGRAMS / "paced_client.py", host, port, PACED, 65536, 2, 20]),
                      env=ends.env("client"), proc_name="paced")


@pytest.mark.parametrize("family", FAMILIES)
def test_server_killed_mid_transfer(fabric, nets, ends, family):
    """kill -9 of the server once 4 MiB have gone: the client ends as kernel
    TCP's does (ECONNRESET, EOF or EPIPE), what it got is an exact prefix."""
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host)
    client = paced(nets, ends, "b", host, port)
    client.wait_for(r"^SENT %d$" % (4 * MIB), timeout=30)
    os.kill(srv.pid, signal.SIGKILL)
    res = result_of(client)
    assert res["end"] in ("ECONNRESET", "EPIPE", "eof"), res
    assert 0 < res["received"] < res["sent"] < PACED, res
    assert len(ends.pairs()[0]) == 1, ends.log("client")


@pytest.mark.parametrize("family", FAMILIES)
def test_client_killed_mid_transfer(fabric, nets, ends, family):
    """kill -9 of the client once 4 MiB have gone: the server's connection
    ends (its CONN line says so) without a wrong byte, and it takes the next
    connection, accelerated."""
    host = nets.addr("a", family)
    srv, port = start_echo(nets, ends, "a", host)
    client = paced(nets, ends, "b", host, port)
    client.wait_for(r"^SENT %d$" % (4 * MIB), timeout=30)
    os.kill(client.pid, signal.SIGKILL)
    (line,) = srv.wait_lines(r"^CONN 1 ", 1, timeout=30)
    assert "BAD" not in line, line
    r = nets.run("b", ends.echo() + client_args(port, "small", host=host), env=ends.env("client2"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "small", expect_mapped=True)
    c, s = ends.pairs("client2")
    assert len(c & s) == 3, ends.log("server")[-20:]
