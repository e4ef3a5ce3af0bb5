#!/usr/bin/env python3
"""pairs.py: kernel TCP against pingpong with a library preloaded, in
interleaved pairs (A B, then B A, ...), for costs of a few percent that a
run of `shunt bench` cannot tell from noise.

    python3 bench/pairs.py --pairs 40 --pin 1                    # cc, libshunt.so
    python3 bench/pairs.py --pairs 40 --pin 1 --mode crr
    python3 bench/pairs.py --pairs 40 --pin 1 --env SHUNT_ACCEL=0
    python3 bench/pairs.py --pairs 40 --pin 1 --netns              # root: across a veth

With --netns the server listens in one network namespace and the client
connects from another over a veth pair (made and deleted here, addresses
10.79.0.1 and .2), and only the client is preloaded: issue 19's "connection
set-up to a host without shunt within 5 % of kernel TCP's" (on a
fabric-enabled host, `shunt fabric enable`, such a client looks for the
destination in the host's registry and marks its socket for the SYN's
option; the line printed says whether the host was enabled).

Each run is `pingpong -t tcp -m MODE -n N` (5,000 connections by default),
once plain and once with LD_PRELOAD (and the settings given), pinned to one
CPU with --pin so that every cost of either shows in the rate.  As root,
loopback sockets in TIME_WAIT are removed before each run (as `shunt bench`
does: shuntbench.flush_time_wait).  Prints the medians of the time per
connection and of the pairs' rate ratios (preloaded against plain), with
the quartiles.  docs/benchmarks.md, "Short connections", has its figures.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import shuntbench  # noqa: E402
from vethpair import VethPair  # noqa: E402


def run(argv, env, child_accel=None):
    """µs a connection; with child_accel, the count of accelerated connections
    the client's library must report (-1: no library in the client)."""
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    m = re.search(r"connections=(\d+) total_ns=(\d+)", r.stdout)
    if r.returncode != 0 or not m:
        raise SystemExit("%s failed: %s" % (" ".join(argv), (r.stderr or r.stdout)[-400:]))
    a = re.search(r"accel_child=(-?\d+)", r.stdout)
    if child_accel is not None and (not a or int(a.group(1)) != child_accel):
        raise SystemExit("%s: the client's library said %s, not %d" % (
            " ".join(argv), a.group(1) if a else "nothing", child_accel))
    return int(m.group(2)) / int(m.group(1)) / 1000.0   # µs a connection


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=HERE.parent / "build")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--mode", choices=("cc", "crr"), default="cc")
    ap.add_argument("-n", type=int, default=5000, help="connections a run")
    ap.add_argument("--pin", help="the CPU both processes run on (taskset)")
    ap.add_argument("--preload", help="the library (default BUILD/libshunt.so)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for the preloaded runs")
    ap.add_argument("--netns", action="store_true", help="server and client in two namespaces (root)")
    opts = ap.parse_args(argv)
    pingpong = [str(opts.build / "bench" / "pingpong"), "-t", "tcp", "-m", opts.mode, "-n", str(opts.n),
                "-d", "100", "-s", "1024"]
    if opts.pin is not None:
        pingpong = ["taskset", "-c", opts.pin] + pingpong
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    lib = str(opts.preload or opts.build / "libshunt.so")
    loaded = dict(plain, LD_PRELOAD=lib, SHUNT_LOG="warn")
    loaded.update(kv.split("=", 1) for kv in opts.env)
    if opts.netns:
        return across_namespaces(opts, pingpong, plain, lib)
    return interleave(opts, lambda which: run(pingpong, plain if which == "plain" else loaded))


def across_namespaces(opts, pingpong, plain, lib):
    """The parent (server, timing) in namespace a, its child re-executed in b
    (pingpong -X), preloaded there only for the loaded runs."""
    if os.geteuid() != 0:
        raise SystemExit("--netns needs root (network namespaces)")
    shunt = str(opts.build / "shunt")
    status = subprocess.run([shunt, "fabric", "status"], capture_output=True, timeout=30).returncode
    tag = os.getpid()
    names = ("pp-%d-a" % tag, "pp-%d-b" % tag)
    with VethPair(names, ("ppa%d" % tag, "ppb%d" % tag), (["10.79.0.1/24"], ["10.79.0.2/24"])):
        child = ["-X", "ip", "-X", "netns", "-X", "exec", "-X", names[1]]
        env_words = ["env", "LD_PRELOAD=" + lib, "SHUNT_LOG=warn"] + opts.env
        server = ["ip", "netns", "exec", names[0]] + pingpong + ["-a", "10.79.0.1"]
        def one(which):
            if which == "plain":
                return run(server + child, plain, child_accel=-1)
            return run(server + child + [w for e in env_words for w in ("-X", e)], plain, child_accel=0)
        def flush():   # the namespaces' own sockets in TIME_WAIT
            for ns in names:
                subprocess.run(["ip", "netns", "exec", ns, "ss", "-K", "-t", "state", "time-wait"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        print("client preloaded in %s, server plain in %s; this host is %s" % (
            names[1], names[0], "fabric-enabled" if status == 0 else "not fabric-enabled"), flush=True)
        return interleave(opts, one, flush)


def interleave(opts, measure, flush_time_wait=shuntbench.flush_time_wait):
    flush = os.geteuid() == 0 and shutil.which("ss") is not None
    pairs = []
    for i in range(opts.pairs):
        got = {}
        for which in (("plain", "loaded") if i % 2 == 0 else ("loaded", "plain")):
            if flush:
                flush_time_wait()
            got[which] = measure(which)
        pairs.append((got["plain"], got["loaded"]))
    ratios = [k / s for k, s in pairs]   # rate of the preloaded run against kernel TCP's
    q = statistics.quantiles(ratios, n=4)
    print("%d pairs, %s, %d connections a run%s: kernel TCP %.1f µs a connection, preloaded %.1f µs; "
          "preloaded rate / kernel TCP's: median %.3f, quartiles %.3f to %.3f" % (
              opts.pairs, opts.mode, opts.n, ", CPU %s" % opts.pin if opts.pin is not None else "",
              statistics.median(k for k, _ in pairs), statistics.median(s for _, s in pairs),
              statistics.median(ratios), q[0], q[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
