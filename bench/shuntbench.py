#!/usr/bin/env python3
"""shunt bench: kernel TCP, Unix domain sockets, shunt and the shared-memory
floor, measured in one run on this machine.

Transports (the same measuring program, bench/pingpong.c, for all four):
  tcp    kernel TCP over 127.0.0.1
  unix   a Unix domain stream socket (what a program could get by
         changing its code)
  shunt  TCP over 127.0.0.1 with both processes under `shunt run`; every
         connection must be accelerated on both ends (shunt_fd_accelerated),
         or the figure is refused; in cc and crr, whose connections are
         short, most are kernel TCP by design (SHUNT_SHORT_CONNS): the
         summary says how many were accelerated
  floor  two processes and a bare shared-memory ring, no system calls:
         the floor for any shared-memory transport with a copy in and out
  memcpy no transport: one thread copying each message with memcpy between
         two reused buffers (ping-pong only), the reference of issue 6's
         "share of memcpy bandwidth"

Tests, each run once per transport per round, transports alternating:
  pingpong  NetPIPE's ping-pong from 1 B to 8 MiB, perturbed by -3, 0, +3
            bytes around each size (seed 002, section 4.2)
  stream    one-way streaming throughput
  rr        request-response rate, 1-byte messages (netperf TCP_RR)
  cc        connect/accept/close rate (netperf TCP_CC; not on the floor)
  crr       a fresh connection for each 1 KiB request and 1 KiB answer
            (netperf TCP_CRR; not on the floor)
  zpoll     a progress loop (bench/zeropoll.c): each process polls with a
            zero timeout, over and over, a set of its end of the connection,
            an idle pipe and an idle Unix socket, until the connection is
            readable, then answers 1 byte; with poll, epoll_wait and select,
            then with non-blocking recv on the connection alone.
            One-way time, and the cost of a zero-timeout wait that finds
            nothing ready (kernel TCP, Unix socket, shunt only)
  fork      busy servers (bench/busyserv.c; kernel TCP, Unix sockets and
  threads   shunt only): a server forking a process per connection (fork)
            or starting a thread per connection (threads), each request
            100 B answered with 1 KiB after --work-us of CPU (a busy loop
            calibrated once per run, the same on every transport), driven
            by N client processes sending back to back, N = --clients
            (1,2,4,8; --quick: 1,4); requests/s, and the CPU and context switches of the
            whole run per request (--busy-poll: every recv waits in poll()
            first)

--netns (root): the same tests between two network namespaces of this host
joined by a veth pair (bench/netnsbench.py): kernel TCP across the veth (the
reference of every ratio), shunt across the veth (fabric must be enabled:
`shunt fabric enable`, or --enable-fabric), a Unix socket bound to a path,
kernel TCP on loopback inside one namespace, and for cc and crr a client under
shunt against a server without it; pingpong, stream, rr, cc, crr; no
standard tools.  The UCX columns are not measured yet (not built).

Then the standard programs where installed (NPtcp, sockperf ping-pong,
throughput and under load, iperf3, redis-benchmark, wrk against nginx),
each over kernel TCP and under shunt; a missing one is skipped with the
reason.  Results: medians over the rounds, ratios within this run.

Output directory (--out): results.csv (every point of every round),
throughput.png, signature.png, saturation.png, summary.md.

Exit status: 0 everything ran and every shunt figure was accelerated;
1 a run failed, was not accelerated, or the graphs could not be drawn;
2 bad usage or a missing build; 130 interrupted.
"""

import argparse
import contextlib
import csv
import datetime
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (RunError, Variant, interrupt_on_signals, log_tail, machine, machine_line, run_client,
                      say, size_name)
import netnsbench
import plots
import stdtools

HERE = Path(__file__).resolve().parent
TRANSPORTS = ("tcp", "unix", "shunt", "floor", "memcpy")
NAMES = {"tcp": "kernel TCP", "unix": "Unix socket", "shunt": "shunt", "floor": "floor", "memcpy": "memcpy"}
ENDS = {"shunt": "both"}    # transport -> which ends run under shunt: "both", or the "client" only
ACCEL_FIELD = {"both": "yes", "client": "no"}   # results.csv's accelerated, checked, by ENDS
TESTS = ("pingpong", "stream", "rr", "cc", "crr", "zpoll", "fork", "threads")
CONNECTS = ("cc", "crr")   # a connection per transaction
CRR_SIZE = 1024
ZPOLL_WAITS = ("poll", "epoll", "select", "recv")   # bench/zeropoll.c's waits, in its order
BUSY = ("fork", "threads")                 # bench/busyserv.c's tests; size = the number of clients
BUSY_TRANSPORTS = ("tcp", "unix", "shunt")
TOOL_ORDER = ("np", "pp", "tp", "tp64", "ul", "iperf", "redis", "wrk")
SHOWN_SIZES = (1, 64, 1024, 64 * 1024, 1024 * 1024, 8 * 1024 * 1024)   # rows of the summary
RUN_TIMEOUT = 600


# --------------------------------------------------------------------------
# settings

def parse_size(text):
    m = re.fullmatch(r"(\d+)\s*([KMG]?)(i?B)?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError("a size such as 65536, 64K or 8M expected")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="shunt bench", description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="about a minute and a half: sizes 2^k only, short trials and runs, busy servers "
                        "with 1 and 4 clients, no standard tools")
    p.add_argument("--out", metavar="DIR", help="where the results go (default ./shunt-bench-DATE-TIME)")
    p.add_argument("--rounds", type=int, help="repeats of every run; medians are over them (default 3)")
    p.add_argument("--max-size", type=parse_size, default=8 * 2**20, metavar="BYTES",
                   help="largest ping-pong size (default 8M)")
    p.add_argument("--seconds", type=float,
                   help="length of each stream, rr and cc run (default 2; 0.5 with --quick); "
                        "the standard tools run for this rounded up to a second")
    p.add_argument("--tests", help="a subset of %s (default all)" % ",".join(TESTS))
    p.add_argument("--transports", help="a subset of %s (default all)" % ",".join(TRANSPORTS))
    p.add_argument("--tools", help="standard tools to run: all, none, or a list of %s "
                                   "(default all; none with --quick)" % ",".join(TOOL_ORDER))
    p.add_argument("--keep-time-wait", action="store_true",
                   help="do not remove loopback sockets in TIME_WAIT before each cc and crr run (by default "
                        "root removes them with ss -K, so that every such run starts from the same state)")
    p.add_argument("--shunt", help="the shunt command (default: the one that ran this)")
    p.add_argument("--pingpong", help="the measuring program (default: found beside shunt or this script)")
    p.add_argument("--shunt-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting for the shunt runs, e.g. SHUNT_RING_SIZE=256K (repeatable)")
    p.add_argument("--clients", metavar="N,N,...",
                   help="client processes of the busy servers (fork, threads), default 1,2,4,8 "
                        "(1,4 with --quick)")
    p.add_argument("--busy-poll", action="store_true",
                   help="the busy servers' server and clients wait in poll() before each recv, as "
                        "event-driven code does (default: blocking recv)")
    p.add_argument("--work-us", type=float, default=30.0, metavar="US",
                   help="CPU work per request of the busy servers (default 30 µs)")
    p.add_argument("--netns", action="store_true",
                   help="between two network namespaces joined by a veth pair (root; the host fabric-enabled): "
                        "transports %s; tests %s" % (",".join(netnsbench.TRANSPORTS), ",".join(netnsbench.TESTS)))
    p.add_argument("--enable-fabric", action="store_true",
                   help="with --netns: run `shunt fabric enable` if the host is not fabric-enabled (left enabled)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (outputs and shunt logs)")
    a = p.parse_args(argv)
    a.rounds = a.rounds if a.rounds is not None else 3
    a.seconds = a.seconds if a.seconds is not None else (0.5 if a.quick else 2.0)
    if a.rounds < 1 or a.seconds <= 0 or a.max_size < 1 or a.max_size > 2**30:
        p.error("--rounds must be at least 1, --seconds positive, --max-size from 1 to 1G")
    tests, transports = (netnsbench.TESTS, netnsbench.TRANSPORTS) if a.netns else (TESTS, TRANSPORTS)
    if a.netns:     # the columns of the two-namespace mode
        NAMES.update(netnsbench.names())
        ENDS.clear()
        ENDS.update({k: c.shunt for k, c in netnsbench.TRANSPORTS.items() if c.shunt})
    a.tests = [t for t in (a.tests or ",".join(tests)).split(",") if t]
    a.transports = [t for t in (a.transports or ",".join(transports)).split(",") if t]
    if not a.tests or set(a.tests) - set(tests):
        p.error("--tests takes a list of %s%s" % (",".join(tests), " with --netns" if a.netns else ""))
    if not a.transports or set(a.transports) - set(transports):
        p.error("--transports takes a list of %s%s" % (",".join(transports), " with --netns" if a.netns else ""))
    if a.enable_fabric and not a.netns:
        p.error("--enable-fabric goes with --netns")
    if a.netns and a.tools not in (None, "none"):
        p.error("--netns runs no standard tools (they talk over 127.0.0.1)")
    tools = a.tools if a.tools is not None else ("none" if a.quick or a.netns else "all")
    a.tools = {"all": list(TOOL_ORDER), "none": []}.get(tools)
    if a.tools is None:
        a.tools = [t for t in tools.split(",") if t]
        if set(a.tools) - set(TOOL_ORDER):
            p.error("--tools takes all, none or a list of %s" % ",".join(TOOL_ORDER))
    for kv in a.shunt_env:
        if not re.fullmatch(r"SHUNT_[A-Z0-9_]+=.*", kv):
            p.error("--shunt-env takes SHUNT_NAME=VALUE")
    # the sweep: NetPIPE's perturbation of 3 always; --quick keeps sizes 2^k
    # and shortens the trials
    a.sweep = ["-p", "3", "-u", str(a.max_size)] + (["-b", "pow2", "-r", "2", "-T", "2"] if a.quick
                                                     else ["-r", "3", "-T", "10"])
    a.stream_sizes = [65536] if a.quick else [1024, 65536, 1024 * 1024]
    a.zpoll = ["-n", "20000", "-e", "100"] if a.quick else ["-n", "100000", "-e", "500"]
    try:
        a.clients = [int(n) for n in (a.clients or ("1,4" if a.quick else "1,2,4,8")).split(",") if n]
    except ValueError:
        a.clients = []
    if not a.clients or min(a.clients) < 1 or max(a.clients) > 64 or not 0 < a.work_us <= 10000:
        p.error("--clients takes numbers from 1 to 64, --work-us a time up to 10000")
    # the busy servers run --seconds too, 0.4 s with --quick (12 runs a round)
    a.busy_seconds = a.seconds if not a.quick or "--seconds" in argv else 0.4
    a.iterations = None      # the busy loop's, calibrated at the first busy run
    return a


def find_programs(opts):
    """The shunt command and pingpong: given, beside this script (installed:
    lib/shunt/), or in the build tree (build/shunt, build/bench/pingpong).
    zeropoll (the zpoll test) is looked for beside pingpong."""
    shunt = opts.shunt or os.environ.get("SHUNT_BENCH_SHUNT") or str(HERE.parent / "build" / "shunt")
    candidates = [opts.pingpong] if opts.pingpong else [HERE / "pingpong", Path(shunt).parent / "bench" / "pingpong"]
    pingpong = next((str(c) for c in candidates if c and os.access(str(c), os.X_OK)), None)
    problems = []
    if pingpong and any(t in BUSY for t in opts.tests):
        busy = Path(pingpong).parent / "busyserv"
        if not os.access(str(busy), os.X_OK):
            problems.append("the measuring program busyserv is missing (looked at %s; make builds it)" % busy)
    if not os.access(shunt, os.X_OK):
        problems.append("the shunt command %s is missing (make)" % shunt)
    if pingpong is None:
        problems.append("the measuring program pingpong is missing (looked at %s; make builds it)"
                        % ", ".join(str(c) for c in candidates))
    if pingpong and "zpoll" in opts.tests and not os.access(str(Path(pingpong).parent / "zeropoll"), os.X_OK):
        problems.append("the measuring program zeropoll is missing beside %s (make builds it)" % pingpong)
    return shunt, pingpong, problems


# --------------------------------------------------------------------------
# one run of pingpong

class Measured:
    """Every point measured: rows of the CSV, and the values by key."""

    def __init__(self):
        self.rows = []          # dicts for the CSV
        self.values = {}        # (test, transport, size, metric) -> [value per round]
        self.failures = []      # (what, detail)
        self.accelerated_runs = 0
        self.client_runs = 0    # runs with the client only under shunt, checked kernel TCP
        self.short_accel = []   # (test, accelerated, connections) of each shunt cc and crr run

    def add(self, test, transport, rnd, size, metric, value, unit, accelerated=None):
        """accelerated: for a shunt cc or crr run, "N of M" connections"""
        self.rows.append({"test": test, "transport": transport, "round": rnd, "size_bytes": size,
                          "metric": metric, "value": "%.6g" % value, "unit": unit,
                          "accelerated": accelerated or ACCEL_FIELD.get(ENDS.get(transport), "n/a")})
        self.values.setdefault((test, transport, size, metric), []).append(value)

    def median(self, test, transport, size, metric):
        v = self.values.get((test, transport, size, metric))
        return statistics.median(v) if v else None


def variant_for(transport, shunt, opts, test=None):
    """How a run starts: its prefix and its environment.  With --netns, in
    the server's namespace, and the column's settings."""
    column = netnsbench.TRANSPORTS[transport] if opts.netns else None
    prefix = opts.namespaces.prefix(column, shunt) if column else [shunt, "run", "--"] if ENDS.get(transport) else []
    if not ENDS.get(transport):
        return Variant(transport, prefix, {})
    # cc and crr log at warn: at info every connection's outcome is a line
    # written by each end, a cost of the log and not of the connection
    # (kernel TCP does not pay it); acceleration is counted by the query API
    env = {"SHUNT_LOG": "warn" if test in CONNECTS else "info", "SHUNT_LOG_FILE": "{dir}/shunt-%p.log"}
    env.update(column.env if column else {})
    env.update(kv.split("=", 1) for kv in opts.shunt_env)
    return Variant(transport, prefix, env)


def pingpong_argv(pingpong, test, transport, size, opts, rundir):
    if test == "zpoll":
        return ([str(Path(pingpong).parent / "zeropoll"), "-t", "unix" if transport == "unix" else "tcp",
                 "-d", "%g" % opts.seconds] + opts.zpoll)
    if test in BUSY:
        busy = str(Path(pingpong).parent / "busyserv")
        return [busy, "-t", "unix" if transport == "unix" else "tcp", "-s", test, "-c", str(size),
                "-i", str(opts.iterations), "-d", "%g" % opts.busy_seconds] + (["-p"] if opts.busy_poll else [])
    if opts.netns:
        column = netnsbench.TRANSPORTS[transport]
        t = ["-t", column.socket] + opts.namespaces.pingpong_args(column, opts.shunt_cmd, rundir)
    else:
        t = ["-t", {"tcp": "tcp", "unix": "unix", "shunt": "tcp", "floor": "shm", "memcpy": "memcpy"}[transport]]
    if test == "pingpong":
        return [pingpong] + t + ["-m", "sweep"] + opts.sweep
    mode = {"stream": "stream", "rr": "rr", "cc": "cc", "crr": "crr"}[test]
    argv = [pingpong] + t + ["-m", mode, "-d", "%g" % opts.seconds]
    if test in ("stream", "rr", "crr"):
        argv += ["-s", str(size)]
    if test in CONNECTS:
        argv += ["-n", "20000"]   # stays clear of running out of ports to TIME_WAIT
    return argv


def check_result(out, transport, test):
    """The last line says where the bytes went; a shunt run must have been
    accelerated on both ends, the others must not have had libshunt at all.
    In cc and crr the connections are short, and most of them are kernel
    TCP by design (SHUNT_SHORT_CONNS): libshunt must be loaded on both ends,
    and both must count the same accelerated ones (returned)."""
    if test in BUSY:
        return check_busy(out, transport)
    m = re.search(r"^result transport=\S+ libshunt=(yes|no) accel_parent=(-?\d+) accel_child=(-?\d+)$", out, re.M)
    if not m:
        raise RunError("pingpong printed no result line", out)
    lib, parent, child = m.group(1) == "yes", int(m.group(2)), int(m.group(3))
    if ENDS.get(transport) == "client":
        # the server without shunt: every connection kernel TCP, libshunt
        # in the client (it counts 0 accelerated; -1 is no libshunt)
        if lib or child < 0:
            raise RunError("libshunt.so was %s; it belongs in the client only"
                           % ("loaded in the server" if lib else "not loaded in the client"), out)
        if child != 0:
            raise RunError("%d connections to a server without shunt were counted accelerated" % child, out)
        return None
    if ENDS.get(transport) != "both":
        if lib:
            raise RunError("libshunt.so was loaded in a run meant to be without shunt (LD_PRELOAD?)", out)
        return
    if not lib:
        raise RunError("libshunt.so was not loaded in the shunt run", out)
    want = 1
    if test in CONNECTS:
        want = int(re.search(r"^%s (?:size=\d+ )?connections=(\d+)" % test, out, re.M).group(1))
        if parent < 0 or child < 0 or parent > want or child < parent:
            raise RunError("libshunt counted %d accelerated connections on the accepting end and %d on the "
                           "connecting end, of %d" % (parent, child, want), out)
        return parent
    else:
        ok = parent == 1 and child == 1
    if not ok:
        raise RunError("NOT ACCELERATED: shunt_fd_accelerated says %d on the accepting end and %d on the "
                       "connecting end%s; the figure is refused"
                       % (parent, child, ""), out)


def check_busy(out, transport):
    """busyserv: every connection accelerated on both ends under shunt."""
    m = re.search(r"^result transport=\S+ libshunt=(yes|no) accel_server=(-?\d+) accel_client=(-?\d+)$", out, re.M)
    n = re.search(r"^busy server=\S+ clients=(\d+) ", out, re.M)
    if not m or not n:
        raise RunError("busyserv printed no result", out)
    lib, server, client, want = m.group(1) == "yes", int(m.group(2)), int(m.group(3)), int(n.group(1))
    if transport != "shunt":
        if lib:
            raise RunError("libshunt.so was loaded in a run meant to be without shunt (LD_PRELOAD?)", out)
    elif not lib:
        raise RunError("libshunt.so was not loaded in the shunt run", out)
    elif server != want or client != want:
        raise RunError("NOT ACCELERATED: shunt_fd_accelerated says %d of %d connections on the servers' side "
                       "and %d on the clients'; the figure is refused" % (server, want, client), out)


def calibrate(pingpong, opts, say):
    """The busy loop's iterations for --work-us, measured once for the run."""
    out = run_client([str(Path(pingpong).parent / "busyserv"), "-m", "calibrate", "-w", "%g" % opts.work_us],
                     dict(os.environ), None, 60)[1]
    m = re.search(r"^calibrate work_us=\S+ iterations=(\d+)$", out, re.M)
    if not m:
        raise RunError("busyserv could not calibrate its work", out)
    opts.iterations = int(m.group(1))
    say("  busy servers: %g µs of work per request = %d iterations of the busy loop"
        % (opts.work_us, opts.iterations))


def parse_run(out, test, size):
    """[(size, metric, value, unit)] from pingpong's output."""
    pts = []
    if test in BUSY:
        m = re.search(r"^busy server=\S+ clients=\d+ requests=(\d+) total_ns=(\d+) cpu_ns=(\d+) nvcsw=(\d+) "
                      r"nivcsw=(\d+) all_requests=(\d+)", out, re.M)
        if not m:
            raise RunError("no result in busyserv's output", out)
        req, ns, cpu, nv, niv, every = (int(g) for g in m.groups())
        every = max(every, 1)
        return [(size, "rate", req / (ns / 1e9), "requests/s"),
                (size, "cpu_us_per_request", cpu / 1e3 / every, "us"),
                (size, "voluntary_switches_per_request", nv / every, "switches"),
                (size, "involuntary_switches_per_request", niv / every, "switches")]
    if test == "pingpong":
        for m in re.finditer(r"^point size=(\d+) repeats=\d+ rtt_ns=([\d.]+)$", out, re.M):
            n, one_way = int(m.group(1)), float(m.group(2)) / 2e9
            pts += [(n, "one_way_us", one_way * 1e6, "us"), (n, "throughput", n * 8 / one_way / 1e6, "Mbit/s")]
        if not pts:
            raise RunError("no points in pingpong's sweep output", out)
        return pts
    if test == "stream":
        m = re.search(r"^stream size=(\d+) messages=(\d+) total_ns=(\d+)$", out, re.M)
        if m:
            return [(size, "throughput", int(m.group(1)) * int(m.group(2)) * 8 / (int(m.group(3)) / 1e9) / 1e6,
                     "Mbit/s")]
    if test == "rr":
        m = re.search(r"^rr size=\d+ transactions=(\d+) total_ns=(\d+)$", out, re.M)
        if m:
            return [(size, "rate", int(m.group(1)) / (int(m.group(2)) / 1e9), "transactions/s")]
    if test == "zpoll":
        for m in re.finditer(r"^zpoll wait=(\w+) one_way_ns=([\d.]+) empty_ns=(\d+) skipped=-?\d+$", out, re.M):
            pts += [(0, m.group(1) + ":one_way_us", float(m.group(2)) / 1000, "us"),
                    (0, m.group(1) + ":empty_ns", float(m.group(3)), "ns")]
        if len(pts) == 2 * len(ZPOLL_WAITS):
            return pts
    if test in CONNECTS:
        m = re.search(r"^%s (?:size=\d+ )?connections=(\d+) total_ns=(\d+)$" % test, out, re.M)
        if m:
            return [(size, "rate", int(m.group(1)) / (int(m.group(2)) / 1e9), "connections/s")]
    raise RunError("no %s result in pingpong's output" % test, out)


def plan(opts):
    """(test, transport, size) in the order of one round."""
    steps = []
    for test in opts.tests:
        sizes = (opts.stream_sizes if test == "stream" else opts.clients if test in BUSY
                 else [{"rr": 1, "crr": CRR_SIZE}.get(test, 0)])
        for size in sizes:
            for transport in opts.transports:
                if test in BUSY and transport not in BUSY_TRANSPORTS:
                    continue
                if (test in CONNECTS and transport == "floor") or (test != "pingpong" and transport == "memcpy"):
                    continue
                if test == "zpoll" and transport not in ("tcp", "unix", "shunt"):
                    continue
                if opts.netns and test not in netnsbench.TRANSPORTS[transport].tests:
                    continue
                steps.append((test, transport, size))
    return steps


def describe(test, size, opts):
    return {"pingpong": "ping-pong 1 B..%s" % size_name(opts.max_size),
            "stream": "stream %s" % size_name(size),
            "rr": "request-response %s" % size_name(size),
            "cc": "connect/accept/close",
            "crr": "connect, %s request/answer, close" % size_name(size),
            "zpoll": "zero-timeout polling 1 B",
            "fork": "process per connection, %d" % size,
            "threads": "thread per connection, %d" % size}[test]


# Loopback sockets in TIME_WAIT: what a run of short connections leaves
# behind for a minute.  Each slows the next connects (a time-wait bucket
# table that fills up makes them *faster* instead: then the kernel drops the
# state), so without care a run's figure depends on the runs before it by
# 5 to 50 % (docs/benchmarks.md, "Short connections").  Only sockets between
# loopback addresses go: the runs' own kind, nobody's connection.
TIME_WAIT_FLUSH = [["ss", "-K", "-t", "state", "time-wait", "src", "127.0.0.0/8"],
                   ["ss", "-K", "-t", "state", "time-wait", "src", "::1"]]


def time_wait_flushable(opts):
    return not opts.keep_time_wait and not opts.netns and os.geteuid() == 0 and shutil.which("ss") is not None


def flush_time_wait():
    for argv in TIME_WAIT_FLUSH:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def round_order(steps, rnd):
    """One round's steps: each test's transports in the planned order in odd
    rounds, reversed in even ones (A B C, C B A, ...).  A connection-heavy
    run leaves tens of thousands of sockets in TIME_WAIT for a minute, which
    slow the next run's connects: a fixed order would always hand them to
    the same transport."""
    if rnd % 2:
        return list(steps)
    out, group = [], []
    for step in steps:
        if group and step[0::2] != group[0][0::2]:
            out += reversed(group)
            group = []
        group.append(step)
    return out + list(reversed(group))


def run_own(opts, shunt, pingpong, workdir, res, say):
    steps = plan(opts)
    opts.flush_time_wait = any(t in CONNECTS for t, _, _ in steps) and time_wait_flushable(opts)
    total = len(steps) * opts.rounds
    k = 0
    if any(t in BUSY for t, _, _ in steps):
        try:
            calibrate(pingpong, opts, say)
        except RunError as e:
            res.failures.append(("busy servers: %s" % e.what, e.output))
            steps = [s for s in steps if s[0] not in BUSY]
            total = len(steps) * opts.rounds
    for rnd in range(1, opts.rounds + 1):
        for test, transport, size in round_order(steps, rnd):
            k += 1
            rundir = Path(workdir) / ("r%d-%s-%s-%d" % (rnd, test, transport, size))
            rundir.mkdir()
            variant = variant_for(transport, shunt, opts, test)
            argv = variant.prefix + pingpong_argv(pingpong, test, transport, size, opts, rundir)
            what = describe(test, size, opts)
            say("  [%d/%d] round %d/%d  %-28s %-11s ..." % (k, total, rnd, opts.rounds, what, NAMES[transport]),
                end="")
            if test in CONNECTS and opts.flush_time_wait:
                flush_time_wait()   # before t0: not the run's time
            t0 = time.monotonic()
            try:
                status, out = run_client(argv, variant.env(rundir), str(rundir), RUN_TIMEOUT)
                (rundir / "output").write_text(out)
                if status != 0:
                    raise RunError("pingpong exited with status %d" % status, out)
                accel = check_result(out, transport, test)
                pts = parse_run(out, test, size)
                accel_label = None
                if accel is not None:
                    conns = int(re.search(r"connections=(\d+)", out).group(1))
                    res.short_accel.append((test, accel, conns))
                    accel_label = "%d of %d" % (accel, conns)
            except RunError as e:
                detail = "    command: %s\n    output (last lines):\n%s" % (
                    shlex.join(argv), "\n".join("      " + l for l in e.output.strip().splitlines()[-12:]))
                if ENDS.get(transport):
                    detail += "\n    shunt logs (%s):\n%s" % (rundir, log_tail(rundir))
                res.failures.append(("%s, %s, round %d: %s" % (what, NAMES[transport], rnd, e.what), detail))
                say(" FAILED: %s (%.1f s)" % (e.what, time.monotonic() - t0))
                continue
            for n, metric, value, unit in pts:
                res.add(test, transport, rnd, n, metric, value, unit, accel_label)
            if ENDS.get(transport) == "both" and accel is None:
                res.accelerated_runs += 1
            res.client_runs += ENDS.get(transport) == "client"
            say(" %s%s (%.1f s)" % (headline_value(test, pts),
                                    "" if not ENDS.get(transport) else ", kernel TCP (checked)"
                                    if ENDS[transport] == "client" else ", accelerated" if accel is None
                                    else ", %d accelerated" % accel, time.monotonic() - t0))


def headline_value(test, pts):
    if test == "pingpong":
        small = min(pts, key=lambda p: p[0])
        tp = [p for p in pts if p[1] == "throughput"]
        exact = [p for p in tp if p[0] & (p[0] - 1) == 0] or tp    # a size 2^k, not a perturbed one
        big = max(exact, key=lambda p: p[0])
        return "%s: %s one-way, %s: %s" % (size_name(small[0]), fmt_us(small[2]), size_name(big[0]),
                                           fmt_rate(big[2], "Mbit/s"))
    if test == "zpoll":
        v = {metric: value for _, metric, value, _ in pts}
        return ", ".join("%s %s one-way, %.0f ns empty" % (w, fmt_us(v[w + ":one_way_us"]), v[w + ":empty_ns"])
                         for w in ZPOLL_WAITS)
    return fmt_rate(pts[0][2], pts[0][3])


# --------------------------------------------------------------------------
# formatting

def fmt_us(v):
    if v is None:
        return "-"
    return "%.2f µs" % v if v < 100 else "%.0f µs" % v


def fmt_rate(v, unit):
    if v is None:
        return "-"
    return ("%.0f %s" if v >= 100 else "%.3g %s") % (v, unit)


def columns(opts, tests):
    """The transports that run any of tests, in their order; and the
    (test, transport) pairs run."""
    planned = {(t, tr) for t, tr, _ in plan(opts)}
    return [tr for tr in opts.transports if any((t, tr) in planned for t in tests)], planned


def ratio(num, den):
    return num / den if num and den else None


def fmt_x(r):
    return "%.2fx" % r if r is not None else "-"


def fmt_pct(r):
    return "%.0f %%" % (100 * r) if r is not None else "-"


def shown_sizes(res):
    """The summary's sizes that were measured (perturbation 0)."""
    have = {k[2] for k in res.values if k[0] == "pingpong"}
    return [s for s in SHOWN_SIZES if s in have]


# the ratio columns: (title, transport, reference, format); a table has
# those whose two transports it shows.  "TCP" is kernel TCP over loopback,
# or over the veth with --netns.
RATIOS = (("shunt vs TCP", "shunt", "tcp", fmt_x), ("Unix vs TCP", "unix", "tcp", fmt_x),
          ("loopback vs TCP", "lo", "tcp", fmt_x), ("shunt client vs TCP", "client", "tcp", fmt_x),
          ("shunt / floor", "shunt", "floor", fmt_pct), ("shunt / memcpy", "shunt", "memcpy", fmt_pct))


def ratio_columns(cols):
    return [r for r in RATIOS if r[1] in cols and r[2] in cols]


def pingpong_tables(res, cols):
    """Markdown: one-way time and throughput at the summary's sizes."""
    head = "| size | " + " | ".join(NAMES[t] for t in cols)
    extra = ratio_columns(cols)
    head += "".join(" | " + e[0] for e in extra) + " |"
    sep = "|---:" * (1 + len(cols) + len(extra)) + "|"
    out = []
    for metric, title, f in (("one_way_us", "One-way time (half the round trip), median", fmt_us),
                             ("throughput", "Throughput (message size / one-way time), median",
                              lambda v: fmt_rate(v, "Mbit/s"))):
        out += ["", "**%s**" % title, "", head, sep]
        for s in shown_sizes(res):
            vals = {t: res.median("pingpong", t, s, metric) for t in cols}
            cells = [f(vals[t]) for t in cols]
            # times: better is lower, so the ratio is theirs over ours
            inv = metric == "one_way_us"
            for _, a, b, fr in extra:
                cells.append(fr(ratio(vals[b], vals[a]) if inv else ratio(vals[a], vals[b])))
            out.append("| %s | %s |" % (size_name(s), " | ".join(cells)))
    return out


def zpoll_table(res, transports):
    """Markdown: the zero-timeout polling ping-pong, one row per wait and figure."""
    cols = [t for t in transports if t in ("tcp", "unix", "shunt")]
    out = ["| wait, figure (median) | " + " | ".join(NAMES[t] for t in cols) + " | shunt vs TCP |",
           "|---" + "|---:" * (len(cols) + 1) + "|"]
    for w in ZPOLL_WAITS:
        empty = "a non-blocking read that finds nothing" if w == "recv" else "a zero-timeout call that finds nothing"
        for metric, label, f in (("one_way_us", "one-way time", fmt_us),
                                 ("empty_ns", empty, lambda v: "-" if v is None else "%.0f ns" % v)):
            vals = {t: res.median("zpoll", t, 0, w + ":" + metric) for t in cols}
            out.append("| %s: %s | %s | %s |" % (w, label, " | ".join(f(vals[t]) for t in cols),
                                                 fmt_x(ratio(vals.get("tcp"), vals.get("shunt")))))
    return out


def other_table(res, cols, planned):
    """Markdown: stream, rr, cc, crr; planned: the (test, transport) run,
    n/a for the others."""
    extra = ratio_columns(cols)
    head = "| test | " + " | ".join(NAMES[t] for t in cols) + "".join(" | " + e[0] for e in extra) + " |"
    out = [head, "|---" + "|---:" * (len(cols) + len(extra)) + "|"]
    keys = sorted({(k[0], k[2], k[3]) for k in res.values if k[0] not in ("pingpong", "zpoll") + BUSY},
                  key=lambda k: (TESTS.index(k[0]), k[1]))
    for test, size, metric in keys:
        vals = {t: res.median(test, t, size, metric) for t in cols}
        label = {"stream": "stream, %s messages (Mbit/s)" % size_name(size),
                 "rr": "request-response, %s (transactions/s)" % size_name(size),
                 "cc": "connect/accept/close (connections/s)",
                 "crr": "connect, %s request and answer, close (connections/s)" % size_name(size)}[test]
        cells = [fmt_rate(vals[t], "").strip() if (test, t) in planned else "n/a" for t in cols]
        cells += [fr(ratio(vals[a], vals[b])) if {(test, a), (test, b)} <= planned else "n/a"
                  for _, a, b, fr in extra]
        out.append("| %s | %s |" % (label, " | ".join(cells)))
    return out


def busy_table(res, transports, opts):
    """Markdown: the busy servers' requests/s by client count, ratios, and
    the CPU per request."""
    cols = [t for t in transports if t in BUSY_TRANSPORTS]
    head = ("| server | clients | " + " | ".join(NAMES[t] for t in cols) +
            " | shunt vs TCP | shunt vs Unix | Unix vs TCP | CPU µs/request (" +
            ", ".join(NAMES[t] for t in cols) + ") |")
    out = ["Requests per second, median; CPU: every process of the run over every request "
           "(%g µs of it is the work)." % opts.work_us, "", head, "|---|---:" + "|---:" * (len(cols) + 4) + "|"]
    for test in BUSY:
        for n in sorted({k[2] for k in res.values if k[0] == test}):
            vals = {t: res.median(test, t, n, "rate") for t in cols}
            cpu = [res.median(test, t, n, "cpu_us_per_request") for t in cols]
            cells = [fmt_rate(vals[t], "").strip() for t in cols]
            cells += [fmt_x(ratio(vals.get("shunt"), vals.get("tcp"))),
                      fmt_x(ratio(vals.get("shunt"), vals.get("unix"))),
                      fmt_x(ratio(vals.get("unix"), vals.get("tcp"))),
                      " / ".join("%.0f" % c if c is not None else "-" for c in cpu)]
            out.append("| %s | %d | %s |" % ({"fork": "process per connection",
                                              "threads": "thread per connection"}[test], n, " | ".join(cells)))
    return out


def curves(res, transports):
    out = {}
    for t in transports:
        sizes = sorted({k[2] for k in res.values if k[0] == "pingpong" and k[1] == t})
        pts = []
        for s in sizes:
            ow, tp = res.median("pingpong", t, s, "one_way_us"), res.median("pingpong", t, s, "throughput")
            if ow is not None and tp is not None:
                pts.append((s, ow / 1e6, tp))
        if pts:
            out[t] = pts
    return out


# --------------------------------------------------------------------------
# main

def measure(opts, shunt, pingpong, workdir, res, tools, topts, tool_res, skipped):
    """pingpong's tests, then the standard tools."""
    if opts.namespaces:
        say("between %s" % opts.namespaces.describe())
    say("measuring with bench/pingpong (%s):" % ", ".join(opts.tests))
    run_own(opts, shunt, pingpong, workdir, res, say)
    if tools:
        say("")
        say("standard tools, kernel TCP and under shunt:")
        runnable = []
        for key in tools:
            why = stdtools.missing(key)
            if why:
                skipped.append((stdtools.BENCHES[key].name, why))
                say("  skipped %s: %s" % (stdtools.BENCHES[key].name, why))
            else:
                runnable.append(key)
        topts.bench = runnable
        if runnable:
            stdtools.run_all(topts, shunt, workdir, tool_res, say)
    elif opts.netns:
        say("")
        say("standard tools: not run with --netns (they talk over 127.0.0.1)")
    elif opts.quick:
        say("")
        say("standard tools: not run with --quick (--tools LIST, or the full run, runs them)")


def main(argv):
    opts = parse_args(argv)
    shunt, pingpong, problems = find_programs(opts)
    if problems:
        for p in problems:
            print("shunt bench: " + p, file=sys.stderr)
        return 2
    out = Path(opts.out or "shunt-bench-%s" % datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print("shunt bench: cannot create %s: %s" % (out, e), file=sys.stderr)
        return 2

    interrupt_on_signals()
    opts.shunt_cmd, opts.namespaces = shunt, None
    if opts.netns:
        problems = netnsbench.host_problems(shunt, opts.enable_fabric, say)
        if problems:
            for p in problems:
                print("shunt bench: " + p, file=sys.stderr)
            return 2
    m = machine()
    started = datetime.datetime.now(datetime.timezone.utc)
    shown = list(argv)
    if "--shunt" in shown[:-1]:     # what `shunt bench` adds, not what the user typed
        i = shown.index("--shunt")
        del shown[i:i + 2]
    cmdline = shlex.join(["shunt", "bench"] + shown)
    tools = [t for t in TOOL_ORDER if t in opts.tools]
    say("shunt bench: %s in one run, medians of %d round%s"
        % (", ".join(NAMES[t] for t in opts.transports), opts.rounds, "s" if opts.rounds > 1 else ""))
    say("machine: %s" % machine_line(m))
    say("output:  %s" % out)
    if opts.netns:
        say("netns:   ratios against kernel TCP across the veth; the UCX columns' server has a /dev/shm of its "
            "own (shunt's rings cannot reach it: the connection rides the fabric engine)")
    say("")

    workdir = tempfile.mkdtemp(prefix="shunt-bench-")
    res = Measured()
    tool_res = stdtools.Results()
    skipped = []
    topts = types.SimpleNamespace(bench=[], rounds=opts.rounds, seconds=max(1, round(opts.seconds)),
                                  np_repeats=25 if opts.quick else 100, pp_mps=4000000,
                                  shunt_log="info", shunt_env=opts.shunt_env)
    t_start = time.monotonic()
    try:
        with netnsbench.Namespaces() if opts.netns else contextlib.nullcontext() as namespaces:
            opts.namespaces = namespaces
            opts.namespaces_described = namespaces.describe() if namespaces else None
            measure(opts, shunt, pingpong, workdir, res, tools, topts, tool_res, skipped)
    except RuntimeError as e:      # the namespaces could not be made (ip)
        print("shunt bench: %s" % e, file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
        return 2
    except KeyboardInterrupt:
        say("\ninterrupted; every process it started is stopped")
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        return 130

    # outputs
    units = {k: u for key in topts.bench for k, _, u, _ in stdtools.BENCHES[key](topts).metrics}
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["test", "transport", "round", "size_bytes", "metric", "value", "unit",
                                          "accelerated"])
        w.writeheader()
        w.writerows(res.rows)
        for (variant, metric), values in sorted(tool_res.values.items()):
            for i, v in enumerate(values, 1):
                w.writerow({"test": "tool:" + metric, "transport": "tcp" if variant == "kernel" else "shunt",
                            "round": i, "size_bytes": "", "metric": metric, "value": "%.6g" % v,
                            "unit": units.get(metric, ""),
                            "accelerated": "yes" if variant == "shunt" else "n/a"})
    graph_error = None
    cv = curves(res, opts.transports)
    if cv:
        try:
            plots.plot_all(cv, out, "shunt bench" + (" --netns" if opts.netns else ""),
                           labels=NAMES if opts.netns else None)
        except ImportError:
            graph_error = "graphs not drawn: python3's matplotlib is not installed (scripts/install-deps)"
    elif "pingpong" in opts.tests:
        graph_error = "graphs not drawn: no ping-pong run worked"

    md = ["# shunt bench" + (" --netns" if opts.netns else ""), "",
          "- command: `%s`" % cmdline,
          "- date: %s" % started.strftime("%Y-%m-%d %H:%M UTC"),
          "- machine: %s" % machine_line(m),
          "- medians of %d round%s; transports alternate within each round; ratios are within this run"
          % (opts.rounds, "s" if opts.rounds > 1 else ""),
          "- shunt figures: %d runs, every one accelerated on both ends (checked with shunt_fd_accelerated); "
          "a run that was not is refused and listed below" % res.accelerated_runs]
    if opts.netns:
        md += ["- between two network namespaces (--netns): %s (removed at the end), fabric enabled; the server "
               "end in the first, the client end in the second (kernel TCP (loopback): both in the first); "
               "TCP in the ratios is kernel TCP across the veth" % opts.namespaces_described,
               "- UCX columns: the server end with a /dev/shm of its own (`unshare -m` and a tmpfs, as a "
               "container's), so that shunt's rings cannot reach it and the connection rides the fabric engine, "
               "UCX (shared-memory lanes, or its TCP lanes with SHUNT_FABRIC_LANES=tcp); no cc or crr there"]
        if res.client_runs:
            md.append("- shunt client, plain server (the client under shunt, the server without): %d runs, "
                      "every connection kernel TCP on both ends "
                      "(checked with shunt_fd_accelerated)" % res.client_runs)
    if getattr(opts, "flush_time_wait", False):
        md.append("- before each cc and crr run, loopback sockets in TIME_WAIT were removed (`ss -K`), so that "
                  "every run started from the same state (--keep-time-wait leaves them)")
    for test in CONNECTS:
        counts = [(a, n) for t, a, n in res.short_accel if t == test]
        if counts:
            md.append("- %s under shunt: %d of %d connections accelerated; the others were kernel TCP by design "
                      "(reason short: SHUNT_SHORT_CONNS, docs/settings.md)"
                      % (test, sum(a for a, _ in counts), sum(n for _, n in counts)))
    md.append("")
    body = len(md)
    if "pingpong" in opts.tests:
        md += ["## Ping-pong (NetPIPE), 1 B to %s, perturbations -3, 0, +3" % size_name(opts.max_size)]
        md += pingpong_tables(res, columns(opts, ["pingpong"])[0])
        md += ["", "Graphs: [throughput](throughput.png), [signature](signature.png), "
                   "[saturation](saturation.png); every point in results.csv.", ""]
    if any(t in opts.tests for t in ("stream", "rr") + CONNECTS):
        md += ["## Streaming, request-response, connections", ""]
        md += other_table(res, *columns(opts, ("stream", "rr") + CONNECTS)) + [""]
    if "zpoll" in opts.tests:
        md += ["## Zero-timeout polling over {connection, idle pipe, idle Unix socket}", ""]
        md += zpoll_table(res, opts.transports) + [""]
    if any(t in opts.tests for t in BUSY) and any(k[0] in BUSY for k in res.values):
        md += ["## Busy servers: a process or a thread per connection, %g µs of CPU per request%s"
               % (opts.work_us, ", poll() before each recv" if opts.busy_poll else ""),
               ""] + busy_table(res, opts.transports, opts) + [""]
    if tools:
        md += ["## Standard tools, kernel TCP and under shunt", ""]
        rows = stdtools.build_table(topts, tool_res)
        if rows:
            md += [stdtools.render_markdown(rows), ""]
            md += ["- " + l.strip() for l in stdtools.accel_lines(tool_res) if not l.startswith("    ")]
        md += ["- skipped %s: %s" % s for s in skipped] + [""]
    failures = res.failures + [("%s, %s, round %d: %s" % (stdtools.BENCHES[k].name, v, r, w), d)
                               for k, v, r, w, d in tool_res.failures]
    not_acc = [a for acc in tool_res.accel.values() for a in acc if not (a[1] and a[2])]
    if failures or not_acc or graph_error:
        md += ["## Problems", ""] + ["- " + f for f, _ in failures]
        md += ["- a standard tool's shunt run was not accelerated (%d runs): its figure is not counted" % len(not_acc)
               ] if not_acc else []
        md += ["- " + graph_error] if graph_error else []
        md += [""]
    (out / "summary.md").write_text("\n".join(md))

    say("")
    for line in md[body:]:
        say(line)
    say("took %.0f s; results in %s (summary.md, results.csv%s)"
        % (time.monotonic() - t_start, out, ", " + ", ".join(plots.FILES) if cv and not graph_error else ""))
    if failures:
        say("")
        say("FAILED RUNS:")
        for what, detail in failures:
            say("  " + what)
            say(detail)
    if graph_error:
        say(graph_error)
    bad = bool(failures or not_acc or graph_error)
    if bad or opts.keep:
        say("run directory kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
