"""Helpers for shunt's integration tests (python3 stdlib + pytest only).

Imported by conftest.py (fixtures, and the CI hooks defined here) and by the
test modules.

Missing tools under CI: a test that needs a program, a Python module or a
library says so with need_tool(), need_module() or missing(): on a
developer's machine the test is skipped, under CI (in_ci()) it fails, so
that a package CI forgot cannot hide a test.  What a machine may lack for
good (no IPv6 loopback, no permission for a network namespace) is a
not_here() skip (or the needs_ipv6 mark), a skip everywhere; docs/testing.md
lists each.  Any other skip under CI (a bare pytest.skip, skipif,
importorskip) is turned into a failure by the hook pytest_runtest_makereport
below, which conftest.py installs.
"""

import importlib.util
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "programs"
PYTHON = sys.executable or "python3"
DEFAULT_TIMEOUT = 60.0
LIBNAME = "libshunt.so"


# --------------------------------------------------------------- helpers

# --------------------------------------------------- missing tools and CI

# The start of the reason of a skip CI allows.
NOT_HERE = "not on this machine: "


def in_ci():
    """True under CI: the CI variable set to anything but "", "0", "false" or
    "no" (hosted CI sets CI=true, .ci/run too).  tests/lib/check.h's
    test_in_ci() is the same rule."""
    return os.environ.get("CI", "") not in ("", "0", "false", "no")


def missing(reason):
    """Something the test needs is not installed: skip, or fail under CI."""
    if in_ci():
        pytest.fail("missing under CI (CI=%s): %s" % (os.environ.get("CI"), reason), pytrace=False)
    pytest.skip("missing: " + reason)


def need_tool(*tools, package=None):
    """Each program must be on PATH (package: the Debian package that has it,
    when its name is not the program's)."""
    for tool in tools:
        if shutil.which(tool) is None:
            missing("%s is not installed (%sscripts/install-deps installs it)" % (
                tool, "Debian package %s; " % package if package else ""))


def need_module(name, package):
    """The Python module must be importable (package: the Debian package)."""
    if importlib.util.find_spec(name) is None:
        missing("Python module %s is not installed (Debian package %s; scripts/install-deps "
                "installs it)" % (name, package))


def not_here(reason):
    """The machine lacks something for good, which a CI machine may lack as
    well: a skip, also under CI.  Every use is listed in docs/testing.md."""
    pytest.skip(NOT_HERE + reason)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_tool(*names, package=None): the test needs these "
                                       "programs (need_tool: a skip, or a failure under CI)")


def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="needs_tool"):
        need_tool(*mark.args, **mark.kwargs)


def _skip_reason(rep):
    lr = rep.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI, a skip whose reason is not a not_here() one fails."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and in_ci() and not hasattr(rep, "wasxfail"):
        reason = _skip_reason(rep)
        if not reason.startswith(NOT_HERE):
            rep.outcome = "failed"
            rep.longrepr = ("skipped under CI (CI=%s), where only not_here() skips are allowed "
                            "(tests/integration/shunttest.py): %s" % (os.environ.get("CI"), reason))


def build_dir():
    return Path(os.environ.get("SHUNT_BUILD") or (REPO / "build")).resolve()


def base_env(**extra):
    """The environment for both the plain and the shunt'd runs: ours,
    without any LD_PRELOAD inherited from the caller."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # the harness's own variables: `shunt run` refuses SHUNT_* names it does not know
    env.pop("SHUNT_BUILD", None)
    env.pop("SHUNT_TEST_TIMEOUT", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def group_members(pgid):
    """Pids of the live processes whose process group is pgid."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        # fields after "(comm)": state ppid pgrp ...
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) >= 3 and int(rest[2]) == pgid:
            pids.append(int(entry))
    return pids


def kill_group_by_pid(pgid, sig=signal.SIGKILL):
    """Send sig, by pid, to every process left in the group we created."""
    for pid in group_members(pgid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_process(proc, grace=5.0):
    """End a Popen started with start_new_session=True: SIGTERM to its pid,
    SIGKILL if it does not exit within grace seconds, then SIGKILL to any
    process still left in its process group (each by pid)."""
    pgid = proc.pid
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=grace)
    kill_group_by_pid(pgid)


def run_cmd(argv, timeout=DEFAULT_TIMEOUT, input=None, cwd=None, env=None):
    """subprocess.run with a hard time bound: the command gets its own
    process group; on timeout the whole group is killed (by pid) and the
    test fails.  Returns a CompletedProcess with bytes stdout/stderr."""
    proc = subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env if env is not None else base_env(),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process(proc, grace=1.0)
        out, err = proc.communicate()
        pytest.fail("command timed out after %ss: %s\nstdout: %r\nstderr: %r"
                    % (timeout, argv, out[-2000:], err[-2000:]))
    finally:
        kill_group_by_pid(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def free_port(host="127.0.0.1"):
    """A TCP port that was free on host a moment ago."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ipv6_loopback_available():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# A kernel or container without IPv6 (Docker's default): a skip also under CI.
needs_ipv6 = pytest.mark.skipif(not ipv6_loopback_available(), reason=NOT_HERE + "no IPv6 loopback (::1)")


def maps_has_libshunt(pid):
    """True/False: libshunt.so is mapped in /proc/PID/maps; None if the
    process is gone."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return LIBNAME in f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None


def exe_of(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return ""


def elf_interpreter(path):
    """The PT_INTERP string of an ELF64 little-endian file, or None when it
    has none (i.e. a static executable)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("%s: not an ELF64 LE file" % path)
    e_phoff, = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(e_phnum):
        off = e_phoff + i * e_phentsize
        p_type, = struct.unpack_from("<I", data, off)
        if p_type == 3:  # PT_INTERP
            p_offset, = struct.unpack_from("<Q", data, off + 8)
            p_filesz, = struct.unpack_from("<Q", data, off + 32)
            return data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
    return None


# --------------------------------------------------------------- shunt

class Shunt:
    """How to run things under shunt."""

    def __init__(self, build):
        self.build = build
        self.bin = build / "shunt"
        self.lib = build / LIBNAME

    def cmd(self, argv):
        return [str(self.bin), "run", "--"] + [str(a) for a in argv]

    def run(self, argv, **kw):
        """Run argv under shunt (see run_cmd for keyword arguments)."""
        return run_cmd(self.cmd(argv), **kw)


# --------------------------------------------------------------- servers

class Server:
    """A process started in its own process group, output to files."""

    def __init__(self, argv, cwd, env, logdir, name):
        self.argv = [str(a) for a in argv]
        self.name = name
        self.out_path = Path(logdir) / ("%s.out" % name)
        self.err_path = Path(logdir) / ("%s.err" % name)
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err,
            cwd=cwd, env=env if env is not None else base_env(),
            start_new_session=True)
        self.pid = self.proc.pid

    def stdout(self):
        return self.out_path.read_text(errors="replace")

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def describe(self):
        return ("%s %s (pid %d, rc %r)\n--- stdout ---\n%s\n--- stderr ---\n%s"
                % (self.name, self.argv, self.pid, self.proc.poll(),
                   self.stdout()[-3000:], self.stderr()[-3000:]))

    def wait_for(self, regex, timeout=30.0):
        """Wait until a stdout line matches regex; returns the match."""
        deadline = time.monotonic() + timeout
        rx = re.compile(regex, re.M)
        while True:
            m = rx.search(self.stdout())
            if m:
                return m
            if self.proc.poll() is not None:
                m = rx.search(self.stdout())
                if m:
                    return m
                pytest.fail("server exited before printing %r:\n%s" % (regex, self.describe()))
            if time.monotonic() > deadline:
                pytest.fail("server did not print %r within %ss:\n%s"
                            % (regex, timeout, self.describe()))
            time.sleep(0.05)

    def wait_lines(self, regex, count, timeout=30.0):
        """Wait until at least count stdout lines match regex; returns them."""
        deadline = time.monotonic() + timeout
        rx = re.compile(regex)
        while True:
            lines = [l for l in self.stdout().splitlines() if rx.search(l)]
            if len(lines) >= count:
                return lines
            if time.monotonic() > deadline or self.proc.poll() is not None:
                pytest.fail("expected %d lines matching %r, got %d:\n%s"
                            % (count, regex, len(lines), self.describe()))
            time.sleep(0.05)

    def wait_port(self, port, host="127.0.0.1", timeout=30.0):
        """Poll connect() until the port accepts, with a deadline."""
        deadline = time.monotonic() + timeout
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        while True:
            if self.proc.poll() is not None:
                pytest.fail("server exited before listening on %s:%d:\n%s"
                            % (host, port, self.describe()))
            try:
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.settimeout(1.0)
                    s.connect((host, port))
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("nothing listening on %s:%d after %ss:\n%s"
                            % (host, port, timeout, self.describe()))
            time.sleep(0.05)

    def processes_with_libshunt(self):
        """{pid: exe} of the processes of this server's group that have
        libshunt.so mapped."""
        found = {}
        for pid in group_members(self.pid):
            if maps_has_libshunt(pid):
                found[pid] = exe_of(pid)
        return found

    def stop(self):
        try:
            stop_process(self.proc)
        finally:
            self._out.close()
            self._err.close()


NGINX_CONF = """
{user}
daemon {daemon};
master_process on;
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        {locations}
    }}
}}
"""


def nginx_conf(directory, port, daemon, locations=""):
    """An nginx configuration with a master and two workers serving
    DIRECTORY/www on 127.0.0.1:PORT; everything it writes stays in DIRECTORY.
    The workers keep our user (nginx would switch root's to nobody), since
    shunt's registry is per user."""
    user = "user root;" if os.geteuid() == 0 else ""
    return NGINX_CONF.format(dir=directory, port=port, daemon="on" if daemon else "off",
                             locations=locations, user=user)


def wait_port(port, proc, deadline=20.0):
    """Until 127.0.0.1:PORT accepts a connection (PROC must not exit meanwhile)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError("server exited early with status %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("port %d never opened" % port)
