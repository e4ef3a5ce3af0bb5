#!/usr/bin/env python3
"""Instructions shunt spends per read(2) and write(2) on an accelerated connection.

Compiles pingpong (bench/pingpong*.c, cc -O2) into <build>/bench/, runs it under
valgrind's callgrind with LD_PRELOAD=<lib> (both processes of the pair are
under shunt, so the connection is accelerated) and SHUNT_SPIN_US=0 (a wait
goes straight to the kernel, so the count does not depend on how long a spin
lasted), then reads, from the timing process's profile, the inclusive
instruction count of shunt's read and write wrappers and divides by their
call counts.  Instruction counts do not depend on how busy the machine is,
which is why this, not a timing, is how a change to the data path is judged
on a shared machine.

Give --base LIB to compare with another build of libshunt.so (for example
one built from the main branch):

    python3 bench/callgrind_hotpath.py
    python3 bench/callgrind_hotpath.py --base /tmp/main-build/libshunt.so --round-trips 5000
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def compile_pingpong(cc, build):
    out = build / "bench"
    out.mkdir(parents=True, exist_ok=True)
    exe = out / "pingpong"
    srcs = [str(REPO / "bench" / f) for f in ("pingpong.c", "pingpong_conn.c", "pingpong_cc.c")]
    subprocess.run([cc, "-O2", "-I", str(REPO / "tests" / "lib"), "-o", str(exe), *srcs], check=True)
    return exe


def per_call(lib, exe, round_trips, size):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LD_PRELOAD=str(lib), SHUNT_SPIN_US="0", SHUNT_ACCEL="1")
        subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=%s/cg.%%p" % tmp, str(exe),
                        "-n", str(round_trips), "-s", str(size), "-w", "100"],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
        profiles = sorted(glob.glob(tmp + "/cg.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", profiles[0]], check=True,
                              capture_output=True, text=True).stdout
    result = {}
    for name in ("do_recv", "do_send"):
        m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+=> \S*io_calls\.c:%s \(([\d,]+)x\)" % name, text, re.M)
        if m:
            total, calls = (int(x.replace(",", "")) for x in m.groups())
            result[name] = total / calls
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--lib", help="libshunt.so to measure (default: <build>/libshunt.so)")
    p.add_argument("--base", help="another libshunt.so to compare with")
    p.add_argument("--round-trips", type=int, default=5000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--cc", default=os.environ.get("CC", "cc"))
    args = p.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("valgrind (callgrind) is not installed")
    build = (REPO / args.build).resolve()
    exe = compile_pingpong(args.cc, build)
    libs = [("this", Path(args.lib) if args.lib else build / "libshunt.so")]
    if args.base:
        libs.insert(0, ("base", Path(args.base)))
    print("| library | instructions per read | instructions per write |")
    print("|---|---|---|")
    for label, lib in libs:
        r = per_call(lib, exe, args.round_trips, args.size)
        print("| %s (%s) | %.0f | %.0f |" % (label, lib, r.get("do_recv", float("nan")), r.get("do_send", float("nan"))))


if __name__ == "__main__":
    main()
