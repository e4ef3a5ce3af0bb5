#!/usr/bin/env python3
"""oneshot.py: programs started again and again for one short connection
each, as a script runs redis-cli, curl or psql -c (issue 18, "never slower
than the kernel" for short connections): the rate of whole client runs over
kernel TCP, a Unix domain socket and shunt, in one run.

    python3 bench/oneshot.py [--build build] [--rounds 8] [--runs 200]

Three redis-servers (a plain one on a TCP port, a plain one on a Unix
socket, one under shunt); a round times --runs invocations of
`redis-cli PING` one after another from a shell without shunt, for each
server, the transports in an order that alternates from round to round.
Under shunt every redis-cli is preloaded with libshunt.so (the server
is preloaded with it too), so each run pays for loading the library and for
its one connection: accelerated while the verdict on redis-cli's
connections to that listener is not yet "short" (the first four runs and
the samples), kernel TCP after (core/conn/short_conns.c).  Loopback
sockets in TIME_WAIT are removed before each timed batch as root, as
`shunt bench` does.  Prints the medians of the time per run and the ratios
of rates against kernel TCP and the Unix socket.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import clean_env, free_port, stop_group  # noqa: E402
import shuntbench  # noqa: E402


def wait_ping(argv, env, deadline=15.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        r = subprocess.run(argv + ["PING"], env=env, capture_output=True, text=True, timeout=10)
        if r.stdout.strip() == "PONG":
            return
        time.sleep(0.1)
    raise SystemExit("redis-server did not answer: %s" % " ".join(argv))


def batch(cli_args, runs, preload):
    """Seconds for runs invocations of redis-cli, one after another."""
    prefix = "LD_PRELOAD=%s " % preload if preload else ""
    script = 'i=0; while [ $i -lt %d ]; do %sredis-cli %s PING >/dev/null || exit 1; i=$((i+1)); done' % (
        runs, prefix, cli_args)
    t0 = time.perf_counter()
    r = subprocess.run(["sh", "-c", script], env=clean_env(), timeout=600)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit("a redis-cli run failed: %s" % cli_args)
    return took


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=HERE.parent / "build")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=200, help="redis-cli invocations per transport and round")
    ap.add_argument("--preload", help="the library the shunt runs load (default BUILD/libshunt.so)")
    opts = ap.parse_args(argv)
    for tool in ("redis-server", "redis-cli"):
        if not shutil.which(tool):
            raise SystemExit("%s is needed (apt-get install redis-server redis-tools)" % tool)
    lib = str(Path(opts.preload or opts.build / "libshunt.so").resolve())
    flush = os.geteuid() == 0 and shutil.which("ss") is not None
    tmp = tempfile.mkdtemp(prefix="oneshot-")
    sock = os.path.join(tmp, "redis.sock")
    tcp_port, shunt_port = free_port(), free_port()
    common = ["--save", "", "--appendonly", "no", "--daemonize", "no"]
    servers = [
        subprocess.Popen(["redis-server", "--port", str(tcp_port)] + common, env=clean_env(),
                         stdout=subprocess.DEVNULL, start_new_session=True),
        subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock] + common, env=clean_env(),
                         stdout=subprocess.DEVNULL, start_new_session=True),
        subprocess.Popen(["redis-server", "--port", str(shunt_port)] + common, env=dict(clean_env(), LD_PRELOAD=lib),
                         stdout=subprocess.DEVNULL, start_new_session=True),
    ]
    cases = [("kernel TCP", "-p %d" % tcp_port, None), ("Unix socket", "-s %s" % sock, None),
             ("shunt", "-p %d" % shunt_port, lib)]
    times = {name: [] for name, _, _ in cases}
    try:
        wait_ping(["redis-cli", "-p", str(tcp_port)], clean_env())
        wait_ping(["redis-cli", "-s", sock], clean_env())
        wait_ping(["redis-cli", "-p", str(shunt_port)], clean_env())
        for rnd in range(opts.rounds):
            order = cases if rnd % 2 == 0 else list(reversed(cases))
            for name, args, preload in order:
                if flush:
                    shuntbench.flush_time_wait()
                t = batch(args, opts.runs, preload)
                times[name].append(t / opts.runs * 1e6)
                print("round %d %-12s %8.1f us a run" % (rnd + 1, name, times[name][-1]), flush=True)
    finally:
        for p in servers:
            stop_group(p)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {name: statistics.median(v) for name, v in times.items()}
    print()
    print("%d rounds of %d redis-cli runs, medians:" % (opts.rounds, opts.runs))
    for name, _, _ in cases:
        print("  %-12s %8.1f us a run" % (name, med[name]))
    per = [k / s for k, s in zip(times["kernel TCP"], times["shunt"])]
    per_unix = [u / s for u, s in zip(times["Unix socket"], times["shunt"])]
    print("shunt against kernel TCP: %.3fx the rate (median of the rounds' ratios %.3fx, %.2f to %.2f)"
          % (med["kernel TCP"] / med["shunt"], statistics.median(per), min(per), max(per)))
    print("shunt against the Unix socket: %.3fx (median of the rounds' ratios %.3fx)"
          % (med["Unix socket"] / med["shunt"], statistics.median(per_unix)))


if __name__ == "__main__":
    main()
