"""The fabric engine takes only the UCX versions the conformance suite passes on
(src/transport/fabric_engine.c, UCX_TESTED_*; docs/compatibility.md, "UCX versions").

A UCX outside them, here PyPI's 1.15.0 (scripts/install-deps puts it in
/var/cache/shunt-ucx), is refused when the engine loads: the connection stays
kernel TCP, every byte as the program sent it, and the log says which version
and why.  Before, the engine took any UCX it found; with 1.15.0 the fabric mode
of the suite crashed four programs (a put into a region given back), and from
1.16 on one hung (the worker's fence waited for a dead peer).

Each case runs a conformance program in the runner's fabric mode (two network
namespaces, SHUNT_FABRIC=only: the engine even where shunt's rings reach), with
the runner's --ucx.  Root only, as the runner's fabric modes are."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shunttest import REPO, base_env, build_dir, missing

UCX_CACHE = Path("/var/cache/shunt-ucx")
RUNNER = REPO / "tests" / "run_programs.py"


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


@pytest.fixture(autouse=True)
def as_root():
    if os.geteuid() != 0:
        missing("root (the runner's fabric mode makes network namespaces)")


def test_untested_version_is_refused():
    """dup_close: one of the programs UCX 1.15.0 crashed on the fabric (SIGSEGV in a put)."""
    rc, out = run_fabric("dup_close", ucx_dir("1.15.0"))
    assert "the fabric modes load UCX 1.15.0" in out, out
    # the program's own checks passed (every byte, both ways); only its connection missed
    # the fabric, which the runner reports as a failure of the mode
    assert re.search(r"^FAIL\s+fabric\s+dup_close\b", out, re.M), out
    assert "(passed, but a connection missed the fabric)" in out, out
    assert "killed by" not in out and "timed out" not in out, out
    assert "no engine: UCX 1.15.0 is not a version shunt was tested with (1.13 to 1.14)" in out, out
    assert rc != 0


def test_tested_version_rides_the_fabric():
    """The same program on PyPI's 1.14.1: accelerated on the fabric (make's
    test-fabric-ucx runs the whole suite on it)."""
    rc, out = run_fabric("dup_close", ucx_dir("1.14.1"))
    assert "the fabric modes load UCX 1.14.1" in out, out
    assert re.search(r"^PASS\s+fabric\s+dup_close\b", out, re.M), out
    assert rc == 0, out
