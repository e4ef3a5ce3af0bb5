"""benchlib: what every benchmark driver of shunt shares: starting and
stopping benchmark processes (servers in their own process group, clients
under a timeout), free ports, the kernel-TCP and shunt variants of a run
and the check in shunt's log that a run was accelerated, the machine's
description, and number formatting.  Used by bench/demo.py,
bench/stdtools.py and bench/shuntbench.py (`shunt bench`)."""

import os
import platform
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

HOST = "127.0.0.1"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

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


def interrupt_on_signals():
    """SIGTERM and SIGHUP end a run as Ctrl-C does, so that the servers it
    started are stopped on the way out."""
    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)


def say(*a, **kw):
    """Progress lines appear as they happen, even through a pipe."""
    print(*a, **kw, flush=True)


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
# formatting and the machine

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
