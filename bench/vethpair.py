"""vethpair.py: two network namespaces joined by a veth pair, and `ip` with a
time bound (python3 stdlib only: `shunt bench --netns`, installed with it,
and the conformance runner and the integration tests' netns.py use it).

    with VethPair(("x", "y"), ("vx", "vy"), (["10.0.0.1/24"], ["10.0.0.2/24"])) as pair:
        ...   # processes started with `ip netns exec x ...`

Each namespace gets ``lo`` up; each end of the pair its addresses (IPv6 ones
without duplicate address detection, ``nodad``: usable at once) and is set up.
The namespaces made are deleted on leaving, whatever happened (a setup that
failed half way included); the veth pair goes with them.  Needs root and
iproute2's ``ip``.
"""

import subprocess

IP_TIMEOUT = 10          # seconds for one `ip` command


def ip(*args, check=True):
    """Run `ip ARGS` with a time bound; with check, a failure raises with its stderr."""
    argv = ["ip"] + [str(a) for a in args]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s took over %ds" % (" ".join(argv), IP_TIMEOUT))
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r


class Scoped:
    """A context whose setup() undoes itself with cleanup() if it fails half
    way, and whose leaving always runs cleanup()."""

    def __enter__(self):
        try:
            self.setup()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False


class VethPair(Scoped):
    def __init__(self, names, veths, addrs):
        self.names, self.veths, self.addrs = tuple(names), tuple(veths), tuple(addrs)
        self.made = []

    def setup(self):
        for ns in self.names:
            ip("netns", "add", ns)
            self.made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "add", self.veths[0], "netns", self.names[0], "type", "veth", "peer", "name", self.veths[1],
           "netns", self.names[1])
        for ns, dev, addrs in zip(self.names, self.veths, self.addrs):
            for a in addrs:
                ip("-n", ns, "addr", "add", a, "dev", dev, *(["nodad"] if ":" in a else []))
            ip("-n", ns, "link", "set", dev, "up")

    def cleanup(self):
        """Deletes the namespaces made; every one is tried.  The failures, in words."""
        errors = []
        while self.made:
            ns = self.made.pop()
            r = ip("netns", "delete", ns, check=False)
            if r.returncode != 0:
                errors.append("ip netns delete %s: %s" % (ns, r.stderr.strip()))
        return errors
