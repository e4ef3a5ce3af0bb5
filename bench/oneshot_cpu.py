#!/usr/bin/env python3
"""oneshot_cpu.py: what a process that starts, makes one connection and
exits pays for libshunt.so, in CPU time rather than wall time (issue 18's
"a program run once per connection"): the children's user + system time
from getrusage, far steadier on this noisy machine than the wall clock.

    python3 bench/oneshot_cpu.py [--build build] [--runs 400]

Runs `redis-cli -p PORT PING` against a plain redis-server, one run per
variant in turn (the order reversed every other turn), --runs times each:
no preload (kernel TCP), an empty preloaded library (bench/null_shim.so:
the floor of any preload), libshunt.so, and libshunt.so with SHUNT_ACCEL=0.
Every connection of a one-shot redis-cli is kernel TCP after the first few
(the shared verdict "short", core/conn/short_conns.c), so what the library
adds is its start, its look at the connection and its exit.  Prints each
variant's median CPU time a run and what it adds to kernel TCP's.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import clean_env, free_port, stop_group  # noqa: E402
import oneshot  # noqa: E402


def cpu_of(argv, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=400)
    opts = ap.parse_args()
    build = Path(opts.build).resolve()
    lib, null = build / "libshunt.so", build / "bench" / "null_shim.so"
    for f in (lib, null):
        if not f.exists():
            sys.exit("%s is missing: make && make bench" % f)
    port = free_port()
    env = clean_env()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        argv = ["redis-cli", "-p", str(port), "PING"]
        oneshot.wait_ping(argv[:-1], env)   # it adds PING
        variants = {
            "kernel TCP": {},
            "empty preload": {"LD_PRELOAD": str(null)},
            "libshunt.so": {"LD_PRELOAD": str(lib), "SHUNT_LOG": "warn"},
            "libshunt.so, SHUNT_ACCEL=0": {"LD_PRELOAD": str(lib), "SHUNT_LOG": "warn", "SHUNT_ACCEL": "0"},
        }
        cpu = {name: [] for name in variants}
        names = list(variants)
        for i in range(opts.runs):
            for name in (names if i % 2 == 0 else names[::-1]):
                cpu[name].append(cpu_of(argv, dict(env, **variants[name])))
    finally:
        stop_group(server)
    base = statistics.median(cpu["kernel TCP"])
    print("%d runs of %s each, CPU time a run (user + system), medians:" % (opts.runs, " ".join(argv[:1] + argv[3:])))
    for name in names:
        m = statistics.median(cpu[name])
        print("  %-28s %7.0f us   +%5.0f us over kernel TCP   %.3fx its rate" % (name, m, m - base, base / m))


if __name__ == "__main__":
    main()
