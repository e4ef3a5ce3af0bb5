"""Short connections judged across runs of a program (core/conn/short_conns.c,
the registry's verdicts): a program started again and again for one short
connection each stays on kernel TCP once its runs' connections to that
listener were short, with samples counted across runs; another program, or
a new listener on the same port, starts afresh; a scribbled verdict only
decides whether a connection is offered.

Every client here is its own process, as a script's redis-cli or curl is;
each checks, through the library's API, which path its connection took, and
that its bytes are exact."""
import os
import subprocess
import textwrap

from shunttest import PYTHON, base_env

SERVER = textwrap.dedent(r"""
    import socket, sys
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(sys.argv[1]))); ls.listen(64)
    print(ls.getsockname()[1], flush=True)
    while True:
        a, _ = ls.accept()
        b = a.recv(16)
        if b == b"stop":
            break
        while b:
            a.sendall(b.upper())
            b = a.recv(16)
        a.close()
""")

# One connection, one short exchange (or argv[2] of them); prints "accelerated:reason".
CLIENT = textwrap.dedent(r"""
    import ctypes, socket, sys
    lib = ctypes.CDLL(None)
    lib.shunt_fd_fallback.restype = ctypes.c_char_p
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1):
        c.sendall(b"ping"); assert c.recv(16) == b"PING"
    key = lib.shunt_fd_fallback(c.fileno())
    print("%d:%s" % (lib.shunt_fd_accelerated(c.fileno()), key.decode() if key else "-"))
""")


class Server:
    def __init__(self, env, port=0):
        self.p = subprocess.Popen([PYTHON, "-c", SERVER, str(port)], env=env, stdout=subprocess.PIPE, text=True)
        self.port = int(self.p.stdout.readline())

    def stop(self):
        import socket
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(b"stop")
        assert self.p.wait(timeout=30) == 0


def runs(env, port, n, argv0=PYTHON, exchanges=1):
    out = []
    for _ in range(n):
        r = subprocess.run([argv0, "-c", CLIENT, str(port), str(exchanges)], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        out.append(r.stdout.strip())
    return out


def test_one_connection_programs_judged_across_runs(shunt_build, tmp_path):
    """Seven runs of a one-connection client: the first four accelerated
    and short, the next two kernel TCP (reason short), the seventh the
    sample (the count after four short ones is two), on kernel TCP as well
    with its calls counted: a long one (20 exchanges), so the run after it
    is accelerated again.  A program of another
    name (the same interpreter through a link) to the same listener starts
    afresh; so do the first program's runs once the server listens anew on
    the same port.  Before the verdicts were shared every run was
    accelerated, as each process judged only its own connections."""
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn")
    srv = Server(env)
    try:
        got = runs(env, srv.port, 6) + runs(env, srv.port, 1, exchanges=20) + runs(env, srv.port, 1)
        assert got == ["1:-"] * 4 + ["0:short"] * 3 + ["1:-"], got
        other = tmp_path / "another-client"
        os.symlink(PYTHON, other)
        assert runs(env, srv.port, 1, argv0=str(other)) == ["1:-"]
        port = srv.port
    finally:
        srv.stop()
    srv = Server(env, port)
    try:
        assert runs(env, srv.port, 1) == ["1:-"]
    finally:
        srv.stop()


def test_verdicts_off_with_short_conns_off(shunt_build):
    """SHUNT_SHORT_CONNS=0: every run offered, and the runs before under
    the default leave nothing that holds against them."""
    on = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn")
    srv = Server(on)
    try:
        assert runs(on, srv.port, 5)[-1] == "0:short"
        off = dict(on, SHUNT_SHORT_CONNS="0")
        assert runs(off, srv.port, 3) == ["1:-"] * 3
    finally:
        srv.stop()


def registry_verdicts():
    """The namespace registry's verdict table as (mmap, offset of entry 0):
    the layout from registry_file.h, checked by its _Static_asserts."""
    import mmap
    import re
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src", "registry", "registry_file.h")
    text = open(src).read()
    version = int(re.search(r"#define REG_VERSION\s+(\d+)u", text).group(1))
    offset = int(re.search(r"REG_AT\(reg_file, verdicts, (\d+)\)", text).group(1))
    path = "/dev/shm/shunt-%d-%d-r%d.reg" % (os.geteuid(), os.stat("/proc/self/ns/net").st_ino, version)
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, 0), offset
    finally:
        os.close(fd)


def test_scribbled_verdict_decides_paths_only(shunt_build):
    """Every word of a program's shared verdict overwritten with 0, 1, ~0
    and random bytes (the key kept, so that the runs keep reading it):
    each run's bytes are exact, it exits normally, and its connection is
    accelerated or kernel TCP for short, nothing else."""
    import struct
    env = base_env(LD_PRELOAD=str(shunt_build / "libshunt.so"), SHUNT_LOG="warn")
    srv = Server(env)
    try:
        assert runs(env, srv.port, 5)[-1] == "0:short"
        m, base = registry_verdicts()
        with open("/proc/%d/net/tcp" % srv.p.pid) as f:   # the listener's inode, as the kernel has it
            rows = [l.split() for l in f][1:]
        inode = next(int(r[9]) for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == srv.port)
        mine = [base + 32 * i for i in range(1024)
                if struct.unpack_from("<QQ", m, base + 32 * i)[1] == inode]
        assert len(mine) == 1, "one verdict for this program and listener: %s" % mine
        at = mine[0]
        for off, size in ((8, 8), (16, 4), (20, 4), (24, 4), (28, 4), (8, 24)):
            for value in (b"\0" * size, (1).to_bytes(size, "little"), b"\xff" * size, os.urandom(size)):
                m[at + off:at + off + size] = value
                for got in runs(env, srv.port, 2):
                    assert got in ("1:-", "0:short"), (off, value, got)
        m.close()
    finally:
        srv.stop()
