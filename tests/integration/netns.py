"""Network namespaces joined by veth pairs, for tests whose two ends are on
different hosts as far as the kernel is concerned (python3 stdlib + pytest).

    with Namespaces(["a", "b"], links=[("a", "b")], logdir=tmp_path) as nets:
        srv = nets.start("b", argv, env=env)          # a shunttest.Server, in b
        nets.run("a", argv, timeout=60, env=env)      # run_cmd inside a
        nets.addr("b", 4)                             # b's address on its first link: "10.77.1.2"
        with nets.outage("a", "b"): ...               # the link down, then up again

What it makes: namespaces named ``shunt-<pid>-<n>-<name>`` (n counts the sets
this process made, so every test has its own prefix), with ``lo`` up; for link i
(from 1) between x and y a veth pair ``s<pid>-<n>-<i>x`` / ``...y`` (hex
numbers, under the kernel's 15 characters), x's end 10.77.i.1/24 and
fd00:77:0:i::1/64, y's end .2 and ::2, IPv6 without duplicate address detection
(``nodad``: usable at once) and ``keep_addr_on_down`` (a link taken down and up
again keeps its addresses, as a cable pulled and put back would). The addresses
exist only inside the namespaces, so nothing here reaches another host.

Cleanup, always (normal exit, an exception, a failed setup half way): the
processes started with start() are stopped by pid with their process groups,
then each veth and namespace this object made is deleted, nothing else. Every
command has a time bound.

Root and iproute2's ``ip`` are needed: need_namespaces() skips without them,
and fails under CI (shunttest.missing), as every missing tool does.
"""

import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shunttest import REPO, Server, missing, need_tool, run_cmd

sys.path.insert(0, str(REPO / "bench"))
from vethpair import IP_TIMEOUT, ip  # noqa: E402
_sets = itertools.count(1)


def need_namespaces():
    """Root and `ip`, and the kernel lets us make a network namespace: else
    a skip, or a failure under CI."""
    if os.geteuid() != 0:
        missing("network namespaces and veth pairs need root")
    need_tool("ip", package="iproute2")
    name = "shunt-%d-probe" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=IP_TIMEOUT)
    if r.returncode != 0:
        missing("cannot make a network namespace (ip netns add: %s)" % r.stderr.strip())
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=IP_TIMEOUT)


class Namespaces:
    """Network namespaces NAMES joined by veth pairs LINKS ((x, y) pairs of
    names); a context manager that always removes what it made."""

    def __init__(self, names, links=(), logdir=None):
        self.seq = next(_sets)
        self.prefix = "shunt-%d-%d" % (os.getpid(), self.seq)
        self.names = list(names)
        self.links = [tuple(l) for l in links]
        self.logdir = Path(logdir) if logdir else None
        self.made_ns = []        # full names, in the order made
        self.made_veths = []     # (namespace, device) of one end of each pair
        self.servers = []

    # ------------------------------------------------------------ setup

    def __enter__(self):
        try:
            for name in self.names:
                self._make_ns(name)
            for i, link in enumerate(self.links, 1):
                self._make_link(i, *link)
        except BaseException:
            self.cleanup(fail=False)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(fail=exc_type is None)     # an error in flight is the one to see
        return False

    def ns(self, name):
        """The full name of namespace NAME."""
        return "%s-%s" % (self.prefix, name)

    def veth(self, i, end):
        dev = "s%x-%x-%d%s" % (os.getpid(), self.seq, i, end)
        assert len(dev) <= 15, dev
        return dev

    def _make_ns(self, name):
        ip("netns", "add", self.ns(name))
        self.made_ns.append(self.ns(name))
        ip("-n", self.ns(name), "link", "set", "lo", "up")

    def _subnet(self, i):
        """Link i's subnet number: i, or the one its (x, y, subnet) entry
        names (two links may share one: namespaces with identical address
        plans, as two containers have)."""
        link = self.links[i - 1]
        return link[2] if len(link) > 2 else i

    def _make_link(self, i, x, y, *_):
        ends = [(x, self.veth(i, "x"), 1), (y, self.veth(i, "y"), 2)]
        sub = self._subnet(i)
        ip("link", "add", ends[0][1], "type", "veth", "peer", "name", ends[1][1])
        self.made_veths.append((None, ends[0][1]))
        for name, dev, host in ends:
            ip("link", "set", dev, "netns", self.ns(name))
            self.made_veths[-1] = (self.ns(name), dev)      # deleting one end deletes the pair
            self.run(name, ["sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/%s/keep_addr_on_down" % dev],
                     timeout=IP_TIMEOUT, check=True)
            ip("-n", self.ns(name), "addr", "add", "10.77.%d.%d/24" % (sub, host), "dev", dev)
            ip("-n", self.ns(name), "addr", "add", "fd00:77:0:%x::%d/64" % (sub, host), "dev", dev, "nodad")
            ip("-n", self.ns(name), "link", "set", dev, "up")

    # ------------------------------------------------------------ addresses

    def _link_of(self, name, peer):
        for i, (x, y, *_) in enumerate(self.links, 1):
            if peer is None and name in (x, y) or {x, y} == {name, peer}:
                return i, ("x" if x == name else "y")
        raise KeyError("no link of %s%s" % (name, " to %s" % peer if peer else ""))

    def addr(self, name, family=4, peer=None):
        """NAME's address (family 4 or 6) on its link to PEER (default: its
        first link)."""
        i, end = self._link_of(name, peer)
        host, sub = (1 if end == "x" else 2), self._subnet(i)
        return "10.77.%d.%d" % (sub, host) if family == 4 else "fd00:77:0:%x::%d" % (sub, host)

    # ------------------------------------------------------------ running

    def cmd(self, name, argv):
        """argv run inside namespace NAME (the environment passes through)."""
        return ["ip", "netns", "exec", self.ns(name)] + [str(a) for a in argv]

    def run(self, name, argv, timeout=60, env=None, input=None, check=False):
        """run_cmd inside NAME: its own process group, killed by pid at the
        time bound (the test fails then)."""
        r = run_cmd(self.cmd(name, argv), timeout=timeout, env=env, input=input)
        if check and r.returncode != 0:
            raise RuntimeError("%s in %s failed (%d): %s" % (argv, name, r.returncode,
                                                            r.stderr.decode(errors="replace")[-2000:]))
        return r

    def start(self, name, argv, env=None, proc_name=None):
        """A shunttest.Server running argv inside NAME (`ip netns exec` execs
        it: its pid is the program's), stopped at cleanup."""
        if self.logdir is None:
            self.logdir = Path(tempfile.mkdtemp(prefix=self.prefix + "-"))
        logdir = self.logdir
        s = Server(self.cmd(name, argv), None, env, logdir, proc_name or "%s-%d" % (name, len(self.servers)))
        self.servers.append(s)
        return s

    # ------------------------------------------------------------ failures

    def link_set(self, x, y, state):
        """The veth between X and Y "down" or "up" (X's end: its peer's
        carrier follows)."""
        i, end = self._link_of(x, y)
        ip("-n", self.ns(x), "link", "set", self.veth(i, end), state)

    def outage(self, x, y):
        """Context manager: the link between X and Y down inside, up after."""
        nets = self

        class _Outage:
            def __enter__(self):
                nets.link_set(x, y, "down")

            def __exit__(self, *exc):
                nets.link_set(x, y, "up")
                return False

        return _Outage()

    # ------------------------------------------------------------ cleanup

    def cleanup(self, fail=True):
        """Stop our processes, delete our veths and namespaces; what could
        not be deleted (after trying all of it) fails the test if FAIL, else
        is only printed."""
        errors = []
        for s in reversed(self.servers):
            try:
                s.stop()
            except Exception as e:    # noqa: BLE001 -- go on with the rest
                errors.append("stopping %s: %s" % (s.name, e))
        self.servers = []
        for ns, dev in reversed(self.made_veths):
            r = ip(*(["-n", ns] if ns else []), "link", "del", dev, check=False)
            if r.returncode != 0 and "Cannot find device" not in r.stderr:
                errors.append("ip link del %s: %s" % (dev, r.stderr.strip()))
        self.made_veths = []
        for ns in reversed(self.made_ns):
            r = ip("netns", "delete", ns, check=False)
            if r.returncode != 0:
                errors.append("ip netns delete %s: %s" % (ns, r.stderr.strip()))
        self.made_ns = []
        if errors:
            message = "cleaning up network namespaces: " + "; ".join(errors)
            if fail:
                pytest.fail(message, pytrace=False)
            print(message)


def left_over(prefix):
    """What a cleanup left of the Namespaces whose prefix is PREFIX: its
    namespaces, and its veths still in this namespace (one moved into a
    namespace goes with it; cleanup deletes those first anyway)."""
    ns = [l.split()[0] for l in ip("netns", "list").stdout.splitlines() if l.startswith(prefix)]
    pid_seq = prefix.split("-")[1:3]
    dev_prefix = "s%x-%x-" % (int(pid_seq[0]), int(pid_seq[1]))
    links = [l for l in ip("-o", "link").stdout.splitlines() if (" %s" % dev_prefix) in l]
    return ns + links
