"""Real event-driven servers and their own clients, both ends under shunt:
redis-server with redis-benchmark (every default test) and redis-cli; nginx
(a master and two workers) serving a static file and a proxied one to curl
and to wrk; memcached with memcaslap (libmemcached's load client, verifying
what it reads); Python asyncio; Node.js net.  Each test checks the replies
and that the connections really were accelerated (the shunt log of every
process names them), and that plain-TCP clients are served at the same
time."""
import os
import re
import shutil
import socket
import subprocess

from shunttest import PYTHON, base_env, need_tool, nginx_conf, wait_port


need = need_tool     # a skip, or a failure under CI


def logs_text(tmp_path):
    return "".join(p.read_text(errors="replace") for p in tmp_path.glob("shunt-*.log"))


def shunt_env(tmp_path, **extra):
    return base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), **extra)


REDIS_DEFAULT_TESTS = ("PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPUSH", "LPOP", "RPOP", "SADD",
                       "HSET", "SPOP", "ZADD", "ZPOPMIN", "LPUSH (needed to benchmark LRANGE)",
                       "LRANGE_100 (first 100 elements)", "LRANGE_300 (first 300 elements)",
                       "LRANGE_500 (first 500 elements)", "LRANGE_600 (first 600 elements)", "MSET (10 keys)")


def test_redis(shunt, tmp_path, start_server, port):
    need("redis-server")
    need("redis-benchmark")
    env = shunt_env(tmp_path)
    srv = start_server(shunt.cmd(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--daemonize", "no"]), env=env, name="redis")
    wait_port(port, srv.proc)
    # every default test; -n requests each, so the counters below are exact
    r = subprocess.run(shunt.cmd(["redis-benchmark", "-p", str(port), "-n", "1000", "-c", "10", "-q"]),
                       env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    out = r.stdout.replace("\r", "\n")
    for test in REDIS_DEFAULT_TESTS:
        assert re.search(r"^%s: [0-9.]+ requests per second" % re.escape(test), out, re.M), (test, out)
    def cli(*a, stdin=None):
        return subprocess.run(shunt.cmd(["redis-cli", "-p", str(port)] + list(a)), env=env, input=stdin,
                              capture_output=True, text=True, timeout=30)
    assert cli("set", "shunt:key", "a value with spaces").stdout.strip() == "OK"
    assert cli("get", "shunt:key").stdout.strip() == "a value with spaces"
    # what the benchmark's commands did: 1000 INCRs; 1000 LPUSH + 1000 RPUSH - 1000 LPOP - 1000 RPOP
    # + 1000 LPUSH for LRANGE; 1000 HSETs of one field
    assert cli("get", "counter:__rand_int__").stdout.strip() == "1000"
    assert cli("llen", "mylist").stdout.strip() == "1000"
    assert cli("hlen", "myhash").stdout.strip() == "1"
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
    # every connection offered a channel: downloads this size (300 KB, 2 MB), one a
    # connection, are short by the short-connection rule and go kernel TCP after four
    # (docs/benchmarks.md, "Downloads"); here they are the paths under test
    env = shunt_env(tmp_path, SHUNT_SHORT_CONNS="0")
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
    if shutil.which("wrk"):
        # wrk: 4 connections on 2 threads for a second, a small file; every answer a 200
        (www / "small.html").write_text("<p>shunt</p>\n" * 20)
        before = logs_text(tmp_path).count("accelerated (client")
        r = subprocess.run(shunt.cmd(["wrk", "-t2", "-c4", "-d1s", "http://127.0.0.1:%d/small.html" % port]),
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert re.search(r"\d+ requests in", r.stdout), r.stdout
        assert "Non-2xx" not in r.stdout and "Socket errors" not in r.stdout, r.stdout
        assert logs_text(tmp_path).count("accelerated (client") >= before + 4


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


def test_memcached(shunt, tmp_path, start_server, port):
    need("memcached")
    need("memcaslap")
    env = shunt_env(tmp_path)
    # -u root: memcached refuses to run as root without it; switching to another user would make its
    # connections with our clients cross users, which shunt never accelerates
    user = ["-u", "root"] if os.getuid() == 0 else []
    srv = start_server(shunt.cmd(["memcached"] + user + ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2"]),
                       env=env, name="memcached")
    wait_port(port, srv.proc)
    # 20000 gets and sets from 8 connections; a fifth of the gets verified against what was set
    r = subprocess.run(shunt.cmd(["memcaslap", "-s", "127.0.0.1:%d" % port, "-x", "20000", "-T", "2", "-c", "8",
                                  "--verify=0.2"]), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    stats = dict(re.findall(r"^(\w+): (\d+)$", r.stdout, re.M))
    assert int(stats["cmd_get"]) + int(stats["cmd_set"]) == 20000, r.stdout
    assert stats["verify_failed"] == "0" and stats["get_misses"] == "0", r.stdout
    # a value written by one client and read back by another (accelerated), and by a plain one
    value = tmp_path / "value"
    value.write_bytes(os.urandom(100_000))
    r = subprocess.run(shunt.cmd(["memccp", "--servers=127.0.0.1:%d" % port, str(value)]), env=env,
                       capture_output=True, timeout=30, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    for e in (env, base_env()):
        r = subprocess.run(shunt.cmd(["memccat", "--servers=127.0.0.1:%d" % port, "value"]) if e is env else
                           ["memccat", "--servers=127.0.0.1:%d" % port, "value"],
                           env=e, capture_output=True, timeout=30)
        assert r.returncode == 0 and r.stdout == value.read_bytes() + b"\n"   # memccat ends with a newline
    log = logs_text(tmp_path)
    assert log.count("accelerated (server") >= 10 and log.count("accelerated (client") >= 10, log[-2000:]
    assert "kernel TCP: client does not run shunt" in log   # the plain memccat


NODE_SERVER = """
const net = require('net');
const srv = net.createServer((sock) => {
  sock.on('data', (d) => sock.write(d));
  sock.on('end', () => sock.end());
});
srv.listen(0, '127.0.0.1', () => console.log('PORT', srv.address().port));
"""

NODE_CLIENT = """
const net = require('net');
const port = parseInt(process.argv[2]);
function bulk(i) {   // 100 KB and more each way, written in odd pieces, read back whole
  return new Promise((resolve, reject) => {
    const n = 100000 + i * 4099;
    const payload = Buffer.alloc(n);
    for (let k = 0; k < n; k++) payload[k] = (i * 31 + k) % 251;
    const got = [];
    // end() only once the server answered: a client that shuts down before the server has
    // accepted stays on kernel TCP (shunt withdraws its offer; docs/compatibility.md)
    const c = net.connect(port, '127.0.0.1', () => {
      for (let off = 0; off < n; off += 7919) c.write(payload.subarray(off, Math.min(n, off + 7919)));
    });
    c.on('data', (d) => { if (got.length === 0) c.end(); got.push(d); });
    c.on('end', () => resolve(Buffer.concat(got).equals(payload)));
    c.on('error', reject);
  });
}
function pingpong() {   // 2000 request-response rounds of one line
  return new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1');
    c.setNoDelay(true);
    let left = 2000, buf = '';
    c.on('connect', () => c.write('ping ' + left + '\\n'));
    c.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\\n')) >= 0) {
        if (buf.slice(0, nl) !== 'ping ' + left) { resolve(false); c.destroy(); return; }
        buf = buf.slice(nl + 1);
        if (--left === 0) { c.end(); resolve(true); return; }
        c.write('ping ' + left + '\\n');
      }
    });
    c.on('error', reject);
  });
}
(async () => {
  const ok = (await Promise.all([...Array(8).keys()].map(bulk))).every(Boolean) && await pingpong();
  console.log(ok ? 'OK' : 'MISMATCH');
})();
"""


def test_nodejs(shunt, tmp_path, start_server):
    need("node")
    (tmp_path / "server.js").write_text(NODE_SERVER)
    (tmp_path / "client.js").write_text(NODE_CLIENT)
    env = shunt_env(tmp_path)
    srv = start_server(shunt.cmd(["node", str(tmp_path / "server.js")]), env=env, name="node-server")
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    for e in (env, base_env()):   # accelerated, then a plain client at the same server
        cmd = ["node", str(tmp_path / "client.js"), str(port)]
        r = subprocess.run(shunt.cmd(cmd) if e is env else cmd, env=e, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "OK", (r.stdout, r.stderr)
    log = logs_text(tmp_path)
    assert log.count("accelerated (server") >= 9 and log.count("accelerated (client") >= 9, log[-2000:]
    assert "kernel TCP: client does not run shunt" in log
