"""The corpus (corpus.py): Python event loops and servers from PyPI
(scripts/install-deps installs them with pip for the python3 on PATH), a
server and its client from the same library, both under shunt.  gRPC
(grpcio) is in test_grpc.py."""
import re

import pytest

from corpus import registry, run_program, sha256

PROGRAMS, program = registry()

MB = 1 << 20

# Shared by the scripts below: a payload made from a seed, so that client
# and server agree on it without sending it twice.  The echo clients send a
# first piece and wait for its echo before they stream the rest and shut
# down: a client that sends more than the socket buffers hold before the
# server accepted, or shuts down before then, stays on kernel TCP by design
# (fallback reasons `claim did not settle`, `client shut down before the
# claim`; docs/compatibility.md), which a busy server makes likely.
PAYLOAD = r"""
import hashlib, os, random
FIRST = 65536
DEADLINE = float(os.environ.get("CORPUS_DEADLINE", "60"))   # seconds the client allows itself
def payload(i, n):
    return random.Random(i).randbytes(n)
def digest(b):
    return hashlib.sha256(b).hexdigest()
def first_round(c, want):
    c.sendall(want[:FIRST])
    got, n = [], 0
    while n < FIRST:
        b = c.recv(FIRST - n)
        if not b:
            raise SystemExit("EOF in the first round")
        got.append(b)
        n += len(b)
    return got
"""


def script(cx, name, body):
    return cx.write(name, PAYLOAD + body)


def serve_script(cx, name, body, *args, env=None):
    """Run a server script that prints `PORT n` once it listens; returns the port."""
    path = script(cx, name, body)
    srv = cx.serve([cx.python, path] + list(args), name, env=env)
    return int(srv.wait_for(r"^PORT (\d+)$").group(1))


def client_script(cx, name, body, *args, env=None, timeout=120):
    path = script(cx, name, body)
    r = cx.run([cx.python, path] + [str(a) for a in args], env=env, timeout=timeout)
    out = r.stdout.decode()
    assert out.strip().splitlines()[-1:] == ["OK"], (out, r.stderr.decode()[-3000:])
    return out


# ---------------------------------------------------------------- Twisted

TWISTED_SERVER = r"""
from twisted.internet import epollreactor
epollreactor.install()
from twisted.internet import reactor, protocol
from twisted.internet.interfaces import IHalfCloseableProtocol
from zope.interface import implementer

@implementer(IHalfCloseableProtocol)
class Echo(protocol.Protocol):
    def dataReceived(self, data):
        self.transport.write(data)
    def readConnectionLost(self):
        self.transport.loseConnection()     # after what was written is sent
    def writeConnectionLost(self):
        pass

f = protocol.ServerFactory()
f.protocol = Echo
port = reactor.listenTCP(0, f, interface="127.0.0.1")
print("PORT", port.getHost().port, flush=True)
reactor.run()
"""

TWISTED_CLIENT = r"""
import sys
from twisted.internet import epollreactor
epollreactor.install()
from twisted.internet import reactor, protocol, defer

port, conns, size = int(sys.argv[1]), 6, 2 << 20
results = []

class Client(protocol.Protocol):
    def connectionMade(self):
        self.want = payload(self.factory.i, size + self.factory.i)
        self.got, self.n = [], 0
        self.transport.write(self.want[:FIRST])
    def dataReceived(self, data):
        first = self.n < FIRST
        self.got.append(data)
        self.n += len(data)
        if first and self.n >= FIRST:
            for off in range(FIRST, len(self.want), 100003):      # the rest, in odd pieces
                self.transport.write(self.want[off:off + 100003])
            self.transport.loseWriteConnection()
    def connectionLost(self, reason):
        self.factory.done.callback(b"".join(self.got) == self.want)

def one(i):
    f = protocol.ClientFactory()
    f.protocol, f.i, f.done = Client, i, defer.Deferred()
    reactor.connectTCP("127.0.0.1", port, f)
    return f.done

d = defer.gatherResults([one(i) for i in range(conns)])
d.addCallback(lambda r: results.extend(r))
d.addBoth(lambda _: reactor.stop())
reactor.callLater(DEADLINE, reactor.stop)
reactor.run()
print("OK" if len(results) == conns and all(results) else "MISMATCH %r" % results, flush=True)
"""


@program("Twisted", source="PyPI Twisted", model="Twisted's epoll reactor, one thread",
         how="a Protocol echo server with half-close (IHalfCloseableProtocol) and a client of 6 connections of "
             "2 MiB written in pieces, loseWriteConnection, every byte compared",
         modules=[("twisted", "Twisted")])
def twisted(cx):
    port = serve_script(cx, "twisted_server.py", TWISTED_SERVER)
    client_script(cx, "twisted_client.py", TWISTED_CLIENT, port)
    cx.accelerated(6)


# ----------------------------------------------------------------- gevent

GEVENT_SERVER = r"""
from gevent.server import StreamServer
import gevent
def echo(sock, addr):
    while True:
        b = sock.recv(65536)
        if not b:
            break
        sock.sendall(b)
    sock.close()
s = StreamServer(("127.0.0.1", 0), echo)
s.start()
print("LOOP", type(gevent.get_hub().loop).__module__, flush=True)
print("PORT", s.server_port, flush=True)
s.serve_forever()
"""

GEVENT_CLIENT = r"""
import sys
import gevent
from gevent import socket
port, conns, size = int(sys.argv[1]), 6, 2 << 20
def one(i):
    want = payload(i, size + i)
    c = socket.create_connection(("127.0.0.1", port))
    got = first_round(c, want)
    def send():
        for off in range(FIRST, len(want), 65537):
            c.sendall(want[off:off + 65537])
        c.shutdown(socket.SHUT_WR)
    g = gevent.spawn(send)
    while True:
        b = c.recv(65536)
        if not b:
            break
        got.append(b)
    g.join()
    c.close()
    return b"".join(got) == want
jobs = [gevent.spawn(one, i) for i in range(conns)]
gevent.joinall(jobs, timeout=DEADLINE)
print("LOOP", type(gevent.get_hub().loop).__module__, flush=True)
print("OK" if all(j.value for j in jobs) else "MISMATCH", flush=True)
"""


def on_kernel_tcp_for_io_uring(cx, n):
    """libuv with io_uring (uvloop, gevent on libuv): a process that uses
    io_uring moves its connections back to kernel TCP and accelerates none
    (issue 17, items 3 and 5; docs/architecture.md, "io_uring"); before that,
    the server never woke for the client's bytes."""
    cx.fell_back("io_uring in this process", count=n)


def gevent_echo(cx, loop, module, deadline=60):
    env = cx.env(GEVENT_LOOP=loop, CORPUS_DEADLINE=deadline)
    path = script(cx, "gevent_server.py", GEVENT_SERVER)
    srv = cx.serve([cx.python, path], "gevent-server", env=env)
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    assert module in srv.wait_for(r"^LOOP (\S+)$").group(1)
    out = client_script(cx, "gevent_client.py", GEVENT_CLIENT, port, env=env)
    assert module in re.search(r"^LOOP (\S+)$", out, re.M).group(1), out
    if module == "libuv":
        on_kernel_tcp_for_io_uring(cx, 6)
    else:
        cx.accelerated(6)


@program("gevent (libev)", source="PyPI gevent", model="greenlets on libev (gevent's default loop, libev-cext)",
         how="StreamServer echo and 6 greenlet clients of 2 MiB (a sender greenlet each, shutdown, read to EOF), "
             "every byte compared; both report the libev loop",
         modules=[("gevent", "gevent")])
def gevent_libev(cx):
    gevent_echo(cx, "libev-cext", "libev")


@program("gevent (libuv)", source="PyPI gevent", model="greenlets on libuv (GEVENT_LOOP=libuv-cffi; gevent's bundled "
         "libuv 1.51 adds sockets to its epoll set through io_uring)",
         how="as gevent (libev), on gevent's libuv loop; every byte compared, then the reason",
         expect="fallback: io_uring in this process: its I/O bypasses shunt",
         modules=[("gevent", "gevent")])
def gevent_libuv(cx):
    gevent_echo(cx, "libuv-cffi", "libuv", deadline=20)   # a second; a hang (as before io_uring was seen) fails


# ---------------------------------------------------------------- eventlet

EVENTLET_SERVER = r"""
import eventlet
def echo(sock):
    while True:
        b = sock.recv(65536)
        if not b:
            break
        sock.sendall(b)
    sock.close()
s = eventlet.listen(("127.0.0.1", 0))
print("HUB", type(eventlet.hubs.get_hub()).__module__, flush=True)
print("PORT", s.getsockname()[1], flush=True)
pool = eventlet.GreenPool()
while True:
    c, _ = s.accept()
    pool.spawn_n(echo, c)
"""

EVENTLET_CLIENT = r"""
import sys
import eventlet
from eventlet.green import socket
port, conns, size = int(sys.argv[1]), 6, 2 << 20
def one(i):
    want = payload(i, size + i)
    c = eventlet.connect(("127.0.0.1", port))
    got = first_round(c, want)
    def send():
        for off in range(FIRST, len(want), 65537):
            c.sendall(want[off:off + 65537])
        c.shutdown(socket.SHUT_WR)
    g = eventlet.spawn(send)
    while True:
        b = c.recv(65536)
        if not b:
            break
        got.append(b)
    g.wait()
    c.close()
    return b"".join(got) == want
pool = eventlet.GreenPool()
ok = all(pool.imap(one, range(conns)))
print("OK" if ok else "MISMATCH", flush=True)
"""


@program("eventlet", source="PyPI eventlet", model="green threads on eventlet's epoll hub",
         how="eventlet.listen with a GreenPool echo, 6 green clients of 2 MiB (sender and reader), every byte compared",
         modules=[("eventlet", "eventlet")])
def eventlet(cx):
    port = serve_script(cx, "eventlet_server.py", EVENTLET_SERVER)
    client_script(cx, "eventlet_client.py", EVENTLET_CLIENT, port)
    cx.accelerated(6)


# ------------------------------------------------------------------- trio

TRIO_SERVER = r"""
import functools, trio
async def echo(stream):
    async for data in stream:
        await stream.send_all(data)
    await stream.aclose()
async def main():
    async with trio.open_nursery() as n:
        listeners = await n.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
        print("PORT", listeners[0].socket.getsockname()[1], flush=True)
trio.run(main)
"""

TRIO_CLIENT = r"""
import sys, trio
port, conns, size = int(sys.argv[1]), 6, 2 << 20
results = {}
async def one(i):
    want = payload(i, size + i)
    s = await trio.open_tcp_stream("127.0.0.1", port)
    await s.send_all(want[:FIRST])
    got, n = [], 0
    while n < FIRST:
        b = await s.receive_some(FIRST - n)
        got.append(b)
        n += len(b)
    async def send():
        for off in range(FIRST, len(want), 65537):
            await s.send_all(want[off:off + 65537])
        await s.send_eof()
    async with trio.open_nursery() as n:
        n.start_soon(send)
        async for b in s:
            got.append(b)
    await s.aclose()
    results[i] = b"".join(got) == want
async def main():
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as n:
            for i in range(conns):
                n.start_soon(one, i)
trio.run(main)
print("OK" if len(results) == conns and all(results.values()) else "MISMATCH %r" % results, flush=True)
"""


@program("trio", source="PyPI trio", model="trio's own epoll loop, structured concurrency",
         how="serve_tcp echo, 6 streams of 2 MiB with send_eof, every byte compared",
         modules=[("trio", "trio")])
def trio(cx):
    port = serve_script(cx, "trio_server.py", TRIO_SERVER)
    client_script(cx, "trio_client.py", TRIO_CLIENT, port)
    cx.accelerated(6)


# ----------------------------------------------------------------- uvloop

UVLOOP_SERVER = r"""
import asyncio, uvloop
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
uvloop.run(main())
"""

UVLOOP_CLIENT = r"""
import asyncio, sys, uvloop
port, conns, size = int(sys.argv[1]), 6, 2 << 20
async def one(i):
    want = payload(i, size + i)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(want[:FIRST])
    got = bytearray(await reader.readexactly(FIRST))
    async def send():
        for off in range(FIRST, len(want), 65537):
            writer.write(want[off:off + 65537])
            await writer.drain()
        writer.write_eof()
    t = asyncio.create_task(send())
    while chunk := await reader.read(65536):
        got += chunk
    await t
    writer.close()
    return bytes(got) == want
async def main():
    return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(conns))), DEADLINE)
print("OK" if all(uvloop.run(main())) else "MISMATCH", flush=True)
"""


@program("uvloop", source="PyPI uvloop", model="asyncio on libuv (uvloop's bundled libuv, which adds sockets to its "
         "epoll set through io_uring)",
         how="asyncio streams echo under uvloop.run, 6 connections of 2 MiB with write_eof, every byte compared, "
             "then the reason",
         expect="fallback: io_uring in this process: its I/O bypasses shunt",
         modules=[("uvloop", "uvloop")])
def uvloop(cx):
    port = serve_script(cx, "uvloop_server.py", UVLOOP_SERVER)
    # a second; a hang (as before io_uring was seen) fails after 20
    client_script(cx, "uvloop_client.py", UVLOOP_CLIENT, port, env=cx.env(CORPUS_DEADLINE=20), timeout=60)
    on_kernel_tcp_for_io_uring(cx, 6)


# ---------------------------------------------------------------- tornado

TORNADO_SERVER = r"""
import asyncio, sys
import tornado.web
BIG = payload(7, 4 << 20)
class Data(tornado.web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "application/octet-stream")
        self.write(BIG)
class Echo(tornado.web.RequestHandler):
    def post(self):
        self.write(digest(self.request.body))
async def main():
    app = tornado.web.Application([(r"/data", Data), (r"/echo", Echo)])
    srv = app.listen(0, address="127.0.0.1", max_body_size=64 << 20)
    port = list(srv._sockets.values())[0].getsockname()[1]
    print("PORT", port, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

TORNADO_CLIENT = r"""
import asyncio, sys
from tornado.httpclient import AsyncHTTPClient
port = int(sys.argv[1])
async def main():
    AsyncHTTPClient.configure(None, max_body_size=64 << 20, max_clients=4)
    c = AsyncHTTPClient()
    base = "http://127.0.0.1:%d" % port
    gets = [c.fetch(base + "/data", request_timeout=60) for _ in range(4)]
    posts = [c.fetch(base + "/echo", method="POST", body=payload(i, 3 << 20), request_timeout=60,
                     headers={"Content-Type": "application/octet-stream"}, expect_100_continue=True)
             for i in range(4)]
    rs = await asyncio.gather(*gets, *posts)
    ok = all(digest(r.body) == digest(payload(7, 4 << 20)) for r in rs[:4])
    ok = ok and all(r.body.decode() == digest(payload(i, 3 << 20)) for i, r in enumerate(rs[4:]))
    print("OK" if ok else "MISMATCH", flush=True)
asyncio.run(main())
"""


@program("tornado", source="PyPI tornado", model="tornado's IOLoop on asyncio",
         how="a tornado.web server and AsyncHTTPClient (4 connections): 4 GETs of 4 MiB and 4 POSTs of 3 MiB "
             "answered with their sha256, every body checked",
         modules=[("tornado", "tornado")])
def tornado(cx):
    port = serve_script(cx, "tornado_server.py", TORNADO_SERVER)
    client_script(cx, "tornado_client.py", TORNADO_CLIENT, port)
    cx.accelerated(4)


# ---------------------------------------------------------------- aiohttp

AIOHTTP_SERVER = r"""
from aiohttp import web
BIG = payload(7, 4 << 20)
async def data(request):
    return web.Response(body=BIG)
async def echo(request):
    body = await request.read()
    return web.Response(text=digest(body))
async def ws(request):
    w = web.WebSocketResponse(max_msg_size=0)
    await w.prepare(request)
    async for msg in w:
        await w.send_bytes(msg.data)
    return w
app = web.Application(client_max_size=64 << 20)
app.add_routes([web.get("/data", data), web.post("/echo", echo), web.get("/ws", ws)])
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print("PORT", s.getsockname()[1], flush=True)
web.run_app(app, sock=s, print=None)
"""

AIOHTTP_CLIENT = r"""
import asyncio, sys, aiohttp
port = int(sys.argv[1])
base = "http://127.0.0.1:%d" % port
async def get(session):
    async with session.get(base + "/data") as r:
        return digest(await r.read()) == digest(payload(7, 4 << 20))
async def post(session, i):
    async with session.post(base + "/echo", data=payload(i, 3 << 20), expect100=True) as r:
        return (await r.text()) == digest(payload(i, 3 << 20))
async def ws(session):
    async with session.ws_connect(base + "/ws", max_msg_size=0) as w:
        for i in range(100):
            m = payload(100 + i, 1 + (i * 7919) % 200000)
            await w.send_bytes(m)
            if (await w.receive()).data != m:
                return False
    return True
async def main():
    conn = aiohttp.TCPConnector(limit=4)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as s:
        rs = await asyncio.gather(*[get(s) for _ in range(4)], *[post(s, i) for i in range(4)], ws(s))
    print("OK" if all(rs) else "MISMATCH %r" % rs, flush=True)
asyncio.run(main())
"""


@program("aiohttp", source="PyPI aiohttp", model="asyncio (epoll selector), HTTP/1.1 and WebSocket",
         how="aiohttp.web and ClientSession (4 pooled connections): 4 GETs of 4 MiB, 4 POSTs of 3 MiB answered "
             "with their sha256, and a WebSocket echo of 100 binary messages up to 200 KB",
         modules=[("aiohttp", "aiohttp")])
def aiohttp(cx):
    port = serve_script(cx, "aiohttp_server.py", AIOHTTP_SERVER)
    client_script(cx, "aiohttp_client.py", AIOHTTP_CLIENT, port)
    cx.accelerated(4)     # the WebSocket takes one of the pool's 4 connections


# -------------------------------------------------------------- websockets

WEBSOCKETS_SERVER = r"""
import asyncio
from websockets.asyncio.server import serve
async def echo(ws):
    async for m in ws:
        await ws.send(m)
async def main():
    async with serve(echo, "127.0.0.1", 0, max_size=None) as srv:
        print("PORT", list(srv.sockets)[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""

WEBSOCKETS_CLIENT = r"""
import asyncio, sys
from websockets.asyncio.client import connect
port = int(sys.argv[1])
async def one(k):
    async with connect("ws://127.0.0.1:%d/" % port, max_size=None) as ws:
        for i in range(60):
            m = payload(k * 1000 + i, 1 + (i * 15013) % 300000)
            await ws.send(m)
            if await ws.recv() != m:
                return False
    return True
async def main():
    return await asyncio.wait_for(asyncio.gather(*(one(k) for k in range(3))), 60)
print("OK" if all(asyncio.run(main())) else "MISMATCH", flush=True)
"""


@program("websockets", source="PyPI websockets", model="asyncio (epoll selector)",
         how="websockets' asyncio server and client: 3 connections, 60 binary messages each up to 300 KB echoed and "
             "compared",
         modules=[("websockets", "websockets")])
def websockets(cx):
    port = serve_script(cx, "websockets_server.py", WEBSOCKETS_SERVER)
    client_script(cx, "websockets_client.py", WEBSOCKETS_CLIENT, port)
    cx.accelerated(3)


# ------------------------------------------------------------------ pyzmq

ZMQ_SERVER = r"""
import sys, zmq
ctx = zmq.Context()
rep = ctx.socket(zmq.REP)
port = rep.bind_to_random_port("tcp://127.0.0.1")
pull = ctx.socket(zmq.PULL)
pport = pull.bind_to_random_port("tcp://127.0.0.1")
print("PORT", port, flush=True)
print("PULL", pport, flush=True)
poller = zmq.Poller()
poller.register(rep, zmq.POLLIN)
poller.register(pull, zmq.POLLIN)
h, n = None, 0
import hashlib
h = hashlib.sha256()
while True:
    for s, _ in poller.poll():
        m = s.recv()
        if s is rep:
            rep.send(m if m != b"DIGEST" else ("%d %s" % (n, h.hexdigest())).encode())
        else:
            h.update(m)
            n += 1
"""

ZMQ_CLIENT = r"""
import sys, zmq, hashlib
port, pport = int(sys.argv[1]), int(sys.argv[2])
ctx = zmq.Context()
req = ctx.socket(zmq.REQ)
req.setsockopt(zmq.RCVTIMEO, 30000)
req.connect("tcp://127.0.0.1:%d" % port)
ok = True
for i in range(300):
    m = payload(i, 1 + (i * 7919) % 300000)
    req.send(m)
    ok = ok and req.recv() == m
push = ctx.socket(zmq.PUSH)
push.connect("tcp://127.0.0.1:%d" % pport)
h = hashlib.sha256()
for i in range(2000):
    m = payload(5000 + i, 1 + (i * 131) % 4000)
    h.update(m)
    push.send(m)
import time
deadline = time.monotonic() + 30
while True:
    req.send(b"DIGEST")
    n, d = req.recv().decode().split()
    if int(n) == 2000 or time.monotonic() > deadline:
        break
    time.sleep(0.05)
ok = ok and int(n) == 2000 and d == h.hexdigest()
push.close(linger=0)
req.close(linger=0)
ctx.term()
print("OK" if ok else "MISMATCH", flush=True)
"""


@program("pyzmq (libzmq)", source="PyPI pyzmq", model="libzmq's I/O threads (epoll) behind zmq sockets",
         how="REQ/REP: 300 messages up to 300 KB echoed; PUSH/PULL: 2000 messages whose sha256 the server "
             "reports over REQ; every message compared",
         modules=[("zmq", "pyzmq")])
def pyzmq(cx):
    path = script(cx, "zmq_server.py", ZMQ_SERVER)
    srv = cx.serve([cx.python, path], "zmq-server")
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    pport = int(srv.wait_for(r"^PULL (\d+)$").group(1))
    client_script(cx, "zmq_client.py", ZMQ_CLIENT, port, pport)
    cx.accelerated(2)


# ---------------------------------------------------------------- pyftpdlib

FTPD_SERVER = r"""
import sys
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer
import logging
logging.basicConfig(level=logging.WARNING)
a = DummyAuthorizer()
a.add_user("corpus", "secret", sys.argv[1], perm="elradfmw")
FTPHandler.authorizer = a
FTPHandler.masquerade_address = None
s = FTPServer(("127.0.0.1", 0), FTPHandler)
print("PORT", s.socket.getsockname()[1], flush=True)
s.serve_forever(timeout=0.5)
"""

FTPD_CLIENT = r"""
import ftplib, hashlib, io, sys
port = int(sys.argv[1])
f = ftplib.FTP()
f.connect("127.0.0.1", port, timeout=30)
f.login("corpus", "secret")
ok = True
for i in range(3):
    data = payload(i, (3 << 20) + i)
    f.storbinary("STOR up%d.bin" % i, io.BytesIO(data))
    out = io.BytesIO()
    f.retrbinary("RETR up%d.bin" % i, out.write)
    ok = ok and out.getvalue() == data
names = f.nlst()
ok = ok and sorted(names) == ["up0.bin", "up1.bin", "up2.bin"]
f.quit()
print("OK" if ok else "MISMATCH %r" % names, flush=True)
"""


@program("pyftpdlib", source="PyPI pyftpdlib", model="its own epoll loop, one thread; a data connection per transfer",
         how="pyftpdlib's FTPServer and Python's ftplib: STOR and RETR of 3 files of 3 MiB in passive mode, NLST; "
             "every byte compared",
         modules=[("pyftpdlib", "pyftpdlib")])
def pyftpdlib(cx):
    (cx.tmp / "home").mkdir()
    port = serve_script(cx, "ftpd.py", FTPD_SERVER, cx.tmp / "home")
    client_script(cx, "ftp_client.py", FTPD_CLIENT, port)
    cx.accelerated(8)


# ---------------------------------------------------------------- gunicorn

GUNICORN_APP = r"""
BIG = payload(7, 4 << 20)
def app(environ, start_response):
    if environ["REQUEST_METHOD"] == "POST":
        body = environ["wsgi.input"].read()
        out = digest(body).encode()
    else:
        out = BIG
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(out)))])
    return [out]
"""


@program("gunicorn", source="PyPI gunicorn", model="pre-fork: an arbiter and 2 sync workers accepting on one socket",
         how="a WSGI app under gunicorn -w 2; curl GETs 4 MiB 4 times and POSTs 3 MiB files answered with their "
             "sha256; every body checked",
         modules=[("gunicorn", "gunicorn")], tools=["curl"])
def gunicorn(cx):
    script(cx, "wsgiapp.py", GUNICORN_APP)
    port = cx.port()
    cx.serve([cx.python, "-m", "gunicorn", "-w", "2", "-b", "127.0.0.1:%d" % port, "--chdir", cx.tmp,
              "wsgiapp:app"], "gunicorn", port=port)
    import random
    big = sha256(random.Random(7).randbytes(4 << 20))
    for _ in range(4):
        r = cx.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/" % port])
        assert sha256(r.stdout) == big
    for i in range(3):
        path, digest = cx.payload("post%d.bin" % i, 3 * MB + i)
        r = cx.run(["curl", "-sS", "--fail", "--data-binary", "@%s" % path, "http://127.0.0.1:%d/" % port])
        assert r.stdout.decode() == digest
    cx.accelerated(7)


# ----------------------------------------------------------------- redis-py

REDIS_CLIENT = r"""
import sys, redis
port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
ok = True
p = r.pipeline(transaction=False)
for i in range(2000):
    p.set("k%d" % i, payload(i, 1 + i % 900))
p.execute()
p = r.pipeline(transaction=False)
for i in range(2000):
    p.get("k%d" % i)
ok = ok and p.execute() == [payload(i, 1 + i % 900) for i in range(2000)]
big = payload(99, 8 << 20)
r.set("big", big)
ok = ok and r.get("big") == big
ps = r.pubsub()
ps.subscribe("corpus")
ps.get_message(timeout=5)
pub = redis.Redis(host="127.0.0.1", port=port)
msgs = [payload(300 + i, 1 + i * 97) for i in range(100)]
for m in msgs:
    pub.publish("corpus", m)
got = []
while len(got) < len(msgs):
    m = ps.get_message(timeout=10)
    if m is None:
        break
    if m["type"] == "message":
        got.append(m["data"])
ok = ok and got == msgs
print("OK" if ok else "MISMATCH", flush=True)
"""


@program("redis-py", source="PyPI redis (client), Debian redis-server", model="a blocking client with a connection "
         "pool against redis-server's epoll loop",
         how="pipelines of 2000 SETs and GETs, an 8 MiB value, pub/sub of 100 messages; every value compared",
         modules=[("redis", "redis")], tools=["redis-server"])
def redis_py(cx):
    port = cx.port()
    cx.serve(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], "redis",
             port=port)
    client_script(cx, "redis_client.py", REDIS_CLIENT, port)
    cx.accelerated(2)     # the pool's connection (pipelines, then pub/sub) and the publisher's


# ----------------------------------------------------------------- paho-mqtt

PAHO_CLIENT = r"""
import sys, threading, hashlib
import paho.mqtt.client as mqtt
port = int(sys.argv[1])
msgs = [payload(i, 1 + (i * 7919) % 200000) for i in range(200)]
got, done, subscribed = [], threading.Event(), threading.Event()
def on_message(c, u, m):
    got.append(m.payload)
    if len(got) == len(msgs):
        done.set()
sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
sub.on_message = on_message
sub.on_subscribe = lambda *a: subscribed.set()
sub.connect("127.0.0.1", port)
sub.subscribe("corpus/paho", qos=1)
sub.loop_start()
subscribed.wait(10)
pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
pub.connect("127.0.0.1", port)
pub.loop_start()
for m in msgs:
    pub.publish("corpus/paho", m, qos=1).wait_for_publish(10)
done.wait(30)
pub.loop_stop(); sub.loop_stop()
print("OK" if got == msgs else "MISMATCH %d" % len(got), flush=True)
"""


@program("paho-mqtt", source="PyPI paho-mqtt, Debian mosquitto", model="paho's network thread (select) against "
         "mosquitto's loop",
         how="a subscriber and a publisher (QoS 1): 200 messages up to 200 KB, in order, every byte compared",
         modules=[("paho.mqtt", "paho-mqtt")], tools=["mosquitto"])
def paho(cx):
    import os
    port = cx.port()
    user = "user root" if os.geteuid() == 0 else ""
    conf = cx.write("mosquitto.conf", "listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n%s\n"
                    % (port, user))
    cx.serve(["mosquitto", "-c", conf], "mosquitto", port=port)
    client_script(cx, "paho_client.py", PAHO_CLIENT, port)
    cx.accelerated(2)


@pytest.mark.parametrize("prog", [p.param() for p in PROGRAMS])
def test_program(prog, shunt, tmp_path, start_server, corpus_cache):
    run_program(prog, shunt, tmp_path, start_server, corpus_cache)
