"""stdtools: the standard benchmark programs, run unmodified over kernel
TCP and under `shunt run`, alternating, with the medians side by side:
sockperf (ping-pong, throughput, under load), NetPIPE (NPtcp), iperf3,
redis-benchmark against redis-server, and wrk against nginx.  Owns how
each program is started and parsed, the rounds, and the table of kernel
against shunt.  A shunt run counts only if shunt's log shows its
connections accelerated on both ends.  Used by bench/demo.py (`make
demo`) and bench/shuntbench.py (`shunt bench`)."""

import json
import os
import re
import shlex
import shutil
import statistics
import time
from pathlib import Path

from benchlib import (HOST, RunError, Server, Variant, acceleration, fmt, free_port, gain, log_tail,
                      run_client, size_name, verdict)

TP_MSG = 65536              # sockperf throughput message size
PP_MSG = 64                 # sockperf ping-pong message size
NP_MAX = 8 * 1024 * 1024    # NetPIPE upper bound
NP_SIZES = [64, 1024, 64 * 1024, 1024 * 1024, 8 * 1024 * 1024]   # shown in the table
TP_ACTIVITY = 1000          # the server prints a line per this many received messages


# --------------------------------------------------------------------------
# parsers (sockperf 3.x, NetPIPE 3.7)

def _num(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        raise RunError("cannot find %s in the output" % what, text)
    return float(m.group(1))


def parse_sockperf_pp(text):
    """One-way latency in usec (sockperf's default: half the round trip)."""
    return {
        "pp_p50": _num(r"percentile\s+50\.0+\s*=\s*([\d.]+)", text, "the 50th percentile"),
        "pp_avg": _num(r"avg-lat(?:ency)?\s*=\s*([\d.]+)", text, "avg-latency"),
        "pp_p99": _num(r"percentile\s+99\.0+\s*=\s*([\d.]+)", text, "the 99th percentile"),
    }


def parse_sockperf_tp_client(text):
    """The sender's view: messages per second and MiB/s (sockperf's "MBps"
    is 2^20 bytes per second: 21935 msg/s * 64 KiB = 1370.9 MBps)."""
    return {"tp_sent": _num(r"BandWidth is\s*([\d.]+)\s*MBps", text, "the sender's bandwidth")}


def parse_sockperf_activity(text, msg_size):
    """The receiver's view, from `sockperf sr -A N`: one line per N received
    messages with the interval it took.  The first interval also holds the
    wait for the client and its warm-up, so it is left out."""
    rows = [(float(m.group(1)), int(m.group(2))) for m in
            re.finditer(r"^\s*(\d+)\s*\[usec\]\s+\d+\s*\[msg/s\]\s+(\d+)\s*\[msg\]", text, re.M)]
    if len(rows) < 3:
        raise RunError("the server printed %d activity lines; at least 3 are needed" % len(rows), text)
    usec = sum(r[0] for r in rows[1:])
    msgs = rows[-1][1] - rows[0][1]
    return {"tp_recv": msgs / (usec / 1e6) * msg_size / 2**20}


def parse_netpipe(text):
    """NetPIPE's output file: bytes, Mbps (2^20 bit/s), one-way seconds."""
    res = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3:
            try:
                res[int(f[0])] = float(f[1])
            except ValueError:
                continue
    if NP_MAX not in res:
        raise RunError("NetPIPE's output stops before %d bytes" % NP_MAX, text)
    return res


# --------------------------------------------------------------------------
# the benchmarks

class Bench:
    key = name = ""
    metrics = []     # (key, label, unit, better) better is "lower" or "higher"
    programs = []    # what must be on PATH
    package = ""     # the Debian package(s) that bring them

    def __init__(self, opts):
        self.opts = opts

    def run(self, variant, rundir, port):
        raise NotImplementedError

    def commands(self, variant, port, rundir):
        raise NotImplementedError


class PingPong(Bench):
    key, name = "pp", "sockperf ping-pong"
    programs, package = ["sockperf"], "sockperf"
    metrics = [("pp_p50", "sockperf pp 64 B: one-way latency, median", "us", "lower"),
               ("pp_avg", "sockperf pp 64 B: one-way latency, average", "us", "lower"),
               ("pp_p99", "sockperf pp 64 B: one-way latency, p99", "us", "lower")]

    def commands(self, variant, port, rundir):
        p = str(port)
        # --mps: sockperf keeps a send time per message in a table sized
        # (1 + seconds) * mps.  With the default (--mps=max) mps counts as
        # 600000, which a round trip under ~1.6 us overruns: sockperf then
        # stops with "ERROR: _seqN > m_maxSequenceNo".  A large explicit rate
        # only sizes the table (16 bytes per message); the same for both.
        return (variant.prefix + ["sockperf", "sr", "--tcp", "-i", HOST, "-p", p],
                variant.prefix + ["sockperf", "pp", "--tcp", "-i", HOST, "-p", p,
                                  "-m", str(PP_MSG), "-t", str(self.opts.seconds),
                                  "--mps=%d" % self.opts.pp_mps])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)
        return run_pair(srv, cli, variant, rundir, port, self.opts.seconds + 30,
                        lambda out, server: parse_sockperf_pp(out))


class Throughput(Bench):
    key, name = "tp", "sockperf throughput"
    programs, package = ["sockperf"], "sockperf"
    msg = TP_MSG
    activity = TP_ACTIVITY   # the server prints a line per this many messages
    metrics = [("tp_recv", "sockperf tp 64 KiB: received (server side)", "MiB/s", "higher"),
               ("tp_sent", "sockperf tp 64 KiB: sent (client side)", "MiB/s", "higher")]

    def commands(self, variant, port, rundir):
        p = str(port)
        return (variant.prefix + ["sockperf", "sr", "--tcp", "-i", HOST, "-p", p,
                                  "-m", str(self.msg), "-A", str(self.activity)],
                variant.prefix + ["sockperf", "tp", "--tcp", "-i", HOST, "-p", p,
                                  "-m", str(self.msg), "-t", str(self.opts.seconds)])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)
        keys = [m[0] for m in self.metrics]

        def parse(out, server):
            res = parse_sockperf_tp_client(out)
            res.update(parse_sockperf_activity(server.output(), self.msg))
            # the parsers name the 64 KiB figures; other sizes keep their own keys
            return {k: res[base] for k, base in zip(keys, ("tp_recv", "tp_sent"))}
        return run_pair(srv, cli, variant, rundir, port, self.opts.seconds + 30, parse)


class SmallThroughput(Throughput):
    """Many small writes in a row (issue 6: 64 B must not cost a wake-up each)."""
    key, name = "tp64", "sockperf throughput, 64 B"
    msg = PP_MSG
    activity = 100 * TP_ACTIVITY   # millions of messages a second: fewer lines
    metrics = [("tp64_recv", "sockperf tp 64 B: received (server side)", "MiB/s", "higher"),
               ("tp64_sent", "sockperf tp 64 B: sent (client side)", "MiB/s", "higher")]


class NetPipe(Bench):
    key, name = "np", "NetPIPE NPtcp"
    programs, package = ["NPtcp"], "netpipe-tcp"

    @property
    def metrics(self):
        return [("np_%d" % s, "NetPIPE %s" % size_name(s), "Mbps", "higher") for s in NP_SIZES]

    def commands(self, variant, port, rundir):
        common = ["-P", str(port), "-l", "1", "-u", str(NP_MAX), "-p", "0", "-n", str(self.opts.np_repeats)]
        return (variant.prefix + ["NPtcp"] + common,
                variant.prefix + ["NPtcp", "-h", HOST] + common + ["-o", str(Path(rundir) / "np.out")])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)
        Path(rundir, "np.out").unlink(missing_ok=True)

        def parse(out, server):
            try:
                text = (Path(rundir) / "np.out").read_text()
            except OSError:
                raise RunError("NPtcp wrote no output file", out)
            sweep = parse_netpipe(text)
            res = {"np_%d" % s: sweep[s] for s in NP_SIZES if s in sweep}
            res["np_sweep"] = sweep
            return res
        return run_pair(srv, cli, variant, rundir, port, 120, parse, server_exits=True)


class UnderLoad(Bench):
    key, name = "ul", "sockperf under load"
    programs, package = ["sockperf"], "sockperf"
    UL_MPS = 10000      # sockperf's own default load
    metrics = [("ul_p50", "sockperf ul 64 B at 10000 msg/s: one-way latency, median", "us", "lower"),
               ("ul_p99", "sockperf ul 64 B at 10000 msg/s: one-way latency, p99", "us", "lower")]

    def commands(self, variant, port, rundir):
        p = str(port)
        return (variant.prefix + ["sockperf", "sr", "--tcp", "-i", HOST, "-p", p],
                variant.prefix + ["sockperf", "ul", "--tcp", "-i", HOST, "-p", p, "-m", str(PP_MSG),
                                  "-t", str(self.opts.seconds), "--mps=%d" % self.UL_MPS])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)

        def parse(out, server):
            r = parse_sockperf_pp(out)
            return {"ul_p50": r["pp_p50"], "ul_p99": r["pp_p99"]}
        return run_pair(srv, cli, variant, rundir, port, self.opts.seconds + 30, parse)


class Iperf3(Bench):
    key, name = "iperf", "iperf3"
    programs, package = ["iperf3"], "iperf3"
    metrics = [("iperf_recv", "iperf3 TCP stream: received", "Mbit/s", "higher")]

    def commands(self, variant, port, rundir):
        p = str(port)
        return (variant.prefix + ["iperf3", "-s", "-1", "-B", HOST, "-p", p],
                variant.prefix + ["iperf3", "-c", HOST, "-p", p, "-t", str(self.opts.seconds), "-J"])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)

        def parse(out, server):
            try:
                bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
            except (ValueError, KeyError, TypeError):
                raise RunError("no received bandwidth in iperf3's JSON output", out)
            return {"iperf_recv": bps / 1e6}
        return run_pair(srv, cli, variant, rundir, port, self.opts.seconds + 30, parse, server_exits=True)


class Redis(Bench):
    key, name = "redis", "redis-benchmark"
    programs, package = ["redis-server", "redis-benchmark"], "redis-server redis-tools"
    metrics = [("redis_set", "redis-benchmark SET, 50 clients", "req/s", "higher"),
               ("redis_get", "redis-benchmark GET, 50 clients", "req/s", "higher")]

    def commands(self, variant, port, rundir):
        p = str(port)
        return (variant.prefix + ["redis-server", "--port", p, "--bind", HOST, "--save", "",
                                  "--appendonly", "no", "--dir", str(rundir)],
                variant.prefix + ["redis-benchmark", "-h", HOST, "-p", p, "-t", "set,get", "-c", "50",
                                  "-n", str(50000 * self.opts.seconds), "--csv"])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)

        def parse(out, server):
            rps = dict(re.findall(r'^"(SET|GET)","([\d.]+)"', out, re.M))
            if set(rps) != {"SET", "GET"}:
                raise RunError("no SET and GET rates in redis-benchmark's output", out)
            return {"redis_set": float(rps["SET"]), "redis_get": float(rps["GET"])}
        return run_pair(srv, cli, variant, rundir, port, 20 * self.opts.seconds + 60, parse)


NGINX_CONF = """{user}
daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    server {{
        listen {host}:{port};
        location / {{ default_type text/plain; return 200 "shunt bench\\n"; }}
    }}
}}
"""


class Wrk(Bench):
    key, name = "wrk", "wrk + nginx"
    programs, package = ["wrk", "nginx"], "wrk nginx-light"
    metrics = [("wrk_rps", "wrk against nginx, 10 connections: requests", "req/s", "higher")]

    def commands(self, variant, port, rundir):
        # root's workers would become nobody, and shunt's registry is per user
        conf = NGINX_CONF.format(user="user root;" if os.geteuid() == 0 else "", dir=rundir, host=HOST,
                                 port=port)
        Path(rundir, "tmp").mkdir(exist_ok=True)
        Path(rundir, "nginx.conf").write_text(conf)
        return (variant.prefix + ["nginx", "-c", str(Path(rundir) / "nginx.conf"), "-p", str(rundir)],
                variant.prefix + ["wrk", "-t", "1", "-c", "10", "-d", "%ds" % self.opts.seconds,
                                  "http://%s:%d/" % (HOST, port)])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)
        return run_pair(srv, cli, variant, rundir, port, self.opts.seconds + 30,
                        lambda out, server: {"wrk_rps": _num(r"Requests/sec:\s*([\d.]+)", out, "Requests/sec")})


def run_pair(srv_argv, cli_argv, variant, rundir, port, timeout, parse, server_exits=False):
    """Starts the server, waits until it listens, runs the client, stops the
    server (always), parses.  Returns the metrics."""
    env = variant.env(rundir)
    server = Server(srv_argv, env, str(rundir), str(Path(rundir) / "server.out"), port)
    try:
        server.start()
        server.wait_listening()
        status, out = run_client(cli_argv, env, str(rundir), timeout)
        lingered = server_exits and not server.wait_exit(10)
    finally:
        server.stop()
    Path(rundir, "client.out").write_text(out)
    if lingered:
        raise RunError("the server did not exit within 10 s of the client's end (stopped it)",
                       out + "\n--- server output ---\n" + server.output())
    if status != 0:
        raise RunError("client exited with status %d" % status,
                       out + "\n--- server output ---\n" + server.output())
    return parse(out, server)


BENCHES = {b.key: b for b in (PingPong, Throughput, SmallThroughput, NetPipe, UnderLoad, Iperf3, Redis, Wrk)}


def missing(key):
    """Why the benchmark cannot run here (a program not on PATH), or None."""
    bench = BENCHES[key]
    absent = [p for p in bench.programs if not shutil.which(p)]
    if not absent:
        return None
    return "%s not installed (Debian package%s %s)" % (" and ".join(absent), "s" if " " in bench.package else "",
                                                       bench.package)


class Results:
    def __init__(self):
        self.values = {}        # (variant, metric) -> [values]
        self.sweeps = {}        # variant -> [ {size: Mbps} ]
        self.failures = []      # (bench, variant, round, what, detail)
        self.accel = {}         # bench -> [(round, server, client, notable)]

    def add(self, variant, metrics):
        for k, v in metrics.items():
            if k == "np_sweep":
                self.sweeps.setdefault(variant, []).append(v)
            else:
                self.values.setdefault((variant, k), []).append(v)

    def median(self, variant, metric):
        vals = self.values.get((variant, metric))
        return statistics.median(vals) if vals else None


def run_all(opts, shunt_bin, workdir, res, say):
    variants = [Variant("kernel", [], {}),
                Variant("shunt", [shunt_bin, "run", "--"],
                        dict({"SHUNT_LOG": opts.shunt_log, "SHUNT_LOG_FILE": "{dir}/shunt-%p.log"},
                             **dict(kv.split("=", 1) for kv in opts.shunt_env)))]
    benches = [BENCHES[b](opts) for b in opts.bench]
    for rnd in range(1, opts.rounds + 1):
        for bench in benches:
            for variant in variants:
                rundir = Path(workdir) / ("r%d-%s-%s" % (rnd, bench.key, variant.name))
                rundir.mkdir()
                say("  round %d/%d  %-20s %-6s ..." % (rnd, opts.rounds, bench.name, variant.name), end="")
                t0 = time.monotonic()
                metrics, err = None, None
                for attempt in range(3):
                    port = free_port()
                    try:
                        metrics = bench.run(variant, rundir, port)
                        break
                    except RunError as e:
                        err = e
                        # the server could not start, for example because the
                        # port was taken after it was chosen: another port
                        if "before listening" in e.what and attempt < 2:
                            continue
                        break
                dt = time.monotonic() - t0
                acc = ""
                if variant.shunted:
                    # Judged on runs that worked; a failed run shows its counts.
                    s, c, notable = acceleration(rundir)
                    if metrics is not None:
                        res.accel.setdefault(bench.key, []).append((rnd, s, c, notable))
                    acc = (" accelerated (server %d, client %d)" % (s, c) if (s and c)
                           else " NOT ACCELERATED (server %d, client %d)" % (s, c))
                if metrics is not None:
                    first = bench.metrics[0]
                    # a shunt figure that went over kernel TCP is no shunt figure
                    counted = not variant.shunted or (s and c)
                    if counted:
                        res.add(variant.name, metrics)
                    say(" %s%s%s (%.1f s)" % (fmt(metrics.get(first[0]), first[2]), "," + acc if acc else "",
                                              "" if counted else ": not counted", dt))
                else:
                    cmd_s, cmd_c = bench.commands(variant, port, rundir)
                    detail = ("    server: %s\n    client: %s\n    output (last lines):\n%s"
                              % (shlex.join(cmd_s), shlex.join(cmd_c),
                                 "\n".join("      " + l for l in err.output.strip().splitlines()[-15:])))
                    if "m_maxSequenceNo" in err.output:
                        detail += ("\n    (sockperf's table of send times, sized for --mps=%d messages/s over"
                                   " 1+%d s, overflowed: the round trips were faster; raise --pp-mps)"
                                   % (opts.pp_mps, opts.seconds))
                    if variant.shunted:
                        detail += ("\n    connections accelerated: server %d, client %d; shunt logs (%s):\n%s"
                                   % (s, c, rundir, log_tail(rundir)))
                    res.failures.append((bench.key, variant.name, rnd, err.what, detail))
                    say(" FAILED: %s;%s (%.1f s)" % (err.what, acc, dt))


def build_table(opts, res):
    """Rows: (metric label, kernel, shunt, ratio, verdict)."""
    rows = []
    for key in opts.bench:
        bench = BENCHES[key](opts)
        failed = [f for f in res.failures if f[0] == key]
        acc = res.accel.get(key, [])
        not_acc = [a for a in acc if not (a[1] and a[2])]
        for metric, label, unit, better in bench.metrics:
            k, s = res.median("kernel", metric), res.median("shunt", metric)
            g = gain(k, s, better)
            v = verdict(g, better)
            marks = []
            if not_acc:
                marks.append("NOT ACCELERATED in %d of %d shunt runs" % (len(not_acc), len(acc)))
            if failed:
                marks.append("FAILED in %d of %d runs" % (len(failed), 2 * opts.rounds))
            if marks:
                v = "; ".join(marks) + ("" if not_acc or g is None else "; " + v)
            rows.append((label, fmt(k, unit), fmt(s, unit), "%.1fx" % g if g is not None else "-", v))
    return rows


def render_text(rows):
    head = ("metric", "kernel TCP", "shunt", "ratio", "verdict")
    w = [max(len(r[i]) for r in rows + [head]) for i in range(5)]
    line = lambda r: "  %-*s  %*s  %*s  %*s  %s" % (w[0], r[0], w[1], r[1], w[2], r[2], w[3], r[3], r[4])
    return "\n".join([line(head), "  " + "-" * (sum(w) + 8 + 4)] + [line(r) for r in rows])


def render_markdown(rows):
    out = ["| metric | kernel TCP | shunt | ratio | verdict |", "|---|---:|---:|---:|---|"]
    out += ["| %s | %s | %s | %s | %s |" % r for r in rows]
    return "\n".join(out)


def accel_lines(res):
    lines = []
    for key, acc in res.accel.items():
        ok = sum(1 for a in acc if a[1] and a[2])
        per = ", ".join("round %d: %d server + %d client" % (a[0], a[1], a[2]) for a in acc)
        mark = "" if ok == len(acc) else "  <-- NOT ACCELERATED"
        lines.append("%s: accelerated in %d of %d shunt runs (%s)%s" % (BENCHES[key].name, ok, len(acc), per, mark))
        notable = sorted({l for a in acc for l in a[3]})
        lines += ["    log: " + l for l in notable[:5]]
    return lines


def per_round_lines(opts, res):
    lines = []
    for key in opts.bench:
        for metric, label, unit, better in BENCHES[key](opts).metrics:
            k = res.values.get(("kernel", metric), [])
            s = res.values.get(("shunt", metric), [])
            lines.append("%s: kernel [%s] shunt [%s] %s" % (label, ", ".join(fmt(v, unit) for v in k),
                                                            ", ".join(fmt(v, unit) for v in s),
                                                            "(round by round)"))
    return lines
