#!/usr/bin/env python3
"""Tuning sweep: NetPIPE (NPtcp) ping-pong and iperf3 streaming runs across shunt's
ring size, chunk size and single-copy threshold, against kernel TCP, written
as CSV, plots and a markdown summary that names the best value of each.

One factor at a time, as the seeds' buffer-count and buffer-size sweeps did:
each run changes one setting and keeps the others at their defaults.  Every
configuration is run --rounds times, alternating with the others, and the
median per message size is kept, so that drift of the machine touches all
alike.

  python3 bench/sweep.py --build build --out sweep-out              # full sweep (quiet machine)
  python3 bench/sweep.py --build build --out sweep-out --quick      # small: checks the script

pingpong is NPtcp -l 1 -u MAX -p 0 -n REPEATS (bandwidth of one message at a time,
NetPIPE's curve); stream is iperf3 with one stream writing messages of each of
STREAM_SIZES for --seconds (NPtcp's own streaming mode stops with "error
writing or reading synchronization string" on this kernel, also without shunt).

Output in --out: sweep.csv (one row per run and size), one PNG per factor and
mode (bandwidth against message size, one curve per value, kernel TCP
dashed), and summary.md (the table of medians at a few sizes, and the value
of each factor with the best geometric-mean bandwidth from 64 KiB up).
Figures are only meaningful on a quiet machine: docs/benchmarks.md says
how the defaults were chosen from them.
"""
import argparse
import csv
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import HOST, RunError, Variant, acceleration, free_port, size_name  # noqa: E402
from stdtools import run_pair  # noqa: E402

DEFAULTS = {"SHUNT_RING_SIZE": "1M", "SHUNT_CHUNK_SIZE": "64K", "SHUNT_ZCOPY_THRESHOLD": "0"}
FACTORS = {
    "ring": ("SHUNT_RING_SIZE", "64K,256K,1M,4M,16M"),
    "chunk": ("SHUNT_CHUNK_SIZE", "16K,64K,256K,1M"),
    "threshold": ("SHUNT_ZCOPY_THRESHOLD", "0,64K,256K,1M,4M"),
}
QUICK = {"ring": "64K,1M", "chunk": "64K,256K", "threshold": "0,256K"}
STREAM_SIZES = [64, 4096, 65536, 1 << 20]   # iperf3 takes writes of at most 1 MiB
SUMMARY_SIZES = [64, 4096, 65536, 262144, 1 << 20, 4 << 20, 8 << 20]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build", help="build directory with shunt (default: build)")
    p.add_argument("--out", default="sweep-out", help="output directory (default: sweep-out)")
    p.add_argument("--factors", default="ring,chunk,threshold", help="which factors to sweep")
    for name, (var, values) in FACTORS.items():
        p.add_argument("--%s" % name, default=None, help="values of %s (default: %s)" % (var, values))
    p.add_argument("--modes", default="pingpong,stream", help="pingpong (NPtcp) and/or stream (iperf3)")
    p.add_argument("--seconds", type=int, default=3, help="iperf3 -t per size, whole seconds (default 3)")
    p.add_argument("--max-size", type=int, default=8 << 20, help="largest message, bytes (default 8 MiB)")
    p.add_argument("--repeats", type=int, default=50, help="NPtcp -n: round trips per size (default 50)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each configuration (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="a few values, sizes up to 1 MiB, 3 round trips, one round: checks the script")
    p.add_argument("--no-plots", action="store_true", help="CSV and summary only")
    o = p.parse_args(argv)
    if o.quick:
        o.max_size, o.repeats, o.rounds, o.seconds = min(o.max_size, 1 << 20), 3, 1, 1
    o.factors = [f for f in o.factors.split(",") if f]
    o.modes = [m for m in o.modes.split(",") if m]
    for f in o.factors:
        if f not in FACTORS:
            p.error("unknown factor %s (ring, chunk, threshold)" % f)
    for m in o.modes:
        if m not in ("pingpong", "stream"):
            p.error("unknown mode %s (pingpong, stream)" % m)
    o.values = {}
    for f in o.factors:
        given = getattr(o, f)
        o.values[f] = (given or (QUICK[f] if o.quick else FACTORS[f][1])).split(",")
    return o


def size_bytes(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def parse_np(path):
    """NPtcp's output file: bytes, Mbps, seconds per message."""
    rows = {}
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if len(f) >= 3:
            try:
                rows[int(f[0])] = (float(f[1]), float(f[2]) * 1e6)
            except ValueError:
                continue
    if not rows:
        raise RunError("NPtcp wrote no results", Path(path).read_text())
    return rows


def parse_iperf(text):
    import json
    try:
        bps = json.loads(text)["end"]["sum_received"]["bits_per_second"]
    except (ValueError, KeyError, TypeError):
        raise RunError("iperf3 gave no result", text)
    return bps / 2**20


def one_run(opts, shunt_bin, env, mode, rundir):
    """NPtcp pair (pingpong) or iperf3 pairs (stream); {size: (Mbps, usec)}."""
    prefix = [shunt_bin, "run", "--"] if env is not None else []
    variant = Variant("shunt" if env is not None else "kernel", prefix, env or {})
    if mode == "stream":
        res = {}
        for size in (s for s in STREAM_SIZES if s <= opts.max_size):
            port = free_port()
            srv = prefix + ["iperf3", "-s", "-1", "-B", HOST, "-p", str(port)]
            cli = prefix + ["iperf3", "-c", HOST, "-p", str(port), "-l", str(size), "-t", str(opts.seconds), "-J"]
            mbps = run_pair(srv, cli, variant, rundir, port, 120, lambda o, s: parse_iperf(o), server_exits=True)
            res[size] = (mbps, size * 8 / 2**20 / mbps * 1e6 if mbps else 0.0)
        return res
    port = free_port()
    common = ["-P", str(port), "-l", "1", "-u", str(opts.max_size), "-p", "0", "-n", str(opts.repeats)]
    out = Path(rundir) / "np.out"
    out.unlink(missing_ok=True)
    srv = prefix + ["NPtcp"] + common
    cli = prefix + ["NPtcp", "-h", HOST] + common + ["-o", str(out)]
    return run_pair(srv, cli, variant, rundir, port, 600, lambda o, s: parse_np(out), server_exits=True)


def configurations(opts):
    """(factor, value, env) for every run; the kernel baseline has env None."""
    confs = [("kernel", "-", None)]
    for f in opts.factors:
        var = FACTORS[f][0]
        for v in opts.values[f]:
            env = dict(DEFAULTS)
            # the log says whether each run was accelerated (checked after it)
            env.update(SHUNT_LOG="info", SHUNT_LOG_FILE="{dir}/shunt-%p.log")
            env[var] = v
            if var == "SHUNT_RING_SIZE":
                env["SHUNT_RING_START"] = v   # the size under test from the first byte on
            confs.append((f, v, env))
    return confs


def sweep(opts, shunt_bin, say):
    samples = {}   # (factor, value, mode, size) -> [(Mbps, usec)]
    confs = configurations(opts)
    with tempfile.TemporaryDirectory(prefix="shunt-sweep-") as work:
        for rnd in range(opts.rounds):
            for mode in opts.modes:
                for factor, value, env in confs:
                    t0 = time.monotonic()
                    rundir = Path(work) / ("r%d-%s-%s-%s" % (rnd, mode, factor, value))
                    rundir.mkdir()
                    try:
                        res = one_run(opts, shunt_bin, env, mode, rundir)
                    except RunError as e:
                        say("FAILED %s=%s %s: %s\n%s" % (factor, value, mode, e.what, e.output[-1500:]))
                        raise SystemExit(1)
                    if env is not None:
                        # a figure that went over kernel TCP is no figure of the setting
                        srv, cli, notable = acceleration(rundir)
                        if not (srv and cli):
                            say("NOT ACCELERATED %s=%s %s (server %d, client %d): %s"
                                % (factor, value, mode, srv, cli, notable[-3:]))
                            raise SystemExit(1)
                    for size, row in res.items():
                        samples.setdefault((factor, value, mode, size), []).append(row)
                    say("round %d %-9s %-6s %-9s %5.1f s" % (rnd + 1, factor, value, mode, time.monotonic() - t0))
    return samples


def medians(samples):
    return {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
            for k, v in samples.items()}


def write_csv(path, samples):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["factor", "value", "mode", "size", "round", "mbps", "usec"])
        for (factor, value, mode, size), rows in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
            for i, (mbps, usec) in enumerate(rows):
                w.writerow([factor, value, mode, size, i + 1, "%.3f" % mbps, "%.3f" % usec])


def sizes_of(med, factor, value, mode):
    return sorted(s for (f, v, m, s) in med if (f, v, m) == (factor, value, mode))


def best_value(opts, med, factor, mode):
    """The value with the highest geometric mean of bandwidth over sizes >= 64 KiB."""
    scores = {}
    for v in opts.values[factor]:
        bw = [med[(factor, v, mode, s)][0] for s in sizes_of(med, factor, v, mode) if s >= 65536]
        if bw:
            scores[v] = math.exp(sum(math.log(max(b, 1e-9)) for b in bw) / len(bw))
    return (max(scores, key=scores.get), scores) if scores else (None, {})


def plot(opts, med, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []
    for factor in opts.factors:
        for mode in opts.modes:
            fig, ax = plt.subplots(figsize=(8, 5))
            ks = sizes_of(med, "kernel", "-", mode)
            ax.plot(ks, [med[("kernel", "-", mode, s)][0] for s in ks], "k--", label="kernel TCP")
            for v in opts.values[factor]:
                ss = sizes_of(med, factor, v, mode)
                ax.plot(ss, [med[(factor, v, mode, s)][0] for s in ss], marker=".", label="%s=%s" % (FACTORS[factor][0], v))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("bandwidth (Mbps = 2^20 bit/s)")
            ax.set_title("%s: %s" % ("NPtcp ping-pong" if mode == "pingpong" else "iperf3 one stream", FACTORS[factor][0]))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize="small")
            name = "sweep-%s-%s.png" % (factor, mode)
            fig.tight_layout()
            fig.savefig(outdir / name, dpi=110)
            plt.close(fig)
            files.append(name)
    return files


def summary(opts, med, plots):
    lines = ["# shunt tuning sweep", "",
             "pingpong: NPtcp -l 1 -u %d -p 0 -n %d; stream: iperf3 -l SIZE -t %d; %d round(s), medians; "
             "Mbps = 2^20 bit/s." % (opts.max_size, opts.repeats, opts.seconds, opts.rounds),
             "Defaults held while one factor varies: %s." % ", ".join("%s=%s" % kv for kv in DEFAULTS.items()), ""]
    for mode in opts.modes:
        # the sizes each mode measured (NPtcp's sweep has them all; iperf3 runs STREAM_SIZES)
        shown = [s for s in (SUMMARY_SIZES if mode == "pingpong" else STREAM_SIZES) if s <= opts.max_size]
        lines += ["## %s" % mode, "", "| setting | " + " | ".join(size_name(s) for s in shown) + " |",
                  "|---|" + "---|" * len(shown)]
        rows = [("kernel TCP", "kernel", "-")] + [("%s=%s" % (FACTORS[f][0], v), f, v) for f in opts.factors for v in opts.values[f]]
        for label, f, v in rows:
            cells = []
            for s in shown:
                cells.append("%.0f" % med[(f, v, mode, s)][0] if (f, v, mode, s) in med else "-")
            lines.append("| %s | %s |" % (label, " | ".join(cells)))
        lines.append("")
        for f in opts.factors:
            best, scores = best_value(opts, med, f, mode)
            if best is not None:
                lines.append("- %s: best %s=%s (geometric mean from 64 KiB: %s)" % (
                    mode, FACTORS[f][0], best, ", ".join("%s %.0f" % (v, sc) for v, sc in scores.items())))
        lines.append("")
    if plots:
        lines += ["## Figures", ""] + ["![%s](%s)" % (p, p) for p in plots] + [""]
    return "\n".join(lines)


def main(argv):
    opts = parse_args(argv)
    shunt_bin = str(Path(opts.build, "shunt").resolve())
    if not Path(shunt_bin).exists():
        print("sweep: %s not found (make first)" % shunt_bin, file=sys.stderr)
        return 2
    outdir = Path(opts.out)
    outdir.mkdir(parents=True, exist_ok=True)
    samples = sweep(opts, shunt_bin, lambda s: print(s, flush=True))
    med = medians(samples)
    write_csv(outdir / "sweep.csv", samples)
    plots = [] if opts.no_plots else plot(opts, med, outdir)
    (outdir / "summary.md").write_text(summary(opts, med, plots))
    print("wrote %s" % ", ".join(str(outdir / n) for n in ["sweep.csv", "summary.md"] + plots))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
