#!/usr/bin/env python3
"""shunt demo: the same real programs over kernel TCP and over shunt.

Runs three unmodified benchmark programs on 127.0.0.1, each once with
neither end under shunt (kernel TCP) and once with both ends under
`shunt run` (shared memory), alternating kernel and shunt (A B A B ...)
for several rounds, and prints the medians side by side:

  sockperf ping-pong   64-byte messages: one-way latency (median, average, p99)
  sockperf throughput  64 KiB messages: bandwidth as the receiving server
                       counts it (and as the sending client reports it)
  NetPIPE (NPtcp)      ping-pong bandwidth over message sizes 1 B .. 8 MiB

Every shunt run logs with SHUNT_LOG=info; the demo counts the log lines
"accelerated (server" and "accelerated (client" to show that the
connection really went through shared memory.  A shunt run that was not
accelerated, or a run that failed, is marked in the table and makes the
exit status non-zero.

Examples:
    python3 bench/demo.py                   # about a minute and a half
    python3 bench/demo.py --quick           # about 30 s
    python3 bench/demo.py --rounds 5 --markdown /tmp/demo.md

Exit status: 0 all runs worked and every shunt run was accelerated;
1 a run failed or a shunt run was not accelerated; 2 bad usage or a
missing program; 130 interrupted.
"""

import argparse
import datetime
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

TP_MSG = 65536              # sockperf throughput message size
PP_MSG = 64                 # sockperf ping-pong message size
NP_MAX = 8 * 1024 * 1024    # NetPIPE upper bound
NP_SIZES = [64, 1024, 64 * 1024, 1024 * 1024, 8 * 1024 * 1024]   # shown in the table
TP_ACTIVITY = 1000          # the server prints a line per this many received messages

LISTEN_DEADLINE = 10.0      # seconds for a server to start listening
STOP_GRACE = 2.0            # seconds between SIGTERM and SIGKILL


# --------------------------------------------------------------------------
# processes

class RunError(Exception):
    """A benchmark run that did not produce a result."""

    def __init__(self, what, output=""):
        super().__init__(what)
        self.what = what
        self.output = output


def stop_group(proc, grace=STOP_GRACE):
    """Stops a process we started in its own process group: SIGTERM, then
    SIGKILL if it is still there after the grace period.  Only ever the
    group whose leader is proc (setsid made its pgid equal to its pid)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def listening_inodes(port):
    """Inodes of the sockets in LISTEN state on this TCP port."""
    want = ":%04X" % port
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1].endswith(want) and fields[3] == "0A":
                inodes.add(fields[9])
    return inodes


def owns_socket(pid, inodes):
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    except OSError:
        pass
    return False


class Server:
    """A benchmark server in its own process group, output to a file."""

    def __init__(self, argv, env, cwd, out_path, port):
        self.argv, self.env, self.cwd = argv, env, cwd
        self.out_path, self.port = out_path, port
        self.proc = None
        self._out = None

    def start(self):
        self._out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                     start_new_session=True)

    def wait_listening(self):
        """Polls until this server's own socket listens on the port.  Not by
        connecting: sockperf's server and NPtcp's receiver would take a probe
        connection for the client.  A socket in LISTEN state accepts
        connections (the kernel completes them into the backlog)."""
        deadline = time.monotonic() + LISTEN_DEADLINE
        while True:
            if self.proc.poll() is not None:
                raise RunError("server exited with status %s before listening on port %d"
                               % (self.proc.returncode, self.port), self.output())
            inodes = listening_inodes(self.port)
            if inodes and owns_socket(self.proc.pid, inodes):
                return
            if time.monotonic() > deadline:
                raise RunError("server not listening on port %d after %.0f s"
                               % (self.port, LISTEN_DEADLINE), self.output())
            time.sleep(0.01)

    def wait_exit(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self):
        if self.proc is not None:
            stop_group(self.proc)
        if self._out is not None:
            self._out.close()
            self._out = None

    def output(self):
        try:
            return ANSI.sub("", Path(self.out_path).read_text(errors="replace"))
        except OSError:
            return ""


def run_client(argv, env, cwd, timeout):
    """Runs a client to completion in its own process group; returns
    (status, output).  On timeout or interruption the group is stopped."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        try:
            out, _ = proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError):
            out = b""
        raise RunError("client did not finish within %.0f s (stopped it)" % timeout,
                       ANSI.sub("", (out or b"").decode(errors="replace")))
    except BaseException:
        stop_group(proc)
        raise
    return proc.returncode, ANSI.sub("", out.decode(errors="replace"))


def free_port():
    """An ephemeral port free right now (on every address, since NPtcp's
    receiver binds the wildcard address).  Nothing is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# variants: kernel TCP, or both ends under shunt

def clean_env():
    """The caller's environment without shunt: no SHUNT_* settings, no
    libshunt in LD_PRELOAD, C locale for parsing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_")}
    pre = env.get("LD_PRELOAD", "")
    kept = [p for p in re.split(r"[: ]+", pre) if p and "libshunt" not in os.path.basename(p)]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    env["LC_ALL"] = "C"
    return env


class Variant:
    def __init__(self, name, prefix, extra_env):
        self.name, self.prefix, self.extra_env = name, prefix, extra_env

    def env(self, rundir):
        env = clean_env()
        for k, v in self.extra_env.items():
            env[k] = v.replace("{dir}", str(rundir))
        return env

    @property
    def shunted(self):
        return bool(self.prefix)


def acceleration(rundir):
    """Counts, over the run's shunt logs, the connections accelerated on the
    server and the client side; returns (server, client, notable lines)."""
    server = client = 0
    notable = []
    for log in sorted(Path(rundir).glob("shunt-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "accelerated (server" in line:
                server += 1
            elif "accelerated (client" in line:
                client += 1
            if " error: " in line or " warn: " in line or "kernel TCP" in line:
                notable.append(line)
    return server, client, notable


def log_tail(rundir, lines=6):
    out = []
    for log in sorted(Path(rundir).glob("shunt-*.log")):
        text = log.read_text(errors="replace").splitlines()
        out.append("    %s:" % log.name)
        out.extend("      " + t for t in text[-lines:])
    return "\n".join(out)


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

    def __init__(self, opts):
        self.opts = opts

    def run(self, variant, rundir, port):
        raise NotImplementedError

    def commands(self, variant, port, rundir):
        raise NotImplementedError


class PingPong(Bench):
    key, name = "pp", "sockperf ping-pong"
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
    metrics = [("tp_recv", "sockperf tp 64 KiB: received (server side)", "MiB/s", "higher"),
               ("tp_sent", "sockperf tp 64 KiB: sent (client side)", "MiB/s", "higher")]

    def commands(self, variant, port, rundir):
        p = str(port)
        return (variant.prefix + ["sockperf", "sr", "--tcp", "-i", HOST, "-p", p,
                                  "-m", str(TP_MSG), "-A", str(TP_ACTIVITY)],
                variant.prefix + ["sockperf", "tp", "--tcp", "-i", HOST, "-p", p,
                                  "-m", str(TP_MSG), "-t", str(self.opts.seconds)])

    def run(self, variant, rundir, port):
        srv, cli = self.commands(variant, port, rundir)

        def parse(out, server):
            res = parse_sockperf_tp_client(out)
            res.update(parse_sockperf_activity(server.output(), TP_MSG))
            return res
        return run_pair(srv, cli, variant, rundir, port, self.opts.seconds + 30, parse)


class NetPipe(Bench):
    key, name = "np", "NetPIPE NPtcp"

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


BENCHES = {"pp": PingPong, "tp": Throughput, "np": NetPipe}


# --------------------------------------------------------------------------
# formatting

def size_name(n):
    for unit, div in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "us":
        return "%.2f us" % v if v < 100 else "%.0f us" % v
    if v >= 1000:
        return "%.0f %s" % (v, unit)
    if v >= 10:
        return "%.1f %s" % (v, unit)
    return "%.2f %s" % (v, unit)


def gain(kernel, shunt, better):
    """How many times better shunt is (>1: better)."""
    if kernel is None or shunt is None or kernel <= 0 or shunt <= 0:
        return None
    return kernel / shunt if better == "lower" else shunt / kernel


def verdict(g, better):
    if g is None:
        return "-"
    what = "latency" if better == "lower" else "bandwidth"
    if 0.95 <= g < 1.05:
        return "%s about the same" % what
    if g >= 1.0:
        return "%s %.1fx %s" % (what, g, "lower" if better == "lower" else "higher")
    return "%s %.1fx WORSE" % (what, 1 / g)


def machine():
    info = {"nproc": len(os.sched_getaffinity(0)), "cpus": os.cpu_count(),
            "kernel": platform.release(), "arch": platform.machine(), "cpu": "", "os": ""}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return info


def machine_line(m):
    cpus = "%d CPUs" % m["nproc"] + ("" if m["nproc"] == m["cpus"] else " (of %d)" % m["cpus"])
    return "%s%s, Linux %s %s%s" % (cpus, " (%s)" % m["cpu"] if m["cpu"] else "", m["kernel"],
                                    m["arch"], ", " + m["os"] if m["os"] else "")


def tool_version(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=10, env=clean_env())
        text = ANSI.sub("", p.stdout.decode(errors="replace"))
        m = re.search(r"version\s*#?\s*([\w.\-]+)", text) or re.search(r"(\d+\.\d+[\w.\-]*)", text)
        return m.group(1) if m else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


# --------------------------------------------------------------------------
# main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, help="kernel/shunt rounds (default 3; 2 with --quick)")
    p.add_argument("--seconds", type=int, help="duration of each sockperf run (default 2; 1 with --quick)")
    p.add_argument("--np-repeats", type=int,
                   help="NetPIPE round trips per message size and trial, -n (default 100; 25 with --quick)")
    p.add_argument("--pp-mps", type=int, default=4000000,
                   help="sockperf ping-pong --mps, which sizes its table of send times "
                        "(default 4000000: room for 4M round trips/s, about 16 B * (1+seconds) * mps of memory)")
    p.add_argument("--quick", action="store_true", help="shorter runs: about 30 s in all")
    p.add_argument("--bench", default="pp,tp,np", help="which benchmarks, of pp,tp,np (default all)")
    p.add_argument("--build", default=str(REPO / "build"),
                   help="directory with libshunt.so and shunt (default: the repo's build/)")
    p.add_argument("--shunt-log", default="info", choices=["info", "debug", "trace"],
                   help="SHUNT_LOG for the shunt runs (default info; the check needs info or more)")
    p.add_argument("--shunt-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting for the shunt runs, e.g. SHUNT_RING_SIZE=256K (repeatable)")
    p.add_argument("--markdown", metavar="FILE", help="also write the results as markdown to FILE")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, outputs)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every run's values")
    a = p.parse_args(argv)
    a.rounds = a.rounds if a.rounds is not None else (2 if a.quick else 3)
    a.seconds = a.seconds if a.seconds is not None else (1 if a.quick else 2)
    a.np_repeats = a.np_repeats if a.np_repeats is not None else (25 if a.quick else 100)
    if a.rounds < 1 or a.seconds < 1 or a.np_repeats < 1:
        p.error("--rounds, --seconds and --np-repeats must be at least 1")
    a.bench = [b.strip() for b in a.bench.split(",") if b.strip()]
    bad = [b for b in a.bench if b not in BENCHES]
    if bad or not a.bench:
        p.error("--bench takes a list of pp, tp, np")
    return a


def preflight(opts):
    problems = []
    shunt = Path(opts.build) / "shunt"
    lib = Path(opts.build) / "libshunt.so"
    for f in (shunt, lib):
        if not f.exists():
            problems.append("%s is missing (make lib tool)" % f)
    need = {"pp": ["sockperf"], "tp": ["sockperf"], "np": ["NPtcp"]}
    for tool in sorted({t for b in opts.bench for t in need[b]}):
        if not shutil.which(tool):
            problems.append("%s is not installed (scripts/install-deps --demo: packages sockperf netpipe-tcp)" % tool)
    return problems, str(shunt)


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
                    res.add(variant.name, metrics)
                    first = bench.metrics[0]
                    say(" %s%s (%.1f s)" % (fmt(metrics.get(first[0]), first[2]), "," + acc if acc else "", dt))
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


def netpipe_summary(res):
    """Per size, the median over rounds; whether shunt >= kernel at each."""
    ks, ss = res.sweeps.get("kernel"), res.sweeps.get("shunt")
    if not ks or not ss:
        return None
    sizes = sorted(set.intersection(*[set(s) for s in ks + ss]))
    below = []
    for n in sizes:
        k = statistics.median(s[n] for s in ks)
        v = statistics.median(s[n] for s in ss)
        if v < k:
            below.append((n, v / k))
    if not below:
        return "NetPIPE: shunt >= kernel TCP at every one of the %d sizes measured (1 B .. 8 MiB, medians)" % len(sizes)
    shown = ", ".join("%s (%.2fx)" % (size_name(n), r) for n, r in below[:8])
    if len(below) > 8:
        shown += " and %d more" % (len(below) - 8)
    return ("NetPIPE: shunt >= kernel TCP at %d of %d sizes measured (medians); below at %s"
            % (len(sizes) - len(below), len(sizes), shown))


def headline(opts, res):
    """One line: what the main rows say."""
    parts = []
    for metric, what, better in (("pp_p50", "64 B ping-pong: median latency", "lower"),
                                 ("tp_recv", "64 KiB stream: received bandwidth", "higher"),
                                 ("np_%d" % NP_SIZES[0], "NetPIPE 64 B", "higher"),
                                 ("np_%d" % NP_SIZES[-1], "NetPIPE 8 MiB", "higher")):
        g = gain(res.median("kernel", metric), res.median("shunt", metric), better)
        if g is None:
            continue
        word = ("lower" if better == "lower" else "higher") if g >= 1 else "WORSE"
        parts.append("%s %.1fx %s" % (what, g if g >= 1 else 1 / g, word))
    return "in short, shunt vs kernel TCP: " + "; ".join(parts) if parts else None


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


def main(argv):
    opts = parse_args(argv)
    problems, shunt_bin = preflight(opts)
    if problems:
        for p in problems:
            print("demo: " + p, file=sys.stderr)
        return 2

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    def say(*a, **kw):
        print(*a, **kw, flush=True)

    m = machine()
    started = datetime.datetime.now(datetime.timezone.utc)
    cmdline = shlex.join([os.path.relpath(sys.argv[0]) if sys.argv[0] else "bench/demo.py"] + list(argv))
    # sockperf's client sleeps 2 s after its warm-up, whatever -t says
    est = opts.rounds * sum({"pp": 2 * (opts.seconds + 2.6), "tp": 2 * (opts.seconds + 2.6),
                             "np": 2 * (0.5 + 4.5 * opts.np_repeats / 100)}[b] for b in opts.bench)
    say("shunt demo: the same programs over kernel TCP and over shunt, on %s" % HOST)
    say("machine:  %s" % machine_line(m))
    say("programs: sockperf %s, NetPIPE NPtcp; shunt from %s" % (tool_version(["sockperf", "--version"]), opts.build))
    say("plan:     %d round%s of kernel then shunt for each benchmark (about %.0f s)"
        % (opts.rounds, "s" if opts.rounds > 1 else "", est))
    say("")

    workdir = tempfile.mkdtemp(prefix="shunt-demo-")
    t_start = time.monotonic()
    res = Results()
    interrupted = False
    try:
        run_all(opts, shunt_bin, workdir, res, say)
    except KeyboardInterrupt:
        interrupted = True
        say("\ninterrupted; servers stopped")
    if interrupted:
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        return 130

    rows = build_table(opts, res)
    npline = netpipe_summary(res)
    say("")
    say("results: medians of %d round(s); latency is one-way (sockperf: half the round trip);" % opts.rounds)
    say("ratio = how many times better shunt is (kernel/shunt for latency, shunt/kernel for bandwidth)")
    say("")
    not_accel = any(not (a[1] and a[2]) for acc in res.accel.values() for a in acc)
    say(render_text(rows))
    say("")
    head = headline(opts, res)
    if not_accel:
        head = "in short: NO VALID COMPARISON: a shunt run was not accelerated (see below)"
    elif head and res.failures:
        head += " (with FAILED runs: see below)"
    if head:
        say(head)
    if npline:
        say(npline)
    for line in accel_lines(res):
        say(line)
    if opts.verbose:
        say("")
        for line in per_round_lines(opts, res):
            say(line)
    if res.failures:
        say("")
        say("FAILED RUNS:")
        for key, variant, rnd, what, detail in res.failures:
            say("  %s, %s, round %d: %s" % (BENCHES[key].name, variant, rnd, what))
            say(detail)

    bad = bool(res.failures) or not_accel
    say("")
    say("took %.0f s" % (time.monotonic() - t_start))
    if opts.markdown:
        md = ["## shunt demo: kernel TCP vs shunt", "",
              "- command: `%s`" % cmdline,
              "- date: %s" % started.strftime("%Y-%m-%d %H:%M UTC"),
              "- machine: %s" % machine_line(m),
              "- programs: sockperf %s, NetPIPE NPtcp (`-l 1 -u %d -p 0 -n %d`), sockperf runs of %d s"
              % (tool_version(["sockperf", "--version"]), NP_MAX, opts.np_repeats, opts.seconds),
              "- medians of %d rounds, kernel and shunt alternating; latency is one-way (half the round trip); "
              "ratio = how many times better shunt is" % opts.rounds, "",
              render_markdown(rows), ""]
        if head:
            md += [head + ".", ""]
        if npline:
            md += [npline, ""]
        md += ["- " + l.strip() for l in accel_lines(res) if not l.startswith("    ")]
        md += ["", "Round by round:", ""] + ["- " + l for l in per_round_lines(opts, res)]
        if res.failures:
            md += ["", "Failed runs:", ""]
            md += ["- %s, %s, round %d: %s" % (BENCHES[k].name, v, r, w) for k, v, r, w, _ in res.failures]
        Path(opts.markdown).write_text("\n".join(md) + "\n")
        say("")
        say("markdown written to %s" % opts.markdown)

    if bad:
        say("")
        if not_accel:
            say("*** NOT ACCELERATED: a shunt run went over kernel TCP; its numbers show no shunt gain ***")
        if res.failures:
            say("*** %d run(s) FAILED (details above) ***" % len(res.failures))
        say("run directory kept: %s" % workdir)
        return 1
    if opts.keep:
        say("run directory kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
