"""Sockets changing hands between processes, with real programs: a Python
server that hands accepted connections to worker processes (multiprocessing
passes them with SCM_RIGHTS), and socat in fork mode (a child per
connection).  Both ends run under shunt; the connections must stay
accelerated and carry every byte."""
import subprocess
import textwrap

from shunttest import PYTHON, base_env, need_tool, nginx_conf, wait_port


def logs(tmp_path):
    return "".join(p.read_text(errors="replace") for p in tmp_path.glob("shunt-*.log"))


def env_for(tmp_path, **extra):
    return base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), **extra)


WORKERS = textwrap.dedent('''
    import multiprocessing as mp, os, socket, sys
    from multiprocessing import reduction

    def worker(conn):
        while True:
            fd = reduction.recv_handle(conn)
            if fd < 0:
                return
            s = socket.socket(fileno=fd)
            data = bytearray()
            while chunk := s.recv(65536):
                data += chunk
            s.sendall(b"%d %d " % (os.getpid(), len(data)) + bytes(data[:100]))
            s.close()

    if __name__ == "__main__":
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)
        parent, child = mp.Pipe()
        w = mp.Process(target=worker, args=(child,))
        w.start()
        print("PORT", ls.getsockname()[1], flush=True)
        for _ in range(int(sys.argv[1])):
            c, _ = ls.accept()
            reduction.send_handle(parent, c.fileno(), w.pid)
            c.close()            # the worker holds it now
        w.join(timeout=30)
''')

CLIENT = textwrap.dedent('''
    import socket, sys
    port, n = int(sys.argv[1]), int(sys.argv[2])
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        payload = bytes((i + k) % 256 for k in range(300_000))
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := c.recv(65536):
            reply += chunk
        assert reply.split(b" ", 2)[1] == b"300000", reply[:40]
        assert reply.split(b" ", 2)[2] == payload[:100]
        c.close()
    print("OK", flush=True)
''')


def test_python_passes_sockets_to_a_worker(shunt, tmp_path, start_server):
    (tmp_path / "server.py").write_text(WORKERS)
    (tmp_path / "client.py").write_text(CLIENT)
    env = env_for(tmp_path)
    srv = start_server(shunt.cmd([PYTHON, str(tmp_path / "server.py"), "3"]), env=env, name="workers")
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    r = subprocess.run(shunt.cmd([PYTHON, str(tmp_path / "client.py"), str(port), "3"]), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "OK", (r.stdout, r.stderr)
    log = logs(tmp_path)
    assert log.count("accelerated (server") == 3 and log.count("accelerated (client") == 3, log[-3000:]
    assert log.count("attached inherited connection") >= 3, log[-3000:]   # in the worker


def test_socat_fork_mode(shunt, tmp_path, start_server, port):
    need_tool("socat")
    env = env_for(tmp_path)
    srv = start_server(shunt.cmd(["socat", "TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr" % port,
                                  "EXEC:cat"]), env=env, name="socat")
    wait_port(port, srv.proc)
    client = textwrap.dedent('''
        import socket, sys
        for i in range(4):
            c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
            payload = bytes((i * 7 + k) % 256 for k in range(200_000))
            c.sendall(payload)
            c.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := c.recv(65536):
                got += chunk
            assert got == payload, (i, len(got))
            c.close()
        print("OK", flush=True)
    ''')
    (tmp_path / "client.py").write_text(client)
    r = subprocess.run(shunt.cmd([PYTHON, str(tmp_path / "client.py"), str(port)]), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "OK", (r.stdout, r.stderr)
    log = logs(tmp_path)
    assert log.count("accelerated (client") >= 4, log[-3000:]
    assert log.count("accelerated (server") >= 4, log[-3000:]   # one forked child per connection




def test_nginx_daemon_mode(shunt, tmp_path, port):
    """nginx daemonises (the process we start forks a master and exits), the
    master forks two workers that wait in epoll: the very first request is
    already accelerated."""
    need_tool("nginx", package="nginx-light")
    need_tool("curl")
    import os, signal, time
    (tmp_path / "www").mkdir()
    body = os.urandom(500_000)
    (tmp_path / "www" / "f.bin").write_bytes(body)
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_conf(tmp_path, port, daemon=True))
    env = env_for(tmp_path)
    r = subprocess.run(shunt.cmd(["nginx", "-c", str(conf), "-p", str(tmp_path)]), env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    pidfile = tmp_path / "nginx.pid"
    try:
        end = time.monotonic() + 20
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < end, "nginx wrote no pid file"
            time.sleep(0.05)
        # wait until a worker has put the listener into its epoll set (and so
        # registered it): the daemon's first process, which opened it, is gone
        import json
        end = time.monotonic() + 20
        while True:
            st = json.loads(subprocess.run([str(shunt.bin), "stat", "--json"], capture_output=True,
                                           text=True, timeout=30, env=base_env()).stdout)
            if any(l["address"].endswith(":%d" % port) and l["registered"] for l in st["listeners"]):
                break
            assert time.monotonic() < end, "no nginx worker registered the listener"
            time.sleep(0.05)
        for i in range(3):
            out = tmp_path / ("got%d" % i)
            c = subprocess.run(shunt.cmd(["curl", "-sS", "--fail", "--retry", "5", "--retry-connrefused",
                                          "-o", str(out), "http://127.0.0.1:%d/f.bin" % port]),
                               env=env, capture_output=True, text=True, timeout=60)
            assert c.returncode == 0, c.stderr
            assert out.read_bytes() == body
        log = logs(tmp_path)
        assert log.count("accelerated (client") == 3, log[-3000:]
        assert log.count("accelerated (server") == 3, log[-3000:]
        assert "no accelerated listener" not in log, log[-3000:]
    finally:
        if pidfile.exists() and pidfile.read_text().strip():
            master = int(pidfile.read_text())
            os.kill(master, signal.SIGTERM)
            end = time.monotonic() + 20
            while time.monotonic() < end:
                try:
                    os.kill(master, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
