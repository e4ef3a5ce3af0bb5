"""`shunt bench --netns` (bench/netnsbench.py): the two-namespace mode, run
with the smallest rounds.  Checked: its output is well-formed (the columns
of every test, the CSV, the summary), every shunt figure across the veth was
accelerated, and the shunt logs say "across namespaces" (so the run fails if
acceleration between namespaces breaks); the UCX columns (the server with a
/dev/shm of its own) accelerated on the fabric, on the lanes each asks for; a run whose shunt column is not accelerated is refused;
a host without fabric is refused with the way to enable it; the namespaces
are gone at the end, also after SIGTERM.  No figure is judged.

Needs root and ip (need_namespaces), and a fabric-enabled host: the fixture
enables fabric if it was not, and then disables it after the test (only
then: a host that was enabled stays so)."""

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from netns import ip, need_namespaces
from shunttest import REPO, base_env, missing

DRIVER = REPO / "bench" / "shuntbench.py"
QUICK = ["--netns", "--quick", "--rounds", "1", "--max-size", "4K", "--seconds", "0.2"]
VETH_COLUMNS = {"tcp", "shunt", "unix", "lo"}
ACROSS_CLIENT = re.compile(r"accelerated \(client, channel \S+, across namespaces\)")
ACROSS_SERVER = re.compile(r"accelerated \(server, channel \S+, \d+ bytes of TCP prefix, across namespaces\)")


def fabric_status(shunt_build):
    return subprocess.run([str(shunt_build / "shunt"), "fabric", "status"], capture_output=True, text=True,
                          timeout=30).returncode


@pytest.fixture
def fabric_on(shunt_build):
    """The host fabric-enabled for the test; left as it was found."""
    need_namespaces()
    was = fabric_status(shunt_build)
    if was != 0:
        r = subprocess.run([str(shunt_build / "shunt"), "fabric", "enable"], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            missing("shunt fabric enable failed: %s%s" % (r.stdout, r.stderr))
    try:
        yield shunt_build
    finally:
        if was != 0:
            d = subprocess.run([str(shunt_build / "shunt"), "fabric", "disable"], capture_output=True, text=True,
                               timeout=60)
            assert d.returncode == 0, d.stderr


def bench(shunt_build, out, *args, shunt=None, timeout=300):
    argv = [sys.executable, str(DRIVER), "--shunt", str(shunt or shunt_build / "shunt"), "--out", str(out)]
    return subprocess.run(argv + list(args), env=base_env(), capture_output=True, text=True, timeout=timeout)


def namespaces_of(output):
    m = re.search(r"^between namespaces (bn-\d+-a) \(server, 10\.78\.0\.1\) and (bn-\d+-b) \(client, 10\.78\.0\.2\)"
                  r" joined by a veth pair$", output, re.M)
    assert m, output
    return m.group(1), m.group(2)


def netns_names():
    return set(line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip())


def kept_rundir(output):
    m = re.search(r"^run directory kept: (\S+)$", output, re.M)
    assert m, output
    return m.group(1)


def test_netns_quick_run(fabric_on, tmp_path):
    out = tmp_path / "out"
    r = bench(fabric_on, out, *QUICK, "--transports", "tcp,shunt,unix,lo,client", "--keep")
    text = r.stdout + r.stderr
    rundir = kept_rundir(r.stdout)
    try:
        assert r.returncode == 0, text
        a, b = namespaces_of(r.stdout)
        assert not {a, b} & netns_names(), "the namespaces were left behind"
        assert "standard tools: not run with --netns" in r.stdout

        with open(out / "results.csv", newline="") as f:
            pts = list(csv.DictReader(f))
        by_test = {}
        for p in pts:
            by_test.setdefault(p["test"], set()).add(p["transport"])
        assert by_test == {"pingpong": VETH_COLUMNS, "stream": VETH_COLUMNS, "rr": VETH_COLUMNS,
                           "cc": VETH_COLUMNS | {"client"}, "crr": VETH_COLUMNS | {"client"}}
        assert all(float(p["value"]) > 0 for p in pts)
        assert {int(p["size_bytes"]) for p in pts if p["test"] == "pingpong"} >= {1, 61, 64, 67, 4093, 4096}
        # every shunt figure accelerated on both ends (shunt_fd_accelerated);
        # the client-only column checked kernel TCP
        assert {p["accelerated"] for p in pts if p["transport"] == "shunt" and p["test"] not in ("cc", "crr")} \
            == {"yes"}
        assert {p["accelerated"] for p in pts if p["transport"] == "client"} == {"no"}
        assert {p["accelerated"] for p in pts if p["transport"] in ("tcp", "unix", "lo")} == {"n/a"}

        summary = (out / "summary.md").read_text()
        assert summary.startswith("# shunt bench --netns\n")
        assert "- shunt figures: 3 runs, every one accelerated on both ends" in summary
        assert "- shunt client, plain server (the client under shunt, the server without): 2 runs" in summary
        assert "| size | kernel TCP (veth) | shunt (veth) | Unix socket (path) | kernel TCP (loopback) | " \
               "shunt vs TCP | Unix vs TCP | loopback vs TCP |" in summary
        assert re.search(r"^\| connect/accept/close \(connections/s\)( \| [\d.]+){5}( \| [\d.]+x){4} \|$",
                         summary, re.M), summary
        assert re.search(r"^\| stream, 64 KiB messages \(Mbit/s\)( \| [\d.]+){4} \| n/a( \| [\d.]+x){3} \| n/a \|$",
                         summary, re.M), summary
        assert "## Problems" not in summary

        # and shunt's own word: its connections crossed the namespaces
        for test, size in (("pingpong", 0), ("stream", 65536), ("rr", 1)):
            logs = "".join(open(os.path.join(rundir, "r1-%s-shunt-%d" % (test, size), f)).read()
                           for f in os.listdir(os.path.join(rundir, "r1-%s-shunt-%d" % (test, size)))
                           if f.startswith("shunt-"))
            assert len(ACROSS_CLIENT.findall(logs)) == 1 and len(ACROSS_SERVER.findall(logs)) == 1, (test, logs)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def test_netns_unaccelerated_shunt_is_refused(fabric_on, tmp_path):
    r = bench(fabric_on, tmp_path / "out", *QUICK, "--tests", "pingpong", "--transports", "tcp,shunt",
              "--shunt-env", "SHUNT_ACCEL=0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT ACCELERATED" in r.stdout
    assert not set(namespaces_of(r.stdout)) & netns_names()
    shutil.rmtree(kept_rundir(r.stdout), ignore_errors=True)


def test_netns_without_fabric_is_refused(shunt_build, tmp_path):
    """A shunt whose `fabric status` says not enabled (exit 3), the rest the
    real one: the mode says how to enable fabric, exits 2, makes nothing."""
    need_namespaces()
    fake = tmp_path / "shunt"
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "fabric status" ] && exit 3\nexec %s "$@"\n' % (shunt_build / "shunt"))
    fake.chmod(0o755)
    p = subprocess.Popen([sys.executable, str(DRIVER), "--shunt", str(fake), "--pingpong",
                          str(shunt_build / "bench" / "pingpong"), "--out", str(tmp_path / "out")] + QUICK,
                         env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, out + err
    assert "not fabric-enabled" in err and "fabric enable` as root" in err and "--enable-fabric" in err
    assert not {"bn-%d-a" % p.pid, "bn-%d-b" % p.pid} & netns_names()
    assert "[1/" not in out


def test_netns_removed_on_sigterm(fabric_on, tmp_path):
    p = subprocess.Popen([sys.executable, str(DRIVER), "--shunt", str(fabric_on / "shunt"),
                          "--out", str(tmp_path / "out"), "--netns", "--rounds", "3", "--tests", "stream",
                          "--seconds", "2"],
                         env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    names = {"bn-%d-a" % p.pid, "bn-%d-b" % p.pid}
    try:
        seen = ""
        deadline = time.monotonic() + 60
        while "[1/" not in seen and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            seen += line
        assert "[1/" in seen, seen
        assert names <= netns_names(), "the namespaces are not there while it runs"
        p.send_signal(signal.SIGTERM)
        rest, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, seen + rest
    assert not names & netns_names(), "the namespaces were left behind after SIGTERM"


FABRIC = re.compile(r"accelerated \((client|server), fabric, lanes (\S+)\)")


def test_netns_ucx_columns(fabric_on, tmp_path):
    """The UCX shared-memory column: the server end with a /dev/shm of its
    own, so the connection rides the fabric engine; every figure accelerated
    on both ends (shunt_fd_accelerated), and the logs name the lanes (sysv
    or posix); no cc or crr there.  (ucx-tcp is not run here: in these
    namespaces UCX's TCP lanes often refuse the endpoint, "Destination is
    unreachable", and the connection stays kernel TCP: benchmarks.md.)"""
    out = tmp_path / "out"
    r = bench(fabric_on, out, *QUICK, "--transports", "tcp,ucx-shm", "--keep")
    text = r.stdout + r.stderr
    rundir = kept_rundir(r.stdout)
    try:
        assert r.returncode == 0, text
        with open(out / "results.csv", newline="") as f:
            pts = list(csv.DictReader(f))
        by_test = {}
        for p in pts:
            by_test.setdefault(p["test"], set()).add(p["transport"])
        ucx = {"ucx-shm"}
        assert by_test == {"pingpong": {"tcp"} | ucx, "stream": {"tcp"} | ucx, "rr": {"tcp"} | ucx,
                           "cc": {"tcp"}, "crr": {"tcp"}}, by_test
        assert {p["accelerated"] for p in pts if p["transport"] in ucx} == {"yes"}
        summary = (out / "summary.md").read_text()
        assert "- UCX columns: the server end with a /dev/shm of its own" in summary
        for column, lanes in (("ucx-shm", r"sysv|posix"),):
            for test, size in (("pingpong", 0), ("stream", 65536), ("rr", 1)):
                d = os.path.join(rundir, "r1-%s-%s-%d" % (test, column, size))
                logs = "".join(open(os.path.join(d, f)).read() for f in os.listdir(d) if f.startswith("shunt-"))
                got = FABRIC.findall(logs)
                assert sorted(role for role, _ in got) == ["client", "server"], (column, test, logs)
                assert all(re.search(lanes, ln) for _, ln in got), (column, test, got)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
