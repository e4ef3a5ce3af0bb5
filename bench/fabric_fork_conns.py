#!/usr/bin/env python3
"""fabric_fork_conns.py: what a connection to a fork-per-connection server costs on the
fabric (issue 19), against kernel TCP over the same veth, in one run.

static_peer's server (a child per connection) in namespace s with a /dev/shm of its own,
its client in namespace c making short connections one after another (each: connect,
a ping-pong of --bytes in --chunk messages, close). Three transports, rounds interleaved,
the order reversed every other round, medians:

  tcp       neither end under shunt
  shunt     both under shunt, defaults: the children have no engine and send no hello
            (SHUNT_FABRIC_FORKED=0, reason fabric_forked): kernel TCP under shunt
  forked    both under shunt with SHUNT_FABRIC_FORKED=1: each connection's server child
            opens its own engine (UCX) and sends the hello; both ends move onto the fabric

Root (namespaces, `shunt fabric enable` for the run if it is not). Prints connections/s
per round and the medians, and the ratio against kernel TCP.

  python3 bench/fabric_fork_conns.py [--conns 200] [--bytes 2000] [--chunk 200] [--rounds 5]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vethpair import VethPair

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
PEER = BUILD / "bench" / "fork_peer"   # tests/programs/static_peer.c, built here
SHUNT = BUILD / "shunt"
OWN_SHM = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o mode=1777 none /dev/shm && exec "$@"', "sh"]
ADDRS = ("10.77.97.1", "10.77.97.2")


def env_for(transport):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    if transport == "forked":
        env["SHUNT_FABRIC_FORKED"] = "1"
    return env


def wrap(transport, argv):
    return argv if transport == "tcp" else [str(SHUNT), "run", "--"] + argv


def one_round(names, transport, args):
    """Connections/s of one client run against a fresh server."""
    env = env_for(transport)
    srv = subprocess.Popen(["ip", "netns", "exec", names[1]] + OWN_SHM +
                           wrap(transport, [str(PEER), "server", "--host", ADDRS[1], "--port", "0"]),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        port = None
        deadline = time.monotonic() + 20
        while port is None and time.monotonic() < deadline:
            line = srv.stdout.readline()
            m = re.match(r"LISTENING (\d+)", line)
            if m:
                port = m.group(1)
        if port is None:
            raise RuntimeError("the server did not listen")
        start = time.monotonic()
        r = subprocess.run(["ip", "netns", "exec", names[0]] +
                           wrap(transport, [str(PEER), "client", "--host", ADDRS[1], "--port", port,
                                            "--mode", "pingpong", "--bytes", str(args.bytes), "--chunk",
                                            str(args.chunk), "--conns", str(args.conns), "--timeout", "20"]),
                           capture_output=True, text=True, env=env, timeout=300)
        elapsed = time.monotonic() - start
        if r.returncode != 0 or "CLIENT OK" not in r.stdout:
            raise RuntimeError("client failed: %s %s" % (r.stdout[-500:], r.stderr[-500:]))
        return args.conns / elapsed
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conns", type=int, default=200)
    p.add_argument("--bytes", type=int, default=2000)
    p.add_argument("--chunk", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("fabric_fork_conns.py: needs root (network namespaces)")
    PEER.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-O2", "-Wall", "-I", str(REPO / "tests" / "lib"), "-o", str(PEER),
                    str(REPO / "tests" / "programs" / "static_peer.c")], check=True)
    enabled = subprocess.run([str(SHUNT), "fabric", "status"], capture_output=True).returncode == 0
    if not enabled:
        subprocess.run([str(SHUNT), "fabric", "enable"], check=True, capture_output=True)
    names = ("ffc-%d-c" % os.getpid(), "ffc-%d-s" % os.getpid())
    transports = ["tcp", "shunt", "forked"]
    got = {t: [] for t in transports}
    try:
        with VethPair(names, ("ffc%dc" % os.getpid(), "ffc%ds" % os.getpid()),
                      ([ADDRS[0] + "/24"], [ADDRS[1] + "/24"])):
            for i in range(args.rounds):
                order = transports if i % 2 == 0 else transports[::-1]
                for t in order:
                    got[t].append(one_round(names, t, args))
                print("round %d: %s" % (i + 1, ", ".join("%s %.0f/s" % (t, got[t][-1]) for t in transports)),
                      flush=True)
    finally:
        if not enabled:
            subprocess.run([str(SHUNT), "fabric", "disable"], capture_output=True)
    med = {t: statistics.median(v) for t, v in got.items()}
    print("medians (connections/s, %d a round, %d B each in %d B messages): %s" % (
        args.conns, args.bytes, args.chunk, ", ".join("%s %.0f" % (t, med[t]) for t in transports)))
    print("against kernel TCP: shunt (defaults) %.2fx, SHUNT_FABRIC_FORKED=1 %.2fx" % (
        med["shunt"] / med["tcp"], med["forked"] / med["tcp"]))


if __name__ == "__main__":
    main(sys.argv[1:])
