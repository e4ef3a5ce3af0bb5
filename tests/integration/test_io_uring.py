"""Programs that use io_uring, server and client under shunt on 127.0.0.1
(issue 17, item 3): libuv's way, through uvloop (asyncio on libuv) and
through Node.js.

The libuv that uvloop bundles (and Node.js's own, with UV_USE_IO_URING=1)
sets up an io_uring at loop start through libc's syscall() and adds sockets
to its epoll set through it (IORING_OP_EPOLL_CTL), so shunt never saw them
join the set: before the fail-safe for io_uring the client's first bytes sat
in the ring and the server never woke (the client timed out).  Now a
process that sets up an io_uring moves its connections back to kernel TCP
and accelerates no new one (src/core/process/uring_failsafe.c): every echo
must come back byte for byte (sha256), from one connection and from several
at once, the server must still run, and the shunt log of each process must
name io_uring as the reason (SHUNT_STRICT=1: a fallback that should not
happen fails the call instead).

scripts/install-deps installs uvloop from PyPI and Node.js from Debian;
without them the tests are skipped, except under CI, where they fail."""
import importlib.util
import subprocess

from shunttest import PYTHON, base_env, missing, need_tool

URING_SEEN = "io_uring in this process (io_uring_setup through syscall())"

UVLOOP_SERVER = """
import asyncio, uvloop

async def echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()

uvloop.run(main())
"""

UVLOOP_CLIENT = """
import asyncio, hashlib, sys, uvloop

def payload(i, n):
    return bytes((i * 131 + k * 7) % 251 for k in range(n))

async def exchange(port, i, sizes):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    ok = True
    for n in sizes:
        data = payload(i, n)
        writer.write(data)
        await writer.drain()
        back = await asyncio.wait_for(reader.readexactly(n), 30)
        ok = ok and hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    writer.close()
    await writer.wait_closed()
    return ok

async def main(port):
    sizes = (64, 1, 4096, 65537, 300000, 1 << 20)
    ok = await exchange(port, 0, sizes)
    ok = ok and all(await asyncio.gather(*(exchange(port, i, sizes[:4]) for i in range(1, 9))))
    print("OK" if ok else "MISMATCH", flush=True)

uvloop.run(main(int(sys.argv[1])))
"""

NODE_SERVER = """
const net = require('net');
const server = net.createServer((c) => c.pipe(c));
server.listen(0, '127.0.0.1', () => console.log('PORT ' + server.address().port));
"""

NODE_CLIENT = """
const net = require('net');
const crypto = require('crypto');
const port = +process.argv[2];
function echo(i, n) {
  return new Promise((resolve, reject) => {
    const data = Buffer.alloc(n);
    for (let k = 0; k < n; k++) data[k] = (i * 131 + k * 7) % 251;
    const got = [];
    let len = 0;
    const c = net.connect(port, '127.0.0.1', () => c.write(data));
    c.on('data', (d) => {
      got.push(d);
      len += d.length;
      if (len >= n) {
        const back = Buffer.concat(got);
        const h = (b) => crypto.createHash('sha256').update(b).digest('hex');
        c.end();
        resolve(len === n && h(back) === h(data));
      }
    });
    c.on('error', reject);
  });
}
setTimeout(() => { console.log('TIMEOUT'); process.exit(1); }, 60000).unref();
(async () => {
  let ok = await echo(0, 64) && await echo(0, 1 << 20);
  ok = ok && (await Promise.all([...Array(8).keys()].map((i) => echo(i + 1, 65537)))).every(Boolean);
  console.log(ok ? 'OK' : 'MISMATCH');
})();
"""


def echo_both_under_shunt(shunt, tmp_path, start_server, server, client, name, **settings):
    """Runs the server and the client under shunt with SHUNT_STRICT=1; the
    client must print OK; returns the shunt log of each process."""
    env = base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), SHUNT_STRICT="1", **settings)
    srv = start_server(shunt.cmd(server), env=env, name=name)
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    r = subprocess.run(shunt.cmd(client + [str(port)]), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "OK", \
        ("client status %s, server status %s (None: running)" % (r.returncode, srv.proc.poll()), r.stdout,
         r.stderr[-3000:])
    assert srv.proc.poll() is None, "the server died (status %s)" % srv.proc.returncode
    return {p.name: p.read_text(errors="replace") for p in tmp_path.glob("shunt-*.log")}


def assert_moved_to_kernel_tcp(logs):
    """Both processes set up a ring through syscall(), so each recorded why
    nothing was accelerated, and no connection was."""
    log = "".join(logs.values())
    uring = [name for name, text in logs.items() if URING_SEEN in text]
    assert len(uring) >= 2, ("this libuv made no io_uring_setup through syscall() in both processes: "
                             "the test no longer covers it", log[-3000:])
    assert "accelerated (" not in log, log[-3000:]
    fallbacks = [line for line in log.splitlines() if "kernel TCP:" in line]
    assert fallbacks and all("io_uring in this process" in line for line in fallbacks), log[-3000:]


def test_uvloop_echo(shunt, tmp_path, start_server):
    if importlib.util.find_spec("uvloop") is None:
        missing("Python module uvloop is not installed for %s (scripts/install-deps installs it from PyPI)" % PYTHON)
    (tmp_path / "server.py").write_text(UVLOOP_SERVER)
    (tmp_path / "client.py").write_text(UVLOOP_CLIENT)
    logs = echo_both_under_shunt(shunt, tmp_path, start_server, [PYTHON, tmp_path / "server.py"],
                                 [PYTHON, tmp_path / "client.py"], "uvloop-server")
    assert_moved_to_kernel_tcp(logs)


def test_nodejs_io_uring(shunt, tmp_path, start_server):
    """Node.js's libuv uses io_uring only when asked (UV_USE_IO_URING=1);
    without it Node.js is accelerated (test_real_servers.py)."""
    need_tool("node", package="nodejs")
    (tmp_path / "server.js").write_text(NODE_SERVER)
    (tmp_path / "client.js").write_text(NODE_CLIENT)
    logs = echo_both_under_shunt(shunt, tmp_path, start_server, ["node", tmp_path / "server.js"],
                                 ["node", tmp_path / "client.js"], "node-server", UV_USE_IO_URING="1")
    assert_moved_to_kernel_tcp(logs)
