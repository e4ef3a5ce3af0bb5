"""Issue 16, suite (b): a fuzzer that overwrites each field of a live
channel segment (struct chan_hdr, both chan_side, both ring_hdr: every
field, each lock again with holders at 2, and each struct whole) with
boundary and random values, from another process of the same user, while
the victim has other connections transferring checksummed data
(tests/programs/segment_fuzz.c does the work; this runs it in four
processes, one per group of fields, and checks what they report).  Each
rule of docs/architecture.md's "Shared memory is input" has a short run of
its own on the fields that broke it (test_rule).

Asserted: no crash (the victim's exit status), no hang (the victim's own
watchdog bounds every call, every join and every close; this bounds the
process and its exit, with the last corrupted connections still open), the
corrupted connection ends cleanly (ECONNRESET, EIO, EPIPE, its reader's
timeout: a lost wake-up, as a peer that stops sending) or continues exact to
its EOF, never a wrong byte nor a clean EOF before the writer's last byte,
and every other connection stays exact.  The figures are printed (pytest -s shows them)."""
import os
import subprocess
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (group of fields, how the victim leaves: exit runs the destructors, _exit the wrapper)
GROUPS = [("hdr", "exit"), ("side0", "_exit"), ("side1", "exit"), ("rings", "_exit")]
RUN_BOUND_S = 90      # a victim's whole run: its watchdog ends a hung case within about 16 s
EXIT_BOUND_S = 10     # from its "exiting" line to its end


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory, shunt_build):
    exe = str(tmp_path_factory.mktemp("fuzz") / "segment_fuzz")
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    "-I", os.path.join(REPO, "src"), os.path.join(REPO, "tests/programs/segment_fuzz.c"),
                    "-o", exe, "-ldl", "-pthread"], check=True, timeout=120)
    return exe


def run_group(fuzzer, shunt_build, tmp_path, group, how, seed):
    # SHUNT_SHORT_CONNS=0: the connections the scribbler cuts short would
    # otherwise teach the victim that this destination's connections are
    # short, and later ones would start on kernel TCP (reason "short"), not
    # on a ring to scribble on (docs/architecture.md, "Short connections")
    env = dict(os.environ, LD_PRELOAD=os.path.join(shunt_build, "libshunt.so"), SHUNT_ACCEL="1",
               SHUNT_SHORT_CONNS="0")
    env.pop("SHUNT_LOG", None)
    log = tmp_path / ("fuzz-%s.log" % group.replace(",", "+"))
    lines = []   # (time, line)
    with open(log, "w") as err:
        p = subprocess.Popen([fuzzer, group, str(seed), how], stdout=subprocess.PIPE, stderr=err, text=True,
                             env=env, start_new_session=True)

        def read():
            for line in p.stdout:
                lines.append((time.monotonic(), line.rstrip("\n")))

        t = threading.Thread(target=read, daemon=True)
        t.start()
        try:
            p.wait(timeout=RUN_BOUND_S)
        except subprocess.TimeoutExpired:
            pass
        ended = time.monotonic()
        if p.poll() is None:
            os.killpg(p.pid, 9)   # its own session: the victim and its scribbler
            p.wait()
            tail = log.read_text().splitlines()[-15:]
            pytest.fail("group %s: the victim hung (%s run bound); last lines:\n%s\n%s" % (
                group, RUN_BOUND_S, "\n".join(l for _, l in lines), "\n".join(tail)))
        t.join(timeout=10)
    out = "\n".join(l for _, l in lines)
    tail = "\n".join(log.read_text().splitlines()[-20:])
    assert p.returncode >= 0, "group %s: the victim died of signal %d\n%s\n%s" % (group, -p.returncode, out, tail)
    assert "HANG" not in out, "group %s: %s\n%s" % (group, out, tail)
    assert p.returncode == 0, "group %s: exit %d\n%s\n%s" % (group, p.returncode, out, tail)
    exiting = [at for at, l in lines if l.startswith("exiting")]
    assert exiting, out
    exit_s = ended - exiting[0]
    assert exit_s <= EXIT_BOUND_S, "group %s: %s took %.1f s with corrupted connections open" % (group, how, exit_s)
    fig = [l for _, l in lines if l.startswith("fields ")]
    assert fig, out
    words = fig[0].split()
    figures = {}
    for i in range(0, len(words) - 1):
        if words[i + 1].isdigit() and not words[i].isdigit():
            figures[words[i]] = int(words[i + 1])
    for w in words:
        if "=" in w:
            k, v = w.split("=")
            figures[k] = int(v)
    figures["exit_ms"] = int(exit_s * 1000)
    return figures


def check_figures(total):
    assert total["wrong_bytes"] == 0 and total["WRONG"] == 0
    assert total["failures"] == 0
    assert total["other-error"] == 0
    # a clean EOF before the last byte the writer sent is bytes lost in silence
    assert total["eof-short"] == 0


# The rules of docs/architecture.md ("Shared memory is input"), each with
# the fields that break it when it does not hold.
RULES = {
    "prefix-snapshot": "hdr.neg",
    "downgrade-word": "hdr.down,hdr.down_tail,hdr.down_txtail,hdr.back_len",
    "ring-indexes": "ring0.head,ring0.tail,ring0.fin,ring0.size,ring1.head,ring1.tail",
    "end-state": "side0.state,side1.state",
    "shared-locks": "side0.tx_lock+holders2,side0.rx_lock+holders2,side1.wait_lock+holders2",
    "futex-words": "side0.fwake,side0.fsleepers,side0.fspace_sleepers,side1.fwake,side1.fsleepers,"
                   "side1.fspace_sleepers",
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule(fuzzer, shunt_build, tmp_path, rule):
    seed = int(os.environ.get("SHUNT_FUZZ_SEED", "16"))
    check_figures(run_group(fuzzer, shunt_build, tmp_path, RULES[rule], "exit", seed))


def test_segment_fuzz(fuzzer, shunt_build, tmp_path):
    seed = int(os.environ.get("SHUNT_FUZZ_SEED", "16"))
    total = {}
    started = time.monotonic()
    for group, how in GROUPS:
        f = run_group(fuzzer, shunt_build, tmp_path, group, how, seed)
        for k, v in f.items():
            total[k] = max(total.get(k, 0), v) if k in ("close_max_ms", "exit_ms", "values") else total.get(k, 0) + v
    took = time.monotonic() - started
    print("\nsegment fuzz (seed %d, %.0f s): %d fields, %d values each, %d cases, %d connections, "
          "%d bytes checked, %d wrong bytes, 0 crashes, 0 hangs; close at most %d ms, exit at most %d ms; "
          "corrupted directions: %s" % (
              seed, took, total["fields"], total["values"], total["cases"], total["connections"],
              total["bytes_checked"], total["wrong_bytes"], total["close_max_ms"], total["exit_ms"],
              ", ".join("%s %d" % (k, total.get(k, 0)) for k in
                        ("exact", "eof-short", "reset", "eio", "epipe", "stalled", "other-error", "WRONG"))))
    check_figures(total)
