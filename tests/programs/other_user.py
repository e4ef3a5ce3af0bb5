#!/usr/bin/env python3
"""A second user (nobody) attacking the files shunt keeps in /dev/shm for
this user (issue 16, suite (d)); driven by tests/integration/test_other_user.py.

    other_user.py scenario NAME BUILD OUTDIR   as root, inside private mount and
                                               network namespaces (unshare): mounts a
                                               tmpfs of its own on /dev/shm, runs one
                                               attack, prints one JSON line
    other_user.py attack ACTION ARG...         the attacker's moves, run as nobody
                                               through setpriv
    other_user.py echo-server | echo-client    the programs under shunt

Each scenario: the attacker makes the names shunt will use first (a file of
its own with mode 0666, a symlink to a file of ours, a FIFO), or races to make
the names shunt makes next to a segment it just saw, or goes at this user's
files directly (open for writing, truncate, unlink); then an echo server and
client under shunt exchange bytes, twice, with the attacker truncating what it
can between the rounds.  It reports: the attacks tried, processes killed by a
signal (crashes), waits that ran out (hangs), whether every byte came back,
which path the connection took (shm, or kernel TCP and why), whether that
reason is visible (the log, `shunt stat`), and whether anything of ours was
written into the attacker's files or through its symlinks.
"""

import ctypes
import hashlib
import shutil
import tempfile
import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

NOBODY = 65534
SHM = "/dev/shm"
# the attacker runs the system's python: root's own (pyenv, under /root) is
# out of nobody's reach
ATTACKER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
ROUND_BYTES = 3 * 1024 * 1024 + 4321
STEP_TIMEOUT = 30

# ------------------------------------------------------------------ the programs under shunt


def pattern(n, salt):
    out = bytearray()
    block = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d-%d" % (salt, block)).digest()
        block += 1
    return bytes(out[:n])


def accelerated(fd):
    try:
        f = ctypes.CDLL(None).shunt_fd_accelerated
    except AttributeError:
        return None
    f.argtypes = [ctypes.c_int]
    return f(fd) == 1


def echo_server():
    """Echoes every connection to its end; prints PORT, then one line per connection."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    print("PORT %d" % ls.getsockname()[1], flush=True)

    def serve(c, n):
        total = 0
        with c:
            c.settimeout(STEP_TIMEOUT)
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
                total += len(b)
            c.shutdown(socket.SHUT_WR)
        print("SERVED %d %d" % (n, total), flush=True)

    n = 0
    while True:
        c, _ = ls.accept()
        n += 1
        threading.Thread(target=serve, args=(c, n), daemon=True).start()


def echo_client(port, nbytes, salt, hold):
    """Sends nbytes of a pattern and reads them back (at once, from a thread);
    then tells which path the connection is on (after the exchange: a client
    learns of the server's claim at its next call), and with hold waits for a
    line on stdin (the driver runs `shunt stat` meanwhile); then half-closes
    and expects the end."""
    data = pattern(nbytes, salt)
    c = socket.create_connection(("127.0.0.1", port), timeout=STEP_TIMEOUT)
    got = bytearray()

    def reader():
        while len(got) < nbytes:
            b = c.recv(1 << 20)
            if not b:
                return
            got.extend(b)

    t = threading.Thread(target=reader)
    t.start()
    c.sendall(data)
    t.join(STEP_TIMEOUT)
    acc = accelerated(c.fileno())
    if hold:
        print("HOLDING %s" % ("shm" if acc else "tcp"), flush=True)
        sys.stdin.readline()
    c.shutdown(socket.SHUT_WR)
    end = c.recv(1)
    c.close()
    ok = bytes(got) == data and end == b""
    print("CLIENT %s %d %s" % ("OK" if ok else "BAD", len(got), "shm" if acc else "tcp"), flush=True)


# ------------------------------------------------------------------ the attacker (as nobody)


def attack(action, args):
    os.umask(0)
    done = 0
    if action == "file":              # a file of ours-to-be, mode 0666
        for p in args:
            with open(p, "w") as f:
                f.write("junk")
            done += 1
    elif action == "empty":
        for p in args:
            open(p, "w").close()
            done += 1
    elif action == "fifo":
        for p in args:
            os.mkfifo(p, 0o666)
            done += 1
    elif action == "symlink":         # target, then the names
        for p in args[1:]:
            os.symlink(args[0], p)
            done += 1
    elif action == "truncate":        # its own files: whatever it can
        for p in args:
            try:
                os.truncate(p, 0)
                done += 1
            except OSError:
                pass
    elif action == "at-ours":         # this user's files: each must be refused by the kernel
        refused = 0
        for p in args:
            for how in ("write", "truncate", "unlink", "rename"):
                try:
                    if how == "write":
                        os.close(os.open(p, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK))
                    elif how == "truncate":
                        os.truncate(p, 0)
                    elif how == "unlink":
                        os.unlink(p)
                    else:
                        tmp = p + ".nobody"
                        open(tmp, "w").close()
                        try:
                            os.rename(tmp, p)
                        finally:
                            if os.path.lexists(tmp):
                                os.unlink(tmp)
                except OSError:
                    refused += 1
                done += 1
        print(json.dumps({"tried": done, "refused": refused}), flush=True)
        return
    elif action == "race":            # makes the names beside every segment it sees, until told to stop
        seen = set()
        tried = refused = 0
        stop = args[0]
        while not os.path.exists(stop):
            for n in os.listdir(SHM):
                if not n.startswith("shunt-0-") or "." in n or n in seen or re.search(r"-(w[01]|b|back)(-|$)", n):
                    continue
                seen.add(n)
                base = os.path.join(SHM, n)
                # every name that follows from what it sees, old style and new
                for suffix, kind in (("-w0", "fifo"), ("-w1", "fifo"), ("-back", "file"), ("-b", "file")):
                    try:
                        if kind == "fifo":
                            os.mkfifo(base + suffix, 0o666)
                        else:
                            with open(base + suffix, "w") as f:
                                f.write("junk")
                    except OSError:
                        pass
                    tried += 1
                for how in ("write", "truncate"):
                    try:
                        if how == "write":
                            os.close(os.open(base, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK))
                        else:
                            os.truncate(base, 0)
                    except OSError:
                        refused += 1
                    tried += 1
            time.sleep(0.0002)
        print(json.dumps({"tried": tried, "refused": refused, "segments": len(seen)}), flush=True)
        return
    print(json.dumps({"tried": done}), flush=True)


# ------------------------------------------------------------------ the scenarios (as root)


class Run:
    def __init__(self, name, build, outdir):
        self.name = name
        self.build = os.path.abspath(build)
        self.src = os.path.join(os.path.dirname(self.build), "src")
        self.out = outdir
        self.procs = []
        self.r = {"scenario": name, "attacks": 0, "crashes": 0, "hangs": 0, "connections": 0, "bytes": 0,
                  "exact": True, "paths": [], "reason_visible": None, "attacker_files_changed": 0,
                  "problems": []}
        self.logdir = os.path.join(outdir, "logs-" + name)
        os.makedirs(self.logdir, mode=0o700, exist_ok=True)
        self.netns = os.stat("/proc/self/ns/net").st_ino
        self.watched = []     # (path, lstat at the start) of the attacker's files and its symlinks' targets
        self.cleanup = []

    def problem(self, what):
        self.r["problems"].append(what)

    def version(self, name):
        text = open(os.path.join(self.src, "registry", "registry_file.h")).read()
        return int(re.search(r"#define %s\s+(\d+)u" % name, text).group(1))

    def registry(self):
        return "%s/shunt-0-%d-r%d.reg" % (SHM, self.netns, self.version("REG_VERSION"))

    def env(self, **extra):
        # none of the caller's SHUNT_* (SHUNT_BUILD: `shunt run` refuses names it does not know)
        e = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
        e.update(SHUNT_LOG="info", SHUNT_LOG_FILE=os.path.join(self.logdir, "log-%p.txt"))
        e.update({k: str(v) for k, v in extra.items()})
        return e

    def shunt(self, argv):
        return [os.path.join(self.build, "shunt"), "run", "--"] + argv

    def nobody(self, action, *args):
        """The attacker's move, as user nobody; returns its JSON answer."""
        p = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                            ATTACKER_PYTHON, __file__, "attack", action] + list(args),
                           capture_output=True, text=True, timeout=STEP_TIMEOUT)
        if p.returncode != 0:
            self.problem("the attacker's %s failed: %s" % (action, p.stderr.strip()[-300:]))
            return {"tried": 0}
        ans = json.loads(p.stdout.strip().splitlines()[-1])
        self.r["attacks"] += ans.get("tried", 0)
        return ans

    def watch(self, *paths):
        for p in paths:
            st = os.lstat(p)
            content = open(p, "rb").read() if stat.S_ISREG(st.st_mode) else None
            self.watched.append((p, st, content))

    def attacker_truncates(self, *paths):
        """The attacker truncates its own files; what it did is the new normal
        (a file that is gone by now stays watched: shunt took it away)."""
        present = [p for p in paths if os.path.lexists(p)]
        self.nobody("truncate", *present)
        self.watched = [w for w in self.watched if w[0] not in present]
        self.watch(*present)

    def check_watched(self):
        for p, st, content in self.watched:
            try:
                now = os.lstat(p)
            except FileNotFoundError:
                # the attacker removes none of its files: shunt took this one for its own
                self.r["attacker_files_changed"] += 1
                self.problem("%s was removed" % p)
                continue
            same = (stat.S_IFMT(now.st_mode) == stat.S_IFMT(st.st_mode) and now.st_uid == st.st_uid and
                    (not stat.S_ISREG(now.st_mode) or open(p, "rb").read() == content))
            if not same:
                self.r["attacker_files_changed"] += 1
                self.problem("%s changed: %s -> %s" % (p, st, now))

    def start(self, argv, env, stdin=subprocess.DEVNULL):
        p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def line(self, p, prefix, timeout=STEP_TIMEOUT):
        """The next line of p's output that starts with prefix (None: it ended or ran out of time)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r, _, _ = select.select([p.stdout], [], [], 0.1)
            if r:
                l = p.stdout.readline()
                if not l:
                    return None
                if l.startswith(prefix):
                    return l.split()
            elif p.poll() is not None:
                return None
        self.r["hangs"] += 1
        self.problem("no %r line within %ss" % (prefix, timeout))
        return None

    def server(self, wrapper=None, **extra):
        """The echo server under shunt; with wrapper, its pid is known before it starts
        (a shell that waits for a line, then execs it: returns (proc, release))."""
        argv = [sys.executable, __file__, "echo-server"]
        if wrapper:
            # the shell is not under shunt (it would open its log and table
            # under that pid first); shunt run execs the server in its place
            p = self.start(["sh", "-c", 'read go; exec "$@"', "sh"] + self.shunt(argv), self.env(**extra),
                           stdin=subprocess.PIPE)
            return p
        p = self.start(self.shunt(argv), self.env(**extra))
        return p

    def port_of(self, server):
        l = self.line(server, "PORT")
        if not l:
            self.problem("the server did not start: %s" % self.describe(server))
            return None
        return int(l[1])

    def client_round(self, port, salt, hold=False, stat=False, **extra):
        """One connection of ROUND_BYTES each way; returns the client's path."""
        c = self.start(self.shunt([sys.executable, __file__, "echo-client", str(port), str(ROUND_BYTES),
                                   str(salt)] + (["hold"] if hold else [])), self.env(**extra),
                       stdin=subprocess.PIPE)
        seen = None
        if hold:
            h = self.line(c, "HOLDING")
            if h and stat:
                seen = self.stat_json(**extra)
            if c.poll() is None:
                c.stdin.write("go\n")
                c.stdin.flush()
        l = self.line(c, "CLIENT")
        try:
            c.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.r["hangs"] += 1
            self.problem("the client did not end")
        if c.returncode is not None and c.returncode < 0:
            self.r["crashes"] += 1
            self.problem("the client was killed by signal %d" % -c.returncode)
        self.r["connections"] += 1
        if not l or l[1] != "OK" or int(l[2]) != ROUND_BYTES:
            self.r["exact"] = False
            self.problem("round %d: %s %s" % (salt, l, self.describe(c)))
            return None, seen
        self.r["bytes"] += 2 * ROUND_BYTES
        self.r["paths"].append(l[3])
        return l[3], seen

    def stat_json(self, **extra):
        p = subprocess.run([os.path.join(self.build, "shunt"), "stat", "--json"], capture_output=True, text=True,
                           timeout=STEP_TIMEOUT, env=self.env(**extra))
        if p.returncode != 0:
            return {"error": p.stderr.strip()}
        return json.loads(p.stdout)

    def describe(self, p):
        err = ""
        if p.poll() is not None:
            try:
                err = p.stderr.read()[-1500:]
            except Exception:
                pass
        return "rc=%s stderr=%r" % (p.returncode, err)

    def logs(self):
        text = ""
        for n in sorted(os.listdir(self.logdir)):
            text += open(os.path.join(self.logdir, n), errors="replace").read()
        return text

    def stop_server(self, p):
        if p.poll() is not None:
            if p.returncode < 0:
                self.r["crashes"] += 1
            self.problem("the server ended early: %s" % self.describe(p))
            return
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            self.r["hangs"] += 1
            self.problem("the server did not end on SIGTERM")

    def finish(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.check_watched()
        for c in self.cleanup:
            c()
        print(json.dumps(self.r), flush=True)

    # ---- the common run: two rounds, the attacker's truncations between them

    def echo_twice(self, expect_path, reason_in_log=None, reason_in_stat=None, between=None, server_extra=None,
                   **extra):
        s = self.server(**(server_extra or {}), **extra)
        port = self.port_of(s)
        if port is None:
            self.stop_server(s)
            return
        path, seen = self.client_round(port, 1, hold=True, stat=reason_in_stat is not None, **extra)
        if between:
            between()
        path2, _ = self.client_round(port, 2, **extra)
        self.stop_server(s)
        for p in (path, path2):
            if p and p != expect_path:
                self.problem("the connection took %s, not %s" % (p, expect_path))
        visible = True
        if reason_in_log:
            logs = self.logs()
            for want in reason_in_log:
                if want not in logs:
                    visible = False
                    self.problem("the log does not say %r:\n%s" % (want, logs[-2000:]))
        if reason_in_stat is not None:
            if not reason_in_stat(seen):
                visible = False
                self.problem("shunt stat does not show it: %s" % json.dumps(seen)[:2000])
        self.r["reason_visible"] = visible


def target_file(run):
    """A file of ours (root's, 0600) for the attacker's symlinks to point at."""
    t = os.path.join(run.out, "roots-own-" + run.name)
    with open(t, "w") as f:
        f.write("secret")
    os.chmod(t, 0o600)
    return t


def scenario_registry(run, kind):
    reg = run.registry()
    if kind == "file":
        run.nobody("file", reg)
    elif kind == "fifo":
        run.nobody("fifo", reg)
    else:
        t = target_file(run)
        run.nobody("symlink", t, reg)
        run.watch(t)
    run.watch(reg)
    owner = "uid %d" % NOBODY

    def stat_says(_):
        p = subprocess.run([os.path.join(run.build, "shunt"), "stat"], capture_output=True, text=True,
                           timeout=STEP_TIMEOUT, env=run.env())
        return p.returncode == 1 and reg in p.stderr and owner in p.stderr

    run.echo_twice("tcp", reason_in_log=["refusing %s" % reg, owner, "another user's"],
                   reason_in_stat=stat_says, between=lambda: run.attacker_truncates(reg) if kind == "file" else None)


def scenario_table(run):
    """The name a process's table had when it followed from the pid alone:
    made first for the server (whose pid is known before it starts) and for
    the next 300 pids (the clients'), then truncated between the rounds."""
    s = run.server(wrapper=True)
    names = ["%s/shunt-0-%d-%d.fds" % (SHM, run.netns, pid) for pid in range(s.pid, s.pid + 300)]
    run.nobody("empty", *names)
    run.watch(*names)
    s.stdin.write("go\n")
    s.stdin.flush()
    port = run.port_of(s)
    if port is None:
        run.stop_server(s)
        return
    path, seen = run.client_round(port, 1, hold=True, stat=True)
    run.attacker_truncates(*names)
    path2, _ = run.client_round(port, 2)
    alive = s.poll() is None
    run.stop_server(s)
    for p in (path, path2):
        if p and p != "shm":
            run.problem("the connection took %s: shunt could have chosen another name" % p)
    # the server's listener is in shunt stat: its table is readable, in a file of its own
    ok = bool(seen) and "listeners" in seen and any(h.get("pid") == s.pid for l in seen["listeners"]
                                                   for h in l.get("holders", []))
    if not ok:
        run.problem("shunt stat does not list the server's listener: %s" % json.dumps(seen)[:1500])
    run.r["reason_visible"] = ok and alive


def scenario_budget(run, kind):
    budget = "%s/shunt-0.budget" % SHM
    if kind == "file":
        run.nobody("file", budget)
    elif kind == "fifo":
        run.nobody("fifo", budget)
    else:
        t = target_file(run)
        run.nobody("symlink", t, budget)
        run.watch(t)
    run.watch(budget)

    def stat_says(seen):
        return bool(seen) and any(c.get("reason") == "not_ours" for c in seen.get("connections", []))

    run.echo_twice("tcp", reason_in_log=["refusing %s" % budget, "uid %d" % NOBODY, "another user's"],
                   reason_in_stat=stat_says, between=lambda: run.attacker_truncates(budget) if kind == "file" else None,
                   SHUNT_SHM_LIMIT="64M")


def scenario_beside(run):
    """A watcher makes, for every segment it sees, every name that follows from
    the segment's (wake FIFOs, a handed-back prefix) and goes at the segment
    itself; meanwhile: processes that wake each other across a fork
    (procs_shutdown_blocked), ends that move back to kernel TCP with a prefix
    handed back (exec_downgrade_prefix), and the echo."""
    stop = os.path.join(SHM, "stop-" + run.name)   # where the attacker can see it
    watcher = subprocess.Popen(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                                ATTACKER_PYTHON, __file__, "attack", "race", stop],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    run.procs.append(watcher)
    time.sleep(0.3)
    conf = os.path.join(run.build, "tests", "conformance")
    env = run.env(SHUNT_ACCEL="1", SHUNT_STRICT="1", SHUNT_TEST_MODE="accelerated",
                  LD_PRELOAD=os.path.join(run.build, "libshunt.so"))
    for test in ("procs_shutdown_blocked", "exec_downgrade_prefix", "procs_shutdown_epoll"):
        exe = os.path.join(conf, test)
        if not os.path.exists(exe):
            continue
        try:
            p = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60, start_new_session=True)
            if p.returncode != 0:
                run.r["exact"] = False
                if p.returncode < 0:
                    run.r["crashes"] += 1
                run.problem("%s: rc %d: %s" % (test, p.returncode, p.stderr[-800:]))
            run.r["connections"] += 1
        except subprocess.TimeoutExpired:
            run.r["hangs"] += 1
            run.problem("%s: no end within 60 s" % test)
    run.echo_twice("shm")
    open(stop, "w").close()
    try:
        out, _ = watcher.communicate(timeout=STEP_TIMEOUT)
        ans = json.loads(out.strip().splitlines()[-1])
        run.r["attacks"] += ans["tried"]
        run.r["segments_raced"] = ans["segments"]
        if ans["refused"] != ans["segments"] * 2:
            run.problem("the kernel let the attacker at a segment: %s" % ans)
    except Exception as e:
        run.problem("the watcher: %s" % e)
    run.r["reason_visible"] = True   # nothing falls back: the names were never the attacker's


def scenario_log(run):
    """SHUNT_LOG_FILE in a directory every user may write: a symlink to a file
    of ours under the server's log name, files of the attacker's under the
    clients' (the next 300 pids)."""
    # /tmp's own kind of directory (the test's directory is out of nobody's reach)
    d = tempfile.mkdtemp(prefix="shunt-suite-d-", dir="/tmp")
    os.chmod(d, 0o1777)
    run.cleanup.append(lambda: shutil.rmtree(d, ignore_errors=True))
    t = target_file(run)
    run.watch(t)
    s = run.server(wrapper=True, SHUNT_LOG_FILE=os.path.join(d, "shunt-%p.log"))
    run.nobody("symlink", t, os.path.join(d, "shunt-%d.log" % s.pid))
    names = [os.path.join(d, "shunt-%d.log" % pid) for pid in range(s.pid + 1, s.pid + 300)]
    run.nobody("file", *names)
    run.watch(os.path.join(d, "shunt-%d.log" % s.pid), *names)
    s.stdin.write("go\n")
    s.stdin.flush()
    port = run.port_of(s)
    if port is None:
        run.stop_server(s)
        return
    path, _ = run.client_round(port, 1, SHUNT_LOG_FILE=os.path.join(d, "shunt-%p.log"))
    run.stop_server(s)
    if path != "shm":
        run.problem("the connection took %s" % path)
    err = s.stderr.read()
    run.r["reason_visible"] = "SHUNT_LOG_FILE" in err and "not this user's" in err
    if not run.r["reason_visible"]:
        run.problem("the server's standard error does not say why it logs there: %r" % err[-1500:])


def scenario_at_ours(run):
    """While a connection is up: the attacker goes at every file of ours in
    /dev/shm (open for writing, truncate, unlink, rename over it)."""
    s = run.server()
    port = run.port_of(s)
    if port is None:
        run.stop_server(s)
        return
    c = run.start(run.shunt([sys.executable, __file__, "echo-client", str(port), str(ROUND_BYTES), "1", "hold"]),
                  run.env(), stdin=subprocess.PIPE)
    run.line(c, "HOLDING")
    ours = [os.path.join(SHM, n) for n in os.listdir(SHM) if n.startswith("shunt-0")]
    ans = run.nobody("at-ours", *ours)
    if ans.get("refused") != ans.get("tried"):
        run.problem("the kernel let the attacker at our files: %s" % ans)
    c.stdin.write("go\n")
    c.stdin.flush()
    l = run.line(c, "CLIENT")
    c.wait(timeout=STEP_TIMEOUT)
    run.r["connections"] += 1
    if not l or l[1] != "OK" or l[3] != "shm":
        run.r["exact"] = False
        run.problem("the held connection: %s" % l)
    else:
        run.r["bytes"] += 2 * ROUND_BYTES
        run.r["paths"].append(l[3])
    run.stop_server(s)
    run.r["files_attacked"] = len(ours)
    run.r["reason_visible"] = True


SCENARIOS = {
    "registry-file": lambda r: scenario_registry(r, "file"),
    "registry-symlink": lambda r: scenario_registry(r, "symlink"),
    "registry-fifo": lambda r: scenario_registry(r, "fifo"),
    "table-squat": scenario_table,
    "budget-file": lambda r: scenario_budget(r, "file"),
    "budget-symlink": lambda r: scenario_budget(r, "symlink"),
    "budget-fifo": lambda r: scenario_budget(r, "fifo"),
    "beside-race": scenario_beside,
    "log-file": scenario_log,
    "at-ours": scenario_at_ours,
}


def scenario(name, build, outdir):
    # a /dev/shm of our own (this process is in its own mount namespace) and loopback up
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777,size=256m", "shunt-suite-d", SHM], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    run = Run(name, build, outdir)
    try:
        SCENARIOS[name](run)
    except Exception as e:
        run.problem("the scenario itself: %s: %s" % (type(e).__name__, e))
    finally:
        run.finish()


def main():
    what = sys.argv[1]
    if what == "scenario":
        scenario(sys.argv[2], sys.argv[3], sys.argv[4])
    elif what == "attack":
        attack(sys.argv[2], sys.argv[3:])
    elif what == "echo-server":
        echo_server()
    elif what == "echo-client":
        echo_client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), len(sys.argv) > 5)
    else:
        sys.exit("unknown: %s" % what)


if __name__ == "__main__":
    main()
