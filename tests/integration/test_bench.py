"""`shunt bench`: the outputs of a reduced quick run (CSV, the three PNG
graphs, the markdown tables), that every shunt figure was measured
accelerated and that a run that was not is refused, that a missing
standard tool is skipped with its reason, that an installed one runs
under kernel TCP and under shunt, and that the installed command finds
its driver.  Runs are kept short (one round, small sizes, fractions of a
second): no figure is judged, only what was produced."""

import csv
import importlib.util
import os
import re
import subprocess
import sys

from shunttest import REPO, base_env, need_module, need_tool

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRANSPORTS = {"tcp", "unix", "shunt", "floor", "memcpy"}


def bench(shunt_build, out, *args, env=None, shunt=None, timeout=240):
    argv = [str(shunt or shunt_build / "shunt"), "bench", "--out", str(out)] + list(args)
    return subprocess.run(argv, env=env or base_env(), capture_output=True, text=True, timeout=timeout)


def rows(out):
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_help_lists_bench(shunt_build):
    r = subprocess.run([str(shunt_build / "shunt"), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "bench [--quick]" in r.stdout
    r = subprocess.run([str(shunt_build / "shunt"), "bench", "--help"], capture_output=True, text=True,
                       timeout=60, env=base_env())
    assert r.returncode == 0, r.stderr
    assert "--quick" in r.stdout and "--out DIR" in r.stdout and "floor" in r.stdout


def test_quick_run_outputs(shunt_build, tmp_path):
    """A reduced --quick run: every test on every transport, the CSV of every
    point, the three graphs, the summary with its ratio columns, and the
    shunt figures accelerated."""
    need_module("matplotlib", "python3-matplotlib")    # it draws the graphs
    out = tmp_path / "out"
    r = bench(shunt_build, out, "--quick", "--rounds", "1", "--max-size", "64K", "--seconds", "0.2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[1/" in r.stdout, "no progress lines"
    assert "standard tools: not run with --quick" in r.stdout

    for name in ("throughput.png", "signature.png", "saturation.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name

    pts = rows(out)
    assert {r["test"] for r in pts} == {"pingpong", "stream", "rr", "cc", "crr", "zpoll", "fork", "threads"}
    # the zero-timeout polling loop: kernel TCP, Unix socket and shunt, each wait's two figures
    assert {r["transport"] for r in pts if r["test"] == "zpoll"} == {"tcp", "unix", "shunt"}
    assert {r["metric"] for r in pts if r["test"] == "zpoll"} == {
        w + ":" + m for w in ("poll", "epoll", "select", "recv") for m in ("one_way_us", "empty_ns")}
    # the busy servers: kernel TCP, Unix sockets and shunt, 1 and 4 clients with --quick
    for test in ("fork", "threads"):
        assert {r["transport"] for r in pts if r["test"] == test} == {"tcp", "unix", "shunt"}
        assert {int(r["size_bytes"]) for r in pts if r["test"] == test} == {1, 4}
        assert {r["metric"] for r in pts if r["test"] == test} == {
            "rate", "cpu_us_per_request", "voluntary_switches_per_request", "involuntary_switches_per_request"}
    assert {r["transport"] for r in pts if r["test"] == "pingpong"} == TRANSPORTS
    assert {r["transport"] for r in pts if r["test"] == "cc"} == TRANSPORTS - {"floor", "memcpy"}
    assert {r["transport"] for r in pts if r["test"] == "crr"} == TRANSPORTS - {"floor", "memcpy"}
    # memcpy is the ping-pong's reference only
    assert {r["transport"] for r in pts if r["test"] in ("stream", "rr")} == TRANSPORTS - {"memcpy"}
    # NetPIPE's perturbations: -3, 0 and +3 around each size
    sizes = {int(r["size_bytes"]) for r in pts if r["test"] == "pingpong" and r["transport"] == "shunt"}
    assert {61, 64, 67, 65533, 65536, 65539} <= sizes
    assert all(float(r["value"]) > 0 for r in pts if "switches" not in r["metric"])   # a spin may not switch
    assert all(r["accelerated"] == "yes" for r in pts if r["transport"] == "shunt" and r["test"] not in ("cc", "crr"))
    # cc and crr: short connections, most on kernel TCP by design; how many
    # were accelerated is counted on both ends and said
    conn_rows = [r for r in pts if r["transport"] == "shunt" and r["test"] in ("cc", "crr")]
    assert len(conn_rows) == 2
    for r in conn_rows:
        m = re.fullmatch(r"(\d+) of (\d+)", r["accelerated"])
        assert m and 0 <= int(m.group(1)) <= int(m.group(2)) and int(m.group(2)) > 0, r

    md = (out / "summary.md").read_text()
    assert "## Busy servers" in md and "| process per connection | 4 |" in md and "| thread per connection | 1 |" in md
    assert ("| size | kernel TCP | Unix socket | shunt | floor | memcpy | shunt vs TCP | Unix vs TCP | shunt / floor"
            " | shunt / memcpy |") in md
    for label in ("| 1 B |", "| 64 KiB |", "| stream, 64 KiB messages", "| request-response, 1 B",
                  "| connect/accept/close", "| connect, 1 KiB request and answer, close", "| poll: one-way time |",
                  "| select: a zero-timeout call that finds nothing |",
                  "| recv: a non-blocking read that finds nothing |"):
        assert label in md, label
    assert "every one accelerated on both ends" in md and "## Problems" not in md
    assert re.search(r"crr under shunt: \d+ of \d+ connections accelerated", md), md


def test_unaccelerated_shunt_figure_is_refused(shunt_build, tmp_path):
    """With acceleration off, the shunt runs go over kernel TCP: each is
    reported as failed and not accelerated, and no shunt figure appears."""
    out = tmp_path / "out"
    r = bench(shunt_build, out, "--shunt-env", "SHUNT_ACCEL=0", "--rounds", "1", "--tests", "pingpong,rr",
              "--transports", "tcp,shunt", "--max-size", "1K", "--seconds", "0.2", "--tools", "none")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT ACCELERATED" in r.stdout and "FAILED RUNS:" in r.stdout
    assert "command: " in r.stdout     # what failed, exactly
    pts = rows(out)
    assert pts and not [p for p in pts if p["transport"] == "shunt"]
    md = (out / "summary.md").read_text()
    assert "## Problems" in md and "NOT ACCELERATED" in md


def test_missing_tool_is_skipped(shunt_build, tmp_path):
    """Standard tools not on PATH are skipped with one line each saying why;
    the run still succeeds."""
    onlypy = tmp_path / "bin"
    onlypy.mkdir()
    os.symlink(sys.executable, onlypy / "python3")
    out = tmp_path / "out"
    r = bench(shunt_build, out, "--rounds", "1", "--tests", "rr", "--transports", "tcp", "--seconds", "0.2",
              "--tools", "np,iperf", env=base_env(PATH=str(onlypy)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped NetPIPE NPtcp: NPtcp not installed (Debian package netpipe-tcp)" in r.stdout
    assert "skipped iperf3: iperf3 not installed (Debian package iperf3)" in r.stdout
    assert "- skipped iperf3: iperf3 not installed" in (out / "summary.md").read_text()


def test_standard_tool_kernel_and_shunt(shunt_build, tmp_path):
    """An installed standard tool (iperf3) runs over kernel TCP and under
    shunt, and its shunt run is checked accelerated in shunt's log."""
    need_tool("iperf3")
    out = tmp_path / "out"
    r = bench(shunt_build, out, "--rounds", "1", "--tests", "rr", "--transports", "tcp", "--seconds", "1",
              "--tools", "iperf")
    assert r.returncode == 0, r.stdout + r.stderr
    md = (out / "summary.md").read_text()
    assert "| iperf3 TCP stream: received |" in md
    assert "iperf3: accelerated in 1 of 1 shunt runs" in md
    pts = rows(out)
    assert {p["transport"] for p in pts if p["test"] == "tool:iperf_recv"} == {"tcp", "shunt"}


def test_installed_bench(shunt_build, tmp_path):
    """`make install` puts the driver and pingpong in PREFIX/lib/shunt, and
    the installed `shunt bench` measures with them."""
    dest = tmp_path / "dest"
    r = subprocess.run(["make", "-C", str(REPO), "install", "DESTDIR=%s" % dest, "PREFIX=/opt/shunt"],
                       capture_output=True, text=True, timeout=300, env=base_env())
    assert r.returncode == 0, r.stdout + r.stderr
    libdir = dest / "opt/shunt/lib/shunt"
    for f in ("shuntbench.py", "benchlib.py", "stdtools.py", "plots.py", "pingpong", "busyserv"):
        assert (libdir / f).exists(), f
    out = tmp_path / "out"
    r = bench(shunt_build, out, "--rounds", "1", "--tests", "pingpong", "--transports", "tcp,shunt",
              "--max-size", "16", "--tools", "none", shunt=dest / "opt/shunt/bin/shunt")
    # without matplotlib the graphs cannot be drawn (status 1); the rest is measured
    expected = 0 if importlib.util.find_spec("matplotlib") else 1
    assert r.returncode == expected, r.stdout + r.stderr
    assert {p["transport"] for p in rows(out)} == {"tcp", "shunt"}


def test_demo_runs_with_a_relative_build(shunt_build):
    """The README's `make demo` passes `--build build`, relative to the repo,
    while the programs run in directories of their own: the demo must still
    find shunt (it did not, once), and its shunt run must be accelerated."""
    need_tool("sockperf")
    rel = os.path.relpath(shunt_build, REPO)
    r = subprocess.run([sys.executable, "bench/demo.py", "--quick", "--rounds", "1", "--bench", "pp",
                        "--seconds", "1", "--build", rel],
                       cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sockperf ping-pong   shunt  ..." in r.stdout and "accelerated (server 1, client 1)" in r.stdout, r.stdout
