#!/usr/bin/env python3
"""callcost.py: what libshunt.so adds to each call of a short connection,
measured from the program's side, call by call.

    python3 bench/callcost.py                       # both cases, 5 rounds
    python3 bench/callcost.py --case crr --rounds 7
    python3 bench/callcost.py --case nginx --env SHUNT_ACCEL=0

Whole-run rates (bench/pairs.py) say that a connection costs a few
microseconds more under shunt, but not where: each run moves by about a
microsecond.  Here build/bench/callcost_shim.so, preloaded in front, times
every call the program makes (socket, connect, accept, read, write, poll,
epoll, close, ...) and keeps its percentiles; the same run is made with the
shim alone (kernel TCP, libc behind the shim) and with libshunt.so behind it,
rounds alternating the order.  The difference of the two 25th percentiles of
a call (the call's usual cost without waiting: a blocking read's or poll's
sleep lands above it) is what shunt adds to that call, system call included;
times the calls a connection makes, summed, what it adds to a connection.

Cases, the server's processes on one CPU and the client's on the other
(--server-cpu, --client-cpu: a call that wakes a peer on its own CPU would
count the peer's run in its time):
  crr    pingpong -t tcp -m crr (a connection for each 1 KiB request and
         answer, the client closing first), N connections a run;
  nginx  nginx (master and two workers) and wrk -t1 -c1 with
         "Connection: close" for --seconds, the integration tests' nginx
         configuration.
The server is the process that accepted, the client the one that connected
(nginx's busier worker).  As root, loopback sockets in TIME_WAIT are removed
before each run (shuntbench.flush_time_wait).  Connections stay on kernel TCP
under shunt, as it decides for short ones (the samples it accelerates are a
few of thousands: their calls are in the counts, not in the 25th
percentiles); --env passes settings to the libshunt.so runs only.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import shuntbench  # noqa: E402
from benchlib import free_port  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
from shunttest import nginx_conf  # noqa: E402


def read_dump(path):
    """{call: (count, p10, p25, p50, p75)} of one process's file."""
    calls = {}
    for line in path.read_text().splitlines():
        f = line.split()
        calls[f[0]] = tuple(int(x) for x in f[1:6])
    return calls


def sides(outdir, tag):
    """(server, client) of a run: the process that accepted most, and the
    one that connected most."""
    procs = [read_dump(p) for p in outdir.glob(tag + ".*")]
    def count(p, *names):
        return sum(p.get(n, (0,))[0] for n in names)
    server = max(procs, key=lambda p: count(p, "accept", "accept4"), default=None)
    client = max(procs, key=lambda p: count(p, "connect"), default=None)
    if not server or not client or not count(server, "accept", "accept4") or not count(client, "connect"):
        raise SystemExit("%s: no server or no client among %d processes" % (tag, len(procs)))
    return server, client


def env_for(opts, outdir, tag, shunt):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    shim = str(opts.build / "bench" / "callcost_shim.so")
    env.update(CALLCOST_DIR=str(outdir), CALLCOST_TAG=tag,
               LD_PRELOAD=shim + (":" + str(opts.build / "libshunt.so") if shunt else ""))
    if shunt:
        env["SHUNT_LOG"] = "warn"
        env.update(kv.split("=", 1) for kv in opts.env)
    return env


def run_crr(opts, env):
    # pingpong's client is its child, which runs itself again under -X's
    # command: on the client's CPU
    argv = ["taskset", "-c", opts.server_cpu, str(opts.build / "bench" / "pingpong"), "-t", "tcp", "-m", "crr",
            "-n", str(opts.n), "-d", "100", "-s", "1024", "-X", "taskset", "-X", "-c", "-X", opts.client_cpu]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or "connections=" not in r.stdout:
        raise SystemExit("pingpong failed: %s" % (r.stderr or r.stdout)[-400:])


def run_nginx(opts, env, workdir):
    port = free_port()
    d = workdir / ("nginx-%d" % port)
    (d / "www").mkdir(parents=True)
    (d / "www" / "index.html").write_bytes(b"x" * 1024)
    conf = d / "nginx.conf"
    # one worker: every connection's server calls are in one process
    conf.write_text(nginx_conf(d, port, daemon=False).replace("worker_processes 2;", "worker_processes 1;"))
    srv = subprocess.Popen(["taskset", "-c", opts.server_cpu, "nginx", "-c", str(conf), "-p", str(d)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (d / "nginx.pid").exists() or not _listening(port):
            if srv.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("nginx did not start (%s)" % (d / "error.log"))
            time.sleep(0.05)
        r = subprocess.run(["taskset", "-c", opts.client_cpu, "wrk", "-t1", "-c1", "-d%ds" % opts.seconds,
                            "-H", "Connection: close", "http://127.0.0.1:%d/" % port],
                           env=env, capture_output=True, text=True, timeout=opts.seconds + 60)
        if r.returncode != 0 or "Requests/sec" not in r.stdout:
            raise SystemExit("wrk failed: %s" % (r.stderr or r.stdout)[-400:])
    finally:
        srv.send_signal(signal.SIGQUIT)   # a graceful stop: the workers exit and write their counts
        try:
            srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()


def _listening(port):
    want = ":%04X" % port
    with open("/proc/net/tcp") as f:
        return any(line.split()[1].endswith(want) and line.split()[3] == "0A" for line in f.read().splitlines()[1:])


def measure(opts, case, workdir):
    """Per round: {(side, call): (calls a connection, plain p25, shunt p25)}."""
    outdir = workdir / "counts"
    outdir.mkdir(exist_ok=True)
    flush = os.geteuid() == 0 and shutil.which("ss") is not None
    rounds = []
    for rnd in range(opts.rounds):
        got = {}
        for which in (("plain", "shunt") if rnd % 2 == 0 else ("shunt", "plain")):
            tag = "%s-%d-%s" % (case, rnd, which)
            if flush:
                shuntbench.flush_time_wait()
            env = env_for(opts, outdir, tag, which == "shunt")
            run_crr(opts, env) if case == "crr" else run_nginx(opts, env, workdir)
            got[which] = sides(outdir, tag)
        row = {}
        for i, side in enumerate(("server", "client")):
            plain, shunt = got["plain"][i], got["shunt"][i]
            conns = got["plain"][1]["connect"][0]
            for call in plain:
                if call in shunt and plain[call][0] >= conns // 2:
                    row[(side, call)] = (plain[call][0] / conns, plain[call][2], shunt[call][2])
        rounds.append(row)
        print("  round %d of %d done" % (rnd + 1, opts.rounds), file=sys.stderr, flush=True)
    return rounds


def report(case, rounds):
    keys = sorted(set.intersection(*(set(r) for r in rounds)))
    print("\n%s: what libshunt.so adds to each call (25th percentiles, ns; median over %d rounds)\n" % (
        case, len(rounds)))
    print("| side | call | calls a connection | kernel TCP | added by shunt | a connection |")
    print("|---|---|---:|---:|---:|---:|")
    total = 0.0
    for side, call in keys:
        per = statistics.median(r[(side, call)][0] for r in rounds)
        plain = statistics.median(r[(side, call)][1] for r in rounds)
        added = statistics.median(r[(side, call)][2] - r[(side, call)][1] for r in rounds)
        total += per * added
        print("| %s | %s | %.2f | %.0f | %+.0f | %+.0f |" % (side, call, per, plain, added, per * added))
    print("| | **all** | | | | **%+.0f** |" % total)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=HERE.parent / "build")
    ap.add_argument("--case", choices=("crr", "nginx", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=5000, help="crr: connections a run")
    ap.add_argument("--seconds", type=int, default=3, help="nginx: wrk's duration")
    ap.add_argument("--server-cpu", default="0", help="the CPU of the server's processes")
    ap.add_argument("--client-cpu", default="1", help="the CPU of the client's")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting for the libshunt.so runs")
    opts = ap.parse_args(argv)
    for need in (opts.build / "bench" / "callcost_shim.so", opts.build / "libshunt.so",
                 opts.build / "bench" / "pingpong"):
        if not need.exists():
            raise SystemExit("%s is missing: make && make bench" % need)
    cases = ("crr", "nginx") if opts.case == "both" else (opts.case,)
    if "nginx" in cases and not (shutil.which("nginx") and shutil.which("wrk")):
        raise SystemExit("the nginx case needs nginx and wrk (apt-get install nginx-light wrk)")
    with tempfile.TemporaryDirectory(prefix="callcost-") as tmp:
        for case in cases:
            report(case, measure(opts, case, Path(tmp)))


if __name__ == "__main__":
    main()
