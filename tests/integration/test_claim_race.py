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
The kernel's run is the reference.

And an epoll sleep on a pending offer, held by the shim while the server
accepts and is killed (test_epoll_sleep_while_the_claim_and_the_death_land)."""
import os
import pathlib
import subprocess

import pytest

from shunttest import base_env


def run_pair(shunt_build, tmp_path, under_shunt, server_mode, client_mode, server_says, server_status, **env_extra):
    """The server in server_mode and the client in client_mode (the shim
    behind libshunt.so holding its call): once the client's call is held,
    the server is told to go, says server_says and ends with server_status;
    then the client goes on.  Returns the client's output and shunt's log."""
    prog = str(shunt_build / "tests" / "programs" / "claim_race")
    shim = str(shunt_build / "tests" / "programs" / "recv_pause_shim.so")
    go = tmp_path / "go"
    lib = [str(shunt_build / "libshunt.so")] if under_shunt else []
    env = base_env(SHUNT_LOG="debug", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"), RECV_PAUSE_FILE=str(go),
                   **env_extra)
    server = subprocess.Popen([prog, server_mode], env=dict(env, LD_PRELOAD=":".join(lib)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    client = None
    try:
        port = server.stdout.readline().split()[1]
        client = subprocess.Popen([prog, client_mode, port], env=dict(env, LD_PRELOAD=":".join(lib + [shim])),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert client.stdout.readline().strip() == "connected"
        assert client.stderr.readline().strip() == "paused"   # its call is at the kernel's door
        server.stdin.write("go\n")
        server.stdin.flush()
        assert server.stdout.readline().strip() == server_says
        assert server.wait(timeout=30) == server_status
        go.write_text("")
        out, err = client.communicate(timeout=30)
        assert client.returncode == 0, err
    finally:
        for p in (server, client):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    return out, "".join(x.read_text() for x in tmp_path.glob("shunt-*.log"))


@pytest.mark.parametrize("call", ["recv", "fionread"])
@pytest.mark.parametrize("under_shunt", [False, True], ids=["kernel", "shunt"])
def test_read_while_the_claim_lands(shunt_build, tmp_path, under_shunt, call):
    out, log = run_pair(shunt_build, tmp_path, under_shunt, "server", "client" if call == "recv" else "fionread",
                        "sent", 0)
    want = "got hello" if call == "recv" else "fionread 5\ngot hello"
    assert out.strip() == want, out + log
    if under_shunt:
        assert "offered channel" in log, log   # the race was shunt's: the client's connection was offered


@pytest.mark.parametrize("under_shunt", [False, True], ids=["kernel", "shunt"])
def test_epoll_sleep_while_the_claim_and_the_death_land(shunt_build, tmp_path, under_shunt):
    """An epoll_wait asleep on a client's pending offer wakes for the
    claim's doorbell and the server's death at once: the server accepts
    (claims, rings) and is killed before shunt looks at what woke it.  The
    one event (edge-triggered on the companion) said the end, but shunt
    looked at it while the offer was still pending in its eyes, so it could
    neither take the doorbell ahead of the end nor call the peer gone; the
    event was spent, the claim then settled, and the wait slept on, the
    end unseen (the stress run's epoll client without progress for 5 s
    after its server was killed).  The kernel reports EPOLLIN and
    EPOLLRDHUP, then the end of stream: so must shunt."""
    out, log = run_pair(shunt_build, tmp_path, under_shunt, "dying", "epoll", "accepted", -9,
                        SHUNT_SHORT_CONNS="0", RECV_PAUSE_AT="epoll")
    assert out.split("\n")[:2] == ["events in rdhup", "recv 0"], out + log
    if under_shunt:
        assert "accelerated (client" in log, log   # the claim landed: the end was the channel's to tell
