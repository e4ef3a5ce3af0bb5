#!/usr/bin/env python3
"""Overhead of shunt's interposition on a syscall-heavy TCP ping-pong.

Compiles pingpong (bench/pingpong*.c, cc -O2) into <build>/bench/, then runs it
alternately without (A: plain) and with (B: LD_PRELOAD=<build>/libshunt.so,
SHUNT_ACCEL=0, i.e. passthrough) for several rounds: in each round, for each
message size, A then B (A B A B ...), so that drift of a noisy machine
touches both alike.  pingpong forks: both processes of the pair (the one
that times and the echoing one) run with the same environment, and every
round trip is one blocking write(2) plus blocking read(2) calls on each side.

Reports, per message size, the median round-trip time of each variant, the
ratio of the medians (shunt / plain), and the min and max of the per-round
ratios.  Prints a markdown fragment; with --write-doc FILE, replaces the
section between ``<!-- overhead:begin -->`` and ``<!-- overhead:end -->``
in FILE (creating the file, or appending the section, if needed).  With
--accel 1 the shunt runs use SHUNT_ACCEL=1 (the fast path between the two
shunt'd processes) and the section is ``overhead-accel:begin/end``.

Examples:
    python3 bench/overhead.py
    python3 bench/overhead.py --round-trips 50000 --rounds 3
    python3 bench/overhead.py --write-doc docs/benchmarks.md

Nothing is pinned: on a small, shared machine the numbers are noisy; use
the medians, and look at min/max before trusting a small difference.
"""

import argparse
import datetime
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN = "<!-- overhead:begin -->"
END = "<!-- overhead:end -->"


def markers(accel):
    """Section markers: the passthrough run owns overhead:begin/end; an
    --accel 1 run has its own section (overhead-accel:begin/end)."""
    if accel == "0":
        return BEGIN, END
    return BEGIN.replace("overhead", "overhead-accel"), END.replace("overhead", "overhead-accel")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--round-trips", type=int, default=200000,
                   help="timed round trips per run (default 200000)")
    p.add_argument("--rounds", type=int, default=7, help="A/B rounds (default 7)")
    p.add_argument("--sizes", default="1,64",
                   help="comma-separated message sizes in bytes (default 1,64)")
    p.add_argument("--warmup", type=int, default=2000,
                   help="untimed round trips before each run (default 2000)")
    p.add_argument("--build", default=os.environ.get("SHUNT_BUILD") or str(REPO / "build"),
                   help="build directory with libshunt.so (default $SHUNT_BUILD or <repo>/build)")
    p.add_argument("--cc", default=os.environ.get("CC") or "cc", help="C compiler (default cc)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds allowed for one run (default 600)")
    p.add_argument("--accel", default="0", choices=["0", "1"],
                   help="SHUNT_ACCEL for the shunt runs (default 0: passthrough; 1 measures "
                        "the library's fast path between the two shunt'd processes)")
    p.add_argument("--cpus", metavar="LIST",
                   help="run both processes on these CPUs (taskset -c LIST); one CPU gives the "
                        "steadiest figures on a noisy 2-core machine")
    p.add_argument("--write-doc", metavar="FILE",
                   help="update the overhead section of this markdown file")
    a = p.parse_args(argv)
    try:
        a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError:
        p.error("--sizes: comma-separated integers expected")
    if not a.sizes or min(a.sizes) <= 0 or a.round_trips <= 0 or a.rounds <= 0:
        p.error("sizes, round trips and rounds must be positive")
    return a


def compile_pingpong(cc, build):
    outdir = build / "bench"
    outdir.mkdir(parents=True, exist_ok=True)
    exe = outdir / "pingpong"
    srcs = [str(REPO / "bench" / f) for f in ("pingpong.c", "pingpong_conn.c", "pingpong_cc.c")]
    r = subprocess.run([cc, "-O2", "-Wall", "-I", str(REPO / "tests" / "lib"), "-o", str(exe), *srcs, "-ldl"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit("compiling %s failed:\n%s" % (" ".join(srcs), r.stderr))
    return exe


def env_for(variant, lib, accel):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("SHUNT_"):
            del env[k]
    if variant == "shunt":
        env["LD_PRELOAD"] = str(lib)
        env["SHUNT_ACCEL"] = accel
    return env


def run_once(exe, variant, lib, size, args):
    cmd = [str(exe), "-n", str(args.round_trips), "-s", str(size), "-w", str(args.warmup)]
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus] + cmd
    try:
        r = subprocess.run(cmd, env=env_for(variant, lib, args.accel), capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        sys.exit("%s run timed out after %ss: %s" % (variant, args.timeout, shlex.join(cmd)))
    if r.returncode != 0:
        sys.exit("%s run failed (exit %d): %s\n%s%s" % (variant, r.returncode, shlex.join(cmd),
                                                        r.stdout, r.stderr))
    m = re.search(r"rtt_ns=([0-9.]+) libshunt=(yes|no)", r.stdout)
    if not m:
        sys.exit("unexpected output from pingpong: %r" % r.stdout)
    loaded = m.group(2) == "yes"
    if loaded != (variant == "shunt"):
        sys.exit("%s run: libshunt.so %s mapped in the benchmark process"
                 % (variant, "is" if loaded else "is not"))
    return float(m.group(1))


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu": cpu,
            "arch": platform.machine()}


def command_line():
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(REPO)
    except ValueError:
        pass
    return shlex.join(["python3", str(script)] + sys.argv[1:])


def render(results, args, info):
    begin, end = markers(args.accel)
    lines = [
        begin,
        "## Interposition overhead (%s)" % ("passthrough" if args.accel == "0"
                                             else "SHUNT_ACCEL=1"),
        "",
        "TCP ping-pong over 127.0.0.1 between two processes (bench/pingpong.c: "
        "blocking write/read, TCP_NODELAY), %d timed round trips per run after %d "
        "warm-up ones, %d rounds alternating plain (A) and "
        "`LD_PRELOAD=build/libshunt.so SHUNT_ACCEL=%s` (B). Medians over the rounds; "
        "ratio = shunt / plain (per-round ratios give min and max)."
        % (args.round_trips, args.warmup, args.rounds, args.accel),
        "",
        "| message | plain RTT (µs, median) | shunt RTT (µs, median) "
        "| ratio shunt/plain (of medians) | ratio min | ratio max |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for size in args.sizes:
        plain, shunt = results[size]["plain"], results[size]["shunt"]
        ratios = [s / p for p, s in zip(plain, shunt)]
        mp, ms = statistics.median(plain), statistics.median(shunt)
        lines.append("| %d B | %.2f | %.2f | %.3f | %.3f | %.3f |"
                     % (size, mp / 1000, ms / 1000, ms / mp, min(ratios), max(ratios)))
    lines += [
        "",
        "- command: `%s`" % info["command"],
        "- date: %s" % info["date"],
        "- machine: %s CPUs (nproc), kernel %s, %s, CPU: %s; %s; shared "
        "and noisy machine: trust the medians, not single runs"
        % (info["nproc"], info["kernel"], info["arch"], info["cpu"],
           "both processes on CPU %s" % info["cpus"] if info.get("cpus") else "nothing pinned"),
        end,
    ]
    return "\n".join(lines) + "\n"


def write_doc(path, section, accel="0"):
    begin, end = markers(accel)
    path = Path(path)
    if path.exists():
        text = path.read_text()
        b, e = text.find(begin), text.find(end)
        if b >= 0 and e > b:
            text = text[:b] + section.rstrip("\n") + text[e + len(end):]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "# Benchmarks\n\n" + section
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    build = Path(args.build).resolve()
    lib = build / "libshunt.so"
    if not lib.exists():
        sys.exit("%s not found: run `make` first (or pass --build)" % lib)
    if shutil.which(args.cc) is None:
        sys.exit("C compiler %r not found" % args.cc)
    exe = compile_pingpong(args.cc, build)

    results = {s: {"plain": [], "shunt": []} for s in args.sizes}
    for rnd in range(1, args.rounds + 1):
        for size in args.sizes:
            for variant in ("plain", "shunt"):  # A B A B ...
                rtt = run_once(exe, variant, lib, size, args)
                results[size][variant].append(rtt)
                print("round %d/%d size %d %-5s rtt %.0f ns" % (rnd, args.rounds, size, variant, rtt),
                      file=sys.stderr, flush=True)

    info = machine()
    info["command"] = command_line()
    info["cpus"] = args.cpus
    info["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = render(results, args, info)
    print(section, end="")
    if args.write_doc:
        write_doc(args.write_doc, section, args.accel)
        print("updated %s" % args.write_doc, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
