#!/usr/bin/env python3
"""servers.py: real event-driven servers with their own load clients, over
kernel TCP and under shunt, side by side (issue 4's targets).

    python3 bench/servers.py [--build build] [--rounds 3] [--only redis,nginx,close,memcached,sendfile]

Each case starts the server, runs the client, stops the server; kernel and
shunt runs alternate (A B, then B A, ...) for --rounds rounds and the table shows
medians and the shunt/kernel ratio of the same run.  Under shunt both the
server and the client run under `shunt run --` with SHUNT_LOG=info, and a
shunt figure counts only if the logs show at least as many accelerated
client connections as the client opens (otherwise the run fails loudly).

  redis c1     redis-benchmark -t get,set -c 1 -n 50000 (no pipelining)
  redis c50    redis-benchmark -t get,set -c 50 -n 200000
  nginx wrk    nginx (master + 2 workers), wrk -t2 -c4 -d3s --latency, 1 KB file:
               requests/s and p99 latency (2 workers and 2 wrk threads on 2 cores:
               the oversubscribed case)
  nginx close  the same with "Connection: close": a new connection for every request
               (issue 18's short connections; most are kernel TCP by design under shunt,
               SHUNT_SHORT_CONNS; both under shunt at SHUNT_LOG=warn, libshunt.so looked
               for in the maps of nginx and wrk)
  memcached    memcached -t 2, memcaslap -T 2 -c 8 -x 200000 (90% get, 10% set): ops/s
  memcached c1 the same with one connection: -T 1 -c 1 -x 50000
  sendfile     nginx (sendfile on, tcp_nopush on) serving a 1 GiB file from the page
               cache to curl -o /dev/null, three downloads a round: MB/s (issue 6)
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import acceleration, clean_env, free_port, stop_group  # noqa: E402
import shuntbench  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))
from shunttest import nginx_conf  # noqa: E402


def wait_listening(port, proc, deadline=15.0):
    end = time.monotonic() + deadline
    table_port = ":%04X" % port
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("server exited with status %s" % proc.returncode)
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.read().splitlines()[1:]:
                    fields = line.split()
                    if fields[1].endswith(table_port) and fields[3] == "0A":
                        return
        time.sleep(0.05)
    raise RuntimeError("server did not listen on port %d" % port)


class Run:
    """One variant (kernel or shunt) of one case, in its own directory."""

    def __init__(self, opts, shunt, rundir):
        self.opts, self.shunt, self.dir = opts, shunt, Path(rundir)
        self.env = clean_env()
        if shunt:
            self.env.update(SHUNT_LOG="info", SHUNT_LOG_FILE=str(self.dir / "shunt-%p.log"))
            self.env.update(kv.split("=", 1) for kv in opts.shunt_env)
        # settings for one side only (the server's or the client's programs)
        self.server_env = dict(self.env, **dict(kv.split("=", 1) for kv in opts.server_env)) if shunt else self.env
        self.client_env = dict(self.env, **dict(kv.split("=", 1) for kv in opts.client_env)) if shunt else self.env

    def cmd(self, argv):
        return [str(self.opts.build / "shunt"), "run", "--"] + argv if self.shunt else argv

    def server(self, argv, port, cwd=None):
        p = subprocess.Popen(self.cmd(argv), env=self.server_env, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_listening(port, p)
        except BaseException:
            stop_group(p)
            raise
        return p

    def client(self, argv, timeout=300):
        r = subprocess.run(self.cmd(argv), env=self.client_env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (argv[0], (r.stderr or r.stdout)[-400:]))
        return r.stdout

    def client_checked(self, argv, server_pid, timeout=300):
        """client(), and under shunt a look at the client's and the server's
        maps a second in: libshunt.so must be in both (short connections are
        mostly kernel TCP by design, so the log cannot tell)."""
        p = subprocess.Popen(self.cmd(argv), env=self.client_env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            if self.shunt:
                time.sleep(1)
                for pid in (p.pid, server_pid):
                    with open("/proc/%d/maps" % pid) as f:
                        if "libshunt.so" not in f.read():
                            raise RuntimeError("libshunt.so is not loaded in pid %d (%s)" % (pid, argv[0]))
            out, err = p.communicate(timeout=timeout)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if p.returncode != 0:
            raise RuntimeError("%s failed: %s" % (argv[0], (err or out)[-400:]))
        return out

    def check_accelerated(self, connections):
        if not self.shunt:
            return
        _, client, notable = acceleration(self.dir)
        if client < connections:
            raise RuntimeError("only %d of %d client connections accelerated: %s" %
                               (client, connections, notable[-3:]))


def redis_case(clients, requests):
    def run(r):
        port = free_port()
        srv = r.server(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"], port)
        try:
            out = r.client(["redis-benchmark", "-p", str(port), "-t", "get,set", "-c", str(clients),
                            "-n", str(requests), "-q"]).replace("\r", "\n")
        finally:
            stop_group(srv)
        r.check_accelerated(clients)
        res = {}
        for test in ("SET", "GET"):
            m = re.search(r"^%s: ([0-9.]+) requests per second" % test, out, re.M)
            if not m:
                raise RuntimeError("no %s figure in: %s" % (test, out[-300:]))
            res["%s req/s" % test] = float(m.group(1))
        return res
    return run


def nginx_case(r, close=False):
    port = free_port()
    (r.dir / "www").mkdir()
    (r.dir / "www" / "small.html").write_bytes(b"<p>shunt</p>\n" * 79)   # 1027 bytes
    conf = r.dir / "nginx.conf"
    conf.write_text(nginx_conf(r.dir, port, daemon=False))
    if close and r.shunt:
        # a connection per request: at SHUNT_LOG=info every one would cost
        # each end a line in its log, which kernel TCP does not pay; so warn,
        # and libshunt is looked for in both processes' maps instead
        for env in (r.server_env, r.client_env):
            env["SHUNT_LOG"] = "warn"
    srv = r.server(["nginx", "-c", str(conf), "-p", str(r.dir)], port)
    try:
        argv = (["wrk", "-t2", "-c4", "-d3s", "--latency"] + (["-H", "Connection: close"] if close else [])
                + ["http://127.0.0.1:%d/small.html" % port])
        if close:
            out = r.client_checked(argv, srv.pid)
        else:
            out = r.client(argv)
    finally:
        stop_group(srv)
    if not close:
        r.check_accelerated(4)
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError("wrk saw errors: %s" % out[-400:])
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    m = re.search(r"^\s+99%\s+([0-9.]+)(us|ms|s)\b", out, re.M)
    p99 = float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1e6}[m.group(2)]
    return {"req/s": rps, "p99 µs": p99}


def memcached_case(threads, conns, ops):
    def run(r):
        port = free_port()
        user = ["-u", "root"] if os.getuid() == 0 else []
        srv = r.server(["memcached"] + user + ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2"], port)
        try:
            out = r.client(["memcaslap", "-s", "127.0.0.1:%d" % port, "-T", str(threads), "-c", str(conns),
                            "-x", str(ops)])
        finally:
            stop_group(srv)
        r.check_accelerated(conns)
        m = re.search(r"Run time: [0-9.]+s Ops: (\d+) TPS: (\d+)", out)
        if not m:
            raise RuntimeError("no TPS in memcaslap's output: %s" % out[-300:])
        return {"ops/s": float(m.group(2))}
    return run


BIG_FILE = 1 << 30


def big_file(directory):
    """A 1 GiB file of varied bytes (a repeated random MiB), written once a
    run and read from the page cache by every download."""
    path = Path(directory) / "big.bin"
    if not path.exists():
        block = os.urandom(1 << 20)
        with open(path, "wb") as f:
            for _ in range(BIG_FILE >> 20):
                f.write(block)
    return path


def sendfile_case(r):
    port = free_port()
    www = r.dir / "www"
    www.mkdir()
    os.symlink(big_file(r.dir.parent), www / "big.bin")
    conf = r.dir / "nginx.conf"
    conf.write_text(nginx_conf(r.dir, port, daemon=False,
                               locations="sendfile on; tcp_nopush on; sendfile_max_chunk 0;"))
    srv = r.server(["nginx", "-c", str(conf), "-p", str(r.dir)], port)
    speeds = []
    try:
        for _ in range(3):
            out = r.client(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{speed_download}",
                            "http://127.0.0.1:%d/big.bin" % port])
            size, speed = out.split()
            if int(size) != BIG_FILE:
                raise RuntimeError("curl received %s bytes of %d" % (size, BIG_FILE))
            speeds.append(float(speed) / 1e6)
    finally:
        stop_group(srv)
    r.check_accelerated(3)
    return {"MB/s": statistics.median(speeds)}


CASES = {
    "redis": [("redis c1", redis_case(1, 50000), "higher"), ("redis c50", redis_case(50, 200000), "higher")],
    "nginx": [("nginx wrk", nginx_case, None)],
    "close": [("nginx wrk close", lambda r: nginx_case(r, close=True), None)],
    "memcached": [("memcached", memcached_case(2, 8, 200000), "higher"),
                  ("memcached c1", memcached_case(1, 1, 50000), "higher")],
    "sendfile": [("nginx sendfile 1 GiB", sendfile_case, "higher")],
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="redis,nginx,close,memcached,sendfile")
    ap.add_argument("--shunt-env", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting for the shunt runs (repeatable), e.g. SHUNT_SPIN_US=0")
    ap.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting for the server of the shunt runs only (repeatable)")
    ap.add_argument("--client-env", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting for the client of the shunt runs only (repeatable)")
    ap.add_argument("--keep-time-wait", action="store_true",
                    help="do not remove loopback sockets in TIME_WAIT before each run (root removes them "
                         "by default, as shunt bench does)")
    opts = ap.parse_args(argv)
    opts.build = opts.build.resolve()
    flush = not opts.keep_time_wait and os.geteuid() == 0 and shutil.which("ss") is not None
    rows = []
    with tempfile.TemporaryDirectory(prefix="shunt-servers-") as tmp:
        for group in opts.only.split(","):
            for name, case, _ in CASES[group]:
                figures = {False: {}, True: {}}
                for rnd in range(opts.rounds):
                    # A B, B A, ...: a run of short connections leaves its
                    # sockets in TIME_WAIT for a minute, which slows the next
                    # run's connects; a fixed order hands them to one side
                    for shunt in ((False, True) if rnd % 2 == 0 else (True, False)):
                        rundir = Path(tmp) / ("%s-%d-%s" % (name.replace(" ", "_"), rnd, shunt))
                        rundir.mkdir()
                        print("  %s round %d/%d %s..." % (name, rnd + 1, opts.rounds, "shunt" if shunt else "kernel"),
                              file=sys.stderr, flush=True)
                        if flush:
                            shuntbench.flush_time_wait()   # every run from the same state (shuntbench.py)
                        for k, v in case(Run(opts, shunt, rundir)).items():
                            figures[shunt].setdefault(k, []).append(v)
                for k in figures[False]:
                    kern, sh = statistics.median(figures[False][k]), statistics.median(figures[True][k])
                    ratio = kern / sh if "µs" in k else sh / kern   # > 1: shunt better
                    rows.append((name, k, kern, sh, ratio))
    print("| case | figure | kernel TCP | shunt | shunt better by |")
    print("|---|---|---|---|---|")
    for name, k, kern, sh, ratio in rows:
        print("| %s | %s | %.0f | %.0f | %.2fx |" % (name, k, kern, sh, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
