"""Issue 16, suite (b), the registry's half: a fuzzer that overwrites each
field of the registry file (the header with its lock word, the victim's
listener entry, the connection record its connections take, a process
entry: every field, and each struct whole) with boundary and random values,
from another process of the same user, again and again while the victim
makes connections, each checksummed both ways
(tests/programs/registry_fuzz.c does the work, in a network namespace of its
own so that the registry is nobody else's).

Asserted: no crash (the exit status: the registry of version 4, a robust
pthread mutex in the file, died of SIGSEGV here at its list pointers), no
hang (every socket call has a timeout, a watchdog bounds progress and this
bounds the run), every connection's bytes exact whether it was accelerated
or fell back (a corrupt registry costs acceleration only), and the registry
accelerates again once its bytes are back.  The figures are printed
(pytest -s shows them)."""
import os
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_BOUND_S = 30


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory, shunt_build):
    exe = str(tmp_path_factory.mktemp("regfuzz") / "registry_fuzz")
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    "-I", os.path.join(REPO, "src"), os.path.join(REPO, "tests/programs/registry_fuzz.c"),
                    "-o", exe, "-ldl", "-pthread"], check=True, timeout=120)
    return exe


def test_registry_fuzz(fuzzer, shunt_build, tmp_path):
    seed = int(os.environ.get("SHUNT_FUZZ_SEED", "16"))
    # every case's connections are meant to be offered a channel: without
    # SHUNT_SHORT_CONNS=0 the fuzzer's many short ones to one listener would
    # be kernel TCP by design (reason short), and nothing would be tested
    env = dict(os.environ, LD_PRELOAD=os.path.join(str(shunt_build), "libshunt.so"), SHUNT_ACCEL="1",
               SHUNT_SHORT_CONNS="0")
    env.pop("SHUNT_LOG", None)
    log = tmp_path / "registry-fuzz.log"
    started = time.monotonic()
    with open(log, "w") as err:
        p = subprocess.Popen([fuzzer, str(seed)], stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=RUN_BOUND_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)   # its own session: the victim and its scribbler
            out, _ = p.communicate()
            pytest.fail("the victim hung (%d s bound):\n%s\n%s" % (RUN_BOUND_S, out, log.read_text()[-3000:]))
    took = time.monotonic() - started
    tail = "\n".join(log.read_text().splitlines()[-15:])
    if p.returncode == 77:
        pytest.skip(out.strip())
    assert p.returncode >= 0, "the victim died of signal %d\n%s\n%s" % (-p.returncode, out, tail)
    assert "HANG" not in out, out + tail
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, out, tail)
    fig = [l for l in out.splitlines() if l.startswith("fields ")]
    assert fig, out
    words = fig[0].split()
    f = {}
    for i in range(len(words) - 1):
        if words[i + 1].isdigit() and not words[i].isdigit():
            f[words[i]] = int(words[i + 1])
    for w in words:
        if "=" in w:
            k, v = w.split("=")
            f[k] = int(v)
    print("\nregistry fuzz (seed %d, %.0f s): %d fields, %d values each, %d cases, %d connections "
          "(%d accelerated, the rest fell back), %d bytes checked, 0 wrong, 0 crashes, 0 hangs" % (
              seed, took, f["fields"], f["values"], f["cases"], f["connections"], f["accelerated"],
              f["bytes_checked"]))
    assert f["cases"] == f["fields"] * f["values"]
    assert f["connections"] >= 2 * f["cases"]
    # the fuzz is meaningful: the registry accelerated before and accelerates again after
    assert f["warm_accelerated"] == 1 and f["after_accelerated"] == 1, out
    assert f["accelerated"] > 0
