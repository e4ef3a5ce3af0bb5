"""`shunt fabric enable` marks the SYN of an active open with the client
socket's cookie, and a server in another network namespace reads it back
(docs/fabric-discovery.md).

Two network namespaces joined by a veth pair (private IPv4 and ULA IPv6,
nodad, inside them only; always deleted).  tests/programs/synopt_peer.c is
both ends: the server (namespace A) sets TCP_SAVE_SYN on its listener and
prints what registry/synopt.c reads off each accepted connection's SYN; the
client (namespace B) prints each socket's own SO_COOKIE.  Checked: they are
equal, connection by connection, over IPv4 and IPv6, and the tag is this
boot's; a packet sniffer in A sees the option on the client's SYNs and on
nothing else (not the SYN-ACK, not the handshake's ACK, not the FIN);
connections over loopback inside one namespace carry none; after `shunt
fabric disable` no SYN carries it; `shunt fabric` as another user fails
with a message and status 1.

Needs root, ip (iproute2) and setpriv (util-linux): missing under CI is a
failure.  The host is left as it was: fabric is restored to the state it
was found in, whatever happened.
"""

import json
import os
import re
import subprocess
import time

import pytest

from shunttest import PYTHON, missing, need_tool

SYNOPT_KIND = 253
SYNOPT_EXID = 0x5348
FLAGGER_EXID = 0x5346  # tests/programs/listener_flagger.c's own option
ROUNDS = 5

# A packet sniffer for one interface of a namespace: runs until the stop
# file appears, then prints one JSON line per TCP packet seen (both
# directions): ports, flags, whether it carries shunt's option ("ours") or
# listener_flagger's ("theirs").
SNIFFER = r'''
import json, os, socket, struct, sys, time
iface, stop = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((iface, 0))
s.settimeout(0.1)
print("ready", flush=True)
seen = []
while True:
    try:
        pkt = s.recv(65536)
    except socket.timeout:
        if os.path.exists(stop):
            break
        continue
    etype = struct.unpack("!H", pkt[12:14])[0]
    ip = pkt[14:]
    if etype == 0x0800 and ip[9] == 6:
        tcp = ip[(ip[0] & 15) * 4:]
    elif etype == 0x86dd and ip[6] == 6:
        tcp = ip[40:]
    else:
        continue
    doff = (tcp[12] >> 4) * 4
    opts, i, ours, theirs = tcp[20:doff], 0, False, False
    while i < len(opts):
        if opts[i] == 0:
            break
        if opts[i] == 1:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2:
            break
        if opts[i] == %d and opts[i + 1] >= 4:
            exid = struct.unpack("!H", opts[i + 2:i + 4])[0]
            ours, theirs = ours or exid == %d, theirs or exid == %d
        i += opts[i + 1]
    sport, dport = struct.unpack("!HH", tcp[:4])
    seen.append({"sport": sport, "dport": dport, "flags": tcp[13], "ours": ours, "theirs": theirs})
for p in seen:
    print(json.dumps(p))
''' % (SYNOPT_KIND, SYNOPT_EXID, FLAGGER_EXID)


def run(argv, check=True, timeout=30):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        pytest.fail("%s: status %d\n%s%s" % (" ".join(map(str, argv)), r.returncode, r.stdout, r.stderr))
    return r


class Fabric:
    def __init__(self, build):
        self.shunt = str(build / "shunt")
        self.peer = str(build / "tests" / "programs" / "synopt_peer")

    def cmd(self, what, check=True):
        return run([self.shunt, "fabric", what], check=check)

    def enabled(self):
        r = self.cmd("status", check=False)
        if r.returncode not in (0, 3):
            pytest.fail("shunt fabric status: status %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        return r.returncode == 0

    def boot_tag(self):
        m = re.search(r"boot tag ([0-9a-f]{8})", self.cmd("status").stdout)
        assert m, "shunt fabric status gives no boot tag"
        return m.group(1)


@pytest.fixture
def fabric(shunt_build):
    if os.geteuid() != 0:
        missing("shunt fabric needs root (bpf, network namespaces)")
    need_tool("ip", package="iproute2")
    need_tool("setpriv", package="util-linux")
    f = Fabric(shunt_build)
    if not os.path.exists(f.peer):
        pytest.fail("%s is missing: run make" % f.peer, pytrace=False)
    was = f.enabled()
    try:
        yield f
    finally:
        if was:
            f.cmd("enable", check=False)
        else:
            f.cmd("disable", check=False)
        assert f.enabled() == was, "shunt fabric not restored to what it was"


@pytest.fixture
def namespaces():
    """Namespaces A and B, veth va (in A, 10.77.0.1, fd77::1) and vb (in B,
    10.77.0.2, fd77::2); deleted afterwards."""
    tag = "%d" % os.getpid()
    a, b = "shunt-fab-a" + tag, "shunt-fab-b" + tag
    va, vb = "sfa" + tag, "sfb" + tag
    made = []
    try:
        for ns in (a, b):
            run(["ip", "netns", "add", ns])
            made.append(ns)
        run(["ip", "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b])
        for ns, dev, v4, v6 in ((a, va, "10.77.0.1/24", "fd77::1/64"), (b, vb, "10.77.0.2/24", "fd77::2/64")):
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "addr", "add", v4, "dev", dev])
            run(["ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad"])
            run(["ip", "-n", ns, "link", "set", dev, "up"])
        yield {"a": a, "b": b, "va": va}
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def exchange(fabric, server_ns, client_ns, server_addr, connect_addr, n, port=5301, server_cgroup=None,
             how="connect"):
    """n connections from client_ns to server_ns: (what the server read off
    each SYN, each client socket's SO_COOKIE), in order.  The server runs in
    server_cgroup (a cgroup2 directory) if given."""
    def enter_cgroup():
        with open(os.path.join(server_cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    srv = subprocess.Popen(["ip", "netns", "exec", server_ns, fabric.peer, "serve", server_addr, str(port), str(n)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=enter_cgroup if server_cgroup else None)
    try:
        assert srv.stdout.readline().strip() == "ready", srv.stderr.read()
        cli = run(["ip", "netns", "exec", client_ns, fabric.peer, how, connect_addr, str(port), str(n)])
        out, err = srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert srv.returncode == 0, err
    syns = [line.split()[1:] for line in out.splitlines()]
    cookies = [line.split()[1] for line in cli.stdout.splitlines()]
    assert len(syns) == n and len(cookies) == n, (out, cli.stdout)
    if how == "connect-marked":
        return syns, cookies, [line.split()[3] for line in cli.stdout.splitlines()]
    return syns, cookies


def test_cookie_pairs_across_namespaces(fabric, namespaces):
    fabric.cmd("enable")
    tag = fabric.boot_tag()
    seen = set()
    for addr in ("10.77.0.1", "fd77::1"):
        syns, cookies = exchange(fabric, namespaces["a"], namespaces["b"], addr, addr, ROUNDS)
        for syn, cookie in zip(syns, cookies):
            # flags 00: these clients did not mark their sockets as a shunt process's
            assert syn == [tag, cookie, "00"], "server read %s, client's SO_COOKIE %s (boot tag %s)" % (
                syn, cookie, tag)
        seen.update(cookies)
    assert len(seen) == 2 * ROUNDS, "cookies repeat: %s" % sorted(seen)


def sniffed(namespaces, tmp_path, traffic):
    """The TCP packets the sniffer saw on A's veth while traffic() ran."""
    stop = tmp_path / "stop"
    sniff = subprocess.Popen(["ip", "netns", "exec", namespaces["a"], PYTHON, "-c", SNIFFER, namespaces["va"],
                              str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sniff.stdout.readline().strip() == "ready", sniff.stderr.read()
        traffic()
        time.sleep(0.3)
        stop.touch()
        out, err = sniff.communicate(timeout=30)
    finally:
        if sniff.poll() is None:
            sniff.kill()
            sniff.wait()
    return [json.loads(line) for line in out.splitlines()]


def test_only_the_syn_carries_it(fabric, namespaces, tmp_path):
    fabric.cmd("enable")

    def traffic():
        for addr in ("10.77.0.1", "fd77::1"):
            exchange(fabric, namespaces["a"], namespaces["b"], addr, addr, ROUNDS, port=5302)
    pkts = sniffed(namespaces, tmp_path, traffic)
    syns = [p for p in pkts if p["flags"] & 0x12 == 0x02 and p["dport"] == 5302]
    others = [p for p in pkts if not (p["flags"] & 0x12 == 0x02 and p["dport"] == 5302)]
    assert len(syns) >= 2 * ROUNDS, pkts
    assert all(p["ours"] for p in syns), syns
    assert len(others) >= 2 * ROUNDS * 3, pkts  # SYN-ACK, ACK, FINs at least
    assert not any(p["ours"] for p in others), [p for p in others if p["ours"]]


def cgroup2_root():
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, kind = line.split()[:3]
            if kind == "cgroup2":
                return mnt
    pytest.fail("no cgroup2 mount", pytrace=False)


def test_flagged_listener_syn_ack_is_not_marked(fabric, namespaces, tmp_path, shunt_build):
    """Another party's sock_ops program turns on header-option callbacks for
    the server's listener (tests/programs/listener_flagger.c, in a cgroup of
    the test's with only the server in it): the kernel then calls shunt's
    program for the listener's SYN-ACKs too.  They carry the other program's
    option and not shunt's (which once went there with the request socket's
    cookie: the program tested the SYN bit, not a SYN without ACK); the
    client's SYNs still carry shunt's, and pair."""
    fabric.cmd("enable")
    cg = os.path.join(cgroup2_root(), "shunt-test-flagged-%d" % os.getpid())
    os.mkdir(cg)
    flagger = subprocess.Popen([str(shunt_build / "tests" / "programs" / "listener_flagger"), cg],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert flagger.stdout.readline().strip() == "ready", flagger.stderr.read()
        got = []

        def traffic():
            for addr in ("10.77.0.1", "fd77::1"):
                got.append(exchange(fabric, namespaces["a"], namespaces["b"], addr, addr, ROUNDS, port=5305,
                                    server_cgroup=cg))
        pkts = sniffed(namespaces, tmp_path, traffic)
    finally:
        out, err = flagger.communicate(timeout=30)
        os.rmdir(cg)
    assert flagger.returncode == 0, err
    for syns, cookies in got:
        assert [syn[1] for syn in syns] == cookies
    syn_acks = [p for p in pkts if p["flags"] & 0x12 == 0x12 and p["sport"] == 5305]
    syns = [p for p in pkts if p["flags"] & 0x12 == 0x02 and p["dport"] == 5305]
    assert len(syn_acks) >= 2 * ROUNDS and len(syns) >= 2 * ROUNDS, pkts
    assert all(p["theirs"] for p in syn_acks), syn_acks  # the callbacks did run for them
    assert not any(p["ours"] for p in syn_acks), [p for p in syn_acks if p["ours"]]
    assert all(p["ours"] and not p["theirs"] for p in syns), syns


def test_marked_client_process_is_flagged(fabric, namespaces):
    """A client that marks its socket as a shunt process's before connect
    (TCP_NOTSENT_LOWAT = 0x7F534850, what the library will do for a
    destination on another host) gets the flag "process" (01) on its SYN's
    option, with its cookie unchanged, and finds the mark consumed (0, the
    kernel's default) after connect; an unmarked client gets 00.  With
    fabric disabled the mark stays and no option goes out."""
    fabric.cmd("enable")
    tag = fabric.boot_tag()
    for addr in ("10.77.0.1", "fd77::1"):
        syns, cookies, lowats = exchange(fabric, namespaces["a"], namespaces["b"], addr, addr, ROUNDS, port=5306,
                                         how="connect-marked")
        assert syns == [[tag, c, "01"] for c in cookies], (syns, cookies)
        assert lowats == ["0"] * ROUNDS, lowats
        syns, cookies = exchange(fabric, namespaces["a"], namespaces["b"], addr, addr, ROUNDS, port=5306)
        assert syns == [[tag, c, "00"] for c in cookies], (syns, cookies)
    fabric.cmd("disable")
    syns, cookies, lowats = exchange(fabric, namespaces["a"], namespaces["b"], "10.77.0.1", "10.77.0.1", 2, port=5306,
                                     how="connect-marked")
    assert syns == [["none"]] * 2 and lowats == ["7f534850"] * 2, (syns, lowats)


def test_loopback_is_not_marked(fabric, namespaces):
    fabric.cmd("enable")
    ns = namespaces["a"]
    for server_addr, connect_addr in (("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("::", "::ffff:127.0.0.1")):
        syns, _ = exchange(fabric, ns, ns, server_addr, connect_addr, 2, port=5303)
        assert syns == [["none"]] * 2, (connect_addr, syns)
    # a namespace's own non-loopback address is marked (docs/fabric-discovery.md, "Scope")
    syns, cookies = exchange(fabric, ns, ns, "10.77.0.1", "10.77.0.1", 2, port=5303)
    assert [s[1] for s in syns] == cookies


def test_disable_removes_it(fabric, namespaces):
    fabric.cmd("enable")
    assert fabric.enabled()
    r = fabric.cmd("enable")  # again: says so, changes nothing
    assert "already enabled" in r.stdout
    fabric.cmd("disable")
    assert not fabric.enabled()
    assert not os.path.exists("/sys/fs/bpf/shunt/synopt")
    for addr in ("10.77.0.1", "fd77::1"):
        syns, _ = exchange(fabric, namespaces["a"], namespaces["b"], addr, addr, ROUNDS, port=5304)
        assert syns == [["none"]] * ROUNDS, syns
    r = fabric.cmd("disable")  # again: nothing to do, not an error
    assert "not enabled" in r.stdout


def test_errors_are_messages(fabric):
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    for what in ("enable", "disable", "status"):
        r = run(nobody + [fabric.shunt, "fabric", what], check=False)
        assert r.returncode in (1, 3), (what, r.returncode, r.stderr)
        if r.returncode == 1:
            assert r.stderr.startswith("shunt fabric: ") and len(r.stderr.splitlines()) == 1, r.stderr
    r = run(nobody + [fabric.shunt, "fabric", "enable"], check=False)
    assert r.returncode == 1 and "root" in r.stderr, r.stderr
    r = run([fabric.shunt, "fabric", "sideways"], check=False)
    assert r.returncode == 2 and "usage" in r.stderr
