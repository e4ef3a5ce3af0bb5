#!/usr/bin/env python3
"""downloads.py: a download on a fresh connection each time (one request, an
answer of SIZE bytes, the server closing at once: HTTP/1.0, FTP's data
connection, `nc < file`), over kernel TCP, a Unix socket and under shunt.

    python3 bench/downloads.py [--build build] [--rounds 3] [--sizes 65536,1048576,...]
    python3 bench/downloads.py --preload OTHER/libshunt.so      # another library for shunt's column
    python3 bench/downloads.py --busy 2                          # beside two CPU-bound loops

Each run is `pingpong -t tcp|unix -m get -s SIZE -n N` (N so that a run moves
about 256 MiB, at least 16 and at most 2,000 connections); shunt's is the same
under `shunt run --` (or LD_PRELOAD of --preload), both processes preloaded.
The three transports alternate, their order reversed every other round, and
as root loopback sockets in TIME_WAIT are removed before each run
(shuntbench.flush_time_wait).  Prints, per size, the median time a connection
took and the ratios of the rates (kernel TCP's time over shunt's: above 1 is
shunt faster), and how many of shunt's connections were accelerated (the
rest were kernel TCP by the short-connection rule).  --busy N runs N
CPU-bound loops beside every run (this interpreter, started and ended by
the script itself, so none outlives it: `python3 -c ... &` from a shell
where python3 is a pyenv shim leaves the loop running when the shell kills
the shim's pid, and busy runs of 2026-11-29 had more loops than they said).
docs/benchmarks.md, "Downloads", has its figures.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import shuntbench  # noqa: E402
from benchlib import clean_env  # noqa: E402

SIZES = [65536, 262144, 1 << 20, 4 << 20, 16 << 20]
MOVED = 256 << 20


def run(build, transport, size, n, shunt=None):
    cmd = [str(build / "bench" / "pingpong"), "-t", transport, "-m", "get", "-s", str(size), "-n", str(n), "-d", "10"]
    env = clean_env()
    if shunt == "run":
        cmd = [str(build / "shunt"), "run", "--"] + cmd
        env["SHUNT_LOG"] = "off"
    elif shunt:
        env["LD_PRELOAD"] = shunt
    shuntbench.flush_time_wait()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    m = re.search(r"^get size=\d+ connections=(\d+) total_ns=(\d+)$", r.stdout, re.M)
    a = re.search(r"accel_child=(-?\d+)", r.stdout)
    if not m or not a:
        sys.exit("unexpected output of %s:\n%s" % (" ".join(cmd), r.stdout))
    conns = int(m.group(1))
    return int(m.group(2)) / conns / 1000.0, int(a.group(1)), conns


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    p.add_argument("--preload", help="this libshunt.so (LD_PRELOAD) instead of `shunt run`")
    p.add_argument("--busy", type=int, default=0, help="CPU-bound loops to run beside (default 0)")
    a = p.parse_args()
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        measure(a)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def measure(a):
    build = a.build.resolve()
    shunt = str(Path(a.preload).resolve()) if a.preload else "run"
    sizes = [int(s) for s in a.sizes.split(",")]
    times = {(s, t): [] for s in sizes for t in ("tcp", "unix", "shunt")}
    accel = {s: [] for s in sizes}
    for rnd in range(a.rounds):
        for size in sizes:
            n = max(16, min(2000, MOVED // size))
            order = ["tcp", "unix", "shunt"]
            if rnd % 2:
                order.reverse()
            for t in order:
                us, acc, conns = run(build, "tcp" if t == "shunt" else t, size, n, shunt if t == "shunt" else None)
                times[(size, t)].append(us)
                if t == "shunt":
                    accel[size].append("%d of %d" % (acc, conns))
                print("  round %d/%d  %8d B  %-5s %9.1f us a connection%s" % (
                    rnd + 1, a.rounds, size, t, us, ", %d accelerated" % acc if t == "shunt" else ""),
                    file=sys.stderr, flush=True)
    print("| answer | kernel TCP (µs a connection) | Unix socket | shunt | shunt vs TCP (rate) | Unix vs TCP | "
          "accelerated under shunt, per round |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for size in sizes:
        k, u, s = (statistics.median(times[(size, t)]) for t in ("tcp", "unix", "shunt"))
        label = "%d KiB" % (size >> 10) if size < (1 << 20) else "%d MiB" % (size >> 20)
        print("| %s | %.1f | %.1f | %.1f | %.2fx | %.2fx | %s |" % (label, k, u, s, k / s, k / u, ", ".join(accel[size])))


if __name__ == "__main__":
    main()
