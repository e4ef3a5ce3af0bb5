"""The real-program corpus (issue 17, item 6): the table and its helpers.

Each program of the corpus is one entry made with @program(...): its name,
where it comes from (Debian, PyPI, npm, or built in the test from a package's
library), its event loop or process model, and what shunt is expected to do
with its connections (`accelerated`, or `fallback: REASON` where shunt falls
back by design).  The test modules test_corpus_*.py hold the entries, one
function each, and run them through one parametrized test; a function gets a
Cx, which runs programs under `shunt run --`, makes checksummed payloads and
reads the shunt logs afterwards:

  cx.accelerated(pairs)   at least PAIRS connections whose server end and
                          client end both logged "accelerated" with the same
                          channel, and not one "kernel TCP:" line or
                          SHUNT_STRICT failure anywhere
  cx.fell_back(reason)    the reason shunt gave, and no accelerated connection

Processes run with SHUNT_LOG=info, SHUNT_LOG_FILE=<dir>/shunt-%p.log and,
where acceleration is expected, SHUNT_STRICT=1 (a connection that should have
been accelerated fails instead of falling back).  Every run has a timeout,
servers are started in their own process group and stopped by pid
(shunttest.Server), and nothing listens beyond 127.0.0.1.

Programs that refuse to run as root (PostgreSQL) or whose users run them as
an unprivileged user run as `nobody` when the tests run as root (Cx.as_user):
shunt's registry is per user, so the clients then run as nobody too.

docs/compatibility.md has a row for every entry ("Real programs");
test_corpus_docs.py checks that it does.
"""

import hashlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from shunttest import PYTHON, base_env, free_port, missing, need_tool, run_cmd

REPO = Path(__file__).resolve().parents[2]

ACCELERATED = "accelerated"


class Program:
    def __init__(self, fn, name, source, model, expect, tools, modules, npm, xfail, how):
        self.fn = fn
        self.name = name
        self.source = source          # debian / pypi / npm / built
        self.model = model            # event loop / process model
        self.expect = expect          # "accelerated" or "fallback: <reason>"
        self.tools = tools
        self.modules = modules        # (import name, PyPI distribution)
        self.npm = npm
        self.xfail = xfail
        self.how = how                # one line: how the test exercises it

    def param(self):
        marks = [pytest.mark.xfail(strict=True, reason=self.xfail)] if self.xfail else []
        return pytest.param(self, id=self.name, marks=marks)


def registry():
    """A fresh table and its decorator, one per test module."""
    table = []

    def program(name, *, source, model, how, expect=ACCELERATED, tools=(), modules=(), npm=(), xfail=None):
        def deco(fn):
            table.append(Program(fn, name, source, model, expect, tuple(tools), tuple(modules), tuple(npm),
                                 xfail, how))
            return fn
        return deco

    return table, program


# ----------------------------------------------------------- what is missing

def need_pypi(module, dist):
    """A Python module from PyPI (scripts/install-deps installs it with pip)."""
    import importlib.util
    if importlib.util.find_spec(module) is None:
        missing("Python module %s is not installed for %s (PyPI package %s; scripts/install-deps "
                "installs it)" % (module, PYTHON, dist))


def npm_root():
    """Where `npm install -g` put its packages (NODE_PATH for the tests' scripts)."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        r = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=30,
                           env=base_env())
    except subprocess.TimeoutExpired:
        return None
    root = r.stdout.strip()
    return root if r.returncode == 0 and root else None


def need_npm(*pkgs):
    root = npm_root()
    for p in pkgs:
        if root is None or not (Path(root) / p / "package.json").exists():
            missing("npm package %s is not installed globally (scripts/install-deps installs it with "
                    "npm install -g)" % p)
    return root


def check_needs(prog):
    for t in prog.tools:
        if isinstance(t, tuple):
            need_tool(t[0], package=t[1])
        else:
            need_tool(t)
    for mod, dist in prog.modules:
        need_pypi(mod, dist)
    if prog.npm:
        need_tool("node", package="nodejs")
        need_npm(*prog.npm)


# ----------------------------------------------------------------- payloads

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# Small programs the entries share: an echo server and a checking client in
# Python's socket module (threads, blocking sockets), for the entries whose
# program is a proxy or a TLS terminator in front of something.
ECHO_SERVER = r"""
import socket, sys, threading
def serve(c):
    with c:
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            c.sendall(b)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print("LISTENING", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# echo_client.py PORT CONNECTIONS BYTES: each connection sends BYTES in
# pieces of 64 KiB, reading each piece's echo before the next (no deadlock on
# full buffers), then half-closes and expects EOF; prints the sha256 of what
# it sent and of what came back.
ECHO_CLIENT = r"""
import hashlib, socket, sys, threading
port, conns, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
res = [None] * conns
def one(i):
    data = bytes((i * 131 + k * 7) % 256 for k in range(65536))
    hs, hr = hashlib.sha256(), hashlib.sha256()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        left = size
        while left:
            piece = data[:min(left, len(data))]
            c.sendall(piece)
            hs.update(piece)
            got = 0
            while got < len(piece):
                b = c.recv(len(piece) - got)
                if not b:
                    raise SystemExit("EOF after %d of %d" % (size - left + got, size))
                hr.update(b)
                got += len(b)
            left -= len(piece)
        c.shutdown(socket.SHUT_WR)
        if c.recv(1) != b"":
            raise SystemExit("bytes after the echo")
    res[i] = (hs.hexdigest(), hr.hexdigest())
ts = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
[t.start() for t in ts]
[t.join() for t in ts]
ok = all(r is not None and r[0] == r[1] for r in res)
print("OK" if ok else "MISMATCH %r" % res, flush=True)
"""


def listening(port):
    """True when a TCP socket listens on PORT (any address), by the kernel's
    tables."""
    want = ":%04X" % port
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[1].endswith(want) and fields[3] == "0A":
                        return True
        except OSError:
            pass
    return False


# ---------------------------------------------------------------------- Cx

class Cx:
    """What an entry's function works with: tmp (a directory for its files),
    port(), serve(), run(), payload(), and the checks."""

    def __init__(self, shunt, tmp_path, start_server, prog, cache):
        self.shunt = shunt
        self.cache = cache               # corpus_cache: a directory shared by the session's entries
        self.prog = prog
        self.tmp = tmp_path
        self._start_server = start_server
        self.user = None                 # (uid, gid, name) when running as another user
        self.logdir = tmp_path / "shunt-logs"
        self.logdir.mkdir()
        self.logdirs = [self.logdir]
        self.strict = prog.expect == ACCELERATED
        self.python = PYTHON             # the python3 the programs run (as_user may change it)
        self.outputs = []                # stderr of every run, for SHUNT_STRICT lines
        self.servers = []
        self._cleanup = []

    # --- who runs it
    def as_user(self, name="nobody"):
        """From now on, run everything as NAME (when the tests run as root),
        in a work directory that user owns (self.tmp points there)."""
        if os.geteuid() != 0:
            return
        pw = pwd.getpwnam(name)
        self.user = (pw.pw_uid, pw.pw_gid, name)
        self.public_dir()
        if not os.access(PYTHON, os.X_OK, effective_ids=False) or str(PYTHON).startswith("/root/"):
            self.python = "/usr/bin/python3"    # the tests' python may live in root's home (pyenv)

    def public_dir(self):
        """Move self.tmp to a directory others may read (under /tmp, mode
        0755, owned by the user the programs run as): for servers whose
        workers run as another user, and for as_user()."""
        work = Path(tempfile.mkdtemp(prefix="shunt-corpus-%s-" % re.sub(r"[^A-Za-z0-9]+", "-", self.prog.name)))
        self._cleanup.append(work)
        work.chmod(0o755)
        self.tmp = work
        self.logdir = work / "shunt-logs"
        self.logdir.mkdir()
        self.logdir.chmod(0o777)
        self.logdirs.append(self.logdir)
        self.own(work)

    def own(self, path):
        """Give PATH (and what is under it) to the user the programs run as."""
        if self.user:
            for p in [Path(path)] + list(Path(path).rglob("*")):
                os.chown(p, self.user[0], self.user[1])
        return path

    def _argv(self, argv, shunted):
        argv = [str(a) for a in argv]
        if shunted:
            argv = self.shunt.cmd(argv)
        if self.user:
            argv = ["setpriv", "--reuid=%d" % self.user[0], "--regid=%d" % self.user[1], "--clear-groups",
                    "--"] + argv
        return argv

    def env(self, shunted=True, **extra):
        if not shunted:
            env = base_env(**extra)
        else:
            env = base_env(SHUNT_LOG=os.environ.get("CORPUS_LOG", "info"), SHUNT_LOG_FILE=str(self.logdir / "shunt-%p.log"),
                           SHUNT_STRICT="1" if self.strict else "0", **extra)
        if self.user:
            env["HOME"] = str(self.tmp)
        return env

    # --- processes
    def port(self):
        return free_port()

    def serve(self, argv, name, shunted=True, env=None, cwd=None, port=None, ready=None, timeout=30):
        """Start a server (under shunt unless shunted=False); wait until PORT
        accepts connections or stdout matches READY."""
        srv = self._start_server(self._argv(argv, shunted), cwd=str(cwd or self.tmp),
                                 env=env if env is not None else self.env(shunted), name=name)
        self.servers.append(srv)
        if port is not None:
            self.wait_port(port, srv, timeout)
        if ready is not None:
            return srv.wait_for(ready, timeout)
        return srv

    def wait_port(self, port, srv, timeout=30):
        """Until something listens on PORT (read from /proc/net/tcp and tcp6,
        so that no probe connection of ours shows in the logs)."""
        deadline = time.monotonic() + timeout
        while True:
            if srv.proc.poll() is not None:
                pytest.fail("%s exited before listening on %d:\n%s" % (srv.name, port, srv.describe()))
            if listening(port):
                return
            if time.monotonic() > deadline:
                pytest.fail("nothing listening on %d after %ss:\n%s" % (port, timeout, srv.describe()))
            time.sleep(0.05)

    def run(self, argv, shunted=True, timeout=60, input=None, env=None, cwd=None, ok=True):
        """Run a client to its end; with ok, its status must be 0."""
        argv = self._argv(argv, shunted)
        r = run_cmd(argv, timeout=timeout, input=input, cwd=str(cwd or self.tmp),
                    env=env if env is not None else self.env(shunted))
        self.outputs.append(r.stderr.decode(errors="replace"))
        if ok and r.returncode != 0:
            pytest.fail("%s exited with %s\nstdout: %s\nstderr: %s\n%s\n%s" % (
                argv, r.returncode, r.stdout[-3000:].decode(errors="replace"),
                r.stderr[-3000:].decode(errors="replace"), self.servers_state(), self.logs_tail()))
        return r

    def servers_state(self):
        return "\n".join(s.describe() for s in self.servers)

    def logs_tail(self, lines=12):
        """The last lines of every shunt log of this test, and each one's
        warnings and errors: what a failure that happens once in many CI runs
        needs to be understood."""
        out = []
        for d in self.logdirs:
            for f in sorted(d.glob("shunt-*.log")):
                try:
                    text = f.read_text(errors="replace").splitlines()
                except OSError:
                    continue
                bad = [l for l in text if " warn:" in l or " error:" in l][-lines:]
                out.append("--- %s (%d lines) ---" % (f.name, len(text)))
                out += ["  " + l for l in bad]
                out += ["  ..."] + ["  " + l for l in text[-lines:]]
        return "\n".join(out)[-8000:]

    def write(self, name, text, mode=None):
        p = self.tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if mode is not None:
            p.chmod(mode)
        self.own(p)
        return p

    def payload(self, name, size):
        """A file of SIZE random bytes; returns (path, sha256)."""
        p = self.tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        p.write_bytes(data)
        self.own(p)
        return p, sha256(data)

    def echo_server(self, port, shunted=True, name="echo"):
        """The Python echo server of this module (threads, blocking)."""
        script = self.write("echo_server.py", ECHO_SERVER)
        return self.serve([self.python, script, port], name, shunted=shunted, ready=r"^LISTENING$")

    def echo_client(self, port, conns=4, size=1 << 20, shunted=True, timeout=60):
        script = self.write("echo_client.py", ECHO_CLIENT)
        r = self.run([self.python, script, port, conns, size], shunted=shunted, timeout=timeout)
        assert r.stdout.decode().strip() == "OK", r.stdout.decode()
        return r

    # --- the checks
    def log_lines(self):
        lines = []
        for d in self.logdirs:
            for p in sorted(d.glob("shunt-*.log")):
                lines += p.read_text(errors="replace").splitlines()
        return lines

    def strict_failures(self):
        texts = list(self.outputs)
        for s in self.servers:
            try:
                texts.append(s.stderr())
                texts.append(s.stdout())
            except OSError:
                pass
        for d in self.logdirs:     # programs that keep their stderr in their own log
            for p in d.glob("*.stderr"):
                texts.append(p.read_text(errors="replace"))
        return [l for t in texts for l in t.splitlines() if "SHUNT_STRICT" in l]

    def summary(self, lines=None):
        lines = self.log_lines() if lines is None else lines
        interesting = [l for l in lines if "libshunt loaded" not in l and "accelerated listener" not in l]
        return "\n".join(interesting[-40:])

    def pairs(self, lines=None):
        """Channels whose server end and client end both logged accelerated."""
        lines = self.log_lines() if lines is None else lines
        servers = set(re.findall(r"accelerated \(server, channel (\S+?),", "\n".join(lines)))
        clients = set(re.findall(r"accelerated \(client, channel (\S+?)\)", "\n".join(lines)))
        return servers & clients

    def accelerated(self, pairs=1, allow=()):
        """At least PAIRS connections accelerated at both ends; no connection
        fell back but for what ALLOW names (substrings of the reason, each
        with the reason it is allowed in the caller)."""
        lines = self.log_lines()
        both = self.pairs(lines)
        fallbacks = [l for l in lines if "kernel TCP:" in l and not any(a in l for a in allow)]
        assert len(both) >= pairs, "expected %d accelerated connections (both ends), found %d:\n%s" % (
            pairs, len(both), self.summary(lines))
        assert not fallbacks, "connections fell back:\n%s" % "\n".join(fallbacks[:20])
        strict = self.strict_failures()
        assert not strict, "SHUNT_STRICT failures:\n%s" % "\n".join(strict[:20])
        return len(both)

    def fell_back(self, reason, count=1, accelerated_ok=False):
        """At least COUNT connections on kernel TCP for REASON (the reason's
        words as the log writes them), and none accelerated unless
        ACCELERATED_OK."""
        lines = self.log_lines()
        hits = [l for l in lines if "kernel TCP: " + reason in l]
        assert len(hits) >= count, "expected %d fallbacks for %r, found %d:\n%s" % (
            count, reason, len(hits), self.summary(lines))
        if not accelerated_ok:
            assert not self.pairs(lines), "a connection was accelerated:\n%s" % self.summary(lines)
        return len(hits)

    def wait_stderr(self, srv, regex, timeout=30):
        """Until the server's stderr matches REGEX."""
        deadline = time.monotonic() + timeout
        rx = re.compile(regex, re.M)
        while not rx.search(srv.stderr()):
            if srv.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("%s did not log %r:\n%s" % (srv.name, regex, srv.describe()))
            time.sleep(0.05)

    def close(self):
        if os.environ.get("CORPUS_KEEP"):      # keep the work directories, to read the logs afterwards
            return
        for d in self._cleanup:
            shutil.rmtree(d, ignore_errors=True)


def run_program(prog, shunt, tmp_path, start_server, corpus_cache):
    check_needs(prog)
    cx = Cx(shunt, tmp_path, start_server, prog, corpus_cache)
    try:
        prog.fn(cx)
    finally:
        for s in reversed(cx.servers):
            s.stop()
        cx.close()


# ---------------------------------------------------------------- PostgreSQL

def pg_bin(name):
    """A PostgreSQL server program (Debian keeps them off PATH)."""
    import glob
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/" + name))
    if found:
        return found[-1]
    if shutil.which(name):
        return shutil.which(name)
    missing("PostgreSQL's %s is not installed (Debian package postgresql; scripts/install-deps installs it)"
            % name)


def postgres(cx, name="postgres"):
    """A PostgreSQL server on 127.0.0.1 (one process per connection), run
    as nobody when the tests run as root (PostgreSQL refuses root), from a
    cluster initdb made once per session and copied.  Returns its port; the
    database superuser is `postgres`, trust authentication."""
    need_tool("psql", package="postgresql-client")
    cx.as_user()
    template = cx.cache / "pg-template"
    if not (template / "PG_VERSION").exists():
        owner = cx.user
        tmpl = cx.cache / "pg-template.tmp"
        shutil.rmtree(tmpl, ignore_errors=True)
        tmpl.mkdir()
        if owner:
            os.chown(tmpl, owner[0], owner[1])
        cx.run([pg_bin("initdb"), "-D", tmpl, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8",
                "--locale=C"], shunted=False, timeout=120, env=cx.env(shunted=False))
        tmpl.rename(template)
    data = cx.tmp / "pgdata"
    shutil.copytree(template, data, symlinks=True)
    data.chmod(0o700)
    cx.own(data)
    port = cx.port()
    srv = cx.serve([pg_bin("postgres"), "-D", data, "-k", cx.tmp, "-h", "127.0.0.1", "-p", port,
                    "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                    "-c", "max_connections=40", "-c", "shared_buffers=32MB", "-c", "logging_collector=off"],
                   name, port=port)
    cx.wait_stderr(srv, r"database system is ready to accept connections", 60)
    return port
