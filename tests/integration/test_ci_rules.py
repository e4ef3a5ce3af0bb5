"""The rules of the test suites themselves: a missing tool fails under CI
and skips elsewhere (pytest's side in shunttest.py, the C programs' in
tests/lib/check.h), and tests/run_programs.py runs every program of a
suite, whatever the others did.

Each runs the real thing on tiny made-up tests in a temporary directory:
pytest on a few test functions, the runner on a few programs (shell
scripts, and C programs built against check.h).
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shunttest import REPO, base_env, need_tool

HERE = Path(__file__).resolve().parent
RUNNER = REPO / "tests" / "run_programs.py"
NO_TOOL = "shunt-test-no-such-tool-4711"

INNER_CONFTEST = '''
from shunttest import pytest_configure, pytest_runtest_makereport, pytest_runtest_setup  # noqa: F401
'''

INNER_TESTS = '''
import pytest
from shunttest import need_module, need_tool, missing, not_here

def test_tool():
    need_tool("%(tool)s")

def test_two_tools_second_missing():
    need_tool("sh", "%(tool)s")

def test_module():
    need_module("shunt_test_no_such_module_4711", "python3-nothing")

def test_missing():
    missing("libfoo.a is not installed")

@pytest.mark.needs_tool("%(tool)s")
def test_marker():
    pass

def test_bare_skip():
    pytest.skip("frobnicator is not installed")

@pytest.mark.skipif(True, reason="bar is not installed")
def test_skipif():
    pass

def test_importorskip():
    pytest.importorskip("shunt_test_no_such_module_4711")

def test_not_here():
    not_here("a kernel without the feature")

def test_present():
    need_tool("sh")
    need_module("os", "python3")

@pytest.mark.xfail(reason="expected")
def test_xfail():
    assert False
''' % {"tool": NO_TOOL}

CI_FAILS = {"test_tool", "test_two_tools_second_missing", "test_module", "test_missing", "test_marker",
            "test_bare_skip", "test_skipif", "test_importorskip"}


def inner_pytest(tmp_path, ci):
    """Runs pytest on INNER_TESTS; {test name: passed|failed|skipped}, and the
    failure messages."""
    d = tmp_path / ("ci-%s" % ci)
    d.mkdir()
    (d / "conftest.py").write_text(INNER_CONFTEST)
    (d / "test_inner.py").write_text(INNER_TESTS)
    xml = d / "result.xml"
    env = base_env(PYTHONPATH=str(HERE))
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(d),
                        "--junitxml", str(xml), str(d / "test_inner.py")],
                       cwd=d, env=env, capture_output=True, text=True, timeout=120)
    assert xml.exists(), r.stdout + r.stderr
    outcome, messages = {}, {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")    # failed in set-up (a mark's check, skipif)
        skipped = case.find("skipped")
        if failure is not None:
            outcome[name] = "failed"
            messages[name] = (failure.get("message") or "") + (failure.text or "")
        elif skipped is not None:
            outcome[name] = "xfailed" if (skipped.get("type") == "pytest.xfail") else "skipped"
            messages[name] = skipped.get("message") or ""
        else:
            outcome[name] = "passed"
    return r, outcome, messages


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_missing_tool_fails_under_ci(tmp_path, ci):
    r, outcome, messages = inner_pytest(tmp_path, ci)
    assert r.returncode == 1, r.stdout + r.stderr
    for name in CI_FAILS:
        assert outcome.get(name) == "failed", (name, outcome, r.stdout)
    assert outcome["test_not_here"] == "skipped", outcome
    assert outcome["test_present"] == "passed", outcome
    assert outcome["test_xfail"] == "xfailed", outcome
    # the helpers say what is missing; the hook says why a skip failed
    assert "missing under CI (CI=%s)" % ci in messages["test_tool"] and NO_TOOL in messages["test_tool"]
    assert NO_TOOL in messages["test_two_tools_second_missing"]
    assert "python3-nothing" in messages["test_module"]
    assert NO_TOOL in messages["test_marker"]
    assert "skipped under CI" in messages["test_bare_skip"] and "frobnicator" in messages["test_bare_skip"]
    assert "bar is not installed" in messages["test_skipif"]


@pytest.mark.parametrize("ci", [None, "", "0", "false", "no"])
def test_missing_tool_skips_elsewhere(tmp_path, ci):
    r, outcome, messages = inner_pytest(tmp_path, ci)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in CI_FAILS | {"test_not_here"}:
        assert outcome.get(name) == "skipped", (name, outcome, r.stdout)
    assert outcome["test_present"] == "passed", outcome
    assert NO_TOOL in messages["test_tool"] and "scripts/install-deps" in messages["test_tool"]


# ------------------------------------------------------------ the runner

SCRIPTS = {
    # a unit test runs without the modes' variables
    "t_pass": '[ -z "$LD_PRELOAD" ] && [ -z "$SHUNT_TEST_MODE" ] && [ -z "$SHUNT_ACCEL" ] || exit 5\n'
              'echo pass-ran > "$MARKS/t_pass"\n',
    "t_skip": 'echo "SKIP: nothing to do here" >&2\nexit 77\n',
    "t_fail": 'echo "it broke" >&2\nexit 3\n',
    "t_hang": 'echo started >&2\nexec sleep 60\n',
    "t_zlast": 'echo ran > "$MARKS/t_zlast"\n',      # after the failures, in name order
}

C_MISSING = r'''
#include "check.h"
int main(void) { MISSING("no %s device", "frobnication"); }
'''
C_SKIP = r'''
#include "check.h"
int main(void) { SKIP("the kernel lacks frobnication"); }
'''


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """A build directory with a unit suite of made-up programs."""
    need_tool("cc", package="build-essential")
    build = tmp_path_factory.mktemp("build")
    unit = build / "tests" / "unit"
    unit.mkdir(parents=True)
    for name, body in SCRIPTS.items():
        (unit / name).write_text("#!/bin/sh\n" + body)
        (unit / name).chmod(0o755)
    for name, src in (("c_missing", C_MISSING), ("c_skip", C_SKIP)):
        (build / (name + ".c")).write_text(src)
        subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-I", str(REPO / "tests" / "lib"),
                        "-o", str(unit / name), str(build / (name + ".c")), "-ldl"], check=True, timeout=120)
    (unit / "notes.txt").write_text("not a program: it has a dot\n")
    return build


def run_runner(args, ci=None, marks=None, extra_env=None):
    env = base_env(LD_PRELOAD="/nonexistent/libshunt.so", SHUNT_TEST_MODE="accelerated", SHUNT_ACCEL="1",
                   MARKS=str(marks or "/nonexistent"))
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    env.update(extra_env or {})
    r = subprocess.run([sys.executable, str(RUNNER)] + [str(a) for a in args], env=env, capture_output=True,
                       text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert lines, r.stderr
    return r, lines


def status_of(lines):
    """{name: (status, mode)} from the runner's result lines."""
    out = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[0] in ("PASS", "FAIL", "SKIP"):
            out[parts[2]] = (parts[0], parts[1])
    return out


def test_runner_unit_suite_runs_everything(programs, tmp_path):
    r, lines = run_runner(["--suite", "unit", "--build", programs, "--timeout", "2"], marks=tmp_path)
    st = status_of(lines)
    assert st == {"t_pass": ("PASS", "unit"), "t_skip": ("SKIP", "unit"), "t_fail": ("FAIL", "unit"),
                  "t_hang": ("FAIL", "unit"), "t_zlast": ("PASS", "unit"), "c_missing": ("SKIP", "unit"),
                  "c_skip": ("SKIP", "unit")}, r.stdout
    assert lines[-1] == "2 passed, 2 failed, 3 skipped", r.stdout
    assert r.returncode == 1
    assert (tmp_path / "t_pass").exists() and (tmp_path / "t_zlast").exists()
    assert "it broke" in r.stdout and "(exit status 3)" in r.stdout
    assert "timed out after 2s" in r.stdout
    assert any("SKIP  unit  c_missing" in l and "SKIP: no frobnication device" in l for l in lines), r.stdout
    assert any("SKIP  unit  t_skip" in l and "SKIP: nothing to do here" in l for l in lines), r.stdout


def test_runner_missing_fails_under_ci(programs, tmp_path):
    r, lines = run_runner(["--suite", "unit", "--build", programs, "--timeout", "2"], ci="true", marks=tmp_path)
    st = status_of(lines)
    assert st["c_missing"] == ("FAIL", "unit"), r.stdout
    assert st["c_skip"] == ("SKIP", "unit"), r.stdout       # a reason a machine may have for good
    assert "missing under CI (CI=true): no frobnication device" in r.stdout
    assert lines[-1] == "2 passed, 3 failed, 2 skipped", r.stdout
    assert r.returncode == 1


def test_runner_exit_status_and_filter(programs, tmp_path):
    r, lines = run_runner(["--suite", "unit", "--build", programs, "--filter", "skip"], marks=tmp_path)
    assert lines[-1] == "0 passed, 0 failed, 2 skipped" and r.returncode == 0, r.stdout
    r, lines = run_runner(["--suite", "unit", "--build", programs, "--filter", "t_pass", "--jobs", "1"],
                          marks=tmp_path)
    assert lines[-1] == "1 passed, 0 failed, 0 skipped" and r.returncode == 0, r.stdout
    # nothing found is a failure
    r, lines = run_runner(["--suite", "unit", "--build", programs, "--filter", "nothing-like-it"])
    assert lines[-1] == "0 passed, 0 failed, 0 skipped" and r.returncode == 1, r.stdout
    assert "no unit tests found" in r.stdout
    r, lines = run_runner(["--build", programs])          # no conformance programs there
    assert lines[-1] == "0 passed, 0 failed, 0 skipped" and r.returncode == 1, r.stdout
    assert "no conformance tests found" in r.stdout
    # the unit suite has one mode
    r = subprocess.run([sys.executable, str(RUNNER), "--suite", "unit", "--build", str(programs), "--modes",
                        "plain"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown mode(s) plain for suite unit" in r.stderr, r.stderr


def test_runner_conformance_plain_mode(tmp_path):
    """The conformance suite's plain mode: no preload, SHUNT_TEST_MODE=plain."""
    conf = tmp_path / "tests" / "conformance"
    conf.mkdir(parents=True)
    (conf / "mode_check").write_text('#!/bin/sh\n[ "$SHUNT_TEST_MODE" = plain ] && [ -z "$LD_PRELOAD" ]\n')
    (conf / "mode_check").chmod(0o755)
    r, lines = run_runner(["--build", tmp_path, "--modes", "plain"])
    assert status_of(lines) == {"mode_check": ("PASS", "plain")}, r.stdout
    assert lines[-1] == "1 passed, 0 failed, 0 skipped" and r.returncode == 0
