#!/usr/bin/env python3
"""Run shunt's test programs: the conformance suite or the unit tests.

--suite conformance (the default) runs every program in BUILD/tests/conformance/ in each
requested mode:

  plain        without shunt: LD_PRELOAD unset, SHUNT_TEST_MODE=plain
  passthrough  LD_PRELOAD=BUILD/libshunt.so, SHUNT_ACCEL=0, SHUNT_TEST_MODE=passthrough
  accelerated  LD_PRELOAD=BUILD/libshunt.so, SHUNT_ACCEL=1, SHUNT_STRICT=1,
               SHUNT_TEST_MODE=accelerated
  crossns      as accelerated with SHUNT_TEST_MODE=crossns, the client and the server in two
               network namespaces: the runner makes them (cx-<pid>-c and cx-<pid>-s, a veth pair
               between them, 10.77.99.1 and fd77::1 in the client's, .2 and ::2 in the
               server's), runs each test in the client's (ip netns exec) and tells
               tests/lib/net.h the server's namespace file and addresses
               (SHUNT_TEST_SERVER_NS, SHUNT_TEST_SERVER_ADDR4/6, SHUNT_TEST_CLIENT_ADDR4/6), where
               its listeners are made. Root only; needs `shunt fabric enable`, which the runner
               does if it is not, and undoes at the end only then; the namespaces are always
               deleted at the end (an error, Ctrl-C or SIGTERM included). Run by a user other
               than root, the mode is one skip (a failure under CI).
  fabric       as crossns with SHUNT_TEST_MODE=fabric and SHUNT_FABRIC=only: every connection
               between the namespaces rides the fabric engine (UCX's shared-memory lanes, or
               `self` where one process holds both ends) instead of shunt's own rings;
               tests/lib/check.h's expect_accelerated checks the path is "fabric" (or a
               fallback by design, with its reason); each process logs (SHUNT_LOG=info, in
               the test's directory), and a test whose log says a connection missed the
               engine ("kernel TCP: fabric: the peer runs shunt ...") or broke fails even if
               it exited 0. The mode's known failures (tests/conformance/
               fabric_known_failures.txt) are reported as KNOWN, not counted as failures
  fabric-tcp   as fabric, on UCX's TCP lanes (SHUNT_FABRIC_LANES=tcp)

--suite unit runs every program in BUILD/tests/unit/ once, directly (mode "unit": the unit
tests are linked with the library's objects, so LD_PRELOAD, SHUNT_ACCEL, SHUNT_STRICT and
SHUNT_TEST_MODE are all unset; a sanitized build needs no preload either).

The Makefile builds the programs; this script compiles nothing. A test exits 0 (pass), 77
(skip) or anything else (fail); every test runs, whatever the others did. Each runs in its
own session and temporary working directory; on timeout its whole process group is killed.
One line per test and mode, then a last line "N passed, N failed, N skipped". Exit status 1
if anything failed or timed out, or if no test was found; 0 otherwise.

Whether a test may skip under CI is the test's own decision (tests/lib/check.h: MISSING
fails under CI, SKIP does not); the CI variable is passed through untouched.

  tests/run_programs.py --build build --modes plain,passthrough [--filter SUBSTR[,SUBSTR...]]
                        [--timeout 30] [--jobs 2] [--sanitizer [address|thread]]
  tests/run_programs.py --suite unit --build build [--filter SUBSTR] [--timeout 120]

--sanitizer (address, the default) preloads libasan before a library built with
make SANITIZE=1. --sanitizer thread runs a library built with make SANITIZE=thread:
libshunt.so first, then BUILD/tests/tsan/clocklock.so, then libtsan (see tsan_preload), with
TSAN_OPTIONS making the first report end the process with status 66; a test whose output
holds a ThreadSanitizer report fails even if its status hid it (a child's report).
"""

import argparse
import concurrent.futures
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from vethpair import IP_TIMEOUT, Scoped, VethPair  # noqa: E402

SUITES = ("conformance", "unit")
MODES = ("plain", "passthrough", "accelerated", "crossns", "fabric", "fabric-tcp")
CROSS_MODES = ("crossns", "fabric", "fabric-tcp")   # in the runner's two namespaces
FABRIC_MODES = ("fabric", "fabric-tcp")
# In a fabric mode, what no connection of a passing test may have logged: one that should have
# ridden the engine and stayed on kernel TCP (reason fabric), or a stream that broke.
FABRIC_FAILED = re.compile(r"kernel TCP: fabric: the peer runs shunt out of the rings' reach|stream broke")
KNOWN_FAILURES = Path(__file__).resolve().parent / "conformance" / "fabric_known_failures.txt"


def known_failures(ucx, path=KNOWN_FAILURES):
    """{(mode, test)} of the fabric modes' known failures: what the fabric does not do right
    yet (docs/compatibility.md), one line each, "test mode[,mode] why"; a mode written
    "mode@ucxM.N" is one only when the tests load UCX M.N (ucx, "M.N.R")."""
    known = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, modes = line.split()[:2]
            for m in modes.split(","):
                mode, _, only = m.partition("@ucx")
                if not only or ucx.startswith(only + "."):
                    known.add((mode, name))
    return known


def ucx_version(env):
    """The version ("M.N.R") of the UCX that a program run with env loads (libucp.so.0, as
    the library's dlopen finds it), or "" when there is none; asked of a child Python,
    with UCX's memory hooks off, so that this runner never loads UCX itself."""
    code = ("import ctypes\nu = ctypes.CDLL('libucp.so.0')\nv = [ctypes.c_uint() for _ in range(3)]\n"
            "u.ucp_get_version(*[ctypes.byref(x) for x in v])\nprint('.'.join(str(x.value) for x in v))")
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    env.update(UCX_MEM_EVENTS="no", UCX_MEM_MALLOC_HOOKS="no", UCX_LOG_LEVEL="fatal")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    return r.stdout.strip() if r.returncode == 0 else ""
UNIT_MODE = "unit"
DEFAULT_TIMEOUT = {"conformance": 30.0, "unit": 120.0}
EXIT_SKIP = 77
# Variables a mode sets or clears; never inherited from the caller's environment.
MODE_VARS = ("LD_PRELOAD", "SHUNT_ACCEL", "SHUNT_STRICT", "SHUNT_TEST_MODE", "SHUNT_TEST_SERVER_NS",
             "SHUNT_TEST_SERVER_ADDR4", "SHUNT_TEST_SERVER_ADDR6", "SHUNT_TEST_CLIENT_ADDR4",
             "SHUNT_TEST_CLIENT_ADDR6")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="conformance", choices=SUITES,
                   help="conformance: BUILD/tests/conformance in the modes asked for; "
                        "unit: BUILD/tests/unit, run directly (default: conformance)")
    p.add_argument("--build", default="build", help="build directory (default: build)")
    p.add_argument("--modes", default=None,
                   help="comma-separated: plain, passthrough, accelerated, crossns, fabric, fabric-tcp (default: "
                        "plain); "
                        "the unit suite has the one mode 'unit'")
    p.add_argument("--filter", default="",
                   help="only tests whose name contains this (or one of these, comma-separated)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per test and mode (default: 30 for conformance, 120 for unit)")
    p.add_argument("--jobs", type=int, default=2, help="tests run in parallel (default: 2)")
    p.add_argument("--sanitizer", nargs="?", const="address", default=None,
                   choices=("address", "thread"),
                   help="built with ASan/UBSan (address, the default: conformance preloads "
                        "libasan before the library; both suites get halting ASAN_OPTIONS and "
                        "UBSAN_OPTIONS) or with TSan (thread)")
    p.add_argument("--tail", type=int, default=20,
                   help="lines of output shown for a failing test (default: 20)")
    p.add_argument("--ucx", default=None, metavar="LIBDIR",
                   help="the fabric modes' tests load the UCX in this directory (its libucp.so.0; "
                        "LD_LIBRARY_PATH) instead of the system's")
    args = p.parse_args(argv)
    if args.ucx is not None and not os.path.isfile(os.path.join(args.ucx, "libucp.so.0")):
        p.error("--ucx: no libucp.so.0 in %s" % args.ucx)
    if args.suite == "unit":
        valid = (UNIT_MODE,)
        args.modes = args.modes if args.modes is not None else UNIT_MODE
    else:
        valid = MODES
        args.modes = args.modes if args.modes is not None else "plain"
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in valid]
    if bad or not args.modes:
        p.error("unknown mode(s) %s for suite %s; choose from %s" % (
            ", ".join(bad) or "(none)", args.suite, ", ".join(valid)))
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT[args.suite]
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    return args


def find_tests(test_dir, substr):
    """Executable regular files without a dot in their name (no .o, .d, ...), sorted; with
    substr, those whose name contains one of its comma-separated parts."""
    if not os.path.isdir(test_dir):
        return []
    parts = [p for p in substr.split(",") if p] or [""]
    found = []
    for name in sorted(os.listdir(test_dir)):
        path = os.path.join(test_dir, name)
        if "." in name or not os.path.isfile(path) or not os.access(path, os.X_OK):
            continue
        if any(p in name for p in parts):
            found.append((name, path))
    return found


def sanitizer_runtime(name="libasan.so"):
    """Absolute path of the runtime library as the compiler knows it, or None."""
    cc = os.environ.get("CC", "cc")
    try:
        out = subprocess.run([cc, "-print-file-name=%s" % name], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = os.path.realpath(out) if out else ""
    return path if os.path.isabs(out) and os.path.exists(path) else None


def sanitizer_options(env, detect_leaks):
    """Halt at the first report (the caller's own settings win)."""
    env.setdefault("ASAN_OPTIONS", "detect_leaks=%d:halt_on_error=1" % detect_leaks)
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")


# Where a ThreadSanitizer report in a test's output begins.
TSAN_REPORT = "WARNING: ThreadSanitizer:"
TSAN_EXIT = 66
TSAN_SUPPRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tsan",
                                 "suppressions.txt")


def tsan_preload(lib, shim, tsan):
    """LD_PRELOAD for a TSan-built libshunt.so in a program that is not built with TSan.

    libshunt.so comes first, libtsan last, the opposite of ASan's order. With libtsan first,
    a program's blocking call (recv, poll, accept...) runs shunt's whole implementation inside
    TSan's interceptor for that call, where TSan ignores the interceptors called from within
    (its BlockingCall scope): it never saw shunt's mutexes taken there and reported races
    under locks that were held. And shunt's own libc calls, made through dlsym(RTLD_NEXT),
    went past libtsan to libc: TSan never saw the fds shunt opens and closes, and took the
    reuse of a number for a race. With libshunt.so first, shunt's code runs as an
    instrumented program's does, and its libc calls reach TSan's interceptors. TSan's own
    start (it starts inside our constructor) is handled by the sigaction wrapper
    (src/interpose/signal_calls.c). The shim in between is tests/tsan/clocklock.c."""
    return "%s %s %s" % (lib, shim, tsan)


def mode_env(mode, lib, asan, sanitized=False, tsan=None):
    env = {k: v for k, v in os.environ.items() if k not in MODE_VARS}
    if mode == UNIT_MODE:
        # linked with the (sanitized, if so) objects: nothing to preload, no mode to say;
        # leaks count here, as the program is all under test
        if sanitized:
            sanitizer_options(env, detect_leaks=1)
        return env
    env["SHUNT_TEST_MODE"] = mode
    if mode == "plain":
        return env
    env["LD_PRELOAD"] = ("%s %s" % (asan, lib)) if asan else lib
    if tsan:
        env["LD_PRELOAD"] = tsan_preload(lib, tsan[1], tsan[0])
        env["TSAN_OPTIONS"] = "halt_on_error=1 exitcode=%d suppressions=%s %s" % (
            TSAN_EXIT, TSAN_SUPPRESSIONS, env.get("TSAN_OPTIONS", ""))
    if asan:
        sanitizer_options(env, detect_leaks=0)
    if mode == "passthrough":
        env["SHUNT_ACCEL"] = "0"
    else:  # accelerated, crossns, fabric, fabric-tcp
        env["SHUNT_ACCEL"] = "1"
        env["SHUNT_STRICT"] = "1"
    if mode.startswith("fabric"):
        env["SHUNT_FABRIC"] = "only"   # the engine even where shunt's own rings reach
        env["SHUNT_FABRIC_FORKED"] = "1"   # and in forked children (off by default: its cost)
    if mode == "fabric-tcp":
        env["SHUNT_FABRIC_LANES"] = "tcp"
    return env


def in_ci():
    """tests/lib/check.h's test_in_ci(): CI set to anything but "", "0", "false" or "no"."""
    return os.environ.get("CI", "") not in ("", "0", "false", "no")


def command(argv):
    """Run argv with a time bound; returns the CompletedProcess (output captured)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s took over %ds" % (" ".join(argv), IP_TIMEOUT))


def checked(argv):
    r = command(argv)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode,
                                                   (r.stderr or r.stdout).strip()))
    return r


class CrossNamespaces(Scoped):
    """Mode crossns's two network namespaces, cx-<pid>-c (the client's, where tests run) and
    cx-<pid>-s (the server's), joined by a veth pair: 10.77.99.1/24 and fd77::1/64 in the
    client's, .2 and ::2 in the server's (IPv6 without duplicate address detection: usable at
    once). The addresses exist only inside them. A context manager: fabric is enabled if it is
    not (and disabled again at the end only then), and the namespaces are deleted at the end
    whatever happened, a setup failed half way included."""

    ADDRS = {"c": ("10.77.99.1", "fd77::1"), "s": ("10.77.99.2", "fd77::2")}

    def __init__(self, shunt):
        self.shunt = shunt
        self.name = {end: "cx-%d-%s" % (os.getpid(), end) for end in "cs"}
        self.pair = None
        self.enabled_fabric = False

    def setup(self):
        if os.geteuid() != 0:
            raise RuntimeError("mode crossns needs root (network namespaces, shunt fabric)")
        names = (self.name["c"], self.name["s"])
        veths = tuple("cx%d%s" % (os.getpid(), end) for end in "cs")
        addrs = tuple([self.ADDRS[end][0] + "/24", self.ADDRS[end][1] + "/64"] for end in "cs")
        self.pair = VethPair(names, veths, addrs).__enter__()
        status = command([self.shunt, "fabric", "status"])
        if status.returncode == 3:
            checked([self.shunt, "fabric", "enable"])
            self.enabled_fabric = True
        elif status.returncode != 0:
            raise RuntimeError("shunt fabric status: status %d: %s" % (
                status.returncode, (status.stderr or status.stdout).strip()))

    def cleanup(self):
        """Delete the namespaces made (the veth pair goes with them), then disable fabric if this
        run enabled it; every step is tried, the first failure reported."""
        errors = self.pair.cleanup() if self.pair else []
        self.pair = None
        if self.enabled_fabric:
            r = command([self.shunt, "fabric", "disable"])
            if r.returncode != 0:
                errors.append("shunt fabric disable: %s" % (r.stderr or r.stdout).strip())
            self.enabled_fabric = False
        if errors:
            print("crossns cleanup: " + "; ".join(errors), file=sys.stderr)

    def env(self, env):
        env = dict(env)
        env["SHUNT_TEST_SERVER_NS"] = "/run/netns/" + self.name["s"]
        for end, who in (("s", "SERVER"), ("c", "CLIENT")):
            env["SHUNT_TEST_%s_ADDR4" % who], env["SHUNT_TEST_%s_ADDR6" % who] = self.ADDRS[end]
        return env

    def argv(self, path):
        return ["ip", "netns", "exec", self.name["c"], path]


class Runner:
    def __init__(self, timeout, tail, prefix):
        self.timeout = timeout
        self.prefix = prefix
        self.tail = tail
        self.lock = threading.Lock()
        self.running = set()  # process group ids of tests in flight
        self.stopping = False

    def kill_group(self, pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self):
        with self.lock:
            self.stopping = True
            groups = list(self.running)
        for pgid in groups:
            self.kill_group(pgid)

    @staticmethod
    def group_members(pgid):
        """Live processes of process group pgid, other than its (exited) leader."""
        members = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == pgid:
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # fields[0] is the state, fields[2] the process group.
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
        return members

    def wait_group(self, pgid, deadline):
        while self.group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def wait_exit(self, pid, deadline):
        """Wait until pid exits or the deadline passes, leaving it unreaped (a zombie keeps
        its process group id from being reused while the group is killed). True if exited."""
        delay = 0.001
        while True:
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if info is not None and info.si_pid == pid:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    @staticmethod
    def fabric_log(cwd):
        """A fabric mode's logs, every process of the test's, line by line."""
        lines = []
        for path in sorted(glob.glob(os.path.join(cwd, "shunt-*.log"))):
            with open(path, errors="replace") as f:
                lines += [l.rstrip("\n") for l in f]
        return lines

    @staticmethod
    def missed(log):
        """The lines of a fabric mode's log that say a connection missed the engine or broke,
        each after the lines before it about the same socket that say why."""
        out = []
        for i, line in enumerate(log):
            if FABRIC_FAILED.search(line):
                sock = re.search(r"sock \d+", line)
                why = [l for l in log[:i] if sock and sock.group(0) + ":" in l][-3:]
                out += why + [line]
        return out

    def run(self, name, argv, mode, env):
        with tempfile.TemporaryDirectory(prefix=self.prefix) as cwd, \
                tempfile.TemporaryFile() as out:
            if mode in FABRIC_MODES:   # each process's log, read after the test
                env = dict(env, SHUNT_LOG="info", SHUNT_LOG_FILE=os.path.join(cwd, "shunt-%p.log"))
            start = time.monotonic()
            with self.lock:
                if self.stopping:
                    return (mode, name, "FAIL", 0.0, ["(not run: interrupted)"])
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                        start_new_session=True)
                self.running.add(proc.pid)
            exited = self.wait_exit(proc.pid, start + self.timeout)
            elapsed = time.monotonic() - start
            if exited:
                # Let the test's children finish their own output (a child's failure
                # message explains why its parent failed), then kill what is left.
                self.wait_group(proc.pid, min(start + self.timeout, time.monotonic() + 1.0))
            self.kill_group(proc.pid)
            rc = proc.wait()
            with self.lock:
                self.running.discard(proc.pid)
            out.seek(0)
            lines = out.read().decode("utf-8", "replace").splitlines()
            log = self.fabric_log(cwd) if mode in FABRIC_MODES else []
            fabric_bad = self.missed(log) if rc == 0 else []
            if rc != 0 and log:   # what shunt did, for the failure's report
                lines += ["--- shunt's log, last lines ---"] + log[-12:]

        if not exited:
            return (mode, name, "FAIL", elapsed,
                    lines[-self.tail:] + ["(timed out after %gs; process group killed)"
                                          % self.timeout])
        reports = [i for i, l in enumerate(lines) if TSAN_REPORT in l]
        if reports:
            # the first report whole (up to its SUMMARY line), however the process ended
            first = reports[0]
            end = next((i for i in range(first, len(lines)) if lines[i].startswith("SUMMARY:")),
                       len(lines) - 1)
            return (mode, name, "FAIL", elapsed,
                    lines[first:end + 1][:80] + ["(%d ThreadSanitizer report(s); exit status %d)"
                                                 % (len(reports), rc)])
        if rc == 0 and fabric_bad:
            return (mode, name, "FAIL", elapsed,
                    fabric_bad[-self.tail:] + ["(passed, but a connection missed the fabric)"])
        if rc == 0:
            return (mode, name, "PASS", elapsed, [])
        if rc == EXIT_SKIP:
            reasons = [l for l in lines if l.startswith("SKIP")]
            reason = reasons[-1] if reasons else (lines[-1] if lines else "SKIP: (no reason)")
            return (mode, name, "SKIP", elapsed, [reason])
        if rc < 0:
            try:
                why = "killed by %s" % signal.Signals(-rc).name
            except ValueError:
                why = "killed by signal %d" % -rc
        else:
            why = "exit status %d" % rc
        return (mode, name, "FAIL", elapsed, lines[-self.tail:] + ["(%s)" % why])


def main(argv):
    args = parse_args(argv)
    build = os.path.abspath(args.build)
    test_dir = os.path.join(build, "tests", args.suite)
    tests = find_tests(test_dir, args.filter)
    if not tests:
        print("no %s tests found in %s%s" % (
            args.suite, test_dir, (" matching '%s'" % args.filter) if args.filter else ""))
        print("0 passed, 0 failed, 0 skipped")
        return 1

    lib = os.path.join(build, "libshunt.so")
    asan = None
    tsan = None
    if any(m not in ("plain", UNIT_MODE) for m in args.modes):
        if not os.path.isfile(lib):
            print("%s not found: needed for mode(s) %s" % (
                lib, ",".join(m for m in args.modes if m != "plain")))
            print("0 passed, 0 failed, 0 skipped")
            return 1
        if args.sanitizer == "address":
            asan = sanitizer_runtime()
            if asan is None:
                print("--sanitizer: libasan.so not found (cc -print-file-name=libasan.so)")
                print("0 passed, 0 failed, 0 skipped")
                return 1
        if args.sanitizer == "thread":
            runtime = sanitizer_runtime("libtsan.so")
            shim = os.path.join(build, "tests", "tsan", "clocklock.so")
            missing = [what for what, ok in (
                ("libtsan.so (cc -print-file-name=libtsan.so)", runtime),
                (shim + " (make SANITIZE=thread tsan-shim)", os.path.isfile(shim)),
                (TSAN_SUPPRESSIONS, os.path.isfile(TSAN_SUPPRESSIONS))) if not ok]
            if missing:
                print("--sanitizer thread: not found: " + ", ".join(missing))
                print("0 passed, 0 failed, 0 skipped")
                return 1
            tsan = (runtime, shim)

    envs = {m: mode_env(m, lib, asan, args.sanitizer == "address", tsan) for m in args.modes}
    if args.ucx:
        for m in args.modes:
            if m in FABRIC_MODES:
                envs[m]["LD_LIBRARY_PATH"] = os.pathsep.join(
                    [os.path.abspath(args.ucx)] + [d for d in [envs[m].get("LD_LIBRARY_PATH")] if d])
    ucx = ""
    if any(m in FABRIC_MODES for m in args.modes):
        ucx = ucx_version(next(envs[m] for m in args.modes if m in FABRIC_MODES))
        print("the fabric modes load UCX %s%s" % (ucx or "(none found)",
                                                 " from " + args.ucx if args.ucx else ""))
    runner = Runner(args.timeout, args.tail,
                    "shunt-unit-" if args.suite == "unit" else "shunt-conf-")
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0, "KNOWN": 0, "FIXED?": 0}
    failed = []
    known = known_failures(ucx) if any(m in FABRIC_MODES for m in args.modes) else set()

    def report(result):
        mode, name, status, elapsed, detail = result
        if (mode, name) in known:
            # a fabric mode's known failure: reported, not counted as one; a pass is shown so
            # that the list shrinks (not a failure: some of them fail only with some timings)
            status = {"FAIL": "KNOWN", "PASS": "FIXED?"}.get(status, status)
        counts[status] += 1
        line = "%s  %s  %s  %.2fs" % (status, mode, name, elapsed)
        if status == "SKIP":
            line += "  " + detail[0]
        print(line)
        if status == "FAIL":
            failed.append("%s/%s" % (mode, name))
        if status in ("FAIL", "KNOWN"):
            for l in detail:
                print("    " + l)
        sys.stdout.flush()

    def interrupted(*_):
        raise KeyboardInterrupt
    # SIGTERM (a CI step's timeout, make's) ends the run as Ctrl-C does: the namespaces go
    signal.signal(signal.SIGTERM, interrupted)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    cross = None
    try:
        crossing = [m for m in args.modes if m in CROSS_MODES]
        if crossing and os.geteuid() != 0 and not in_ci():
            # a developer's make test as a user; under CI the setup below fails instead
            for m in crossing:
                print("SKIP  %s  (all tests)  SKIP: mode %s needs root (network namespaces, "
                      "shunt fabric)" % (m, m))
                counts["SKIP"] += 1
        elif crossing:
            cross = CrossNamespaces(os.path.join(build, "shunt"))
            try:
                cross.__enter__()
            except RuntimeError as e:
                cross = None
                print("modes %s: %s" % (",".join(crossing), e))
                print("0 passed, 1 failed, 0 skipped")
                return 1
            for m in crossing:
                envs[m] = cross.env(envs[m])
        futures = [pool.submit(runner.run, name, cross.argv(path) if mode in CROSS_MODES else [path],
                               mode, envs[mode])
                   for mode in args.modes for name, path in tests
                   if mode not in CROSS_MODES or cross is not None]
        for fut in concurrent.futures.as_completed(futures):
            report(fut.result())
    except KeyboardInterrupt:
        runner.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        print("interrupted")
        print("%d passed, %d failed, %d skipped" % (counts["PASS"], counts["FAIL"] + 1,
                                                     counts["SKIP"]))
        return 1
    finally:
        pool.shutdown(wait=True)
        if cross is not None:
            cross.cleanup()

    if failed:
        print("failed: " + " ".join(sorted(failed)))
    extra = ""
    if known:
        extra = ", %d known failures of the fabric modes, %d of them passed" % (
            counts["KNOWN"] + counts["FIXED?"], counts["FIXED?"])
    print("%d passed, %d failed, %d skipped%s" % (counts["PASS"], counts["FAIL"], counts["SKIP"], extra))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
