"""The `shunt` command and the behaviour a user sees from settings:
help and version, the settings table (and that docs/settings.md agrees
with it), clear one-line errors for bad settings, fallback reasons in
SHUNT_LOG, SHUNT_STRICT, and registry records that come and go with
their sockets (as `shunt stat` shows them)."""
import re
import resource
import signal
import subprocess
import textwrap

import pytest

from shunttest import PYTHON, REPO, base_env


def run(argv, env=None, timeout=60, **kw):
    return subprocess.run(argv, env=env or base_env(), capture_output=True, text=True, timeout=timeout, **kw)


def test_help_and_version(shunt_build):
    r = run([str(shunt_build / "shunt"), "--help"])
    assert r.returncode == 0 and "run [--] PROGRAM" in r.stdout and "stat" in r.stdout
    r = run([str(shunt_build / "shunt"), "--version"])
    assert r.returncode == 0 and re.fullmatch(r"shunt \d+\.\d+\.\d+\n", r.stdout)
    r = run([str(shunt_build / "shunt"), "frobnicate"])
    assert r.returncode == 2 and "unknown command" in r.stderr


def settings_from_help(shunt_build):
    r = run([str(shunt_build / "shunt"), "run", "--help"])
    assert r.returncode == 0
    return dict(re.findall(r"^  (SHUNT_[A-Z_]+)\s+default (\S+)", r.stdout, re.M))


def test_settings_table_matches_docs(shunt_build):
    helped = settings_from_help(shunt_build)
    assert {"SHUNT_ACCEL", "SHUNT_STRICT", "SHUNT_LOG", "SHUNT_LOG_FILE", "SHUNT_RING_SIZE", "SHUNT_SPIN_US"} <= set(helped)
    doc = (REPO / "docs" / "settings.md").read_text()
    documented = dict(re.findall(r"^\| `(SHUNT_[A-Z_]+)` \| ([^|]+) \|", doc, re.M))
    assert set(documented) == set(helped), "docs/settings.md and `shunt run --help` list different settings"
    for name, default in helped.items():
        if default != '""':
            assert documented[name].strip() == "`%s`" % default, name


@pytest.mark.parametrize("name,value", [("SHUNT_LOG", "loud"), ("SHUNT_ACCEL", "maybe"),
                                        ("SHUNT_RING_SIZE", "1000"), ("SHUNT_RING_SIZE", "12Q"),
                                        ("SHUNT_SPIN_US", "-1"), ("SHUNT_STRICT", ""),
                                        ("SHUNT_POLL_KERNEL_CALLS", "many"), ("SHUNT_POLL_KERNEL_US", "2000000")])
def test_bad_setting_is_one_clear_line(shunt_build, name, value):
    r = run([str(shunt_build / "shunt"), "run", "--", "true"], env=base_env(**{name: value}))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "bad setting" in lines[0], r.stderr
    # preloaded directly: the same line, and the program still runs (on kernel TCP)
    env = base_env(**{name: value, "LD_PRELOAD": str(shunt_build / "libshunt.so")})
    r = run([PYTHON, "-c", "print('ran')"], env=env)
    assert r.returncode == 0 and r.stdout == "ran\n"
    assert [l for l in r.stderr.splitlines() if name in l], r.stderr


def test_unknown_setting_is_refused(shunt_build):
    r = run([str(shunt_build / "shunt"), "run", "--", "true"], env=base_env(SHUNT_RINGSIZE="64K"))
    assert r.returncode == 2 and "unknown setting SHUNT_RINGSIZE" in r.stderr


def test_run_keeps_existing_preload(shunt_build, tmp_path):
    r = run([str(shunt_build / "shunt"), "run", "--", "sh", "-c", "echo $LD_PRELOAD"],
            env=base_env(LD_PRELOAD="/nonexistent/other.so"))
    entries = r.stdout.split()
    assert entries[0] == "/nonexistent/other.so" and entries[-1].endswith("libshunt.so")


PEER = textwrap.dedent('''
    import socket, sys, time
    role, port = sys.argv[1], int(sys.argv[2])
    if role == "server":
        ls = socket.socket(); ls.bind(("127.0.0.1", port)); ls.listen(1)
        print("ready", flush=True)
        c, _ = ls.accept(); c.sendall(c.recv(100)); c.close()
    else:
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        c.sendall(b"hello"); assert c.recv(100) == b"hello"; print("ok", flush=True)
''')


def talk(shunt_build, tmp_path, port, server_shunted, client_shunted, client_env=None):
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    logs = tmp_path / "log-%p.txt"

    def argv(role, shunted):
        base = [PYTHON, str(script), role, str(port)]
        return [str(shunt_build / "shunt"), "run", "--"] + base if shunted else base

    env = base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(logs))
    srv = subprocess.Popen(argv("server", server_shunted), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline() == "ready\n"
        extra = dict(client_env or {})
        preexec = extra.pop("_preexec", None)
        r = subprocess.run(argv("client", client_shunted), env=dict(env, **extra), capture_output=True,
                           text=True, timeout=60, preexec_fn=preexec)
        if r.returncode == 0:
            srv.wait(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    text = "".join(p.read_text() for p in tmp_path.glob("log-*.txt"))
    return r, text


def test_fallback_reason_client_side(shunt_build, tmp_path, port):
    r, log = talk(shunt_build, tmp_path, port, server_shunted=False, client_shunted=True)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert "kernel TCP: no accelerated listener" in log, log


def test_fallback_reason_server_side(shunt_build, tmp_path, port):
    r, log = talk(shunt_build, tmp_path, port, server_shunted=True, client_shunted=False)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert "kernel TCP: client does not run shunt" in log, log


def test_accelerated_is_logged(shunt_build, tmp_path, port):
    r, log = talk(shunt_build, tmp_path, port, server_shunted=True, client_shunted=True)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert "accelerated (server" in log and "accelerated (client" in log, log


def no_shared_memory():
    """The client cannot create its channel: files may not grow (ftruncate
    gives EFBIG), and the signal that would come with it is ignored."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_channel_failure_falls_back(shunt_build, tmp_path, port):
    r, log = talk(shunt_build, tmp_path, port, True, True, client_env={"_preexec": no_shared_memory})
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert "kernel TCP: no shared memory for a channel" in log, log


def test_strict_fails_loudly(shunt_build, tmp_path, port):
    r, log = talk(shunt_build, tmp_path, port, True, True,
                  client_env={"_preexec": no_shared_memory, "SHUNT_STRICT": "1"})
    assert r.returncode != 0
    assert "SHUNT_STRICT" in r.stderr and "no shared memory for a channel" in r.stderr, r.stderr
    assert "Errno 71" in r.stderr or "Protocol error" in r.stderr, r.stderr


RECORDS = textwrap.dedent('''
    import json, socket, subprocess, sys
    shunt = sys.argv[1]
    def stat():
        return json.loads(subprocess.run([shunt, "stat", "--json"], capture_output=True, text=True, check=True).stdout)
    def mine(s, kind):
        return [e for e in s[kind] if any(h["pid"] == pid for h in e["holders"])]
    import os; pid = os.getpid()
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
    port = ls.getsockname()[1]
    s = stat(); print("listeners", len([l for l in mine(s, "listeners") if l["address"].endswith(":%d" % port)]))
    c = socket.create_connection(("127.0.0.1", port)); a, _ = ls.accept()
    c.sendall(b"x"); a.recv(1)
    s = stat(); print(json.dumps(s), file=sys.stderr)
    conns = {e["role"]: e for e in mine(s, "connections") if e["path"] == "shm"}
    print("connections", len(conns), len([r for r in s["records"] if r["state"] == "accelerated"
                                           and r["server"].endswith(":%d" % port)]))
    # the counters: the client sent one byte in one send, the server received it
    print("counted", conns["client"]["counters"]["bytes_out"], conns["client"]["counters"]["sends"],
          conns["server"]["counters"]["bytes_in"], conns["server"]["counters"]["recvs"])
    c.close(); a.close()
    s = stat(); print("after close", len(mine(s, "connections")),
                      len([r for r in s["records"] if r["server"].endswith(":%d" % port)]))
    ls.close()
    s = stat(); print("after listener close", len([l for l in mine(s, "listeners") if l["address"].endswith(":%d" % port)]))
''')


def test_records_come_and_go_with_sockets(shunt_build, tmp_path):
    script = tmp_path / "records.py"
    script.write_text(RECORDS)
    # the tool itself must not run under shunt: it reads the registry directly
    r = run([str(shunt_build / "shunt"), "run", "--", PYTHON, str(script), str(shunt_build / "shunt")],
            env=base_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["listeners 1", "connections 2 1", "counted 1 1 1 1", "after close 0 0",
                                        "after listener close 0"], r.stdout


def test_make_install(tmp_path):
    """`make install` puts shunt and libshunt.so under PREFIX, and the
    installed shunt finds the installed library."""
    dest = tmp_path / "root"
    r = run(["make", "-C", str(REPO), "install", "DESTDIR=%s" % dest, "PREFIX=/opt/shunt"], timeout=300)
    assert r.returncode == 0, r.stderr
    tool = dest / "opt/shunt/bin/shunt"
    lib = dest / "opt/shunt/lib/libshunt.so"
    assert tool.exists() and lib.exists()
    r = run([str(tool), "run", "--", "sh", "-c", "echo $LD_PRELOAD"])
    assert r.returncode == 0 and r.stdout.strip() == str(lib.resolve())
