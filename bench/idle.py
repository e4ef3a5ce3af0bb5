#!/usr/bin/env python3
"""idle.py: one busy connection beside N idle ones in one epoll loop, over
kernel TCP and under shunt (O2G's figure 5).

    python3 bench/idle.py [--build build] [--n 1,10,100,1000,10000] [--rounds 3]
                          [--shunt-env NAME=VALUE ...] [--markdown]

Compiles bench/idle_conns.c into <build>/bench/, then for each N runs it
plainly and under `shunt run --`, alternating kernel and shunt runs for
--rounds rounds, and reports the medians: one-way latency of 64-byte
ping-pongs on the busy connection and its streaming throughput, each also
as a ratio to the same variant's N=1 figure (the cost of the idle ones) and
shunt against kernel TCP at the same N.  A shunt run whose busy connection
was not accelerated (idle_conns asks libshunt) is reported as a failure,
never as a figure.
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


def compile_bench(build):
    out = build / "bench" / "idle_conns"
    out.parent.mkdir(parents=True, exist_ok=True)
    src = REPO / "bench" / "idle_conns.c"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(out), str(src), "-ldl"], check=True)
    return out


def run_once(exe, n, shunt, opts):
    argv = [str(exe), str(n), "-r", str(opts.round_trips), "-b", str(opts.stream_mib)]
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
    ap.add_argument("--shunt-env", action="append", default=[])
    ap.add_argument("--markdown", action="store_true")
    opts = ap.parse_args(argv)
    opts.build = opts.build.resolve()
    exe = compile_bench(opts.build)
    ns = [int(x) for x in opts.n.split(",")]
    res = {}
    for n in ns:
        lat = {False: [], True: []}
        tp = {False: [], True: []}
        for r in range(opts.rounds):
            for shunt in (False, True):
                print(f"  N={n} round {r + 1}/{opts.rounds} {'shunt' if shunt else 'kernel'}...",
                      file=sys.stderr, flush=True)
                l, t = run_once(exe, n, shunt, opts)
                lat[shunt].append(l)
                tp[shunt].append(t)
        res[n] = {k: (statistics.median(lat[k]), statistics.median(tp[k])) for k in (False, True)}
    base = res[ns[0]]
    head = ("| idle N | kernel one-way µs | shunt one-way µs | shunt/kernel latency | "
            f"kernel MB/s | shunt MB/s | shunt/kernel tp | kernel lat vs N={ns[0]} | shunt lat vs N={ns[0]} | "
            f"kernel tp vs N={ns[0]} | shunt tp vs N={ns[0]} |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in ns:
        (kl, kt), (sl, st) = res[n][False], res[n][True]
        print(f"| {n} | {kl:.2f} | {sl:.2f} | {sl / kl:.3f} | {kt:.0f} | {st:.0f} | {st / kt:.2f} | "
              f"{kl / base[False][0]:.2f} | {sl / base[True][0]:.2f} | {kt / base[False][1]:.2f} | "
              f"{st / base[True][1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
