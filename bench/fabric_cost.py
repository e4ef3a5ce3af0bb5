#!/usr/bin/env python3
"""fabric_cost.py: what `shunt fabric enable` costs a connection.

Connect rate between two network namespaces joined by a veth pair, with the
sock_ops program attached and without it, in interleaved rounds (the order
within a round alternates), each round N connects one after another
(connect, read SO_COOKIE, close) against a server that saves SYNs and reads
the option (tests/programs/synopt_peer.c).  Prints each round and the
medians.  Root; leaves fabric as it found it and deletes its namespaces.

  bench/fabric_cost.py [--build build] [--rounds 20] [--connects 3000] [--addr 10.78.0.1]
"""
import argparse
import os
import statistics
import subprocess
import sys


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def one_round(peer, a, b, addr, n, port):
    srv = subprocess.Popen(["ip", "netns", "exec", a, peer, "serve", addr, str(port), str(n)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        out = subprocess.run(["ip", "netns", "exec", b, peer, "rate", addr, str(port), str(n)],
                             check=True, capture_output=True, text=True, timeout=600).stdout
        srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    _, count, secs = out.split()
    return int(count) / float(secs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--connects", type=int, default=3000)
    ap.add_argument("--addr", default="10.78.0.1")
    args = ap.parse_args()
    shunt = os.path.join(args.build, "shunt")
    peer = os.path.join(args.build, "tests", "programs", "synopt_peer")
    was = subprocess.run([shunt, "fabric", "status"], capture_output=True).returncode == 0
    a, b = "shunt-cost-a%d" % os.getpid(), "shunt-cost-b%d" % os.getpid()
    six = ":" in args.addr
    peer_addr = "fd78::2" if six else "10.78.0.2"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", "sca", "netns", a, "type", "veth", "peer", "name", "scb", "netns", b)
        for ns, dev, ad in ((a, "sca", args.addr), (b, "scb", peer_addr)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", ad + ("/64" if six else "/24"), "dev", dev, *(["nodad"] if six else []))
            sh("ip", "-n", ns, "link", "set", dev, "up")
        rates = {"off": [], "on": []}
        for r in range(args.rounds):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            line = []
            for mode in order:
                sh(shunt, "fabric", "enable" if mode == "on" else "disable")
                rate = one_round(peer, a, b, args.addr, args.connects, 5400 + r)
                rates[mode].append(rate)
                line.append("%s %.0f/s" % (mode, rate))
            print("round %2d: %s" % (r + 1, ", ".join(line)), flush=True)
        off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
        print("median connects/s: without %.0f, with %.0f (%+.1f%%); per connection %.2f us -> %.2f us (%+.2f us)"
              % (off, on, 100 * (on - off) / off, 1e6 / off, 1e6 / on, 1e6 / on - 1e6 / off))
    finally:
        subprocess.run([shunt, "fabric", "enable" if was else "disable"], capture_output=True)
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
