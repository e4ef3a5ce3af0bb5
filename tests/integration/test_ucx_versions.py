"""The fabric engine takes only the UCX versions the conformance suite passes on
(src/transport/fabric_engine.c, UCX_TESTED_*; docs/compatibility.md, "UCX versions").

Accepted versions: a conformance program rides the fabric on each UCX that
scripts/install-deps puts in /var/cache/shunt-ucx (PyPI's libucx-cu12 wheels);
on 1.15.0 that program (dup_close) crashed before the engine kept a region
given back while an endpoint of the same process to it remained, and from
1.16 on emfile_count hung before the engine asked UCX for its former
protocols (1.16 to 1.21) or, on 1.22, whose former protocols fail puts of
16 KiB, drove its worker from a thread of its own (a new endpoint's wire-up
waits for the peer's progress).  (make test-fabric-ucx runs the whole suite on some of them.)

Refused versions: a stand-in libucp.so.0 that says it is UCX 1.12, 1.23 or
2.0 (every function the engine looks up is there, and none but
ucp_get_version may be called: each of the others aborts).  The connection stays kernel TCP, every
byte as the program sent it, and the log says which version and why.

Each case runs a conformance program in the runner's fabric mode (two network
namespaces, SHUNT_FABRIC=only: the engine even where shunt's rings reach), with
the runner's --ucx.  Root only, as the runner's fabric modes are."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shunttest import REPO, base_env, build_dir, missing, need_tool

UCX_CACHE = Path("/var/cache/shunt-ucx")
RUNNER = REPO / "tests" / "run_programs.py"
UCX_CALLS = REPO / "src" / "transport" / "fabric_ucx.h"
# The versions scripts/install-deps fetches: the range's ends, Ubuntu 24.04's
# (1.16), Debian 13's (1.18), and the last with UCX's former protocols (1.21).
ACCEPTED = ("1.14.1", "1.15.0", "1.16.0", "1.18.1", "1.21.0", "1.22.0")


def ucx_dir(version):
    lib = UCX_CACHE / version / "libucx" / "lib"
    if not (lib / "libucp.so.0").is_file():
        missing("UCX %s from PyPI is not in %s (scripts/install-deps puts it there)" % (version, lib))
    return lib


def run_fabric(test, ucx):
    """The runner's fabric mode on one conformance program, the tests loading the
    UCX of directory ucx; (exit status, output)."""
    r = subprocess.run([sys.executable, str(RUNNER), "--build", str(build_dir()), "--modes", "fabric",
                        "--filter", test, "--jobs", "1", "--tail", "200", "--ucx", str(ucx)],
                       env=base_env(), capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def stand_in_ucx(dest, major, minor):
    """A libucp.so.0 in dest that answers ucp_get_version with major.minor.0 and
    exports every other function the engine looks up as a call that aborts."""
    need_tool("cc", package="gcc")
    names = re.findall(r"^\s*X\((\w+),", UCX_CALLS.read_text(), re.M)
    assert "ucp_get_version" in names and len(names) > 10, names
    src = ["#include <stdlib.h>",
           "void ucp_get_version(unsigned *a, unsigned *b, unsigned *c)"
           " { *a = %d; *b = %d; *c = 0; }" % (major, minor)]
    src += ["void %s(void) { abort(); }" % n for n in names if n != "ucp_get_version"]
    c = dest / "stand_in_ucx.c"
    c.write_text("\n".join(src) + "\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(dest / "libucp.so.0"), str(c)], check=True)
    return dest


@pytest.fixture(autouse=True)
def as_root():
    if os.geteuid() != 0:
        missing("root (the runner's fabric mode makes network namespaces)")


def refused(out, version):
    assert "the fabric modes load UCX %s" % version in out, out
    # the program's own checks passed (every byte, both ways); only its connection missed
    # the fabric, which the runner reports as a failure of the mode
    assert re.search(r"^FAIL\s+fabric\s+dup_close\b", out, re.M), out
    assert "(passed, but a connection missed the fabric)" in out, out
    assert "killed by" not in out and "timed out" not in out, out
    assert ("no engine: UCX %s is not a version shunt was tested with (1.13 to 1.22)" % version) in out, out


@pytest.mark.parametrize("major,minor", [(1, 12), (1, 23), (2, 0)])
def test_untested_version_is_refused(tmp_path, major, minor):
    rc, out = run_fabric("dup_close", stand_in_ucx(tmp_path, major, minor))
    refused(out, "%d.%d.0" % (major, minor))
    assert rc != 0


@pytest.mark.parametrize("version", ACCEPTED)
def test_tested_version_rides_the_fabric(version):
    """dup_close on each: accelerated on the fabric, every byte exact."""
    rc, out = run_fabric("dup_close", ucx_dir(version))
    assert "the fabric modes load UCX %s" % version in out, out
    assert re.search(r"^PASS\s+fabric\s+dup_close\b", out, re.M), out
    assert rc == 0, out


@pytest.mark.parametrize("version", ("1.16.0", "1.21.0", "1.22.0"))
def test_peer_outside_shunt_does_not_stall_a_new_endpoint(version):
    """emfile_count: the server sits in a plain accept while its client's second
    connection moves to the fabric.  With UCX's new protocols (on by default from
    1.16) the client's first get waited for the server's worker to answer the
    endpoint's wire-up, for ever: up to 1.21 the engine asks for the former
    protocols; on 1.22 (the new ones) shunt's progress thread answers."""
    rc, out = run_fabric("emfile_count", ucx_dir(version))
    assert re.search(r"^PASS\s+fabric\s+emfile_count\b", out, re.M), out
    assert rc == 0, out


@pytest.mark.parametrize("version", ACCEPTED)
def test_engine_unit_test_on(version):
    """tests/unit/test_fabric_engine on each: puts, gets, fences and flushes on both
    kinds of lanes, a dying writer, a region given back, a peer ended, the memory hooks
    off (UCM's options set in the head of a structure whose tail moved in 1.18 and
    1.20), and both ends in one process (UCX's `self` lane)."""
    prog = build_dir() / "tests" / "unit" / "test_fabric_engine"
    if not prog.is_file():
        missing("%s (make tests)" % prog)
    env = dict(base_env(), LD_LIBRARY_PATH=str(ucx_dir(version)))
    r = subprocess.run([str(prog)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
