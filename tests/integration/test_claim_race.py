"""A claim that lands between shunt's look at a pending offer and the
kernel's read (tests/programs/claim_race.c, recv_pause_shim.c).

The client connects and reads with MSG_DONTWAIT before the server has
accepted: shunt finds the offer pending and reads the kernel's socket, and
the shim behind libshunt.so holds that read at the kernel's door.  Meanwhile
the server accepts (under shunt: it claims the offer, and rings the client),
makes a raw clone (its connections move back to kernel TCP: a last doorbell,
then its bytes go by TCP), sends "hello" and closes.  Then the read goes on.
Before: it took the doorbells and "hello" together, counted them all as
doorbells, and the client read an end of stream and nothing else (tests/
stress's raw clone rounds met it as "a client read the end before any
byte").  Now no claim lands while a pending offer's read is in the kernel
(negotiate_tcp_begin): every byte arrives, once.  The same for FIONREAD
asked at that moment: it counted the doorbells among the bytes to read.
The kernel's run is the reference."""
import os
import pathlib
import subprocess

import pytest

from shunttest import base_env


@pytest.mark.parametrize("call", ["recv", "fionread"])
@pytest.mark.parametrize("under_shunt", [False, True], ids=["kernel", "shunt"])
def test_read_while_the_claim_lands(shunt_build, tmp_path, under_shunt, call):
    prog = str(shunt_build / "tests" / "programs" / "claim_race")
    shim = str(shunt_build / "tests" / "programs" / "recv_pause_shim.so")
    go = tmp_path / "go"
    lib = [str(shunt_build / "libshunt.so")] if under_shunt else []
    env = base_env(SHUNT_LOG="debug", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), RECV_PAUSE_FILE=str(go))
    server = subprocess.Popen([prog, "server"], env=dict(env, LD_PRELOAD=":".join(lib)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    client = None
    try:
        port = server.stdout.readline().split()[1]
        client = subprocess.Popen([prog, "client" if call == "recv" else "fionread", port], env=dict(env, LD_PRELOAD=":".join(lib + [shim])),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert client.stdout.readline().strip() == "connected"
        assert client.stderr.readline().strip() == "paused"   # its read is at the kernel's door
        server.stdin.write("go\n")
        server.stdin.flush()
        assert server.stdout.readline().strip() == "sent"
        assert server.wait(timeout=30) == 0
        go.write_text("")
        out, err = client.communicate(timeout=30)
        assert client.returncode == 0, err
    finally:
        for p in (server, client):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    log = "".join(x.read_text() for x in tmp_path.glob("shunt-*.log"))
    want = "got hello" if call == "recv" else "fionread 5\ngot hello"
    assert out.strip() == want, out + log
    if under_shunt:
        assert "offered channel" in log, log   # the race was shunt's: the client's connection was offered
