"""`shunt stat` on running programs, and SHUNT_LOG tracing.

redis-server and sockperf, each with accelerated clients (under shunt) and
a plain client (without shunt, so that the server side falls back with the
reason no_offer): every connection shows with the right pid, fd (checked in
/proc), addresses, path and reason, and its counters move while traffic
flows.  Also: -p, --watch, --json, errors in one line, a corrupted fd
table, the tables of killed processes going away, holders after dup, fork
and SCM_RIGHTS, and the log at each level (the connection id in the log is
the one stat shows)."""
import json
import os
import re
import signal
import subprocess
import textwrap
import time

import pytest

from shunttest import PYTHON, base_env, need_tool, not_here, wait_port


need = need_tool     # a skip, or a failure under CI


def stat(shunt_build, *args, check=True):
    r = subprocess.run([str(shunt_build / "shunt"), "stat"] + list(args), capture_output=True, text=True,
                       timeout=30, env=base_env())
    if check:
        assert r.returncode == 0, r.stderr
    return r


def stat_json(shunt_build, *args):
    return json.loads(stat(shunt_build, "--json", *args).stdout)


def socket_inode(pid, fd):
    """The kernel's answer: which socket pid's fd holds (0 if none)."""
    try:
        m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink("/proc/%d/fd/%d" % (pid, fd)))
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def local_ports(pid):
    """Local ports of the TCP sockets pid holds, from /proc (no shunt involved)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        ino = socket_inode(pid, int(fd))
        if ino:
            inodes.add(ino)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[9]) in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def held_by(entry, pid):
    return [h["fd"] for h in entry["holders"] if h["pid"] == pid]


def check_holders(entry, only=None):
    """Every pid/fd stat names (of the pids in only, if given) really holds that socket."""
    for h in entry["holders"]:
        if only is None or h["pid"] in only:
            assert socket_inode(h["pid"], h["fd"]) == entry["id"], (h, entry)


def wait_for(fn, what, timeout=20):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < end, "timed out waiting for " + what
        time.sleep(0.1)


def shunt_env(tmp_path):
    return base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"))


def test_redis_connections(shunt, shunt_build, tmp_path, start_server, port):
    need("redis-server")
    need("redis-cli")
    need("redis-benchmark")
    env = shunt_env(tmp_path)
    srv = start_server(shunt.cmd(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--daemonize", "no"]), env=env, name="redis")
    wait_port(port, srv.proc)
    redis = srv.proc.pid   # shunt run execs the program: same pid
    # long-lived clients: subscribers stay connected; the benchmark keeps sending
    fast = start_server(shunt.cmd(["redis-cli", "-p", str(port), "subscribe", "accelerated"]), env=env, name="cli")
    plain = start_server(["redis-cli", "-p", str(port), "subscribe", "plain"], env=base_env(), name="plain")
    bench = start_server(shunt.cmd(["redis-benchmark", "-p", str(port), "-c", "1", "-n", "100000000", "-t", "ping",
                                    "-q"]), env=env, name="bench")

    def snapshot():
        s = stat_json(shunt_build)
        mine = [c for c in s["connections"] if held_by(c, fast.proc.pid)]
        bench_conns = [c for c in s["connections"] if held_by(c, bench.proc.pid) and c["path"] == "shm"]
        fallback = [c for c in s["connections"] if held_by(c, redis) and c["reason"] == "no_offer"]
        # the subscriber is settled once the reply to SUBSCRIBE came through the ring
        ready = mine and mine[0]["path"] == "shm" and mine[0]["counters"]["bytes_in"] > 0
        return (s, mine, bench_conns, fallback) if ready and bench_conns and fallback else None

    s, mine, bench_conns, fallback = wait_for(snapshot, "the redis clients in shunt stat")

    listener = [l for l in s["listeners"] if held_by(l, redis)]
    assert len(listener) == 1 and listener[0]["address"] == "127.0.0.1:%d" % port, s["listeners"]
    assert listener[0]["path"] == "shm" and listener[0]["registered"] and listener[0]["state"] == "listen"
    check_holders(listener[0])

    # the accelerated redis-cli: client side in its process, server side in redis
    (cli,) = mine
    check_holders(cli)
    assert cli["role"] == "client" and cli["peer"] == "127.0.0.1:%d" % port and cli["reason"] is None
    server_side = [c for c in s["connections"] if c["id"] == cli["peer_id"]]
    assert len(server_side) == 1, s
    (srv_side,) = server_side
    check_holders(srv_side)
    assert held_by(srv_side, redis) and srv_side["role"] == "server" and srv_side["path"] == "shm"
    assert srv_side["local"] == cli["peer"] and srv_side["peer"] == cli["local"]
    assert srv_side["state"] == "estab" and srv_side["counters"]["bytes_out"] == cli["counters"]["bytes_in"]

    # the plain redis-cli: only redis's side exists, on kernel TCP, and says why
    (fb,) = [c for c in fallback if int(c["peer"].rsplit(":", 1)[1]) in local_ports(plain.proc.pid)]
    check_holders(fb)
    assert fb["path"] == "tcp" and fb["role"] == "server" and fb["local"] == "127.0.0.1:%d" % port
    # on kernel TCP the counts are the kernel's: SUBSCRIBE came in, its reply went out
    assert fb["counters"]["source"] == "kernel" and fb["counters"]["bytes_in"] > 0, fb
    assert fb["counters"]["bytes_out"] > 0 and fb["state"] == "estab"
    assert not [c for c in s["connections"] if held_by(c, plain.proc.pid)]   # it does not run shunt

    # counters move while the benchmark runs
    conn = bench_conns[0]
    check_holders(conn)
    first = conn["counters"]

    def moved():
        now = [c for c in stat_json(shunt_build)["connections"] if c["id"] == conn["id"]]
        return now and now[0]["counters"]["sends"] > first["sends"] and \
            now[0]["counters"]["bytes_in"] > first["bytes_in"] and now[0]

    later = wait_for(moved, "the benchmark's counters to move")
    assert later["counters"]["bytes_out"] > first["bytes_out"]

    # -p: the sockets of one process, each with all its holders
    only = stat_json(shunt_build, "-p", str(fast.proc.pid))
    assert [c["id"] for c in only["connections"]] == [cli["id"]] and only["listeners"] == []
    text = stat(shunt_build, "-p", str(redis)).stdout
    assert "%d/" % redis in text and "tcp:no_offer" in text and "shm" in text, text
    only = stat_json(shunt_build, "-p", str(redis))
    assert only["connections"] and all(held_by(c, redis) for c in only["connections"])


SOCKPERF_WAIT = 20


def test_sockperf_connections(shunt, shunt_build, tmp_path, start_server, port):
    """sockperf's server serves one ping-pong client at a time: first one
    under shunt, then a plain one."""
    need("sockperf")
    env = shunt_env(tmp_path)
    srv = start_server(shunt.cmd(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)]), env=env,
                       name="sockperf-server")
    wait_port(port, srv.proc)
    server = srv.proc.pid
    pp = ["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-t", "60", "--mps", "2000"]
    fast = start_server(shunt.cmd(pp), env=env, name="pp-shunt")

    def accelerated():
        s = stat_json(shunt_build)
        cl = [c for c in s["connections"] if held_by(c, fast.proc.pid)]
        return (s, cl) if cl and cl[0]["path"] == "shm" and cl[0]["counters"]["sends"] > 0 else None

    s, (cl,) = wait_for(accelerated, "the sockperf client under shunt in shunt stat", SOCKPERF_WAIT)
    check_holders(cl)
    assert cl["role"] == "client" and cl["peer"] == "127.0.0.1:%d" % port and cl["reason"] is None
    (peer,) = [c for c in s["connections"] if c["id"] == cl["peer_id"]]
    check_holders(peer)
    assert held_by(peer, server) and peer["path"] == "shm" and peer["local"] == cl["peer"]
    assert peer["peer"] == cl["local"] and peer["role"] == "server"
    assert [l for l in s["listeners"] if held_by(l, server) and l["path"] == "shm"]

    def moved():
        now = [c for c in stat_json(shunt_build)["connections"] if c["id"] == cl["id"]]
        c = now and now[0]["counters"]
        return c and c["sends"] > cl["counters"]["sends"] and c["recvs"] > cl["counters"]["recvs"] and \
            c["bytes_out"] > cl["counters"]["bytes_out"]

    wait_for(moved, "sockperf's counters to move", SOCKPERF_WAIT)
    fast.stop()

    plain = start_server(pp, env=base_env(), name="pp-plain")

    def fallback():
        ports = local_ports(plain.proc.pid)
        fb = [c for c in stat_json(shunt_build)["connections"]
              if held_by(c, server) and int(c["peer"].rsplit(":", 1)[1]) in ports]
        return fb

    (f,) = wait_for(fallback, "the plain sockperf client in shunt stat", SOCKPERF_WAIT)
    check_holders(f)
    assert f["path"] == "tcp" and f["reason"] == "no_offer" and f["state"] == "estab" and f["role"] == "server"
    assert f["local"] == "127.0.0.1:%d" % port and f["counters"]["source"] == "kernel"

    def kernel_moved():
        now = [c for c in stat_json(shunt_build)["connections"] if c["id"] == f["id"]]
        c = now and now[0]["counters"]
        return c and c["bytes_in"] > f["counters"]["bytes_in"] and c["bytes_out"] > f["counters"]["bytes_out"]

    wait_for(kernel_moved, "the kernel's counters of the plain connection to move", SOCKPERF_WAIT)


HOLDER = textwrap.dedent('''
    import os, socket, sys, time
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(4)
    c = socket.create_connection(ls.getsockname()); a, _ = ls.accept()
    c.sendall(b"x"); a.recv(1)
    print(ls.getsockname()[1], c.fileno(), a.fileno(), flush=True)
    time.sleep(60)
''')


def test_watch_json_and_count(shunt, shunt_build, tmp_path, start_server):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen(shunt.cmd([PYTHON, str(script)]), env=base_env(), stdout=subprocess.PIPE, text=True)
    try:
        port, cfd, afd = map(int, holder.stdout.readline().split())
        r = stat(shunt_build, "--watch", "0.2", "--count", "3")
        assert r.stdout.count("--- ") == 3 and r.stdout.count("LISTENERS") == 3, r.stdout
        r = stat(shunt_build, "--watch", "0.1", "--count", "2", "--json", "-p", str(holder.pid))
        docs = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(docs) == 2
        for d in docs:
            fds = sorted(h["fd"] for c in d["connections"] for h in c["holders"] if h["pid"] == holder.pid)
            assert fds == sorted([cfd, afd]), d
            assert d["listeners"][0]["address"] == "127.0.0.1:%d" % port
        # without a count it runs until interrupted (SIGINT as a terminal sends it: a runner
        # started in the background of a shell hands its children SIGINT ignored)
        w = subprocess.Popen([str(shunt_build / "shunt"), "stat", "--watch", "0.1"], stdout=subprocess.PIPE,
                             text=True, env=base_env(),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            seen = 0
            while seen < 3:
                line = w.stdout.readline()
                assert line, "stat --watch stopped by itself"
                seen += line.startswith("--- ")
        finally:
            w.send_signal(signal.SIGINT)
            w.wait(timeout=10)
            w.stdout.close()
    finally:
        holder.kill()
        holder.wait()


def test_errors_are_one_line(shunt_build):
    r = stat(shunt_build, "--frobnicate", check=False)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "unknown option" in r.stderr
    r = stat(shunt_build, "-p", "notapid", check=False)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "process id" in r.stderr
    r = stat(shunt_build, "-p", "999999999", check=False)
    assert r.returncode == 1 and r.stderr == "shunt stat: no process 999999999\n"
    # a network namespace where nothing ran under shunt has no registry
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        not_here("cannot make a network namespace (unshare -n: %s)"
                 % probe.stderr.decode(errors="replace").strip())
    # A new namespace may get the inode of one deleted a moment ago (the netns
    # tests make dozens), whose registry the sweep keeps for a minute: that
    # file is no process's (its namespace is gone), so it goes first.
    stale = 'rm -f /dev/shm/shunt-$(id -u)-$(readlink /proc/self/ns/net | tr -dc 0-9)-r*.reg; '
    r = subprocess.run(["unshare", "-n", "sh", "-c", stale + "exec %s stat" % (shunt_build / "shunt")],
                       capture_output=True, text=True, timeout=30, env=base_env())
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "no shunt registry" in r.stderr and r.stdout == ""
    # a registry file of another version (or anything else under that name)
    # (the file's name comes from shunt itself: it names it when there is none)
    script = (stale + 'f=$(%s stat 2>&1 | sed -n "s/.*no shunt registry (\\(.*\\)):.*/\\1/p"); '
              'case "$f" in /dev/shm/shunt-*.reg) ;; *) echo "no name: $f" >&2; exit 3;; esac; '
              'printf junk > $f; chmod 600 $f; %s stat; rc=$?; rm -f $f; exit $rc'
              % (shunt_build / "shunt", shunt_build / "shunt"))
    r = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=30,
                       env=base_env())
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "another version of shunt" in r.stderr, r.stderr


def table_of(pid):
    for name in os.listdir("/dev/shm"):
        if re.fullmatch(r"shunt-%d-\d+-p\d+-%d-[0-9a-f]+\.fds" % (os.geteuid(), pid), name):
            return "/dev/shm/" + name
    return None


def test_corrupted_table_and_dead_process(shunt, shunt_build, tmp_path):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    procs = [subprocess.Popen(shunt.cmd([PYTHON, str(script)]), env=base_env(), stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        for p in procs:
            p.stdout.readline()
        victim, killed = procs
        # scribble over every record of one table: stat must neither crash nor believe it
        path = table_of(victim.pid)
        assert path, os.listdir("/dev/shm")
        size = os.path.getsize(path)
        rnd = bytearray(os.urandom(size - 128))
        for off in range(0, len(rnd), 128):
            rnd[off:off + 4] = (2).to_bytes(4, "little")   # a settled sequence: the reader takes it
        with open(path, "r+b") as f:
            f.seek(128)
            f.write(rnd)
        s = stat_json(shunt_build)
        # what stat says of this test's two processes (another test's process
        # exiting meanwhile would make its own records stale, by design)
        ours = {victim.pid, killed.pid}
        for c in s["connections"] + s["listeners"]:
            check_holders(c, only=ours)
        # a truncated table is no better
        os.truncate(path, 64)
        s = stat_json(shunt_build)
        assert not [c for c in s["connections"] if held_by(c, victim.pid)]
        # a killed process: its sockets leave stat, its table leaves /dev/shm
        assert table_of(killed.pid)
        assert [c for c in stat_json(shunt_build)["connections"] if held_by(c, killed.pid)]
        killed.kill()
        killed.wait()
        s = stat_json(shunt_build)
        assert not [c for c in s["connections"] if held_by(c, killed.pid)]
        assert table_of(killed.pid) is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


TRACED = textwrap.dedent('''
    import json, os, socket, subprocess, sys
    shunt, out = sys.argv[1], sys.argv[2]
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
    c = socket.create_connection(ls.getsockname()); a, _ = ls.accept()
    c.sendall(b"ping"); assert a.recv(4) == b"ping"
    env = dict(os.environ); env.pop("LD_PRELOAD", None)
    s = subprocess.run([shunt, "stat", "--json", "-p", str(os.getpid())], capture_output=True, text=True, env=env)
    open(out, "w").write(json.dumps({"client_fd": c.fileno(), "server_fd": a.fileno(), "stat": json.loads(s.stdout)}))
    c.close(); a.close()
''')


@pytest.mark.parametrize("level", ["off", "info", "debug", "trace"])
def test_tracing_levels(shunt, shunt_build, tmp_path, level):
    script = tmp_path / "traced.py"
    script.write_text(TRACED)
    out = tmp_path / "stat.json"
    logs = tmp_path / "logs"
    logs.mkdir()
    env = base_env(SHUNT_LOG=level, SHUNT_LOG_FILE=str(logs / "log-%p.txt"))
    r = subprocess.run(shunt.cmd([PYTHON, str(script), str(shunt_build / "shunt"), str(out)]), env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""   # a log file was named: nothing on the program's stderr
    text = "".join(p.read_text() for p in logs.iterdir())
    if level == "off":
        assert text == "" and not list(logs.iterdir())
        return
    got = json.loads(out.read_text())
    ids = {}
    for c in got["stat"]["connections"]:
        ids[c["role"]] = (c["id"], [h["fd"] for h in c["holders"]])
    cid, cfds = ids["client"]
    sid, sfds = ids["server"]
    assert cfds == [got["client_fd"]] and sfds == [got["server_fd"]]
    pid = got["stat"]["connections"][0]["holders"][0]["pid"]
    # info: outcomes, with pid, fd and the connection id stat shows
    assert "shunt[%d] info: fd %d sock %d: accelerated (client" % (pid, got["client_fd"], cid) in text, text
    assert "shunt[%d] info: fd %d sock %d: accelerated (server" % (pid, got["server_fd"], sid) in text, text
    assert re.search(r"info: fd \d+ sock \d+: accelerated listener on port \d+", text), text
    debug = re.findall(r"^shunt\[\d+\] debug: .*$", text, re.M)
    trace = re.findall(r"^shunt\[\d+\] trace: .*$", text, re.M)
    if level == "info":
        assert not debug and not trace, text
        return
    # debug: the negotiation, step by step, and state changes
    assert "debug: fd %d sock %d: offered channel" % (got["client_fd"], cid) in text, text
    assert "debug: fd %d sock %d: offer from pid %d" % (got["server_fd"], sid, pid) in text, text
    assert "debug: fd %d sock %d: offer verified" % (got["server_fd"], sid) in text, text
    assert "debug: fd %d sock %d: closed (fin)" % (got["client_fd"], cid) in text, text
    if level == "debug":
        assert not trace, text
        return
    # trace: every record written for shunt stat
    assert "trace: fd %d sock %d: stat: connection client offered (recorded)" % (got["client_fd"], cid) in text
    assert "trace: fd %d sock %d: stat: connection client shm (recorded)" % (got["client_fd"], cid) in text
    assert "trace: fd %d sock %d: stat: connection server shm (recorded)" % (got["server_fd"], sid) in text


FALLBACK_CLIENT = textwrap.dedent('''
    import json, os, socket, subprocess, sys
    shunt, port = sys.argv[1], int(sys.argv[2])
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"hi")
    env = dict(os.environ); env.pop("LD_PRELOAD", None)
    s = subprocess.run([shunt, "stat", "--json", "-p", str(os.getpid())], capture_output=True, text=True, env=env)
    print(json.dumps({"fd": c.fileno(), "pid": os.getpid(), "stat": json.loads(s.stdout)}))
''')


def test_client_fallback_reason(shunt, shunt_build, tmp_path, port):
    """A client under shunt talking to a server that is not: the client's
    side shows on kernel TCP with the reason no_listener."""
    import socket
    script = tmp_path / "client.py"
    script.write_text(FALLBACK_CLIENT)
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", port))
        ls.listen(1)
        r = subprocess.run(shunt.cmd([PYTHON, str(script), str(shunt_build / "shunt"), str(port)]), env=base_env(),
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    (c,) = got["stat"]["connections"]
    assert c["holders"] == [{"pid": got["pid"], "fd": got["fd"]}]
    assert c["path"] == "tcp" and c["reason"] == "no_listener" and c["role"] == "client"
    assert c["peer"] == "127.0.0.1:%d" % port and c["state"] == "estab"


HOLDERS = textwrap.dedent('''
    import array, json, os, socket, subprocess, sys, time
    shunt = sys.argv[1]
    env = dict(os.environ); env.pop("LD_PRELOAD", None)
    def stat():
        return json.loads(subprocess.run([shunt, "stat", "--json"], capture_output=True, text=True, env=env).stdout)
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(4)
    c = socket.create_connection(ls.getsockname()); a, _ = ls.accept()
    c.sendall(b"x"); a.recv(1)
    d = os.dup(c.fileno())
    u1, u2 = socket.socketpair()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        msg, anc, flags, addr = u2.recvmsg(1, socket.CMSG_LEN(4))
        fd = array.array("i", anc[0][2][:4])[0]
        s = socket.socket(fileno=fd)
        s.sendall(b"y")
        os.read(r, 1)
        os._exit(0)
    u1.sendmsg([b"f"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))])
    got = c.recv(1)
    server_fd = a.fileno()
    a.close()
    s = stat()
    print(json.dumps({"parent": os.getpid(), "child": child, "c": c.fileno(), "d": d, "l": ls.fileno(),
                      "server_fd": server_fd, "got": got.decode(), "stat": s}))
    os.write(w, b"x")
    os.waitpid(child, 0)
''')


@pytest.mark.parametrize("path", ["shm", "tcp"])
def test_holders_after_dup_fork_and_scm_rights(shunt, shunt_build, tmp_path, path):
    """One socket, several holders: dup in one process, fork, and an fd
    received with SCM_RIGHTS (and the sender's copy closed).  Also for a
    connection on kernel TCP (SHUNT_ACCEL=0), whose record carries no id
    until a second fd needs one: stat finds its sockets through /proc."""
    script = tmp_path / "holders.py"
    script.write_text(HOLDERS)
    env = base_env(**({"SHUNT_ACCEL": "0"} if path == "tcp" else {}))
    r = subprocess.run(shunt.cmd([PYTHON, str(script), str(shunt_build / "shunt")]), env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    parent, child, s = got["parent"], got["child"], got["stat"]
    assert got["got"] == "y"
    mine = {c["role"]: c for c in s["connections"] if held_by(c, parent) or held_by(c, child)}
    holders = lambda e: sorted((h["pid"], h["fd"]) for h in e["holders"])
    # the client: fd and its dup, in the parent and in the forked child
    assert holders(mine["client"]) == sorted([(parent, got["c"]), (parent, got["d"]), (child, got["c"]),
                                              (child, got["d"])]), mine["client"]
    # the server side: the parent closed its copy after passing it; the child holds the one
    # it inherited at fork and the one it received
    srv = holders(mine["server"])
    assert [p for p, fd in srv] == [child, child] and (child, got["server_fd"]) in srv, mine["server"]
    assert mine["server"]["path"] == path and mine["client"]["path"] == path
    if path == "shm":
        assert mine["server"]["counters"]["bytes_out"] == 1
    else:
        assert mine["server"]["reason"] == mine["client"]["reason"] == "disabled"
    (listener,) = [l for l in s["listeners"] if held_by(l, parent)]
    assert holders(listener) == sorted([(parent, got["l"]), (child, got["l"])])


def test_kernel_tcp_connection_costs_no_fstat(shunt_build):
    """A connection that stays on kernel TCP (most short ones) is recorded
    for `shunt stat` without its socket's inode, which `shunt stat` reads
    from /proc: the library no longer asks fstat on every connect and
    accept (two calls a connection over both ends, 0.36 µs each here;
    docs/benchmarks.md, "Short connections").  Counted with strace over
    pingpong's connect/accept/close loop: what is left is the start, the
    fork and the first four connections, not a call per connection."""
    need("strace", package="strace")
    n = 600
    out = shunt_build / "strace.out"
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn")
    r = subprocess.run(["strace", "-f", "-c", "-e", "trace=fstat,newfstatat,statx", "-o", str(out),
                        str(shunt_build / "bench" / "pingpong"), "-t", "tcp", "-m", "cc", "-n", str(n), "-d", "60"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"^cc connections=(\d+) ", r.stdout, re.M)
    assert m and int(m.group(1)) == n, r.stdout
    m = re.search(r"^result transport=tcp libshunt=yes accel_parent=(\d+) accel_child=(\d+)$", r.stdout, re.M)
    assert m, r.stdout
    assert int(m.group(1)) < n // 4, "most connections should be kernel TCP (SHUNT_SHORT_CONNS): %s" % r.stdout
    calls = 0
    for line in out.read_text().splitlines():
        f = line.split()
        if f and f[-1] in ("fstat", "newfstatat", "statx"):
            calls += int(f[3])   # % time, seconds, usecs/call, calls[, errors], syscall
    # before: 2 a connection (1,330 for 600); now about 120, whatever n is
    assert calls < n // 2, "%d stat calls for %d connections:\n%s" % (calls, n, out.read_text())


KEPT_OBJECT_PEER = textwrap.dedent(r"""
    # One process under shunt: a client to a server without shunt, and a
    # server for a client without shunt (the other process).  Prints, per
    # connection: what shunt keeps for the fd ("object" counter), its
    # fallback key, and the bytes exchanged both ways.
    import ctypes, os, socket, sys
    lib = ctypes.CDLL(None)
    lib.shunt_fd_counter.restype = ctypes.c_longlong
    lib.shunt_fd_fallback.restype = ctypes.c_char_p
    def show(name, fd):
        key = lib.shunt_fd_fallback(fd)
        print(name, lib.shunt_fd_counter(fd, b"object"), key.decode() if key is not None else None, flush=True)
    plain_port, = (int(a) for a in sys.argv[1:])
    # client: connect to the plain server, which echoes
    c = socket.create_connection(("127.0.0.1", plain_port))
    show("client", c.fileno())
    d = os.dup(c.fileno())            # a dup of a connection kept without an object
    show("client_dup", d)
    c.sendall(b"ping" * 1000)
    got = b""
    while len(got) < 4000:
        got += c.recv(65536)
    print("client_echo", got == b"ping" * 1000, flush=True)
    os.close(d)
    c.close()
    # server: a listener under shunt; the plain process connects and sends
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    print("port", ls.getsockname()[1], flush=True)
    a, _ = ls.accept()
    show("server", a.fileno())
    want = b"pong" * 1000
    got = b""
    while len(got) < len(want):
        got += a.recv(65536)
    a.sendall(got[::-1])
    a.shutdown(socket.SHUT_WR)
    print("server_echo", got == want, a.recv(1) == b"", flush=True)
    a.close()
""")


def test_kernel_tcp_connection_keeps_no_object(shunt_build):
    """A connection that is kernel TCP for good gets no socket object in the
    library's fd table: an accepted one whose client offered nothing (no
    offer posted anywhere), a client's once its connect settled on kernel
    TCP.  Making and freeing that object was a fifth of what a short
    connection cost the library (docs/benchmarks.md, "Short connections").
    The connections behave as the kernel's (bytes both ways, a dup, a
    shutdown, EOF) and keep their fallback reason for `shunt stat`; an
    accelerated connection keeps its object."""
    import socket as pysocket
    plain = pysocket.socket()
    plain.bind(("127.0.0.1", 0))
    plain.listen(4)
    plain_port = plain.getsockname()[1]
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn")
    p = subprocess.Popen([PYTHON, "-c", KEPT_OBJECT_PEER, str(plain_port)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        plain.settimeout(30)
        conn, _ = plain.accept()
        data = b""
        while len(data) < 4000:
            data += conn.recv(65536)
        conn.sendall(data)
        conn.close()
        lines = {}
        while "port" not in lines:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            k, *v = line.split()
            lines[k] = v
        out = pysocket.create_connection(("127.0.0.1", int(lines["port"][0])), timeout=30)
        out.sendall(b"pong" * 1000)
        back = b""
        while True:
            b = out.recv(65536)
            if not b:
                break
            back += b
        assert back == (b"pong" * 1000)[::-1]
        out.close()
        rest, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        for line in rest.splitlines():
            k, *v = line.split()
            lines[k] = v
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        plain.close()
    assert lines["client"] == ["0", "no_listener"], lines
    assert lines["client_dup"] == ["0", "no_listener"], lines
    assert lines["client_echo"] == ["True"], lines
    assert lines["server"] == ["0", "no_offer"], lines
    assert lines["server_echo"] == ["True", "True"], lines


def test_accelerated_connection_keeps_its_object(shunt_build):
    """The other side of test_kernel_tcp_connection_keeps_no_object: both
    ends under shunt, every connection offered (SHUNT_SHORT_CONNS=0), so
    accelerated: both ends keep their objects (the "object" counter is not
    a constant)."""
    code = textwrap.dedent(r"""
        import ctypes, socket
        lib = ctypes.CDLL(None)
        lib.shunt_fd_counter.restype = ctypes.c_longlong
        ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
        c = socket.create_connection(ls.getsockname())
        a, _ = ls.accept()
        c.sendall(b"x"); assert a.recv(1) == b"x"
        print(lib.shunt_fd_accelerated(c.fileno()), lib.shunt_fd_accelerated(a.fileno()),
              lib.shunt_fd_counter(c.fileno(), b"object"), lib.shunt_fd_counter(a.fileno(), b"object"),
              lib.shunt_fd_counter(ls.fileno(), b"object"))
    """)
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn", SHUNT_SHORT_CONNS="0")
    r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1", "1", "1", "1"], r.stdout


def test_new_socket_object_made_at_first_need(shunt_build):
    """A TCP socket the program makes gets its object only when something
    needs one (fdtable.h, LAZY): not at socket(), not for O_NONBLOCK or
    TCP_NODELAY set before connect (kept in the table's entry), not for a
    bind; a connect that stays kernel TCP never makes it.  What was kept
    reaches the object when it is made: an accelerated connection answers
    TCP_NODELAY as the program set it and keeps O_NONBLOCK (a recv with
    nothing there says EAGAIN).  A duplicate made behind shunt's back (the
    raw system call) before the first use shares the one object."""
    code = textwrap.dedent(r"""
        import ctypes, errno, os, socket
        lib = ctypes.CDLL(None, use_errno=True)
        lib.shunt_fd_counter.restype = ctypes.c_longlong
        obj = lambda s: lib.shunt_fd_counter(s if isinstance(s, int) else s.fileno(), b"object")
        ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(4)
        port = ls.getsockname()[1]
        out = []
        c = socket.socket()
        out.append(obj(c))                                        # 0: new
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.setblocking(False)
        c.bind(("127.0.0.1", 0))
        out.append(obj(c))                                        # 0: still new
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        a, _ = ls.accept()
        out.append(lib.shunt_fd_accelerated(c.fileno()) if obj(c) else -1)
        c.setblocking(True)
        c.sendall(b"x"); assert a.recv(1) == b"x"
        out.append(lib.shunt_fd_accelerated(c.fileno()))         # 1: accelerated, an object
        out.append(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0)   # the program's value
        c.setblocking(False)
        try:
            c.recv(1); out.append("no EAGAIN")
        except BlockingIOError:
            out.append("EAGAIN")
        # a duplicate behind shunt's back, before the first use
        d = socket.socket()
        raw = lib.syscall(32, d.fileno())                         # SYS_dup on x86_64
        assert raw >= 0, ctypes.get_errno()
        lib.shunt_fd_accelerated(raw)                             # its first use: probed
        out.append(obj(raw))                                      # shares d's object, made now
        out.append(obj(d))
        d.connect(("127.0.0.1", port))
        b, _ = ls.accept()
        d.sendall(b"y"); assert b.recv(1) == b"y"
        b.sendall(b"z")
        out.append(lib.shunt_fd_accelerated(raw))
        out.append(os.read(raw, 1).decode())                      # the byte, through the ring
        print(*out)
    """)
    need_x86 = os.uname().machine == "x86_64"
    if not need_x86:
        pytest.skip("the raw dup's system call number is x86_64's")
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn", SHUNT_SHORT_CONNS="0")
    r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0", "1", "1", "True", "EAGAIN", "1", "1", "1", "z"], r.stdout


def test_short_destination_sampled_after_seconds(shunt_build):
    """A destination judged short is sampled again after at most ten
    seconds however few connections were made meanwhile (short_conns.c,
    SAMPLE_SECONDS), and otherwise after a count that grows to 16384: a
    slow client whose connections turn long finds out within seconds,
    a fast one pays for few samples.  Four short connections, one more on
    kernel TCP (reason short), eleven seconds, then a sample: kernel TCP
    too, its calls counted, and long (20 exchanges), so the one after it is
    accelerated (before, the count alone decided: the connection after the
    eleven seconds was not a sample, and the next one was on TCP as well)."""
    code = textwrap.dedent(r"""
        import ctypes, socket, time
        lib = ctypes.CDLL(None)
        lib.shunt_fd_fallback.restype = ctypes.c_char_p
        ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
        def one(exchanges=1):
            c = socket.create_connection(ls.getsockname())
            a, _ = ls.accept()
            for _ in range(exchanges):
                c.sendall(b"q"); assert a.recv(1) == b"q"
                a.sendall(b"r"); assert c.recv(1) == b"r"
            acc = lib.shunt_fd_accelerated(c.fileno())
            key = lib.shunt_fd_fallback(c.fileno())
            c.close(); a.close()
            return "%d:%s" % (acc, key.decode() if key else "-")
        out = [one() for _ in range(5)]
        time.sleep(11)
        out.append(one(20))
        out.append(one())
        print(*out)
    """)
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn")
    r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = r.stdout.split()
    assert [g.split(":")[0] for g in got] == ["1", "1", "1", "1", "0", "0", "1"], got
    assert got[4] == "0:short" and got[5] == "0:short", got
