"""Suite (d) of issue 16: a second user (nobody) attacks the files shunt
keeps in /dev/shm for this user.

Each scenario of tests/programs/other_user.py runs as root in private mount
and network namespaces (unshare) with a tmpfs of its own on /dev/shm, so the
names it squats are nobody else's on this machine.  The attacker acts
through setpriv as user nobody.  Scenarios: the registry's name made first
as nobody's file (then truncated), as a symlink to a file of ours, as a
FIFO; the old, pid-only names of fd tables made first for the server and
the next 300 pids (then truncated under the running server); the shm
budget's name the same three ways (with SHUNT_SHM_LIMIT); a watcher that
makes every name that follows from a segment's the moment it appears (wake
FIFOs, a handed-back prefix) and goes at the segment, while processes wake
each other across fork and ends move back to kernel TCP; SHUNT_LOG_FILE in a
world-writable directory with a symlink and nobody's files under the names
it will take; and the attacker opening, truncating, unlinking and renaming
over every file of ours while a connection runs.

Asserted for each: no process killed by a signal, no wait that runs out,
every byte back, the connection on shared memory where shunt could choose a
name of its own and on kernel TCP with the reason visible (the log and
`shunt stat`) where it could not, and nothing of ours written into the
attacker's files or through its symlinks.  The figures are printed.
"""

import json
import os
import pwd
import shutil
import subprocess

import pytest

from shunttest import PROGRAMS, PYTHON, run_cmd

SCRIPT = PROGRAMS / "other_user.py"
SCENARIOS = ["registry-file", "registry-symlink", "registry-fifo", "table-squat", "budget-file", "budget-symlink",
             "budget-fifo", "beside-race", "log-file", "at-ours"]


def can_run():
    if os.geteuid() != 0:
        return "needs root (namespaces, a second user)"
    for tool in ("unshare", "setpriv", "ip", "mount"):
        if not shutil.which(tool):
            return "%s is not installed" % tool
    try:
        pwd.getpwuid(65534)
    except KeyError:
        return "no user 65534 (nobody)"
    probe = subprocess.run(["unshare", "--mount", "--net", "true"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        return "cannot make mount and network namespaces here"
    return None


def test_another_user_cannot_hurt_us(shunt_build, tmp_path, capsys):
    why = can_run()
    if why:
        pytest.skip(why)
    results = []
    for name in SCENARIOS:
        out = tmp_path / name
        out.mkdir()
        r = run_cmd(["unshare", "--mount", "--net", "--propagation", "private", PYTHON, SCRIPT, "scenario", name,
                     shunt_build, out], timeout=240)
        lines = [l for l in r.stdout.decode(errors="replace").splitlines() if l.startswith("{")]
        if r.returncode != 0 or not lines:
            results.append({"scenario": name, "attacks": 0, "crashes": 1 if r.returncode < 0 else 0, "hangs": 0,
                            "connections": 0, "bytes": 0, "exact": False, "paths": [], "reason_visible": False,
                            "attacker_files_changed": 0,
                            "problems": ["the scenario ended with %d: %s" % (r.returncode,
                                                                            r.stderr.decode(errors="replace")[-1500:])]})
            continue
        results.append(json.loads(lines[-1]))

    total = {k: sum(x[k] for x in results) for k in ("attacks", "crashes", "hangs", "connections", "bytes",
                                                      "attacker_files_changed")}
    fallbacks = sum(1 for x in results if "tcp" in x["paths"])
    visible = sum(1 for x in results if "tcp" in x["paths"] and x["reason_visible"])
    with capsys.disabled():
        print("\nsuite (d), another user at our files:")
        print("  %-17s %7s %5s %10s  %-9s %s" % ("scenario", "attacks", "conns", "bytes", "path", "result"))
        for x in results:
            print("  %-17s %7d %5d %10d  %-9s %s" % (x["scenario"], x["attacks"], x["connections"], x["bytes"],
                                                    ",".join(sorted(set(x["paths"]))) or "-",
                                                    "ok" if not x["problems"] else "FAILED"))
        print("  %d scenarios, %d attacks, %d connections, %d bytes checked exact; %d crashes, %d hangs, "
              "%d files of the attacker's written; %d fell back to kernel TCP, %d with the reason visible"
              % (len(results), total["attacks"], total["connections"], total["bytes"], total["crashes"],
                 total["hangs"], total["attacker_files_changed"], fallbacks, visible))
    failed = ["%s: %s" % (x["scenario"], "; ".join(x["problems"])[:3000]) for x in results if x["problems"]]
    assert not failed, "\n".join(failed)
    assert total["crashes"] == 0 and total["hangs"] == 0 and total["attacker_files_changed"] == 0
    assert all(x["exact"] for x in results)
