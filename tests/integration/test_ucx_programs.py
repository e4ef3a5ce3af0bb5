"""Programs that use UCX themselves (as MPI libraries do), under shunt.

With UCX_TLS=tcp and UCX_NET_DEVICES=lo, UCX moves a program's bytes over
TCP connections of its own on loopback (one each way between two workers,
opened and accepted by UCX, polled by UCX's own epoll set and async
thread). To shunt those are the program's connections like any other:
with both processes under shunt they are accelerated, and every byte is
checked (tests/programs/ucx_echo.c: an 8 MiB stream echoed in pieces of
1 byte to 256 KiB, and a 64 KiB tagged message each way). The same program
without shunt is the reference, and the Debian package's ucx_perftest is
driven the way its users drive it.

UCX's TCP lanes may connect both ways at once and close the duplicate
(its collision rule): that socket is closed before the other side accepts
it, its offer withdrawn, so the side that accepts it records "client does
not run shunt" for a connection that carries nothing but an EOF. So the
tests ask that the address exchange and at least one lane were
accelerated, at both ends alike, and that nothing else fell back.

These are the program's own UCX, not shunt's fabric engine (which
libshunt.so loads with dlopen for connections between hosts, and which
takes none of the program's UCX settings: docs/architecture.md).
"""
import re
import subprocess
import time

import pytest

from shunttest import base_env, free_port, need_tool

UCX_TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo", "UCX_WARN_UNUSED_ENV_VARS": "n"}
TIMEOUT = 90


def env_for(shunt_build, tmp_path, under_shunt):
    if not under_shunt:
        return base_env(**UCX_TCP)
    return base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="info",
                    SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), **UCX_TCP)


def log_lines(tmp_path):
    return "".join(p.read_text() for p in sorted(tmp_path.glob("shunt-*.log"))).splitlines()


def channel_of(line):
    m = re.search(r"channel (\S+?)[,)]", line)
    return m.group(1) if m else None


def check_accelerated(tmp_path):
    """The exchange and at least one of UCX's lanes accelerated at both
    ends (each client's channel claimed by a server); UCX's duplicate lane,
    which its client closes at once, is the only other connection, and its
    close races with the server's accept, at any step: the offer withdrawn
    before the claim (the server falls back, "client does not run shunt"),
    the client's socket already gone when the server asks the kernel about
    it (the kernel knows no such socket: "offer does not match the
    connection"), its channel already removed when the server maps it
    ("channel could not be mapped"), or the claim made and the connection
    closed before its client looked (a server's line without its client's).
    One such connection at most, for one of those reasons."""
    lines = log_lines(tmp_path)
    clients = {channel_of(l) for l in lines if "accelerated (client" in l}
    servers = {channel_of(l) for l in lines if "accelerated (server" in l}
    assert len(clients) >= 2 and clients <= servers, "\n".join(lines)
    fell = [l for l in lines if ": kernel TCP" in l]
    closed_early = ("kernel TCP: client does not run shunt", "kernel TCP: channel could not be mapped")
    gone = [l for l in lines if "the kernel says 0 (mismatch)" in l]
    assert all(l.endswith(closed_early) or
               (l.endswith("kernel TCP: offer does not match the connection") and gone) for l in fell), \
        "\n".join(lines)
    assert len(fell) + len(servers - clients) <= 1, "\n".join(lines)


def listening(port):
    """Is a socket listening on 127.0.0.1:PORT (from /proc: a probe
    connection would be taken for the client by ucx_perftest's server)?"""
    want = ":%04X" % port
    with open("/proc/net/tcp") as f:
        return any(l.split()[1].endswith(want) and l.split()[3] == "0A" for l in f.readlines()[1:])


def pair(server_argv, client_argv, env, port_line=None, port=None):
    """Starts the server, then the client once the server says its port
    (port_line: a regex with the port as group 1) or listens on port; both
    must exit 0.  The client's stdout."""
    srv = subprocess.Popen(server_argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if port_line:
            line = srv.stdout.readline()
            m = re.search(port_line, line)
            assert m, "server said %r" % line
            client_argv = [a.replace("{port}", m.group(1)) for a in client_argv]
        else:
            end = time.monotonic() + 30
            while not listening(port):
                assert srv.poll() is None and time.monotonic() < end, "server never listened"
                time.sleep(0.05)
        cli = subprocess.run(client_argv, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert cli.returncode == 0, cli.stderr
        out, err = srv.communicate(timeout=TIMEOUT)
        assert srv.returncode == 0, err
        return cli.stdout
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


@pytest.mark.parametrize("under_shunt", [False, True], ids=["kernel", "shunt"])
def test_ucx_stream_and_tag_exact(shunt_build, tmp_path, under_shunt):
    """8 MiB echoed over a UCX stream endpoint and 64 KiB tagged each way,
    every byte checked; under shunt the address exchange and UCX's own
    connections are accelerated (check_accelerated)."""
    prog = str(shunt_build / "tests" / "programs" / "ucx_echo")
    env = env_for(shunt_build, tmp_path, under_shunt)
    out = pair([prog, "server", "0"], [prog, "client", "{port}"], env, port_line=r"port (\d+)")
    assert out.split() == ["ok", str(8 << 20)], out
    if under_shunt:
        check_accelerated(tmp_path)


@pytest.mark.parametrize("test", ["tag_lat", "stream_bw"])
def test_ucx_perftest_under_shunt(shunt_build, tmp_path, test):
    """ucx_perftest (Debian's ucx-utils), server and client under shunt over
    UCX's TCP lanes: it runs to its final line, and its connections were
    accelerated."""
    need_tool("ucx_perftest", package="ucx-utils")
    env = env_for(shunt_build, tmp_path, True)
    port = free_port()
    args = ["-p", str(port), "-t", test, "-n", "2000", "-w", "100", "-s", "8" if test == "tag_lat" else "65536"]
    out = pair(["ucx_perftest"] + args, ["ucx_perftest", "127.0.0.1"] + args, env, port=port)
    assert re.search(r"^Final:\s+2000\s", out, re.M), out
    check_accelerated(tmp_path)
