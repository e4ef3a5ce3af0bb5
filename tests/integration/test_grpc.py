"""gRPC (Python grpcio, its default epoll1 poller), server and client under
shunt on 127.0.0.1 (issue 17, item 2).  grpcio's event engine threads share
one epoll set and add a connection's socket to it while another thread
sleeps there; before the fix in src/core/kinds/epoll.c both processes died
of SIGSEGV at the first accelerated call (the poller was handed shunt's own
registration, "SHUN" and an fd number, as its event data), and with only
that fixed the first call hung until its deadline (the sleeping poller was
never woken for the new socket).  Checks every reply byte for byte, calls
from several threads at once, that the server is still alive, and that the
connection was accelerated at both ends (SHUNT_STRICT=1: a connection that
could not be fails instead of falling back; the shunt log names both ends).

scripts/install-deps installs grpcio; without it the test is skipped, except
in CI (CI set), where a missing package fails it."""
import importlib.util
import os
import subprocess

import pytest

from shunttest import PYTHON, base_env

SERVER = """
from concurrent import futures
import grpc

def echo(request, context):
    return request

server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "shunt.Echo", {"Call": grpc.unary_unary_rpc_method_handler(echo)}),))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print("PORT", port, flush=True)
server.wait_for_termination()
"""

CLIENT = """
import sys
from concurrent import futures
import grpc

def payload(i):
    n = (1, 100, 4096, 65537, 300000, 2000000)[i % 6] + i
    return bytes((i * 31 + k) % 251 for k in range(n))

with grpc.insecure_channel("127.0.0.1:%d" % int(sys.argv[1])) as channel:
    call = channel.unary_unary("/shunt.Echo/Call")
    ok = all(call(payload(i), timeout=30) == payload(i) for i in range(12))
    with futures.ThreadPoolExecutor(max_workers=4) as pool:   # calls from several threads at once
        ok = ok and all(pool.map(lambda i: call(payload(i), timeout=30) == payload(i), range(12, 36)))
print("OK" if ok else "MISMATCH", flush=True)
"""


def test_grpc_unary_echo(shunt, tmp_path, start_server):
    if importlib.util.find_spec("grpc") is None:
        message = "grpcio is not installed for %s (scripts/install-deps installs it)" % PYTHON
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "client.py").write_text(CLIENT)
    env = base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), SHUNT_STRICT="1",
                   GRPC_POLL_STRATEGY="epoll1")
    srv = start_server(shunt.cmd([PYTHON, str(tmp_path / "server.py")]), env=env, name="grpc-server")
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    r = subprocess.run(shunt.cmd([PYTHON, str(tmp_path / "client.py"), str(port)]), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "OK", \
        ("client status %s, server status %s (None: running)" % (r.returncode, srv.proc.poll()), r.stdout,
         r.stderr[-3000:])
    assert srv.proc.poll() is None, "the gRPC server died (status %s)" % srv.proc.returncode
    log = "".join(p.read_text(errors="replace") for p in tmp_path.glob("shunt-*.log"))
    assert "accelerated (server" in log and "accelerated (client" in log, log[-2000:]
    assert "kernel TCP:" not in log, log[-2000:]
