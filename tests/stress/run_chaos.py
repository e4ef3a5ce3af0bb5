#!/usr/bin/env python3
"""Run shunt's stress and chaos program (tests/stress/chaos.c) under shunt and judge it.

  tests/stress/run_chaos.py --build build [--seconds 20] [--strict-leftovers] [--raw-clones] [--sanitizer]

BUILD/tests/stress/chaos runs with BUILD/libshunt.so preloaded, SHUNT_ACCEL=1,
SHUNT_SHORT_CONNS=0 (its many short connections to one server are each to be offered a
channel, not put on kernel TCP by design) and SHUNT_STRICT=0 (connections that lose the race between the client's shutdown and the
server's accept fall back by design, and must stay exact on kernel TCP), in a session of its
own and a temporary directory. The run is bounded: --seconds of rounds, then at most one round
(15 s) and the sweep; past --seconds + 30 s its whole process group is killed and the run
fails as a hang. Its last line gives the figures; the run passes when its exit status is 0,
that line is there, and it really did what it claims (connections, some accelerated, bytes
checked, kills). Exit status 0 on a pass, 1 otherwise. --sanitizer: the build is make
SANITIZE=1's (ASan + UBSan); libasan is preloaded first, and a report ends its process with a
failure, which the program counts as an error. Its slower timing found a hang the plain build
did not show (epoll_fallback_close).

shunt logs at debug level into the temporary directory (SHUNT_LOG_FILE); when the program
names a connection in trouble (a hang, a wrong byte, bytes lost), the log lines of its sockets
are shown, so that a failure seen once in CI can be read afterwards.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

FIGURES = re.compile(
    r"chaos: (?P<rounds>\d+) rounds, (?P<conns>\d+) connections \((?P<accel>\d+) accelerated\), "
    r"(?P<bytes>\d+) bytes checked, (?P<kills>\d+) kills, (?P<lost>\d+) lost, (?P<wrong>\d+) wrong, "
    r"(?P<crashes>\d+) crashes, (?P<hangs>\d+) hangs, (?P<errors>\d+) errors, (?P<left>\d+) leftovers "
    r"\((?P<left_kill>\d+) of them after a kill; (?P<left_before>\d+) before the sweep\), "
    r"(?P<clones>\d+) raw clones")


SOCKETS = re.compile(r"\b(?:sock|sender's) (\d+)")


def show_logs(cwd, diag, tail):
    """The log lines of every socket a diagnostic line names (its inode: "sock N")."""
    inodes = []
    for line in diag:
        for ino in SOCKETS.findall(line):
            if ino != "0" and ino not in inodes:
                inodes.append(ino)
    if not inodes:
        return
    lines = []
    for name in sorted(os.listdir(cwd)):
        if name.startswith("shunt-") and name.endswith(".log"):
            with open(os.path.join(cwd, name), errors="replace") as f:
                lines += [l.rstrip("\n") for l in f]
    for ino in inodes[:8]:
        mine = [l for l in lines if re.search(r"\bsock %s\b" % ino, l)]
        print("    shunt's log of sock %s (%d lines%s):" % (ino, len(mine), ", the last %d" % tail
                                                            if len(mine) > tail else ""))
        for l in mine[-tail:]:
            print("      " + l)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of rounds (default 20)")
    p.add_argument("--raw-clones", action="store_true",
                   help="servers make raw clones in a third of the rounds (make test-stress's third run)")
    p.add_argument("--strict-leftovers", action="store_true",
                   help="files left in /dev/shm after a kill fail the run too")
    p.add_argument("--sanitizer", action="store_true",
                   help="the library is built with ASan/UBSan (make SANITIZE=1): preload libasan")
    p.add_argument("--tail", type=int, default=40, help="lines of diagnostics shown")
    args = p.parse_args(argv)

    build = os.path.abspath(args.build)
    prog = os.path.join(build, "tests", "stress", "chaos")
    lib = os.path.join(build, "libshunt.so")
    for path in (prog, lib):
        if not os.path.isfile(path):
            print("stress: %s not found (make tests)" % path)
            return 1
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "SHUNT_TEST_MODE", "SHUNT_STRICT", "SHUNT_ACCEL", "SHUNT_SHORT_CONNS")}
    env.update(LD_PRELOAD=lib, SHUNT_ACCEL="1", SHUNT_STRICT="0", SHUNT_SHORT_CONNS="0")
    if args.sanitizer:
        cc = os.environ.get("CC", "cc")
        asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        if not os.path.isabs(asan) or not os.path.exists(asan):
            print("stress: --sanitizer: libasan.so not found (cc -print-file-name=libasan.so)")
            return 1
        env["LD_PRELOAD"] = "%s %s" % (os.path.realpath(asan), lib)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    cmd = [prog, "--seconds", "%g" % args.seconds]
    if args.strict_leftovers:
        cmd.append("--strict-leftovers")
    if args.raw_clones:
        cmd.append("--raw-clones")
    bound = args.seconds + 30

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shunt-chaos-") as cwd:
        env.update(SHUNT_LOG="debug", SHUNT_LOG_FILE=os.path.join(cwd, "shunt-%p.log"))
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=bound)
            hung = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            hung = True
        finally:
            # whatever the program left in its group (a child it could not reap)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elapsed = time.monotonic() - start
        diag = [l for l in err.splitlines() if l.strip()]
        for line in diag[:args.tail]:
            print("    " + line)
        if len(diag) > args.tail:
            print("    ... %d more lines" % (len(diag) - args.tail))
        show_logs(cwd, diag, args.tail)
    match = None
    for line in out.splitlines():
        m = FIGURES.search(line)
        if m:
            match, figures = m, line
    if hung:
        print("stress: FAIL: the run did not end within %gs (process group killed): a hang" % bound)
        return 1
    if not match:
        print("stress: FAIL: no figures (exit status %s)" % proc.returncode)
        for line in out.splitlines()[-args.tail:]:
            print("    " + line)
        return 1
    print(figures)
    n = {k: int(v) for k, v in match.groupdict().items()}
    problems = []
    if proc.returncode != 0:
        problems.append("exit status %d" % proc.returncode)
    for what in ("conns", "accel", "bytes", "kills") + (("clones",) if args.raw_clones else ()):
        if n[what] == 0:
            problems.append("no %s: the run did not test what it claims" % what)
    if problems:
        print("stress: FAIL after %.1fs: %s" % (elapsed, "; ".join(problems)))
        return 1
    print("stress: PASS after %.1fs" % elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
