#!/usr/bin/env python3
"""What an idle accelerated connection costs: N connections between two
processes under shunt (each has exchanged one byte each way, then sits
idle), measured from outside.

  python3 bench/idle_cost.py --build build -n 1000
  python3 bench/idle_cost.py --build build -n 10000      # the 10,000-idle-connection run

Reports, per connection: bytes of /dev/shm held (the blocks of the new
shunt-* files: memory really reserved, not the files' apparent size),
mappings and fds in each process, and the processes' resident set growth.
Also runs the same without shunt, for the kernel's own cost.  Honours any
SHUNT_* settings in the environment (SHUNT_RING_START, SHUNT_SHM_LIMIT...).
"""
import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PEER = r"""
import os, resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
role, n = sys.argv[1], int(sys.argv[2])
conns = []
if role == "server":
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4096)
    print(ls.getsockname()[1], flush=True)
    for _ in range(n):
        c, _ = ls.accept()
        c.sendall(c.recv(1))        # one byte each way
        conns.append(c)
else:
    port = int(sys.argv[3])
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"x")
        assert c.recv(1) == b"x"
        conns.append(c)
print("ready", flush=True)
sys.stdin.readline()                # idle until told to go
"""


def shm_files():
    prefix = "shunt-%d-" % os.geteuid()
    out = {}
    for e in os.scandir("/dev/shm"):
        if e.name.startswith(prefix):
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            out[e.name] = (st.st_blocks * 512, st.st_size)
    return out


def proc_stats(pid):
    maps = Path("/proc/%d/maps" % pid).read_text().splitlines()
    fds = len(os.listdir("/proc/%d/fd" % pid))
    rss = 0
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return {"maps": len(maps), "shm_maps": sum("/dev/shm/shunt-" in m for m in maps), "fds": fds, "rss": rss}


def start(argv, env):
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def measure(prefix, n, env):
    before = shm_files()
    srv = start(prefix + [sys.executable, "-c", PEER, "server", str(n)], env)
    port = srv.stdout.readline().strip()
    base_srv = proc_stats(srv.pid)
    cli = start(prefix + [sys.executable, "-c", PEER, "client", str(n), port], env)
    try:
        for p in (cli, srv):
            if p.stdout.readline().strip() != "ready":
                raise SystemExit("idle_cost: a peer failed (too many open files? raise the hard limit)")
        time.sleep(0.5)
        after = shm_files()
        # the client creates the channels: names carry its pid (other users of /dev/shm are left out)
        new = {k: v for k, v in after.items() if k not in before and "-%d-" % cli.pid in k}
        res = {"conns": n, "segments": len(new), "shm_bytes": sum(v[0] for v in new.values()),
               "shm_apparent": sum(v[1] for v in new.values()),
               "server": proc_stats(srv.pid), "client": proc_stats(cli.pid), "server_base": base_srv}
    finally:
        for p in (cli, srv):
            try:
                p.stdin.write("\n")
                p.stdin.flush()
            except OSError:
                pass
        for p in (cli, srv):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    return res


def report(name, r):
    n = r["conns"]
    s, c = r["server"], r["client"]
    print("%s: %d connections, %d channel segments" % (name, n, r["segments"]))
    if r["segments"]:
        print("  /dev/shm held: %d bytes in all, %.1f KiB per connection (apparent size %.0f KiB each)"
              % (r["shm_bytes"], r["shm_bytes"] / n / 1024, r["shm_apparent"] / max(r["segments"], 1) / 1024))
    print("  server: %d fds, %d mappings (%d of channels), RSS %.1f MiB (%.1f KiB per connection)"
          % (s["fds"], s["maps"], s["shm_maps"], s["rss"] / 2**20, (s["rss"] - r["server_base"]["rss"]) / n / 1024))
    print("  client: %d fds, %d mappings (%d of channels), RSS %.1f MiB" % (c["fds"], c["maps"], c["shm_maps"], c["rss"] / 2**20))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("-n", type=int, default=1000, help="connections (default 1000)")
    o = p.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < o.n + 100:
        raise SystemExit("idle_cost: the fd limit (%d) is below %d connections" % (hard, o.n))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    report("kernel TCP", measure([], o.n, env))
    report("shunt", measure([str(Path(o.build, "shunt").resolve()), "run", "--"], o.n, env))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
