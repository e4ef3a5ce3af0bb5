"""Nothing of a connection outlives the processes that hold it: its segment
in /dev/shm and its registry record go when the last holder closes, exits
(exit, _exit, abort), or is killed while its peer goes on; when every
process of a connection is killed at once, the next process to use the
registry sweeps them away.  /dev/shm is shared with other users of this
machine: the tests count only the segments named after their own pids,
while the connection lives (one) and after (none)."""
import os
import pytest
import re
import signal
import subprocess
import textwrap
import time

from shunttest import PYTHON, base_env

SCRIPT = textwrap.dedent('''
    import os, re, resource, signal, socket, sys, time
    mode = sys.argv[1]
    def segments(pid):
        return [n for n in os.listdir("/dev/shm") if re.fullmatch(r"shunt-\\d+-\\d+-c\\d+-%d-\\d+-[0-9a-f]+" % pid, n)]
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
    port = ls.getsockname()[1]
    r, w = os.pipe()
    child = os.fork()
    if child == 0:                      # the client
        ls.close(); os.close(r)
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        c.sendall(b"x" * 1000)
        assert c.recv(1000)
        os.write(w, b"%d\\n" % os.getpid())
        if mode == "client-exits":
            os._exit(0)                 # no close, no exit handlers
        if mode == "client-exit":
            sys.exit(0)                 # exit handlers run; the socket is not closed first
        if mode == "client-abort":
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.abort()
        time.sleep(60)                  # killed by the test
        os._exit(1)
    os.close(w)
    s, _ = ls.accept(); ls.close()
    got = b""
    while len(got) < 1000:
        got += s.recv(1000)
    s.sendall(b"y")
    os.read(r, 100)
    print("CLIENT", child, flush=True)
    print("SEGMENTS", len(segments(child)), flush=True)
    if mode in ("client-exits", "client-exit"):
        os.waitpid(child, 0)
        assert s.recv(10) == b""        # EOF from the dead client
        s.close()
        print("DONE", flush=True)
    elif mode in ("client-killed", "client-abort"):
        if mode == "client-killed":
            os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        try:
            s.recv(10)
        except ConnectionResetError:
            pass
        s.close()
        print("DONE", flush=True)
    elif mode == "both-killed":
        print("SERVER", os.getpid(), flush=True)
        time.sleep(60)
''')


def shm_named(pattern, pids):
    """The files of /dev/shm whose name matches pattern, with one of pids
    as the pattern's first group."""
    found = []
    for name in os.listdir("/dev/shm"):
        m = re.fullmatch(pattern, name)
        if m and int(m.group(1)) in pids:
            found.append(name)
    return found


def segments_of(pids):
    # a segment, and the files beside it (wake FIFOs, a handed-back prefix)
    return shm_named(r"shunt-\d+-\d+-c\d+-(\d+)-\d+-[0-9a-f]+(-(w0|w1|b)-[0-9a-f]+)?", pids)


def records_of(shunt_build, pids, env):
    import json
    r = subprocess.run([str(shunt_build / "shunt"), "stat", "--json"], capture_output=True, text=True,
                       timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    return [c for c in s["records"] if c["client_pid"] in pids or c["server_pid"] in pids]


def run_mode(shunt, tmp_path, mode):
    script = tmp_path / "pair.py"
    script.write_text(SCRIPT)
    env = base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"))
    p = subprocess.Popen(shunt.cmd([PYTHON, str(script), mode]), env=env, stdout=subprocess.PIPE, text=True)
    pids = {p.pid}
    try:
        line = p.stdout.readline()
        assert line.startswith("CLIENT"), line
        pids.add(int(line.split()[1]))
        line = p.stdout.readline()
        assert line.split() == ["SEGMENTS", "1"], line   # the connection's, while it lives
        if mode == "both-killed":
            assert p.stdout.readline().startswith("SERVER")
            for pid in sorted(pids, reverse=True):
                os.kill(pid, signal.SIGKILL)
            p.wait(timeout=30)
            try:
                os.waitpid(max(pids), os.WNOHANG)
            except ChildProcessError:
                pass
        else:
            assert p.stdout.readline().strip() == "DONE"
            p.wait(timeout=30)
            assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    log = "".join(x.read_text() for x in tmp_path.glob("shunt-*.log"))
    assert "accelerated (server" in log and "accelerated (client" in log, log
    return pids, env


@pytest.mark.parametrize("mode", ["client-exits", "client-exit", "client-abort", "client-killed"])
def test_client_ends_without_closing(shunt, shunt_build, tmp_path, mode):
    """_exit, exit, abort, SIGKILL of the client while the server goes on."""
    pids, env = run_mode(shunt, tmp_path, mode)
    assert segments_of(pids) == []
    assert records_of(shunt_build, pids, env) == []


def test_both_killed_then_swept(shunt, shunt_build, tmp_path):
    pids, env = run_mode(shunt, tmp_path, "both-killed")
    time.sleep(0.2)
    # `shunt stat` opens the registry, which sweeps what dead processes left
    assert records_of(shunt_build, pids, env) == []
    assert segments_of(pids) == []


# A forking server: a child per connection, which echoes and then ends by
# _exit (no destructor runs) or is killed.  Each child has its own fd table
# for `shunt stat` (/dev/shm/shunt-<uid>-<netns>-p<version>-<pid>-<random>.fds).
FORKING_SERVER = textwrap.dedent('''
    import os, signal, socket, sys
    mode, count = sys.argv[1], int(sys.argv[2])
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
    print("PORT", ls.getsockname()[1], flush=True)
    children = []
    for _ in range(count):
        s, _ = ls.accept()
        child = os.fork()
        if child == 0:
            ls.close()
            s.sendall(s.recv(100))
            if mode == "_exit":
                os._exit(0)             # the socket still open, no exit handlers
            os.kill(os.getpid(), signal.SIGKILL)
        s.close()
        os.waitpid(child, 0)
        children.append(child)
    print("CHILDREN", *children, flush=True)
    sys.stdin.readline()                # the test counts the tables meanwhile
''')

# One client process: it opens the registry once, at its first connect, so
# its sweep (the first open's) runs before any child has ended.
FORKING_CLIENT = textwrap.dedent('''
    import socket, sys
    port, count = int(sys.argv[1]), int(sys.argv[2])
    for i in range(count):
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        c.sendall(b"hello %d" % i)
        assert c.recv(100) == b"hello %d" % i
        c.close()
    print("DONE", flush=True)
''')


TABLE_NAME = r"shunt-\d+-\d+-p\d+-(\d+)-[0-9a-f]+\.fds"


def tables_of(pids, before=frozenset()):
    """The fd tables of pids, but for those named in before: the tables
    that were there before the test began are other processes', whose pid
    ours may have got again (the kernel's pids wrap; a table's name has 64
    random bits, so a table made since never has an earlier one's name)."""
    return [n for n in shm_named(TABLE_NAME, pids) if n not in before]


def describe_tables(names):
    """What a leftover table says of itself, for a failure's message: when
    it was made, and whether its pid is a process now (and which)."""
    out = []
    for n in names:
        pid = int(re.fullmatch(TABLE_NAME, n).group(1))
        try:
            st = os.stat("/dev/shm/" + n)
            made = "made %.2f s ago" % (time.time() - st.st_mtime)
        except OSError as e:
            made = str(e)
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                now = "pid %d is %r" % (pid, f.read().replace(b"\0", b" ")[:80])
        except OSError:
            now = "pid %d is no process" % pid
        out.append("%s: %s, %s" % (n, made, now))
    return "\n".join(out)


@pytest.mark.parametrize("mode", ["_exit", "killed"])
def test_forking_server_children_leave_no_table(shunt, shunt_build, tmp_path, mode):
    """20 connections to a forking server whose children end by _exit (or
    are killed): their fd tables go with them (_exit), or are swept as the
    next children start (killed: at most a few are left at any time), not
    only when some process next opens the registry."""
    count = 20
    (tmp_path / "server.py").write_text(FORKING_SERVER)
    (tmp_path / "client.py").write_text(FORKING_CLIENT)
    # 20 connections of a few bytes each to one server, every one to be
    # accelerated: without SHUNT_SHORT_CONNS=0 the later ones would be kernel
    # TCP by design (reason short)
    env = base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), SHUNT_SHORT_CONNS="0")
    before = frozenset(shm_named(TABLE_NAME, range(1 << 22)))
    server = subprocess.Popen(shunt.cmd([PYTHON, str(tmp_path / "server.py"), mode, str(count)]), env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("PORT"), line
        client = subprocess.run(shunt.cmd([PYTHON, str(tmp_path / "client.py"), line.split()[1], str(count)]),
                                env=env, capture_output=True, text=True, timeout=60)
        assert client.stdout.strip() == "DONE", client.stderr
        line = server.stdout.readline()
        assert line.startswith("CHILDREN"), line
        children = {int(x) for x in line.split()[1:]}
        assert len(children) == count
        left = tables_of(children, before)
        if mode == "_exit":
            assert left == [], describe_tables(left)
        else:
            assert len(left) <= 2, describe_tables(left)   # the last child's, swept when the next one starts
        server.stdin.write("\n")
        server.stdin.flush()
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    log = "".join(x.read_text() for x in tmp_path.glob("shunt-*.log"))
    assert log.count("accelerated (server") == count, log
    # whatever is left goes with the next process to open the registry
    records_of(shunt_build, children | {server.pid}, env)
    left = tables_of(children | {server.pid}, before)
    assert left == [], describe_tables(left)


# A network namespace that goes (issue 16, finding 6): its processes were
# killed mid-connection, and its registry (3 MiB), segments and fd tables
# stayed in /dev/shm for good.  Everything runs in a mount namespace of its
# own with a tmpfs on /dev/shm, so the sweep it provokes touches nothing of
# anybody else's on this machine.
NAMESPACE_GONE = textwrap.dedent(r'''
    import os, re, signal, subprocess, sys, time
    shunt, py, pair = sys.argv[1], sys.argv[2], sys.argv[3]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777,size=256m", "shunt-netns-gone", "/dev/shm"], check=True)
    def ls():
        return sorted(os.listdir("/dev/shm"))
    # a namespace whose two processes are killed while their connection runs
    doomed = subprocess.Popen(["unshare", "-n", "sh", "-c",
                               'ip link set lo up && readlink /proc/self/ns/net && exec "$@"', "sh",
                               shunt, "run", "--", py, pair, "both-killed"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    ns = re.search(r"net:\[(\d+)\]", doomed.stdout.readline()).group(1)
    client = int(doomed.stdout.readline().split()[1])
    assert doomed.stdout.readline().startswith("SEGMENTS")
    assert doomed.stdout.readline().startswith("SERVER")
    for pid in (client, doomed.pid):
        os.kill(pid, signal.SIGKILL)
    doomed.wait(timeout=30)
    left = [n for n in ls() if "-%s-" % ns in n]
    print("LEFT", len(left), " ".join(left), flush=True)
    # older than the sweep's grace
    old = time.time() - 3600
    for n in ls():
        os.utime("/dev/shm/" + n, (old, old), follow_symlinks=False)
    # the first process of another namespace that opens its registry sweeps
    subprocess.run(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", shunt, "run", "--", py,
                    "-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()"],
                   check=True, timeout=60)
    print("AFTER", " ".join(n for n in ls() if "-%s-" % ns in n), flush=True)
''')


def test_namespace_gone_is_swept(shunt_build, tmp_path):
    if os.geteuid() != 0 or subprocess.run(["unshare", "--mount", "--net", "true"], capture_output=True,
                                           timeout=10).returncode != 0:
        pytest.skip("needs root and namespaces")
    pair = tmp_path / "pair.py"
    pair.write_text(SCRIPT)
    driver = tmp_path / "netns_gone.py"
    driver.write_text(NAMESPACE_GONE)
    env = {k: v for k, v in base_env().items() if not k.startswith("SHUNT_")}   # `shunt run` refuses SHUNT_BUILD
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", PYTHON, str(driver),
                        str(shunt_build / "shunt"), PYTHON, str(pair)],
                       capture_output=True, text=True, timeout=120, env=env, start_new_session=True)
    assert r.returncode == 0, r.stdout + r.stderr
    left = [l for l in r.stdout.splitlines() if l.startswith("LEFT")][0].split()
    # what the killed processes left: the registry and the segment at least
    assert int(left[1]) >= 2 and any(n.endswith(".reg") for n in left[2:]), left
    after = [l for l in r.stdout.splitlines() if l.startswith("AFTER")][0].split()[1:]
    assert after == [], "left in /dev/shm by a namespace that is gone: %s" % after
