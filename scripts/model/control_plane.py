#!/usr/bin/env python3
"""A model of the control plane between node leaders (issue 44): a star around rank 0 against
a k-ary tree, fitted to engine_bench runs on emulated nodes and projected to large jobs.

    scripts/model/control_plane.py RUNS.jsonl [--plot docs/control-plane-model.png]
    scripts/model/control_plane.py --self-test

Stdlib only; matplotlib only for --plot (skipped, with a message, when it is missing).
Run with --help for the inputs and the model.
"""

import argparse
import json
import math
import sys

HELP = """\
INPUT: a JSON-lines file, one line per run: the line rank 0 of
crates/symmem-bootstrap/examples/engine_bench.rs prints (engine_bench_nodes prints it too),
with fields added by hand:

  "nodes":  N, the node count (default: the hosts counted in "daemons_kb")
  "shape":  "star" (every leader linked to rank 0) or "tree" (leaders in a k-ary tree)
  "fanout": k, the children per leader of a tree (ignored, may be null, for a star)

Of engine_bench's own fields the model reads:

  barrier_us.median            barrier latency, microseconds (--stat picks min or median)
  rank0_cpu_us_per_barrier     rank 0's CPU time (user + sys) per barrier
  rank0_frames_per_barrier     TCP frames rank 0 sent + received per barrier
  leaders_cpu_us_per_barrier   the other node leaders' CPU per barrier: {min, median, max}
  leaders_frames_per_barrier   their frames per barrier: {min, median, max}
  rendezvous_us                start-up: join plus the heap exchange, slowest rank

Other fields are kept and ignored. Blank lines are skipped. For example (shortened):

  {"nodes": 8, "shape": "star", "fanout": null, "barrier_us": {"median": 176.6, ...},
   "rank0_cpu_us_per_barrier": 120.4, "rank0_frames_per_barrier": 14.0, ...}

scripts/model/example.jsonl holds two real star runs (2 and 8 emulated nodes).

TREE: the complete k-ary tree over the N node leaders in heap order (leader i's parent is
(i - 1) // k, rank 0's node the root). Its height is exact: the fewest levels below the root
whose nodes number N or more (1 + k + k^2 + ...), which can be less than ceil(log_k N)
(3 nodes in a binary tree: height 1). A star is the tree with k = N - 1 (height 1).

MODEL (all times in microseconds):

  barrier(N) = L + H * (net + c) + S * c
      H = 2 * height   hops on the critical path (up to the root and back down)
      S = 2 * sum over the levels of the most children any leader of that level has: the
          frames the busiest leader of each level handles one after the other (star:
          2 (N - 1) at rank 0; tree: 2 k per level, fewer on a last, partial level)
      L the local part (the ranks' Unix star, the Context), c the cost of one frame at a
      leader, net the one-way network latency. L and c are fitted by least squares on the
      relative error; net is fitted too for the measured points when there are three runs or
      more of at least two tree heights (emulated nodes share one loopback, so it is
      loopback's), else it is --measured-net-us (default 0: loopback's latency folds into L).

  rank 0 CPU per barrier = a + b * F0, F0 = 2 * min(k, N - 1) the frames rank 0 handles,
      a and b fitted from the rank 0 points and the other leaders' medians (2 frames each
      under a star, 2 k + 2 for a tree's inner leaders).

  start-up(N) = fence + connections
      star: (N - 1) * h + 5 * net      every leader's handshake served by rank 0 in turn
      tree: sum over the levels of the busiest parent's children * h + height * 5 * net
            (a leader opens its children's links once its own link is up)
      h the cost of one handshake at the serving leader (--handshake-us, default 100: an
      accept, a thread, three HMAC-SHA256 and three small messages; or --fit-handshake, from
      the star runs' rendezvous_us), 5 one-way latencies per handshake (TCP's connect, then
      the server's nonce, the client's proof, the server's answer). The fence (PMIx's
      all-gather, the launch) is fitted as one constant from rendezvous_us: it does not grow
      with N in the projection, which understates it at scale. On emulated nodes the
      rendezvous also holds the launcher's spread of the ranks' starts, which grows with N.

OUTPUT: markdown tables: the fitted parameters, each measured point against the model (error
in %), and the projection to --project nodes (default 128, 1024, 8192) for the star and the
tree of each --fanout, at each --net-us (default 2: InfiniBand, 20: TCP over Ethernet).
"""

# One-way latencies of a handshake: TCP's connect (a round trip), the server's nonce, the
# client's proof and the server's answer.
HANDSHAKE_TRIPS = 5
DEFAULT_HANDSHAKE_US = 100.0


# ---------------------------------------------------------------------------------------------
# The tree.


def tree_height(n, k):
    """The height of the complete k-ary tree over n nodes: the fewest levels below the root
    such that 1 + k + k^2 + ... reaches n (0 for a lone node). Exact, in integers."""
    if n < 1 or k < 1:
        raise ValueError(f"a tree needs n >= 1 and k >= 1, not n={n}, k={k}")
    height, covered, width = 0, 1, 1
    while covered < n:
        width *= k
        covered += width
        height += 1
    return height


def busiest_per_level(n, k):
    """For each level that has children (0 = the root), the most children a node of that
    level has, in the heap-ordered complete k-ary tree over n nodes (node i's children are
    k i + 1 .. k i + k). The first node of a level has the most."""
    out = []
    first = 0
    for _ in range(tree_height(n, k)):
        out.append(max(0, min(k, n - (k * first + 1))))
        first = k * first + 1
    return out


def fanout_of(shape, n, k):
    """The k of the tree a run's shape is: a star is the tree with k = N - 1."""
    if shape == "star":
        return max(1, n - 1)
    return k


def hops(n, shape, k):
    """Frames on the critical path of one collective: up to the root and back."""
    return 2 * tree_height(n, fanout_of(shape, n, k))


def serial_frames(n, shape, k):
    """Frames the busiest leader of each level handles one after the other, summed."""
    return 2 * sum(busiest_per_level(n, fanout_of(shape, n, k)))


def rank0_frames(n, shape, k):
    """Frames rank 0 (the root) sends and receives per collective."""
    return 2 * min(fanout_of(shape, n, k), n - 1)


def inner_frames(n, shape, k):
    """Frames of the busiest leader below the root (its children's and its parent's), or
    2 when there is none (a star's leaders)."""
    levels = busiest_per_level(n, fanout_of(shape, n, k))
    return 2 * (max(levels[1:]) if len(levels) > 1 else 0) + 2


# ---------------------------------------------------------------------------------------------
# Least squares.


def least_squares(rows, ys, weights=None):
    """The x minimising sum (w (row . x - y))^2, by the normal equations; None when they are
    singular (the columns do not tell the unknowns apart)."""
    m = len(rows[0])
    weights = weights or [1.0] * len(rows)
    a = [[0.0] * m for _ in range(m)]
    b = [0.0] * m
    for row, y, w in zip(rows, ys, weights):
        for i in range(m):
            b[i] += w * w * row[i] * y
            for j in range(m):
                a[i][j] += w * w * row[i] * row[j]
    scale = max(abs(a[i][i]) for i in range(m)) or 1.0
    for col in range(m):
        pivot = max(range(col, m), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) <= 1e-10 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(m):
            if r != col:
                f = a[r][col] / a[col][col]
                for j in range(col, m):
                    a[r][j] -= f * a[col][j]
                b[r] -= f * b[col]
    return [b[i] / a[i][i] for i in range(m)]


def relative(ys):
    """Weights that make least squares minimise the relative error."""
    return [1.0 / abs(y) if y else 1.0 for y in ys]


# ---------------------------------------------------------------------------------------------
# The model.


class Model:
    """The fitted constants; see HELP."""

    def __init__(self):
        self.local = 0.0  # L
        self.per_message = 0.0  # c
        self.measured_net = 0.0
        self.net_fitted = False
        self.cpu_local = None  # a
        self.cpu_per_frame = None  # b
        self.handshake = DEFAULT_HANDSHAKE_US  # h
        self.handshake_from = "default"
        self.fence = None

    def barrier(self, n, shape, k, net):
        h = hops(n, shape, k)
        return self.local + h * (net + self.per_message) + serial_frames(n, shape, k) * self.per_message

    def rank0_cpu(self, n, shape, k, frames=None):
        if self.cpu_local is None:
            return None
        frames = rank0_frames(n, shape, k) if frames is None else frames
        return self.cpu_local + self.cpu_per_frame * frames

    def connections(self, n, shape, k, net):
        kk = fanout_of(shape, n, k)
        levels = busiest_per_level(n, kk)
        return sum(levels) * self.handshake + len(levels) * HANDSHAKE_TRIPS * net

    def startup(self, n, shape, k, net):
        if self.fence is None:
            return None
        return self.fence + self.connections(n, shape, k, net)


def fit(points, measured_net=0.0, handshake=None, fit_handshake=False):
    """The model fitted to `points` (dicts: nodes, shape, fanout, barrier, and optionally
    rank0_cpu, rank0_frames, leaders_cpu, leaders_frames, rendezvous)."""
    if len(points) < 2:
        raise ValueError(f"the fit needs at least 2 runs, the input has {len(points)}")
    model = Model()
    ys = [p["barrier"] for p in points]
    hs = [hops(p["nodes"], p["shape"], p["fanout"]) for p in points]
    ss = [serial_frames(p["nodes"], p["shape"], p["fanout"]) for p in points]
    solved = None
    if len(set(hs)) >= 2 and len(points) >= 3:
        solved = least_squares([[1.0, h, h + s] for h, s in zip(hs, ss)], ys, relative(ys))
    if solved is not None:
        model.local, model.measured_net, model.per_message = solved
        model.net_fitted = True
    else:
        model.measured_net = measured_net
        rows = [[1.0, h + s] for h, s in zip(hs, ss)]
        targets = [y - h * measured_net for y, h in zip(ys, hs)]
        solved = least_squares(rows, targets, relative(ys))
        if solved is None:
            raise ValueError("the runs do not tell the local part from the per-frame cost: "
                             "give runs of at least two node counts or shapes")
        model.local, model.per_message = solved

    cpu = cpu_points(points)
    if len({f for f, _ in cpu}) >= 2:
        solved = least_squares([[1.0, f] for f, _ in cpu], [c for _, c in cpu], relative([c for _, c in cpu]))
        if solved is not None:
            model.cpu_local, model.cpu_per_frame = solved

    if handshake is not None:
        model.handshake, model.handshake_from = handshake, "--handshake-us"
    starts = [p for p in points if p.get("rendezvous") is not None]
    if fit_handshake:
        stars = [p for p in starts if p["shape"] == "star"]
        if len({p["nodes"] for p in stars}) < 2:
            raise ValueError("--fit-handshake needs star runs of at least two node counts with rendezvous_us")
        ys = [p["rendezvous"] - HANDSHAKE_TRIPS * model.measured_net for p in stars]
        solved = least_squares([[1.0, p["nodes"] - 1] for p in stars], ys, relative(ys))
        if solved is None:
            raise ValueError("--fit-handshake: the star runs do not tell the fence from the handshakes")
        model.fence, model.handshake = solved
        model.handshake_from = "fitted (star rendezvous_us)"
    elif starts:
        ys = [p["rendezvous"] for p in starts]
        rest = [y - model.connections(p["nodes"], p["shape"], p["fanout"], model.measured_net)
                for y, p in zip(ys, starts)]
        model.fence = least_squares([[1.0]] * len(starts), rest, relative(ys))[0]
    return model


def cpu_points(points):
    """(frames per barrier, CPU per barrier) of rank 0 and of the other leaders' medians."""
    out = []
    for p in points:
        if p.get("rank0_cpu") is not None:
            frames = p.get("rank0_frames")
            if frames is None:
                frames = rank0_frames(p["nodes"], p["shape"], p["fanout"])
            out.append((frames, p["rank0_cpu"]))
        if p.get("leaders_cpu") is not None and p.get("leaders_frames") is not None:
            out.append((p["leaders_frames"], p["leaders_cpu"]))
    return out


# ---------------------------------------------------------------------------------------------
# Input.


def median_of(value):
    """A {min, median, max} object's median, or None."""
    return value.get("median") if isinstance(value, dict) else None


def read_points(path, stat):
    points = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                run = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e})") from None
            points.append(point(run, stat, where))
    if not points:
        raise ValueError(f"{path}: no runs")
    return points


def point(run, stat, where):
    """One run's numbers; an error names what is missing."""
    shape = run.get("shape")
    if shape not in ("star", "tree"):
        raise ValueError(f'{where}: "shape" must be "star" or "tree", not {shape!r}')
    nodes = run.get("nodes")
    if nodes is None and isinstance(run.get("daemons_kb"), list):
        nodes = len({d[0] for d in run["daemons_kb"] if d})
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f'{where}: "nodes" must be a node count (add "nodes": N to the line)')
    fanout = run.get("fanout")
    if shape == "tree" and (not isinstance(fanout, int) or fanout < 1):
        raise ValueError(f'{where}: a tree needs "fanout": k (its children per leader)')
    barrier = run.get("barrier_us", {}).get(stat) if isinstance(run.get("barrier_us"), dict) else None
    if not isinstance(barrier, (int, float)):
        raise ValueError(f"{where}: no barrier_us.{stat} (is it an engine_bench line?)")
    return {
        "nodes": nodes,
        "shape": shape,
        "fanout": fanout if shape == "tree" else None,
        "barrier": float(barrier),
        "rank0_cpu": run.get("rank0_cpu_us_per_barrier"),
        "rank0_frames": run.get("rank0_frames_per_barrier"),
        "leaders_cpu": median_of(run.get("leaders_cpu_us_per_barrier")),
        "leaders_frames": median_of(run.get("leaders_frames_per_barrier")),
        "rendezvous": run.get("rendezvous_us"),
    }


# ---------------------------------------------------------------------------------------------
# Output.


def num(value, places=1):
    if value is None:
        return "-"
    return f"{value:,.{places}f}"


def err(model_value, measured):
    if model_value is None or measured in (None, 0):
        return "-"
    percent = round(100.0 * (model_value - measured) / measured, 1)
    return f"{percent:+.1f}" if percent else "0.0"


def shape_name(shape, k):
    return "star" if shape == "star" else f"tree k={k}"


def report(model, points, project, fanouts, nets):
    out = ["## Fitted parameters", "", "| parameter | value | from |", "|---|---|---|"]
    out.append(f"| local part L | {num(model.local, 2)} us | least squares on the barrier medians |")
    out.append(f"| per-frame cost c | {num(model.per_message, 2)} us | least squares on the barrier medians |")
    out.append(f"| network latency of the measured runs | {num(model.measured_net, 2)} us | "
               + ("least squares (loopback)" if model.net_fitted
                  else "--measured-net-us (one tree height only: not separable from L)") + " |")
    if model.cpu_local is not None:
        out.append(f"| rank 0 CPU: local a | {num(model.cpu_local, 2)} us | least squares on CPU per barrier |")
        out.append(f"| rank 0 CPU: per frame b | {num(model.cpu_per_frame, 2)} us | least squares on CPU per barrier |")
    out.append(f"| handshake cost h | {num(model.handshake, 1)} us | {model.handshake_from} |")
    if model.fence is not None:
        out.append(f"| fence (constant) | {num(model.fence / 1000.0, 2)} ms | rendezvous_us less the connections |")
    out += ["", "## Measured runs against the model", "",
            "| nodes | shape | barrier us | model | err % | rank 0 CPU us | model | err % "
            "| rank 0 frames | model | start-up ms | model | err % |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    warnings = []
    for p in points:
        n, shape, k = p["nodes"], p["shape"], p["fanout"]
        b = model.barrier(n, shape, k, model.measured_net)
        cpu = model.rank0_cpu(n, shape, k, p["rank0_frames"])
        frames = rank0_frames(n, shape, k)
        start = model.startup(n, shape, k, model.measured_net)
        if p["rank0_frames"] is not None and abs(p["rank0_frames"] - frames) > 0.01:
            warnings.append(f"{n} nodes, {shape_name(shape, k)}: rank 0 handled {p['rank0_frames']} frames "
                            f"per barrier, the model's tree {frames}: is the tree shaped otherwise?")
        rendezvous = p["rendezvous"] / 1000.0 if p["rendezvous"] is not None else None
        out.append(f"| {n} | {shape_name(shape, k)} | {num(p['barrier'])} | {num(b)} | {err(b, p['barrier'])} "
                   f"| {num(p['rank0_cpu'])} | {num(cpu)} | {err(cpu, p['rank0_cpu'])} "
                   f"| {num(p['rank0_frames'], 0)} | {frames} "
                   f"| {num(rendezvous)} | {num(start / 1000.0 if start is not None else None)} "
                   f"| {err(start, p['rendezvous'])} |")
    if len(points) <= (3 if model.net_fitted else 2):
        warnings.append("as many runs as fitted constants: the barrier errors are 0 by construction")
    out += [""] + [f"Note: {w}" for w in warnings] + ([""] if warnings else [])
    out += ["## Projection", "",
            "| nodes | shape | height | "
            + " | ".join(f"barrier us, net {num(net, 0)} us" for net in nets)
            + " | rank 0 CPU us/barrier | rank 0 frames/barrier | "
            + " | ".join(f"start-up ms, net {num(net, 0)} us" for net in nets) + " |",
            "|---:|---|---:|" + "---:|" * (2 * len(nets) + 2)]
    shapes = [("star", None)] + [("tree", k) for k in fanouts]
    for n in project:
        for shape, k in shapes:
            starts = [model.startup(n, shape, k, net) for net in nets]
            cells = [f"{n:,}", shape_name(shape, k), str(tree_height(n, fanout_of(shape, n, k)))]
            cells += [num(model.barrier(n, shape, k, net)) for net in nets]
            cells += [num(model.rank0_cpu(n, shape, k)), f"{rank0_frames(n, shape, k):,}"]
            cells += [num(start / 1000.0 if start is not None else None, 2) for start in starts]
            out.append("| " + " | ".join(cells) + " |")
    out += ["", "Start-up holds the fence at its fitted constant; see --help."]
    return "\n".join(out)


def plot(model, points, project, fanouts, nets, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot at {path} (pip install matplotlib)", file=sys.stderr)
        return
    top = max(project + [p["nodes"] for p in points])
    ns = sorted({2 ** i for i in range(1, top.bit_length() + 1) if 2 ** i <= top} | set(project) | {top})
    shapes = [("star", None)] + [("tree", k) for k in fanouts]
    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(12, 4.8))
    for index, (shape, k) in enumerate(shapes):
        colour = f"C{index % 10}"
        for net, style in zip(nets, ["-", "--", ":", "-."]):
            lat.plot(ns, [model.barrier(n, shape, k, net) for n in ns], style, color=colour,
                     label=f"{shape_name(shape, k)}, net {net:g} us")
        if model.cpu_local is not None:
            cpu.plot(ns, [model.rank0_cpu(n, shape, k) for n in ns], color=colour, label=shape_name(shape, k))
    lat.scatter([p["nodes"] for p in points], [p["barrier"] for p in points], color="k", zorder=3,
                label="measured (emulated nodes)")
    measured_cpu = [p for p in points if p["rank0_cpu"] is not None]
    cpu.scatter([p["nodes"] for p in measured_cpu], [p["rank0_cpu"] for p in measured_cpu], color="k",
                zorder=3, label="measured")
    for ax, title in ((lat, "barrier latency (us)"), (cpu, "rank 0 CPU per barrier (us)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Self-test.


def self_test():
    heights = {(1, 2): 0, (2, 2): 1, (3, 2): 1, (4, 2): 2, (7, 2): 2, (8, 2): 3, (15, 2): 3,
               (16, 2): 4, (2, 8): 1, (9, 8): 1, (10, 8): 2, (73, 8): 2, (74, 8): 3,
               (4681, 8): 4, (4682, 8): 5, (8192, 8): 5, (8192, 2): 13, (5, 1): 4,
               (1024, 32): 2, (1057, 32): 2, (1058, 32): 3}
    for (n, k), want in heights.items():
        got = tree_height(n, k)
        assert got == want, f"tree_height({n}, {k}) = {got}, not {want}"
    for n in range(2, 200):
        assert tree_height(n, n - 1) == 1
        assert hops(n, "star", None) == 2
        assert serial_frames(n, "star", None) == 2 * (n - 1)
        assert rank0_frames(n, "star", None) == 2 * (n - 1)
        for k in (2, 3, 8):
            levels = busiest_per_level(n, k)
            assert len(levels) == tree_height(n, k)
            assert all(1 <= c <= k for c in levels), (n, k, levels)
            assert levels[0] == min(k, n - 1)
    assert busiest_per_level(10, 8) == [8, 1]
    assert busiest_per_level(8192, 8) == [8, 8, 8, 8, 8]

    # Known constants, exact synthetic runs: the fit must give them back.
    truth = Model()
    truth.local, truth.per_message, truth.measured_net = 40.0, 3.5, 6.0
    truth.cpu_local, truth.cpu_per_frame = 15.0, 7.0
    truth.handshake, truth.fence = 250.0, 30_000.0
    runs = [(n, "star", None) for n in (2, 4, 8, 16, 32)]
    runs += [(n, "tree", 2) for n in (4, 8, 16, 32)] + [(n, "tree", 4) for n in (8, 32)]
    points = []
    for n, shape, k in runs:
        points.append({
            "nodes": n, "shape": shape, "fanout": k,
            "barrier": truth.barrier(n, shape, k, truth.measured_net),
            "rank0_cpu": truth.rank0_cpu(n, shape, k), "rank0_frames": rank0_frames(n, shape, k),
            "leaders_cpu": truth.rank0_cpu(n, shape, k, inner_frames(n, shape, k)),
            "leaders_frames": inner_frames(n, shape, k),
            "rendezvous": truth.startup(n, shape, k, truth.measured_net),
        })

    def close(got, want, what):
        assert abs(got - want) <= 1e-6 * max(1.0, abs(want)), f"{what}: fitted {got}, not {want}"

    got = fit(points, handshake=truth.handshake)
    assert got.net_fitted
    for name in ("local", "per_message", "measured_net", "cpu_local", "cpu_per_frame", "fence"):
        close(getattr(got, name), getattr(truth, name), name)
    stars = [p for p in points if p["shape"] == "star"]
    got = fit(stars, fit_handshake=True)
    close(got.handshake, truth.handshake, "handshake from the star rendezvous")
    close(got.fence, truth.fence + HANDSHAKE_TRIPS * truth.measured_net, "fence from the star rendezvous")
    # Stars alone have one height: the network latency folds into the local part.
    assert not got.net_fitted
    close(got.local, truth.local + 2 * truth.measured_net, "local part of stars alone")
    close(got.per_message, truth.per_message, "per-frame cost of stars alone")
    # A tree of large fanout takes fewer serial frames than the star at 8192 nodes.
    assert truth.barrier(8192, "tree", 8, 2.0) < truth.barrier(8192, "star", None, 2.0) / 100
    print("self-test: ok (tree heights, serial frames, the fit recovers known constants)")


# ---------------------------------------------------------------------------------------------


def numbers(text, kind):
    return [kind(v) for v in text.split(",") if v.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="control_plane.py",
        description="Model of the leaders' control plane (star or k-ary tree), fitted to "
                    "engine_bench runs and projected to large node counts.",
        epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", help="JSON-lines file of engine_bench runs (see below)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the tree's height and that the fit recovers known constants, then exit")
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="which barrier_us figure is the latency (default: median)")
    parser.add_argument("--project", default="128,1024,8192", metavar="N,N,...",
                        help="node counts to project to (default: 128,1024,8192)")
    parser.add_argument("--fanout", metavar="K,K,...",
                        help="tree fanouts to project (default: those of the tree runs, else 8)")
    parser.add_argument("--net-us", default="2,20", metavar="US,US,...",
                        help="one-way network latencies to project with, microseconds "
                             "(default: 2 for InfiniBand, 20 for TCP over Ethernet)")
    parser.add_argument("--measured-net-us", type=float, default=0.0, metavar="US",
                        help="the measured runs' network latency when the runs cannot fit it "
                             "(one tree height only; default 0: it folds into the local part)")
    parser.add_argument("--handshake-us", type=float, metavar="US",
                        help=f"one handshake's cost at the serving leader (default {DEFAULT_HANDSHAKE_US:g})")
    parser.add_argument("--fit-handshake", action="store_true",
                        help="fit the handshake cost and the fence from the star runs' rendezvous_us "
                             "(on emulated nodes it holds the launcher's spread of rank starts too)")
    parser.add_argument("--plot", metavar="PNG", help="also draw the model (needs matplotlib; skipped without)")
    args = parser.parse_args(argv)
    if args.self_test:
        self_test()
        return 0
    if not args.runs:
        parser.error("give the runs' JSON-lines file (or --self-test); --help describes it")
    if args.fit_handshake and args.handshake_us is not None:
        parser.error("--fit-handshake and --handshake-us both set the handshake cost: give one")
    try:
        points = read_points(args.runs, args.stat)
        model = fit(points, args.measured_net_us, args.handshake_us, args.fit_handshake)
        project = numbers(args.project, int)
        nets = numbers(args.net_us, float)
        if args.fanout:
            fanouts = numbers(args.fanout, int)
        else:
            fanouts = sorted({p["fanout"] for p in points if p["shape"] == "tree"}) or [8]
        if any(n < 1 for n in project) or any(k < 1 for k in fanouts):
            raise ValueError("--project and --fanout take positive numbers")
    except (OSError, ValueError) as e:
        print(f"control_plane.py: {e}", file=sys.stderr)
        return 2
    print(report(model, points, project, fanouts, nets))
    if args.plot:
        plot(model, points, project, fanouts, nets, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
