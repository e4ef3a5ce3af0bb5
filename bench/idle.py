#!/usr/bin/env python3
"""idle.py: one busy connection beside N idle ones in one epoll loop, over
kernel TCP and under shunt (O2G's figure 5).

    python3 bench/idle.py [--build build] [--n 1,10,100,1000,10000] [--rounds 3]
                          [--place both|server|client|unwatched] [--control]
                          [--shunt-env NAME=VALUE ...] [--markdown]

Compiles bench/idle_conns.c (and bench/shm_idle.c) into <build>/bench/, then
runs it plainly and under `shunt run --` for every N, --rounds times: each
round runs every N, kernel and shunt in turn, so that all the figures of a
round are taken in the same few seconds.  Reports the medians: one-way
latency of 64-byte ping-pongs on the busy connection and its streaming
throughput, shunt against kernel TCP at the same N, and, as the cost of the
idle ones, the median over the rounds of each round's figure at N divided by
the same round's figure at the first N (a ratio of figures taken minutes
apart would measure the machine's drift as much as the idle connections).
--place is idle_conns' -i (which process holds the idle ends).  --control
also runs bench/shm_idle (a spinning shared-memory ping-pong without shunt,
with N idle segments mapped, N idle TCP connections and an epoll set of
them; its -e) in every round and prints its latency the same way.  A shunt
run whose busy connection was not accelerated (idle_conns asks libshunt) is
reported as a failure, never as a figure.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"n=(\d+) rtt_ns=(\d+) stream_mbps=([\d.]+) accelerated=(yes|no)")


def compile_bench(build, name):
    out = build / "bench" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    src = REPO / "bench" / (name + ".c")
    newest = max(src.stat().st_mtime, (REPO / "bench" / "idle_common.h").stat().st_mtime,
                 (REPO / "bench" / "bench_util.h").stat().st_mtime)
    if not out.exists() or out.stat().st_mtime < newest:
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(out), str(src), "-ldl"], check=True)
    return out


def run_control(exe, n, opts):
    p = subprocess.run([str(exe), str(n), "-r", str(opts.round_trips), "-e"], capture_output=True, text=True,
                       timeout=opts.timeout)
    m = re.search(r"rtt_ns=(\d+)", p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"shm_idle {n} failed: {(p.stderr or p.stdout).strip()[-300:]}")
    return int(m.group(1)) / 2000.0


def paired(per_round, n, base):
    """The median over rounds of round[n] / round[base]."""
    return statistics.median(r[n] / r[base] for r in per_round)


def run_once(exe, n, shunt, opts):
    argv = [str(exe), str(n), "-r", str(opts.round_trips), "-b", str(opts.stream_mib), "-i", opts.place]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shunt:
        argv = [str(opts.build / "shunt"), "run", "--"] + argv
        for kv in opts.shunt_env:
            k, _, v = kv.partition("=")
            env[k] = v
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=opts.timeout)
    m = LINE.search(p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"idle_conns {n} ({'shunt' if shunt else 'kernel'}) failed: "
                           f"{(p.stderr or p.stdout).strip()[-300:]}")
    if shunt and m.group(4) != "yes":
        raise RuntimeError(f"idle_conns {n} under shunt ran on kernel TCP: not a shunt figure")
    return int(m.group(2)) / 2000.0, float(m.group(3))   # one-way us, MB/s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--n", default="1,10,100,1000,10000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-trips", type=int, default=20000)
    ap.add_argument("--stream-mib", type=int, default=256)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--place", default="both", choices=("both", "server", "client", "unwatched"))
    ap.add_argument("--control", action="store_true")
    ap.add_argument("--shunt-env", action="append", default=[])
    ap.add_argument("--markdown", action="store_true")
    opts = ap.parse_args(argv)
    opts.build = opts.build.resolve()
    exe = compile_bench(opts.build, "idle_conns")
    control = compile_bench(opts.build, "shm_idle") if opts.control else None
    ns = [int(x) for x in opts.n.split(",")]
    rounds = []   # per round: {(figure, variant): {n: value}}
    for r in range(opts.rounds):
        fig = {}
        for n in ns:
            for shunt in (False, True):
                print(f"  round {r + 1}/{opts.rounds} N={n} {'shunt' if shunt else 'kernel'}...",
                      file=sys.stderr, flush=True)
                l, t = run_once(exe, n, shunt, opts)
                fig.setdefault(("lat", shunt), {})[n] = l
                fig.setdefault(("tp", shunt), {})[n] = t
            if control:
                fig.setdefault(("lat", "control"), {})[n] = run_control(control, n, opts)
        rounds.append(fig)

    def median(key, n):
        return statistics.median(f[key][n] for f in rounds)

    def vs_base(key, n):
        return paired([f[key] for f in rounds], n, ns[0])

    res = {n: {k: (median(("lat", k), n), median(("tp", k), n)) for k in (False, True)} for n in ns}
    head = ("| idle N | kernel one-way µs | shunt one-way µs | shunt/kernel latency | "
            f"kernel MB/s | shunt MB/s | shunt/kernel tp | kernel lat vs N={ns[0]} | shunt lat vs N={ns[0]} | "
            f"kernel tp vs N={ns[0]} | shunt tp vs N={ns[0]} |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in ns:
        (kl, kt), (sl, st) = res[n][False], res[n][True]
        print(f"| {n} | {kl:.2f} | {sl:.2f} | {sl / kl:.3f} | {kt:.0f} | {st:.0f} | {st / kt:.2f} | "
              f"{vs_base(('lat', False), n):.2f} | {vs_base(('lat', True), n):.2f} | "
              f"{vs_base(('tp', False), n):.2f} | {vs_base(('tp', True), n):.2f} |")
    if control:
        print()
        print(f"| idle N | shm_idle -e one-way µs | shm_idle lat vs N={ns[0]} |")
        print("|---|---|---|")
        for n in ns:
            print(f"| {n} | {median(('lat', 'control'), n):.3f} | {vs_base(('lat', 'control'), n):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
