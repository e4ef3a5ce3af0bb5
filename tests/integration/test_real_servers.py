"""Real servers and their own clients, both ends under shunt: redis-server
with redis-benchmark and redis-cli, and nginx (a master and two workers)
serving a static file and a proxied one to curl.  Each test checks the
replies and that the connections really were accelerated (the shunt log of
every process names them), and that plain-TCP clients are served at the
same time."""
import os
import re
import shutil
import socket
import subprocess

import pytest

from shunttest import PYTHON, base_env, nginx_conf, wait_port


def need(tool):
    if not shutil.which(tool):
        pytest.skip("%s is not installed (scripts/install-deps installs it)" % tool)


def logs_text(tmp_path):
    return "".join(p.read_text(errors="replace") for p in tmp_path.glob("shunt-*.log"))


def shunt_env(tmp_path, **extra):
    return base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), **extra)


def test_redis(shunt, tmp_path, start_server, port):
    need("redis-server")
    need("redis-benchmark")
    env = shunt_env(tmp_path)
    srv = start_server(shunt.cmd(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--daemonize", "no"]), env=env, name="redis")
    wait_port(port, srv.proc)
    r = subprocess.run(shunt.cmd(["redis-benchmark", "-p", str(port), "-n", "2000", "-c", "10", "-q",
                                  "-t", "set,get,incr,lpush,lpop,sadd,hset,mset"]),
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for test in ("SET", "GET", "INCR", "LPUSH", "LPOP", "SADD", "HSET", "MSET"):
        assert re.search(r"^\s*%s\b[^\n]*: [0-9.]+ requests per second" % test, r.stdout, re.M), r.stdout
    def cli(*a, stdin=None):
        return subprocess.run(shunt.cmd(["redis-cli", "-p", str(port)] + list(a)), env=env, input=stdin,
                              capture_output=True, text=True, timeout=30)
    assert cli("set", "shunt:key", "a value with spaces").stdout.strip() == "OK"
    assert cli("get", "shunt:key").stdout.strip() == "a value with spaces"
    big = "".join(chr(97 + (i * 7) % 26) for i in range(3_000_000))
    assert cli("-x", "set", "shunt:big", stdin=big).stdout.strip() == "OK"   # -x: the value from stdin
    assert cli("strlen", "shunt:big").stdout.strip() == str(len(big))
    assert cli("get", "shunt:big").stdout.rstrip("\n") == big
    # a plain client at the same time as accelerated ones
    plain = subprocess.run(["redis-cli", "-p", str(port), "get", "shunt:key"], env=base_env(),
                           capture_output=True, text=True, timeout=30)
    assert plain.stdout.strip() == "a value with spaces"
    log = logs_text(tmp_path)
    assert log.count("accelerated (server") >= 10, log[-2000:]
    assert log.count("accelerated (client") >= 10, log[-2000:]
    assert "kernel TCP: client does not run shunt" in log   # the plain redis-cli




def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nginx(shunt, tmp_path, start_server, port):
    need("nginx")
    need("curl")
    www = tmp_path / "www"
    www.mkdir()
    static = os.urandom(2_000_000)
    (www / "static.bin").write_bytes(static)
    backend_dir = tmp_path / "backend"
    backend_dir.mkdir()
    proxied = os.urandom(300_000)
    (backend_dir / "file.bin").write_bytes(proxied)
    backend = free_port()
    env = shunt_env(tmp_path)
    be = start_server(shunt.cmd([PYTHON, "-m", "http.server", str(backend), "--bind", "127.0.0.1"]),
                      env=env, cwd=str(backend_dir), name="backend")
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_conf(tmp_path, port, daemon=False,
                               locations="location /proxied/ { proxy_pass http://127.0.0.1:%d/; }" % backend))
    ng = start_server(shunt.cmd(["nginx", "-c", str(conf), "-p", str(tmp_path)]), env=env, name="nginx")
    for p, s in ((backend, be), (port, ng)):
        wait_port(p, s.proc)
    for i in range(3):
        for path, want in (("/static.bin", static), ("/proxied/file.bin", proxied)):
            out = tmp_path / "got"
            r = subprocess.run(shunt.cmd(["curl", "-sS", "--fail", "-o", str(out),
                                          "http://127.0.0.1:%d%s" % (port, path)]),
                               env=env, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert out.read_bytes() == want, path
    # a plain curl is served too, over kernel TCP
    r = subprocess.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/static.bin" % port],
                       env=base_env(), capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == static
    log = logs_text(tmp_path)
    # curl -> nginx, and nginx -> the backend for the proxied file
    assert log.count("accelerated (server") >= 9, log[-3000:]
    assert log.count("accelerated (client") >= 9, log[-3000:]


ASYNC_SERVER = """
import asyncio, sys
async def echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
async def main():
    srv = await asyncio.start_server(echo, "127.0.0.1", 0)
    print("PORT", srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
"""

ASYNC_CLIENT = """
import asyncio, hashlib, sys
async def one(port, i, n):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = bytes((i * 31 + k) % 251 for k in range(n))
    async def send():
        for off in range(0, n, 7919):
            writer.write(payload[off:off + 7919])
            await writer.drain()
        writer.write_eof()
    task = asyncio.create_task(send())
    got = bytearray()
    while chunk := await reader.read(65536):
        got += chunk
    await task
    writer.close()
    return bytes(got) == payload
async def main(port):
    results = await asyncio.gather(*(one(port, i, 200_000 + i * 1000) for i in range(8)))
    print("OK" if all(results) else "MISMATCH %s" % results, flush=True)
asyncio.run(main(int(sys.argv[1])))
"""


def test_python_asyncio(shunt, tmp_path, start_server):
    (tmp_path / "server.py").write_text(ASYNC_SERVER)
    (tmp_path / "client.py").write_text(ASYNC_CLIENT)
    env = shunt_env(tmp_path)
    srv = start_server(shunt.cmd([PYTHON, str(tmp_path / "server.py")]), env=env, name="asyncio-server")
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    r = subprocess.run(shunt.cmd([PYTHON, str(tmp_path / "client.py"), str(port)]), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "OK", (r.stdout, r.stderr)
    log = logs_text(tmp_path)
    assert log.count("accelerated (server") >= 8 and log.count("accelerated (client") >= 8, log[-2000:]
