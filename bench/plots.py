"""plots: the three NetPIPE graphs of `shunt bench` (seed 002, section 4.2),
as PNG files, one line per transport:

  throughput.png  throughput against message size (log x)
  signature.png   throughput against one-way time (log x): the latency is
                  where a line starts, the peak throughput its top
  saturation.png  one-way time against message size (log-log): where a line
                  bends upwards the transport saturates

matplotlib is imported only here and only when plotting, so the rest of
the benchmark runs (and says what is missing) without it."""

from pathlib import Path

STYLES = {  # transport -> (label, matplotlib format)
    "tcp": ("kernel TCP", "o-"),
    "unix": ("Unix domain socket", "s-"),
    "shunt": ("shunt (TCP under shunt run)", "^-"),
    "floor": ("floor (bare shared-memory ring)", "v--"),
    "memcpy": ("memcpy, one thread (reference)", "x:"),
    "lo": ("kernel TCP, loopback in one namespace (--netns)", "d-."),
}

FILES = ("throughput.png", "signature.png", "saturation.png")


def plot_all(curves, outdir, title, labels=None):
    """curves: {transport: [(size_bytes, one_way_seconds, mbit_per_s)]}
    sorted by size; labels: {transport: label} instead of STYLES'.  Writes FILES into outdir; returns their paths.
    Raises ImportError when matplotlib is not installed."""
    import matplotlib
    matplotlib.use("Agg")   # no display needed
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    graphs = [
        ("throughput.png", "throughput graph", lambda p: p[0], lambda p: p[2],
         "message size (bytes)", "throughput (Mbit/s)", "log", "linear"),
        ("signature.png", "signature graph", lambda p: p[1], lambda p: p[2],
         "one-way time (s)", "throughput (Mbit/s)", "log", "linear"),
        ("saturation.png", "saturation graph", lambda p: p[0], lambda p: p[1],
         "message size (bytes)", "one-way time (s)", "log", "log"),
    ]
    written = []
    for name, what, fx, fy, xl, yl, xs, ys in graphs:
        fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
        for transport, (label, style) in STYLES.items():
            pts = curves.get(transport)
            if not pts:
                continue
            ax.plot([fx(p) for p in pts], [fy(p) for p in pts], style, label=(labels or {}).get(transport, label),
                    markersize=3, linewidth=1.2)
        ax.set_xscale(xs)
        ax.set_yscale(ys)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title("%s: %s" % (title, what))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = outdir / name
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
