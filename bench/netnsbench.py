"""netnsbench: the two-namespace mode of `shunt bench` (--netns, issue 19).

Two network namespaces of this host joined by a veth pair, the way containers
of one machine talk: the server end of every run (bench/pingpong's parent) in
namespace a (10.78.0.1/24), the client end (its child, which re-execs itself
under `ip netns exec b`, pingpong -X) in namespace b (10.78.0.2/24).  The
addresses exist only inside the namespaces: nothing leaves the machine.  The
namespaces are bn-<pid>-a and bn-<pid>-b, the veth ends bn<pid>a and bn<pid>b;
they are deleted when the run ends, however it ends (a SIGKILL leaves them:
the next run deletes those of processes that are gone).

The columns (TRANSPORTS; the order is the order of a round):

  tcp     kernel TCP across the veth: the reference every ratio is taken to
  shunt   the same with both processes under `shunt run`: shunt's rings in
          /dev/shm, which both namespaces share; every connection must be
          accelerated on both ends, or the figure is refused
  unix    a Unix domain socket bound to a path (an abstract name belongs to
          one network namespace; a path works across namespaces that share
          a filesystem): what a user would otherwise pick
  lo      kernel TCP over 127.0.0.1 inside namespace a: what the two
          processes would get in one namespace
  client  cc and crr only: the client under shunt, the server without it:
          what a client pays to find that nobody listens accelerated in any
          namespace (every connection must be kernel TCP)
  ucx-shm both under shunt, the server with a /dev/shm of its own (a
          container's: `unshare -m` and a tmpfs; the client keeps the host's),
          so that shunt's rings cannot reach and the connection rides the
          fabric engine, UCX, on its shared-memory lanes; every connection
          must have moved at both ends (shunt_fd_accelerated)
  ucx-tcp the same on UCX's TCP lanes (SHUNT_FABRIC_LANES=tcp), which are
          slower than kernel TCP: its cost, reported, not hidden
The UCX columns run no cc or crr: a connection that carries nothing never
moves onto the fabric (it stays on TCP until its first bytes after the
hello), so there is nothing of the engine's to time.

Connections between namespaces are accelerated only on a fabric-enabled host
(`shunt fabric enable`, root, once per boot): host_problems() checks it, and
with --enable-fabric enables it (and leaves it enabled)."""

import os
import re
import subprocess
from pathlib import Path

from vethpair import VethPair, ip

PREFIX = "bn-"
ADDR = ("10.78.0.1", "10.78.0.2")     # namespace a (server), b (client); /24
CONNECTS = ("cc", "crr")
TESTS = ("pingpong", "stream", "rr", "cc", "crr")


OWN_SHM = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o mode=1777 none /dev/shm && exec "$@"', "sh"]
# the client's way back to the host's /dev/shm: this driver's mount namespace
HOST_MOUNTS = ["nsenter", "--mount=/proc/%d/ns/mnt" % os.getpid(), "--"]


class Column:
    def __init__(self, name, socket, cross, shunt, tests=TESTS, env=None, own_shm=False):
        self.name = name          # the column's title
        self.socket = socket      # pingpong -t
        self.cross = cross        # the client end in namespace b (else both in a)
        self.shunt = shunt        # None, "both" ends under shunt, or the "client" only
        self.tests = tests
        self.env = env or {}      # settings of the shunt runs that select this column
        self.own_shm = own_shm    # the server in a /dev/shm of its own (the fabric's columns)


TRANSPORTS = {
    "tcp": Column("kernel TCP (veth)", "tcp", True, None),
    "shunt": Column("shunt (veth)", "tcp", True, "both"),
    "unix": Column("Unix socket (path)", "unix", True, None),
    "lo": Column("kernel TCP (loopback)", "tcp", False, None),
    "client": Column("shunt client, plain server", "tcp", True, "client", tests=CONNECTS),
    "ucx-shm": Column("shunt over UCX shared memory", "tcp", True, "both", tests=("pingpong", "stream", "rr"),
                      own_shm=True),
    "ucx-tcp": Column("shunt over UCX TCP lanes", "tcp", True, "both", tests=("pingpong", "stream", "rr"),
                      env={"SHUNT_FABRIC_LANES": "tcp"}, own_shm=True),
}


def names():
    return {k: c.name for k, c in TRANSPORTS.items()}


# --------------------------------------------------------------------------
# the host

def fabric_enabled(shunt):
    """`shunt fabric status`: 0 enabled, 3 not, else an error (None)."""
    r = subprocess.run([shunt, "fabric", "status"], capture_output=True, text=True, timeout=30)
    return {0: True, 3: False}.get(r.returncode)


def host_problems(shunt, enable, say):
    """What keeps the mode from running here (root, ip, fabric), or [].
    With enable, a host without fabric is fabric-enabled (and left so)."""
    if os.geteuid() != 0:
        return ["--netns needs root (network namespaces, a veth pair, ip netns exec)"]
    try:
        ip("-V")
    except (OSError, RuntimeError) as e:
        return ["--netns needs iproute2's ip (%s)" % e]
    state = fabric_enabled(shunt)
    if state is None:
        return ["`%s fabric status` failed: cannot tell whether this host is fabric-enabled" % shunt]
    if state:
        return []
    if not enable:
        return ["this host is not fabric-enabled, so connections between namespaces would be kernel TCP "
                "(not_loopback): run `%s fabric enable` as root (once per boot; `shunt fabric disable` "
                "undoes it), or add --enable-fabric" % shunt]
    r = subprocess.run([shunt, "fabric", "enable"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or not fabric_enabled(shunt):
        return ["`%s fabric enable` failed: %s" % (shunt, (r.stderr or r.stdout).strip())]
    say("fabric: enabled by --enable-fabric (left enabled; `shunt fabric disable` undoes it)")
    return []


# --------------------------------------------------------------------------
# the namespaces

class Namespaces:
    """bn-<pid>-a and bn-<pid>-b joined by a veth pair; a context manager
    that always deletes them (with them, the veth pair)."""

    def __init__(self):
        pid = os.getpid()
        self.a, self.b = "%s%d-a" % (PREFIX, pid), "%s%d-b" % (PREFIX, pid)
        self.veth = ("bn%da" % pid, "bn%db" % pid)
        self.pair = VethPair((self.a, self.b), self.veth, ([ADDR[0] + "/24"], [ADDR[1] + "/24"]))

    def __enter__(self):
        remove_stale()
        self.pair.__enter__()
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def cleanup(self):
        self.pair.cleanup()

    def describe(self):
        return ("namespaces %s (server, %s) and %s (client, %s) joined by a veth pair"
                % (self.a, ADDR[0], self.b, ADDR[1]))

    def prefix(self, column, shunt):
        """What the run's command starts with: the server's namespace, and
        shunt for a column whose both ends run it."""
        return (["ip", "netns", "exec", self.a] + (OWN_SHM if column.own_shm else []) +
                ([shunt, "run", "--"] if column.shunt == "both" else []))

    def pingpong_args(self, column, shunt, rundir):
        """pingpong's arguments that place the two ends."""
        args = ["-U", str(Path(rundir) / "sock")] if column.socket == "unix" else []
        if column.socket == "tcp" and column.cross:
            args += ["-a", ADDR[0]]
        if column.cross:
            words = ((HOST_MOUNTS if column.own_shm else []) + ["ip", "netns", "exec", self.b] +
                     ([shunt, "run", "--"] if column.shunt == "client" else []))
            for w in words:
                args += ["-X", w]
        return args


def remove_stale():
    """Namespaces bn-<pid>-a/b of a run that is gone (killed by SIGKILL)."""
    r = ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        m = re.match(r"(%s(\d+)-[ab])\b" % PREFIX, line)
        if m and not os.path.exists("/proc/%s" % m.group(2)):
            ip("netns", "delete", m.group(1), check=False)
