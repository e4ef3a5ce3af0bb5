"""Connections between network namespaces (netns.py: two namespaces, a and b,
joined by a veth pair; root and iproute2).

shunt accelerates only two processes of one network namespace (its registry is
per user and per namespace; a client offers only to loopback destinations). A
connection from one namespace to another is therefore kernel TCP, byte for byte,
with its reason recorded at each end: `not_loopback` at the client, `no_offer`
at the server (the keys of src/core/conn/fallback.c; the log writes their
names). Every case runs twice: `plain` (no shunt: the kernel's answer, the
reference) and `shunt` (both ends under `build/shunt run`, each side's log in a
folder of its own), over IPv4 and IPv6, and checks

- the bytes: every byte echoed checked against pyecho's pattern at both ends
  (8 MiB each way for the plain echo), or sha256 of a 3 MiB value through redis;
- the path, under shunt: each end's log names the reason for every connection,
  and no end logged `accelerated`; a shunt'd decoy listener on the same port in
  the client's own namespace gets nothing (a connection wrongly paired through
  the client's registry would go there); `shunt stat --json` in each namespace
  shows the held connection on `tcp` with its key.

One case puts both ends in namespace a on its loopback: there the connection
must be accelerated (both ends logged the same channel, SHUNT_STRICT=1), which
proves the registry works inside a namespace, and a decoy in b on the same port
gets nothing.
"""

import hashlib
import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from echopeers import CLIENT_TIMEOUT, check_client, check_server_log, client_args, listening_port, side_argv
from netns import Namespaces, left_over, need_namespaces
from shunttest import PROGRAMS, PYTHON, REPO, base_env, need_tool

MODES = ["plain", "shunt"]
FAMILIES = [4, 6]
MIB = 1 << 20


def reason_names():
    """{key: the name the log writes} from src/core/conn/fallback.c."""
    src = (REPO / "src" / "core" / "conn" / "fallback.c").read_text()
    names, keys = src.split("reason_keys[]", 1)
    entry = re.compile(r'\[(FB_\w+)\] = "([^"]*)"')
    by_enum = dict(entry.findall(names))
    return {key: by_enum[e] for e, key in entry.findall(keys)}


REASON = reason_names()


@pytest.fixture
def nets(tmp_path):
    need_namespaces()
    if os.path.exists("/run/shunt/fabric"):
        pytest.fail("shunt fabric is enabled: these cases are for a host without it (test_netns_accel.py)")
    with Namespaces(["a", "b"], links=[("a", "b")], logdir=tmp_path) as n:
        yield n


class Ends:
    """How one case runs its two ends: MODE plain or shunt; under shunt each
    side logs into a folder of its own (side: "client", "server", "decoy")."""

    def __init__(self, shunt, builds, mode, tmp_path, **settings):
        self.shunt, self.builds, self.mode, self.dir, self.settings = shunt, builds, mode, tmp_path, settings

    @property
    def shunted(self):
        return self.mode == "shunt"

    def argv(self, argv):
        return self.shunt.cmd(argv) if self.shunted else [str(a) for a in argv]

    def echo(self, kind="py"):
        """The echo peer (echopeers.side_argv), under shunt or not."""
        return self.argv(side_argv(self.builds, kind))

    def env(self, side):
        if not self.shunted:
            return base_env()
        d = self.dir / ("log-" + side)
        d.mkdir(exist_ok=True)
        return base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=d / "shunt-%p.log", **self.settings)

    def log(self, side):
        d = self.dir / ("log-" + side)
        return [l for p in sorted(d.glob("shunt-*.log")) for l in p.read_text(errors="replace").splitlines()]

    def paths(self, side):
        """What SIDE's log says of its connections: (Counter of fallback
        reasons by name, channels accelerated as client, as server)."""
        lines = self.log(side)
        text = "\n".join(lines)
        fallbacks = Counter(m for m in re.findall(r"kernel TCP: (.*)$", text, re.M))
        return (fallbacks, set(re.findall(r"accelerated \(client, channel (\S+?)\)", text)),
                set(re.findall(r"accelerated \(server, channel (\S+?),", text)))

    def check_fell_back(self, conns, exact=True):
        """Under shunt: CONNS connections (at least, unless EXACT) on kernel
        TCP, not_loopback at the client and no_offer at the server, no other
        reason and nothing accelerated at either end."""
        if not self.shunted:
            return
        want = {"client": REASON["not_loopback"], "server": REASON["no_offer"]}
        for side, reason in want.items():
            fallbacks, as_client, as_server = self.paths(side)
            summary = "%s log:\n%s" % (side, "\n".join(self.log(side)[-30:]))
            assert not as_client and not as_server, "accelerated across namespaces: " + summary
            assert set(fallbacks) == {reason}, "reasons %s, want only %r: %s" % (dict(fallbacks), reason, summary)
            n = fallbacks[reason]
            assert n == conns if exact else n >= conns, "%d fallbacks, want %d: %s" % (n, conns, summary)

    def check_accelerated(self, conns):
        """Under shunt: CONNS connections whose both ends logged the same
        channel, and no fallback at either end."""
        if not self.shunted:
            return
        client, server = self.paths("client"), self.paths("server")
        summary = "\n".join(self.log("client")[-20:] + self.log("server")[-20:])
        assert not client[0] and not server[0], "fell back: %s %s\n%s" % (dict(client[0]), dict(server[0]), summary)
        assert len(client[1] & server[2]) == conns, "want %d accelerated pairs:\n%s" % (conns, summary)


def host_port(host, port):
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def start_echo(nets, ends, name, host, port=0, side="server", kind="py"):
    srv = nets.start(name, ends.echo(kind) + ["server", "--host", host, "--port", str(port)], env=ends.env(side),
                     proc_name=side)
    return srv, listening_port(srv)


@pytest.fixture
def ends_of(shunt, builds, tmp_path):
    return lambda mode, **settings: Ends(shunt, builds, mode, tmp_path, **settings)


def no_connection(decoy):
    assert "CONN" not in decoy.stdout(), "the decoy got a connection:\n" + decoy.describe()


# ------------------------------------------------------------------ the harness

def test_harness_cleans_up(tmp_path):
    """What Namespaces made is gone after a clean exit, after an error
    inside (a process still running in a namespace included) and after a
    setup that failed half way."""
    need_namespaces()
    with Namespaces(["a", "b"], links=[("a", "b")], logdir=tmp_path) as n:
        r = n.run("a", ["ip", "-o", "addr"], timeout=10, check=True).stdout.decode()
        assert n.addr("a", 4) + "/24" in r and n.addr("a", 6) + "/64" in r and "127.0.0.1/8" in r, r
        refused = n.run("b", [PYTHON, "-c", "import socket; socket.create_connection(('%s', 9), 5)" % n.addr("a", 4)],
                     timeout=10)
        assert b"ConnectionRefusedError" in refused.stderr, refused.stderr    # a's kernel answered: the link works
    assert left_over(n.prefix) == []
    with pytest.raises(RuntimeError, match="inside"):
        with Namespaces(["a", "b"], links=[("a", "b")], logdir=tmp_path) as m:
            sleeper = m.start("b", ["sleep", "60"])
            raise RuntimeError("inside")
    assert left_over(m.prefix) == []
    assert sleeper.proc.poll() is not None
    # a setup failing half way (the pair made, one end moved, the other has no namespace to go to)
    half = Namespaces(["a"], links=[("a", "nowhere")], logdir=tmp_path)
    with pytest.raises(RuntimeError, match="nowhere"):
        half.__enter__()
    assert left_over(half.prefix) == []


# ------------------------------------------------------------------ echo across namespaces

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("direction", ["a-to-b", "b-to-a"])
@pytest.mark.parametrize("mode", MODES)
def test_echo_across(nets, ends_of, mode, direction, family):
    """8 MiB each way from one namespace to the other, checked at both ends;
    a decoy on the same port in the client's namespace sees nothing."""
    ends = ends_of(mode)
    cl, sv = direction.split("-to-")
    host = nets.addr(sv, family)
    srv, port = start_echo(nets, ends, sv, host)
    decoy, _ = start_echo(nets, ends, cl, "::", port, side="decoy")
    r = nets.run(cl, ends.echo() + client_args(port, "bulk", host=host),
                 env=ends.env("client"), timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=ends.shunted)
    check_server_log(srv, "bulk")
    no_connection(decoy)
    ends.check_fell_back(1)


@pytest.mark.parametrize("family", FAMILIES)
def test_reasons_in_stat(nets, ends_of, shunt, family):
    """A connection held open: `shunt stat --json` in the client's namespace
    shows its end on tcp with not_loopback, in the server's namespace with
    no_offer; neither namespace has a connection on shm."""
    ends = ends_of("shunt")
    host = nets.addr("b", family)
    srv, port = start_echo(nets, ends, "b", host)
    held = nets.start("a", ends.argv([PYTHON, "-c", HOLD, host, port]), env=ends.env("client"), proc_name="held")
    local = held.wait_for(r"^HELD (.*)$").group(1)

    def stat(name):
        r = nets.run(name, [shunt.bin, "stat", "--json"], timeout=30, check=True)
        return json.loads(r.stdout)

    def held_by(c, pid):
        return any(h["pid"] == pid for h in c["holders"])

    a, b = stat("a"), stat("b")
    (mine,) = [c for c in a["connections"] if held_by(c, held.pid)]
    assert mine["role"] == "client" and mine["path"] == "tcp" and mine["reason"] == "not_loopback", mine
    assert mine["peer"] == host_port(host, port) and mine["local"] == local, (mine, local)
    (theirs,) = [c for c in b["connections"] if held_by(c, srv.pid)]
    assert theirs["role"] == "server" and theirs["path"] == "tcp" and theirs["reason"] == "no_offer", theirs
    assert theirs["local"] == host_port(host, port) and theirs["peer"] == local, theirs
    assert [c for c in a["connections"] + b["connections"] if c["path"] == "shm"] == [], (a, b)
    assert [l for l in b["listeners"] if held_by(l, srv.pid) and l["path"] == "shm"], b["listeners"]


HOLD = '''
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
s.sendall(b"hello")
assert s.recv(5) == b"hello"
h, p = s.getsockname()[:2]
print("HELD", "[%s]:%d" % (h, p) if ":" in h else "%s:%d" % (h, p), flush=True)
time.sleep(60)
'''


# ------------------------------------------------------------------ real servers

def redis_session(nets, ends, server_ns, client_ns, host, tmp_path):
    """redis-server in SERVER_NS on HOST, redis-cli and redis-benchmark in
    CLIENT_NS (ENDS decide whether under shunt): a 3 MiB random value set and
    read back (sha256), then a short benchmark."""
    need_tool("redis-server", "redis-cli", "redis-benchmark", package="redis-server, redis-tools")
    port = 6379
    srv = nets.start(server_ns, ends.argv(["redis-server", "--bind", host, "--port", port, "--save", "",
                                           "--appendonly", "no", "--protected-mode", "no", "--dir", tmp_path]),
                     env=ends.env("server"), proc_name="redis")
    cli = ["redis-cli", "-h", host, "-p", port]
    deadline = time.monotonic() + 20
    while nets.run(client_ns, cli + ["ping"], timeout=10).stdout != b"PONG\n":
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.describe()
        time.sleep(0.1)
    blob = os.urandom(3 * MIB)
    r = nets.run(client_ns, ends.argv(cli + ["-x", "set", "blob"]), input=blob, env=ends.env("client"), timeout=60)
    assert r.stdout == b"OK\n", r
    r = nets.run(client_ns, ends.argv(cli + ["--raw", "get", "blob"]), env=ends.env("client"), timeout=60)
    assert r.returncode == 0 and r.stdout.endswith(b"\n"), r.stderr
    assert hashlib.sha256(r.stdout[:-1]).hexdigest() == hashlib.sha256(blob).hexdigest(), len(r.stdout)
    r = nets.run(client_ns, ends.argv(["redis-benchmark", "-h", host, "-p", port, "-n", "2000", "-c", "4", "-t",
                                       "set,get", "-d", "1000", "-q"]), env=ends.env("client"), timeout=60)
    assert r.returncode == 0 and r.stdout.count(b"requests per second") == 2, r


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_redis_across(nets, ends_of, mode, family, tmp_path):
    """redis-server in b, redis-cli and redis-benchmark in a: a 3 MiB random
    value set and read back (sha256), then a short benchmark."""
    ends = ends_of(mode)
    redis_session(nets, ends, "b", "a", nets.addr("b", family), tmp_path)
    # the pings above were plain: a connection of each redis-cli and benchmark client at least
    ends.check_fell_back(6, exact=False)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_forking_server_across(nets, ends_of, mode, family):
    """static_peer's server forks a child per connection: five sequential
    connections from the other namespace, each checked."""
    ends = ends_of(mode)
    host = nets.addr("b", family)
    srv, port = start_echo(nets, ends, "b", host, kind="c")
    r = nets.run("a", ends.echo() + client_args(port, "halfclose", host=host),
                 env=ends.env("client"), timeout=CLIENT_TIMEOUT)
    check_client(r, "halfclose", expect_mapped=ends.shunted)
    check_server_log(srv, "halfclose")
    ends.check_fell_back(5)


# ------------------------------------------------------------------ failures

PACED = 24 * MIB


def paced(nets, ends, host, port, nbytes=PACED, pause_ms=2):
    return nets.start("a", ends.argv([PYTHON, PROGRAMS / "paced_client.py", host, port, nbytes, 65536, pause_ms, 20]),
                      env=ends.env("client"), proc_name="paced")


def result_of(client, timeout=60):
    """The client's RESULT line as a dict; fails if it never ends or saw a
    wrong byte."""
    try:
        client.proc.wait(timeout=timeout)
    except Exception:
        pytest.fail("the client did not end within %ss:\n%s" % (timeout, client.describe()))
    m = client.wait_for(r"^RESULT (\S+) sent=(\d+) received=(\d+) sha_sent=(\w+) sha_received=(\w+)$", timeout=1)
    assert client.proc.returncode == 0 and "BAD" not in client.stdout(), client.describe()
    return dict(end=m.group(1), sent=int(m.group(2)), received=int(m.group(3)), sha_sent=m.group(4),
                sha_received=m.group(5))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_link_down_mid_transfer(nets, ends_of, mode, family):
    """The veth taken down for 2 s once 4 MiB have gone, then up again: the
    kernel's TCP retransmits and the transfer completes (the plain run's
    answer); under shunt the same, every byte right."""
    ends = ends_of(mode)
    host = nets.addr("b", family)
    srv, port = start_echo(nets, ends, "b", host)
    client = paced(nets, ends, host, port)
    client.wait_for(r"^SENT %d$" % (4 * MIB), timeout=30)
    with nets.outage("a", "b"):
        time.sleep(2)
        # 20 MiB to go at 2 ms a 64 KiB piece: not done unless the bytes went another way than the link
        assert client.proc.poll() is None, "the transfer ended while the link was down:\n" + client.describe()
    res = result_of(client)
    assert res["end"] == "ok" and res["sent"] == res["received"] == PACED, res
    assert res["sha_sent"] == res["sha_received"], res
    assert srv.wait_lines(r"^CONN ", 1) == ["CONN 1 RECV %d OK" % PACED], srv.describe()
    ends.check_fell_back(1)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_server_killed_mid_transfer(nets, ends_of, mode, family):
    """kill -9 of the server once 4 MiB have gone: the client's reads end as
    kernel TCP's do (ECONNRESET, or EOF, or EPIPE on a send), what it got
    before is an exact prefix of what it sent, and nothing hangs."""
    ends = ends_of(mode)
    host = nets.addr("b", family)
    srv, port = start_echo(nets, ends, "b", host)
    assert "pyecho.py" in Path("/proc/%d/cmdline" % srv.pid).read_bytes().decode(errors="replace")
    client = paced(nets, ends, host, port, nbytes=256 * MIB)
    client.wait_for(r"^SENT %d$" % (4 * MIB), timeout=30)
    os.kill(srv.pid, signal.SIGKILL)
    res = result_of(client)
    assert res["end"] in ("ECONNRESET", "EPIPE", "eof"), res
    assert 0 < res["received"] < res["sent"] < 256 * MIB, res
    ends.check_fell_back(1)


# ------------------------------------------------------------------ both ends in one namespace

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_inside_one_namespace(nets, ends_of, mode, family):
    """Client and server both in namespace a, on a's loopback: accelerated
    under shunt (the registry of a's namespace pairs them); a decoy on the
    same address and port in b gets nothing."""
    ends = ends_of(mode, SHUNT_STRICT=1)
    host = "127.0.0.1" if family == 4 else "::1"
    srv, port = start_echo(nets, ends, "a", host)
    decoy, _ = start_echo(nets, ends, "b", host, port, side="decoy")
    r = nets.run("a", ends.echo() + client_args(port, "bulk", host=host), env=ends.env("client"),
                 timeout=CLIENT_TIMEOUT)
    check_client(r, "bulk", expect_mapped=ends.shunted)
    check_server_log(srv, "bulk")
    no_connection(decoy)
    ends.check_accelerated(1)
