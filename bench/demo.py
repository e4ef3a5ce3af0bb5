#!/usr/bin/env python3
"""shunt demo: the same real programs over kernel TCP and over shunt.

Runs three unmodified benchmark programs on 127.0.0.1, each once with
neither end under shunt (kernel TCP) and once with both ends under
`shunt run` (shared memory), alternating kernel and shunt (A B A B ...)
for several rounds, and prints the medians side by side:

  sockperf ping-pong   64-byte messages: one-way latency (median, average, p99)
  sockperf throughput  64 KiB messages: bandwidth as the receiving server
                       counts it (and as the sending client reports it)
  NetPIPE (NPtcp)      ping-pong bandwidth over message sizes 1 B .. 8 MiB

Every shunt run logs with SHUNT_LOG=info; the demo counts the log lines
"accelerated (server" and "accelerated (client" to show that the
connection really went through shared memory.  A shunt run that was not
accelerated, or a run that failed, is marked in the table and makes the
exit status non-zero.

Examples:
    python3 bench/demo.py                   # about a minute and a half
    python3 bench/demo.py --quick           # about 30 s
    python3 bench/demo.py --rounds 5 --markdown /tmp/demo.md

Exit status: 0 all runs worked and every shunt run was accelerated;
1 a run failed or a shunt run was not accelerated; 2 bad usage or a
missing program; 130 interrupted.
"""

import argparse
import datetime
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import HOST, gain, interrupt_on_signals, say, machine, machine_line, size_name, tool_version
from stdtools import (BENCHES, missing, NP_MAX, NP_SIZES, Results, accel_lines, build_table, per_round_lines,
                      render_markdown, render_text, run_all)

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------
# main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, help="kernel/shunt rounds (default 3; 2 with --quick)")
    p.add_argument("--seconds", type=int, help="duration of each sockperf run (default 2; 1 with --quick)")
    p.add_argument("--np-repeats", type=int,
                   help="NetPIPE round trips per message size and trial, -n (default 100; 25 with --quick)")
    p.add_argument("--pp-mps", type=int, default=4000000,
                   help="sockperf ping-pong --mps, which sizes its table of send times "
                        "(default 4000000: room for 4M round trips/s, about 16 B * (1+seconds) * mps of memory)")
    p.add_argument("--quick", action="store_true", help="shorter runs: about 30 s in all")
    p.add_argument("--bench", default="pp,tp,np", help="which benchmarks: pp,tp,np (the default), also ul,iperf,redis,wrk")
    p.add_argument("--build", default=str(REPO / "build"),
                   help="directory with libshunt.so and shunt (default: the repo's build/)")
    p.add_argument("--shunt-log", default="info", choices=["info", "debug", "trace"],
                   help="SHUNT_LOG for the shunt runs (default info; the check needs info or more)")
    p.add_argument("--shunt-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting for the shunt runs, e.g. SHUNT_RING_SIZE=256K (repeatable)")
    p.add_argument("--markdown", metavar="FILE", help="also write the results as markdown to FILE")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, outputs)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every run's values")
    a = p.parse_args(argv)
    a.rounds = a.rounds if a.rounds is not None else (2 if a.quick else 3)
    a.seconds = a.seconds if a.seconds is not None else (1 if a.quick else 2)
    a.np_repeats = a.np_repeats if a.np_repeats is not None else (25 if a.quick else 100)
    if a.rounds < 1 or a.seconds < 1 or a.np_repeats < 1:
        p.error("--rounds, --seconds and --np-repeats must be at least 1")
    a.bench = [b.strip() for b in a.bench.split(",") if b.strip()]
    bad = [b for b in a.bench if b not in BENCHES]
    if bad or not a.bench:
        p.error("--bench takes a list of %s" % ", ".join(BENCHES))
    return a


def preflight(opts):
    problems = []
    # absolute: the programs run in a directory of their own
    shunt = Path(opts.build).resolve() / "shunt"
    lib = Path(opts.build).resolve() / "libshunt.so"
    for f in (shunt, lib):
        if not f.exists():
            problems.append("%s is missing (make lib tool)" % f)
    for why in sorted({missing(b) for b in opts.bench} - {None}):
        problems.append("%s: scripts/install-deps --bench installs every benchmark program" % why)
    return problems, str(shunt)


def netpipe_summary(res):
    """Per size, the median over rounds; whether shunt >= kernel at each."""
    ks, ss = res.sweeps.get("kernel"), res.sweeps.get("shunt")
    if not ks or not ss:
        return None
    sizes = sorted(set.intersection(*[set(s) for s in ks + ss]))
    below = []
    for n in sizes:
        k = statistics.median(s[n] for s in ks)
        v = statistics.median(s[n] for s in ss)
        if v < k:
            below.append((n, v / k))
    if not below:
        return "NetPIPE: shunt >= kernel TCP at every one of the %d sizes measured (1 B .. 8 MiB, medians)" % len(sizes)
    shown = ", ".join("%s (%.2fx)" % (size_name(n), r) for n, r in below[:8])
    if len(below) > 8:
        shown += " and %d more" % (len(below) - 8)
    return ("NetPIPE: shunt >= kernel TCP at %d of %d sizes measured (medians); below at %s"
            % (len(sizes) - len(below), len(sizes), shown))


def headline(opts, res):
    """One line: what the main rows say."""
    parts = []
    for metric, what, better in (("pp_p50", "64 B ping-pong: median latency", "lower"),
                                 ("tp_recv", "64 KiB stream: received bandwidth", "higher"),
                                 ("np_%d" % NP_SIZES[0], "NetPIPE 64 B", "higher"),
                                 ("np_%d" % NP_SIZES[-1], "NetPIPE 8 MiB", "higher")):
        g = gain(res.median("kernel", metric), res.median("shunt", metric), better)
        if g is None:
            continue
        word = ("lower" if better == "lower" else "higher") if g >= 1 else "WORSE"
        parts.append("%s %.1fx %s" % (what, g if g >= 1 else 1 / g, word))
    return "in short, shunt vs kernel TCP: " + "; ".join(parts) if parts else None


def main(argv):
    opts = parse_args(argv)
    problems, shunt_bin = preflight(opts)
    if problems:
        for p in problems:
            print("demo: " + p, file=sys.stderr)
        return 2

    interrupt_on_signals()
    m = machine()
    started = datetime.datetime.now(datetime.timezone.utc)
    cmdline = shlex.join([os.path.relpath(sys.argv[0]) if sys.argv[0] else "bench/demo.py"] + list(argv))
    # sockperf's client sleeps 2 s after its warm-up, whatever -t says
    est = opts.rounds * sum({"pp": 2 * (opts.seconds + 2.6), "tp": 2 * (opts.seconds + 2.6),
                             "np": 2 * (0.5 + 4.5 * opts.np_repeats / 100)}.get(b, 2 * (opts.seconds + 3))
                              for b in opts.bench)
    say("shunt demo: the same programs over kernel TCP and over shunt, on %s" % HOST)
    say("machine:  %s" % machine_line(m))
    say("programs: sockperf %s, NetPIPE NPtcp; shunt from %s" % (tool_version(["sockperf", "--version"]), opts.build))
    say("plan:     %d round%s of kernel then shunt for each benchmark (about %.0f s)"
        % (opts.rounds, "s" if opts.rounds > 1 else "", est))
    say("")

    workdir = tempfile.mkdtemp(prefix="shunt-demo-")
    t_start = time.monotonic()
    res = Results()
    interrupted = False
    try:
        run_all(opts, shunt_bin, workdir, res, say)
    except KeyboardInterrupt:
        interrupted = True
        say("\ninterrupted; servers stopped")
    if interrupted:
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        return 130

    rows = build_table(opts, res)
    npline = netpipe_summary(res)
    say("")
    say("results: medians of %d round(s); latency is one-way (sockperf: half the round trip);" % opts.rounds)
    say("ratio = how many times better shunt is (kernel/shunt for latency, shunt/kernel for bandwidth)")
    say("")
    not_accel = any(not (a[1] and a[2]) for acc in res.accel.values() for a in acc)
    say(render_text(rows))
    say("")
    head = headline(opts, res)
    if not_accel:
        head = "in short: NO VALID COMPARISON: a shunt run was not accelerated (see below)"
    elif head and res.failures:
        head += " (with FAILED runs: see below)"
    if head:
        say(head)
    if npline:
        say(npline)
    for line in accel_lines(res):
        say(line)
    if opts.verbose:
        say("")
        for line in per_round_lines(opts, res):
            say(line)
    if res.failures:
        say("")
        say("FAILED RUNS:")
        for key, variant, rnd, what, detail in res.failures:
            say("  %s, %s, round %d: %s" % (BENCHES[key].name, variant, rnd, what))
            say(detail)

    bad = bool(res.failures) or not_accel
    say("")
    say("took %.0f s" % (time.monotonic() - t_start))
    if opts.markdown:
        md = ["## shunt demo: kernel TCP vs shunt", "",
              "- command: `%s`" % cmdline,
              "- date: %s" % started.strftime("%Y-%m-%d %H:%M UTC"),
              "- machine: %s" % machine_line(m),
              "- programs: sockperf %s, NetPIPE NPtcp (`-l 1 -u %d -p 0 -n %d`), sockperf runs of %d s"
              % (tool_version(["sockperf", "--version"]), NP_MAX, opts.np_repeats, opts.seconds),
              "- medians of %d rounds, kernel and shunt alternating; latency is one-way (half the round trip); "
              "ratio = how many times better shunt is" % opts.rounds, "",
              render_markdown(rows), ""]
        if head:
            md += [head + ".", ""]
        if npline:
            md += [npline, ""]
        md += ["- " + l.strip() for l in accel_lines(res) if not l.startswith("    ")]
        md += ["", "Round by round:", ""] + ["- " + l for l in per_round_lines(opts, res)]
        if res.failures:
            md += ["", "Failed runs:", ""]
            md += ["- %s, %s, round %d: %s" % (BENCHES[k].name, v, r, w) for k, v, r, w, _ in res.failures]
        Path(opts.markdown).write_text("\n".join(md) + "\n")
        say("")
        say("markdown written to %s" % opts.markdown)

    if bad:
        say("")
        if not_accel:
            say("*** NOT ACCELERATED: a shunt run went over kernel TCP; its numbers show no shunt gain ***")
        if res.failures:
            say("*** %d run(s) FAILED (details above) ***" % len(res.failures))
        say("run directory kept: %s" % workdir)
        return 1
    if opts.keep:
        say("run directory kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
