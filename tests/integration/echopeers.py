"""Echo peers shared by the integration tests: building them, running them
and checking what they print.  See tests/programs/pyecho.py for the protocol.

Programs (argv prefixes):
  go      tests/programs/goecho, CGO_ENABLED=0: static, no libc
  static  tests/programs/static_peer.c built with cc -static
  py      python3 tests/programs/pyecho.py
  c       tests/programs/static_peer.c built as a dynamic executable
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from shunttest import PROGRAMS, PYTHON, base_env, missing

WORKLOADS = {
    # name: (mode, bytes per connection, chunk / max message size, connections)
    "bulk": ("bulk", 8 * 1024 * 1024 + 12345, 65536, 1),
    "small": ("pingpong", 100_000, 200, 3),
    "halfclose": ("halfclose", 100_000, 65536, 5),
}
PEERS = ["go", "static"]
OP_TIMEOUT = 20      # seconds a client allows per connection / socket operation
CLIENT_TIMEOUT = 90  # seconds a whole client run may take
SIDES = ["py", "c"]


# ------------------------------------------------------------------ builds

def _build(argv, cwd, env, what):
    try:
        r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.fail("building %s timed out" % what)
    return r


class Builds:
    """Builds the test programs once per session, on first use."""

    def __init__(self, outdir):
        self.outdir = Path(outdir)
        self.cache = {}

    def get(self, kind):
        if kind not in self.cache:
            try:
                self.cache[kind] = ("ok", getattr(self, "_build_" + kind)())
            except _Skip as e:
                self.cache[kind] = ("skip", str(e))
            except Exception as e:  # report the same failure on every use
                self.cache[kind] = ("fail", "%s: %s" % (type(e).__name__, e))
        status, val = self.cache[kind]
        if status == "skip":
            missing(val)
        if status == "fail":
            pytest.fail(val, pytrace=False)
        return val

    def _build_go(self):
        go = shutil.which("go")
        if go is None:
            raise _Skip("the Go toolchain (`go`) is not installed: cannot build goecho")
        out = self.outdir / "goecho"
        env = base_env(CGO_ENABLED="0", GOTOOLCHAIN="local", GOPROXY="off")
        if not os.access(os.path.expanduser("~"), os.W_OK) and "GOCACHE" not in env:
            env["GOCACHE"] = str(self.outdir / "gocache")
        r = _build([go, "build", "-o", str(out), "."], PROGRAMS / "goecho", env, "goecho")
        if r.returncode != 0:
            raise RuntimeError("go build failed:\n" + r.stderr.decode(errors="replace"))
        return out

    def _cc(self):
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise _Skip("no C compiler (cc) installed")
        return cc

    def _build_static(self):
        cc = self._cc()
        libc_a = subprocess.run([cc, "-print-file-name=libc.a"], capture_output=True,
                                text=True, timeout=60).stdout.strip()
        if not os.path.isabs(libc_a) or not os.path.exists(libc_a):
            raise _Skip("static glibc (libc.a, Debian package libc6-dev) is not installed: "
                        "cannot build static_peer with cc -static")
        out = self.outdir / "static_peer"
        r = _build([cc, "-static", "-O2", "-Wall", "-I", str(PROGRAMS.parent / "lib"), "-o", str(out),
                    str(PROGRAMS / "static_peer.c")],
                   None, base_env(), "static_peer")
        if r.returncode != 0:
            raise RuntimeError("cc -static failed:\n" + r.stderr.decode(errors="replace"))
        return out

    def _build_c(self):
        cc = self._cc()
        out = self.outdir / "dynamic_peer"
        r = _build([cc, "-O2", "-Wall", "-I", str(PROGRAMS.parent / "lib"), "-o", str(out),
                    str(PROGRAMS / "static_peer.c")],
                   None, base_env(), "dynamic_peer")
        if r.returncode != 0:
            raise RuntimeError("cc failed:\n" + r.stderr.decode(errors="replace"))
        return out


class _Skip(Exception):
    pass


def peer_argv(builds, kind):
    """argv prefix of an uninterceptable peer."""
    return [str(builds.get(kind))]


def side_argv(builds, side):
    """argv prefix of the program run under shunt."""
    if side == "py":
        return [PYTHON, str(PROGRAMS / "pyecho.py")]
    return [str(builds.get("c"))]


def client_args(port, workload, host="127.0.0.1"):
    mode, nbytes, chunk, conns = WORKLOADS[workload]
    return ["client", "--host", host, "--port", str(port), "--mode", mode,
            "--bytes", str(nbytes), "--chunk", str(chunk), "--conns", str(conns),
            "--timeout", str(OP_TIMEOUT)]


def server_args(host="127.0.0.1"):
    return ["server", "--host", host, "--port", "0"]


def listening_port(srv):
    return int(srv.wait_for(r"^LISTENING (\d+)$", timeout=30).group(1))


def check_client(r, workload, expect_mapped):
    mode, nbytes, chunk, conns = WORKLOADS[workload]
    out = r.stdout.decode(errors="replace")
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, "client failed (rc %d):\n%s\n%s" % (r.returncode, out[-2000:], err[-2000:])
    lines = out.splitlines()
    assert lines[0] == "LIBSHUNT_MAPPED " + ("yes" if expect_mapped else "no"), lines[:1]
    assert "CLIENT OK conns=%d bytes=%d mode=%s" % (conns, nbytes, mode) in lines, out[-2000:]


def check_server_log(srv, workload):
    """The server verified every connection's stream."""
    mode, nbytes, chunk, conns = WORKLOADS[workload]
    lines = srv.wait_lines(r"^CONN \d+ ", conns, timeout=30)
    for line in lines:
        assert re.fullmatch(r"CONN \d+ RECV %d OK" % nbytes, line), (
            "server-side check failed: %r\n%s" % (line, srv.describe()))
