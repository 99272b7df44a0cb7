#!/usr/bin/env python3
"""A model of the control plane between node leaders (issue 44): a star around rank 0 against
a k-ary tree, fitted to engine_bench runs on emulated nodes and projected to large jobs.

    scripts/model/control_plane.py RUNS.jsonl [--plot docs/control-plane-model.png]
    scripts/model/control_plane.py docs/control-plane-runs.jsonl --plot docs/control-plane-model.png
    scripts/model/control_plane.py --self-test

Two regimes, kept apart: the measured machine (every emulated node a process on the same few
cores: a barrier there waits for the whole job's CPU work) and a real cluster (each leader on
cores of its own: a barrier waits for its critical path). Stdlib only; matplotlib only for
--plot (skipped, with a message, when it is missing). Run with --help for the inputs and the
model.
"""

import argparse
import json
import math
import statistics
import sys

HELP = """\
INPUT: a JSON-lines file, one line per run: the line rank 0 of
crates/symmem-bootstrap/examples/engine_bench.rs prints (engine_bench_nodes prints it; the
driver scripts/model/measure.sh adds the first four fields below and writes the file):

  "nodes":  N, the node count (default: the hosts counted in "daemons_kb"), one rank each
  "shape":  "star" (every leader linked to rank 0) or "tree" (leaders in a k-ary tree)
  "fanout": k, the children per leader of a tree (ignored, may be null, for a star)
  "load":   the 1-minute load average at the run's start (shown, not fitted)
  "calls":  "folded" where the leaders fold their subtree's calls into one entry (PROTOCOL 4
            on, measure.sh adds it); missing or "whole" for older builds (every rank's call
            went up to rank 0 whole)

Of engine_bench's own fields the model reads:

  barrier_us.median            barrier latency, microseconds (--stat picks min or median)
  rank0_cpu_us_per_barrier     rank 0's CPU time (user + sys) per barrier
  rank0_frames_per_barrier     TCP frames rank 0 sent + received per barrier
  all_cpu_us_per_barrier       every rank's CPU per barrier, summed (the whole job's work)
  all_frames_per_barrier       every rank's frames per barrier, summed
  leaders_cpu_us_per_barrier   the other leaders' CPU per barrier {min, median, max}: only
                               when all_cpu_us_per_barrier is missing (older runs), as rank
                               0's plus (N - 1) times their median
  alloc_free_after_us.median   one allocate + free of 4 KiB after the barriers
  rendezvous_us                start-up: join plus the heap exchange, slowest rank

Other fields are kept and ignored. Blank lines are skipped. docs/control-plane-runs.jsonl holds
the runs of issue 44 (2-32 emulated nodes on 2 cores); scripts/model/example.jsonl two star
runs (2 and 8 nodes).

THE TREE: the complete k-ary tree over the N leaders in heap order (leader i's parent is
(i - 1) // k, rank 0's node the root); a star is the tree with k = N - 1. Per collective:

  H = 2 * levels    hops on the critical path (up to the root and back down)
  S = 2 * sum over the levels of the most children any leader of that level has: the frames
      the busiest leader of each level handles one after the other (star: 2 (N - 1))
  F0 = 2 * min(k, N - 1), the frames at rank 0; every link carries 2 frames a collective,
      counted at both ends: the whole job handles 4 (N - 1), whatever the shape
  E  = entries a leader parses per collective. Calls folded (as built): each leader sends up
      one entry for its whole subtree (each distinct call with its ranks as runs, the
      payloads compacted when equal), so a leader parses one entry per child: E0 = min(k,
      N - 1), E_path = S / 2, E_all = N - 1. Calls whole (builds before PROTOCOL 4): every
      rank's call (its rank, op, payload) went up to rank 0, so each leader parsed (and
      re-encoded) the entries of every rank below it: E0 = N - 1, E_path = the subtrees of
      one root-to-leaf path less their heads (N - 1 at the root, ...), E_all = the sum of
      every rank's depth. In a star the two are the same.

CPU (fitted, least squares on the relative error):

  rank 0 CPU per barrier = a + b * F0 + c * E0
  job CPU per barrier    = a_all * N + a_inner * I + b * 4 (N - 1) + c_all * E_all
      b (CPU per frame) is rank 0's: 4 (N - 1) frames move with N in every run, so the job's
      own sums cannot tell a per-frame cost from a per-leader one. c_all is fitted from the
      tree runs (stars only, or no all_cpu_us_per_barrier: c_all = c). a_all is a leader's fixed CPU per barrier,
      a_inner what a leader with leaders below it spends more (its poll over them, the fold,
      the answer it sends down), I = ceil((N - 1) / k) such leaders; fitted where runs of
      folded and whole calls tell it from c_all (else 0).

THE MEASURED MACHINE (contended: N processes on --cores cores, other jobs beside them):

  barrier = alpha * max(P, job CPU / cores) + beta
      P = a + H * w_m + b * S + c * E_path, the critical path (loopback's latency folded into
      w_m, a hop's wake-up there). alpha and beta are fitted by least squares, w_m by a scan
      (0-200 us) around it; 1 / alpha is the share of the cores the job got (other jobs ran),
      beta a fixed part (scheduling, the launcher's daemons). The job CPU is the model's, so
      the errors shown are the whole model's; the law alone (the same alpha, beta on the
      measured job CPU) is shown too.
  allocate + free = 2 barriers + the payload (below) + L: an allocation is one all-gather
      of every rank's heap offset through the same tree (a barrier whose entries carry a
      payload), a free one barrier; L, fitted, is the provider's own work on each rank.
  start-up = r0 + r1 * N, fitted: on the measured machine rendezvous_us follows the launcher
      (mpirun, its orted daemons) starting N processes on the few cores. Not projected.

A REAL CLUSTER (each leader its own cores: the critical path only, net one-way latency):

  barrier = a + H * (net + w) + b * S + c * E_path   (E_path = S / 2 as built; the whole
      calls' E_path is shown beside it)
      w = --wakeup-us (assumed, default 5): a blocked leader woken on an idle core. b and c
      are this machine's, taken under contention: upper bounds for a dedicated core.
  rank 0 CPU = a + b * F0 + c * E0
  allocate + free = 2 barriers + payload + L, payload = (byte cost) * (payload bytes per rank) *
      (N * sum over the path's levels of (1 + children): the all-gather's answer, every rank's
      payload, parsed once and tagged (HMAC) once per child at each leader of the path; plus
      the payloads on the way up, one per rank below: payloads that differ are never folded;
      equal ones, as a symmetric heap's offsets, travel as one, so this is an upper bound).
      --payload-bytes (default 30: an 8-digit
      offset as serde_json writes a byte vector) and --byte-ns (default 2, assumed: JSON and
      HMAC-SHA256) are not fitted: 32 nodes' payloads (about 1 KB) are under the noise. The
      wire's own time per byte (0.08 ns at 100 Gb/s, 0.32 ns at 25 GbE) is left out.
  start-up = fence + connections
      connections: each leader opens its children's links once its own is up; each level
      costs ceil(children / 64) * (h + 5 * net) (handshakes served in parallel threads, at
      most 64 at once; 5 one-way latencies each: TCP's connect, nonce, proof, answer); a star
      is one level of N - 1 children. h = --handshake-us (default 100, assumed: the accept,
      a thread, three HMAC-SHA256, three small messages), the serving node assumed to have
      cores for the 64 threads (else (N - 1) h / cores for the star).
      fence (the launcher's and PMIx's part, assumed, not fitted; two bounds):
        tree-shaped: --fence-floor-ms (default 40: the 2-node start here, mostly PMIx_Init)
          + --fence-ms-per-doubling (default 10) * log2 N, a daemon tree's all-gather;
        per rank: --fence-ms-per-rank (default 1) * N, what central-store bootstraps show
          (PyTorch's TCPStore: 96K ranks in about 100 s; NVSHMEM's unique-id bootstrap
          staggers the start about 10 s at rank 10,000).

OUTPUT: a markdown section (ready for docs/benchmarks.md): the fitted parameters, each measured
run against the model (error in %; misses over 25 % named), the projection to --project
nodes (default 128, 1024, 8192) for the star and the tree of each --fanout (default 2, 4, 8)
at each --net-us (default 2: InfiniBand, 20: TCP over Ethernet), start-up at scale and the
published anchors. --plot PNG draws barrier latency and rank 0's CPU against nodes.
"""

# One-way latencies of a handshake: TCP's connect (a round trip), the server's nonce, the
# client's proof and the server's answer.
HANDSHAKE_TRIPS = 5
DEFAULT_HANDSHAKE_US = 100.0
# The most handshakes a leader serves at once (tcp.rs: MAX_HANDSHAKES).
MAX_HANDSHAKES = 64
# Collectives of one allocate + free: the all-gather of the offsets, the free's barrier.
ALLOC_FREE_COLLECTIVES = 2
# A point is a miss when its model is off by more than this, in %.
MISS_PERCENT = 25.0
# The scan of the measured machine's wake-up per hop, microseconds.
WAKEUP_SCAN = (0.0, 200.0, 0.5)

ANCHORS = [
    ("NVSHMEM, unique-id bootstrap", "about log2(N) rounds, but a new TCP connection per message; "
     "start-up staggered by rank, about 10 s at rank 10,000", "none"),
    ("NCCL 2.23+, bootstrap", "a ring, with several roots to spread the start", "none"),
    ("PyTorch, libuv TCPStore", "one store: 96K ranks started in about 100 s", "none"),
]


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


def job_frames(n):
    """Frames the whole job handles per collective: 2 a link, counted at both its ends."""
    return 4 * (n - 1)


def subtree_size(n, k, node):
    """Nodes in `node`'s subtree (itself included): each level below it is a contiguous run
    of heap numbers."""
    size, lo, hi = 0, node, node
    while lo < n:
        size += min(hi, n - 1) - lo + 1
        lo, hi = k * lo + 1, k * hi + k
    return size


def inner_leaders(n, shape, k):
    """Leaders with leaders below them: node i has children while k i + 1 < n."""
    return -(-(n - 1) // fanout_of(shape, n, k)) if n > 1 else 0


def rank0_entries(n, shape, k, folded=False):
    """Entries rank 0 parses per collective: one per child when calls are folded, one per
    rank below it when they travel whole."""
    return min(fanout_of(shape, n, k), n - 1) if folded else n - 1


def path_entries(n, shape, k, folded=False):
    """Entries the leaders of the heaviest root-to-leaf path parse, summed. Folded: one per
    child of each (S / 2). Whole: each leader gets every entry of its subtree but its own;
    the first child of a level heads its largest subtree."""
    if folded:
        return sum(busiest_per_level(n, fanout_of(shape, n, k)))
    kk = fanout_of(shape, n, k)
    total, node = 0, 0
    while node < n:
        below = subtree_size(n, kk, node) - 1
        if below <= 0:
            break
        total += below
        node = kk * node + 1
    return total


def job_entries(n, shape, k, folded=False):
    """Entries parsed in the whole job per collective. Folded: one per link (N - 1). Whole:
    every rank's depth, summed."""
    if folded:
        return n - 1
    kk = fanout_of(shape, n, k)
    total, depth, lo, hi = 0, 0, 0, 0
    while lo < n:
        total += depth * (min(hi, n - 1) - lo + 1)
        depth, lo, hi = depth + 1, kk * lo + 1, kk * hi + kk
    return total


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


def relative_sse(model_values, ys):
    return sum(((m - y) / y) ** 2 for m, y in zip(model_values, ys) if y)


# ---------------------------------------------------------------------------------------------
# The model.


class Model:
    """The fitted constants and the assumptions; see HELP."""

    def __init__(self):
        # CPU per barrier (fitted).
        self.cpu_fixed = None  # a
        self.cpu_per_frame = None  # b
        self.cpu_per_entry = 0.0  # c
        self.entry_fitted = False
        self.job_fixed = None  # a_all
        self.job_per_entry = None  # c_all
        self.job_per_inner = 0.0  # a_inner
        self.job_inner_fitted = False
        self.job_entry_fitted = False
        self.job_cpu_from = "all_cpu_us_per_barrier"
        # The measured machine (fitted).
        self.cores = 2.0
        self.alpha = None
        self.beta = None
        self.measured_wakeup = 0.0  # w_m
        self.path_bound = []  # the measured runs bound by their critical path
        self.alloc_local = 0.0  # L: an allocation's own work on each rank (fitted)
        self.start_fixed = None  # r0
        self.start_per_node = None  # r1
        # A real cluster (assumed).
        self.wakeup = 5.0  # w
        self.payload_bytes = 30.0
        self.byte_ns = 2.0
        self.handshake = DEFAULT_HANDSHAKE_US  # h
        self.fence_floor_ms = 40.0
        self.fence_per_doubling_ms = 10.0
        self.fence_per_rank_ms = 1.0

    # CPU.
    # Every method takes `folded`: whether the leaders fold their subtree's calls (the build
    # as it is, the default) or send them up whole (builds before PROTOCOL 4).
    def rank0_cpu(self, n, shape, k, folded=True):
        if self.cpu_fixed is None:
            return None
        entries = rank0_entries(n, shape, k, folded)
        return self.cpu_fixed + self.cpu_per_frame * rank0_frames(n, shape, k) + self.cpu_per_entry * entries

    def job_cpu(self, n, shape, k, folded=True):
        if self.job_fixed is None:
            return None
        return (self.job_fixed * n + self.cpu_per_frame * job_frames(n)
                + self.job_per_inner * inner_leaders(n, shape, k)
                + self.job_per_entry * job_entries(n, shape, k, folded))

    # Latency.
    def critical_path(self, n, shape, k, net, wakeup, folded=True):
        """a + H (net + wakeup) + b S + c E: the path's own time, every leader on its cores."""
        frames = serial_frames(n, shape, k)
        entries = path_entries(n, shape, k, folded)
        return (self.cpu_fixed + hops(n, shape, k) * (net + wakeup) + self.cpu_per_frame * frames
                + self.cpu_per_entry * entries)

    def contended_parts(self, n, shape, k, job_cpu=None, folded=True):
        """(critical path, job CPU / cores) on the measured machine."""
        job = self.job_cpu(n, shape, k, folded) if job_cpu is None else job_cpu
        return self.critical_path(n, shape, k, 0.0, self.measured_wakeup, folded), job / self.cores

    def contended(self, n, shape, k, job_cpu=None, folded=True):
        path, cpu = self.contended_parts(n, shape, k, job_cpu, folded)
        return self.alpha * max(path, cpu) + self.beta

    def barrier(self, n, shape, k, net, folded=True):
        return self.critical_path(n, shape, k, net, self.wakeup, folded)

    # Allocate + free.
    def payload(self, n, shape, k):
        """The all-gather's payload work on the critical path, microseconds, payloads that
        differ (never folded: one per rank on the way up, whatever the build)."""
        handled = n * sum(1 + c for c in busiest_per_level(n, fanout_of(shape, n, k)))
        handled += path_entries(n, shape, k)
        return self.byte_ns * 1e-3 * self.payload_bytes * handled

    def alloc_free(self, n, shape, k, net, folded=True):
        return (ALLOC_FREE_COLLECTIVES * self.barrier(n, shape, k, net, folded) + self.payload(n, shape, k)
                + self.alloc_local)

    def alloc_free_contended(self, n, shape, k, folded=True):
        return (ALLOC_FREE_COLLECTIVES * self.contended(n, shape, k, folded=folded) + self.payload(n, shape, k)
                + self.alloc_local)

    # Start-up.
    def measured_start(self, n):
        if self.start_fixed is None:
            return None
        return self.start_fixed + self.start_per_node * n

    def connections(self, n, shape, k, net):
        levels = busiest_per_level(n, fanout_of(shape, n, k))
        return sum(math.ceil(c / MAX_HANDSHAKES) * (self.handshake + HANDSHAKE_TRIPS * net) for c in levels)

    def fence_tree_ms(self, n):
        return self.fence_floor_ms + self.fence_per_doubling_ms * math.log2(max(n, 1))

    def fence_rank_ms(self, n):
        return self.fence_per_rank_ms * n


def fit(points, cores=2.0):
    """The model fitted to `points` (dicts from point()); the assumptions at their defaults."""
    if len(points) < 2:
        raise ValueError(f"the fit needs at least 2 runs, the input has {len(points)}")
    model = Model()
    model.cores = cores
    fit_rank0(model, points)
    fit_job(model, points)
    fit_contended(model, points)
    fit_alloc_local(model, points)
    starts = [p for p in points if p.get("rendezvous") is not None]
    if len({p["nodes"] for p in starts}) >= 2:
        ys = [p["rendezvous"] for p in starts]
        solved = least_squares([[1.0, p["nodes"]] for p in starts], ys, relative(ys))
        if solved is not None:
            model.start_fixed, model.start_per_node = solved
    return model


def fit_rank0(model, points):
    """a, b, c from rank 0's CPU per barrier (c only when trees of whole calls tell entries
    from frames)."""
    cpu = [p for p in points if p.get("rank0_cpu") is not None]
    if len({p["nodes"] for p in cpu}) < 2 and len({rank0_frames(p["nodes"], p["shape"], p["fanout"]) for p in cpu}) < 2:
        raise ValueError("the runs need rank0_cpu_us_per_barrier at two node counts at least")
    ys = [p["rank0_cpu"] for p in cpu]
    frames = [p["rank0_frames"] if p.get("rank0_frames") is not None
              else rank0_frames(p["nodes"], p["shape"], p["fanout"]) for p in cpu]
    entries = [rank0_entries(*key(p)) for p in cpu]
    solved = None
    # Entries tell apart from frames only where calls went up whole through a tree (folded,
    # and in a star, rank 0 parses one entry per two frames).
    if any(2 * e != f for e, f in zip(entries, frames)) and len(cpu) >= 3:
        solved = least_squares([[1.0, f, e] for f, e in zip(frames, entries)], ys, relative(ys))
    if solved is not None:
        model.cpu_fixed, model.cpu_per_frame, model.cpu_per_entry = solved
        model.entry_fitted = True
    else:
        solved = least_squares([[1.0, f] for f in frames], ys, relative(ys))
        if solved is None:
            raise ValueError("rank 0's CPU: the runs do not tell the fixed part from the per-frame cost")
        model.cpu_fixed, model.cpu_per_frame = solved


def job_cpu_of(p):
    """The job's CPU per barrier of a run: measured, else rank 0's plus the leaders' median."""
    if p.get("all_cpu") is not None:
        return p["all_cpu"]
    if p.get("rank0_cpu") is not None and p.get("leaders_cpu") is not None:
        return p["rank0_cpu"] + (p["nodes"] - 1) * p["leaders_cpu"]
    if p.get("rank0_cpu") is not None and p["nodes"] == 1:
        return p["rank0_cpu"]
    return None


def fit_job(model, points):
    """a_all (and c_all from trees) from the job's CPU per barrier, b being rank 0's."""
    runs = [p for p in points if job_cpu_of(p) is not None]
    if not runs:
        raise ValueError("the runs have neither all_cpu_us_per_barrier nor the leaders' CPU")
    if any(p.get("all_cpu") is None for p in runs):
        model.job_cpu_from = "rank 0's plus (N - 1) x the other leaders' median (no all_cpu_us_per_barrier)"
    ys = [job_cpu_of(p) for p in runs]
    rest = [y - model.cpu_per_frame * job_frames(p["nodes"]) for y, p in zip(ys, runs)]
    entries = [job_entries(*key(p)) for p in runs]
    inner = [inner_leaders(p["nodes"], p["shape"], p["fanout"]) for p in runs]
    solved = None
    # The entries need the job's own sum: the stand-in (rank 0 and the leaves' median) holds
    # no inner leader, whose entries are the trees' difference.
    own_sums = all(p.get("all_cpu") is not None for p in runs)
    if own_sums and len(runs) >= 4 and any(e != p["nodes"] - 1 for e, p in zip(entries, runs)):
        # An inner leader's own work (its poll over the leaders below, the fold, the answer it
        # sends down), where folded trees tell it from the entries.
        rows = [[p["nodes"], i, e] for p, i, e in zip(runs, inner, entries)]
        three = least_squares(rows, rest, relative(ys))
        if three is not None and min(three[1:]) >= 0:
            model.job_fixed, model.job_per_inner, model.job_per_entry = three
            model.job_inner_fitted = model.job_entry_fitted = True
            return
    if own_sums and len(runs) >= 2 and any(e != p["nodes"] - 1 for e, p in zip(entries, runs)):
        solved = least_squares([[p["nodes"], e] for p, e in zip(runs, entries)], rest, relative(ys))
    if solved is not None and solved[1] >= 0:
        model.job_fixed, model.job_per_entry = solved
        model.job_entry_fitted = True
    else:
        model.job_per_entry = model.cpu_per_entry
        rest = [r - model.job_per_entry * e for r, e in zip(rest, entries)]
        model.job_fixed = least_squares([[p["nodes"]] for p in runs], rest, relative(ys))[0]


def fit_contended(model, points):
    """alpha, beta by least squares and the wake-up per hop w_m by a scan (then refined)."""
    ys = [p["barrier"] for p in points]

    def solve(wakeup):
        model.measured_wakeup = wakeup
        xs = [max(model.contended_parts(*key(p)[:3], folded=p["folded"])) for p in points]
        solved = least_squares([[x, 1.0] for x in xs], ys, relative(ys))
        if solved is None:
            return None, math.inf
        return solved, relative_sse([solved[0] * x + solved[1] for x in xs], ys)

    lo, hi, step = WAKEUP_SCAN
    scan = [lo + i * step for i in range(int(round((hi - lo) / step)) + 1)]
    errors = [solve(w)[1] for w in scan]
    best = min(range(len(scan)), key=lambda i: (errors[i], i))
    if errors[best] == math.inf:
        raise ValueError("the barrier runs do not tell alpha from beta: give runs of two node counts")
    # Golden-section search in the scan's cell around the best (the error is flat where no
    # run is bound by its critical path: the scan's first minimum stands then).
    left, right = scan[max(best - 1, 0)], scan[min(best + 1, len(scan) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        x1, x2 = right - ratio * (right - left), left + ratio * (right - left)
        if solve(x1)[1] <= solve(x2)[1]:
            right = x2
        else:
            left = x1
    wakeup = (left + right) / 2
    if solve(wakeup)[1] > errors[best]:
        wakeup = scan[best]
    (model.alpha, model.beta), _ = solve(wakeup)
    model.path_bound = [p for p in points if bound_by(model, p) == "path"]


def fit_alloc_local(model, points):
    """L: what allocate + free takes beyond its collectives and payload (the provider's own
    work on each rank: the mapping, the allocator), by least squares on the relative error."""
    runs = [p for p in points if p.get("alloc_free") is not None]
    if not runs:
        return
    model.alloc_local = 0.0
    ys = [p["alloc_free"] for p in runs]
    rest = [y - model.alloc_free_contended(*key(p)) for y, p in zip(ys, runs)]
    solved = least_squares([[1.0] for _ in runs], rest, relative(ys))
    if solved is not None:
        model.alloc_local = solved[0]


def bound_by(model, p):
    path, cpu = model.contended_parts(*key(p)[:3], folded=p["folded"])
    return "path" if path > cpu else "CPU"


def key(p):
    """A point's (nodes, shape, fan-out, folded): the model's arguments."""
    return p["nodes"], p["shape"], p["fanout"], p["folded"]


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

    calls = run.get("calls", "whole")
    if calls not in ("folded", "whole"):
        raise ValueError(f'{where}: "calls" must be "folded" or "whole", not {calls!r}')

    def stat_of(field):
        value = run.get(field)
        value = value.get(stat) if isinstance(value, dict) else None
        return float(value) if isinstance(value, (int, float)) else None

    barrier = stat_of("barrier_us")
    if barrier is None:
        raise ValueError(f"{where}: no barrier_us.{stat} (is it an engine_bench line?)")
    return {
        "nodes": nodes,
        "shape": shape,
        "fanout": fanout if shape == "tree" else None,
        "folded": calls == "folded",
        "load": run.get("load"),
        "barrier": barrier,
        "rank0_cpu": run.get("rank0_cpu_us_per_barrier"),
        "rank0_frames": run.get("rank0_frames_per_barrier"),
        "leaders_cpu": median_of(run.get("leaders_cpu_us_per_barrier")),
        "all_cpu": run.get("all_cpu_us_per_barrier"),
        "all_frames": run.get("all_frames_per_barrier"),
        "alloc_free": stat_of("alloc_free_after_us"),
        "rendezvous": run.get("rendezvous_us"),
        "runs": 1,
    }


def merge_repeats(points):
    """One point per configuration (nodes, shape, fan-out, calls): each figure the median of
    its runs (on 2 shared cores one run's barrier may be off by 15 % from the next), in the
    order each configuration first came."""
    groups = {}
    for p in points:
        groups.setdefault(key(p), []).append(p)
    merged = []
    for runs in groups.values():
        one = dict(runs[0])
        for field, value in one.items():
            if field in ("nodes", "shape", "fanout", "folded", "runs"):
                continue
            values = [r[field] for r in runs if isinstance(r.get(field), (int, float))]
            one[field] = statistics.median(values) if values else None
        one["runs"] = len(runs)
        merged.append(one)
    return merged


# ---------------------------------------------------------------------------------------------
# Output.


def num(value, places=1):
    if value is None:
        return "-"
    return f"{value:,.{places}f}"


def percent(model_value, measured):
    if model_value is None or measured in (None, 0):
        return None
    return 100.0 * (model_value - measured) / measured


def err(model_value, measured):
    e = percent(model_value, measured)
    if e is None:
        return "-"
    e = round(e, 1)
    text = f"{e:+.1f}" if e else "0.0"
    return f"**{text}**" if abs(e) > MISS_PERCENT else text


def shape_name(shape, k):
    return "star" if shape == "star" else f"tree k={k}"


def run_name(p):
    """A run's shape, and "calls whole" for a tree of a build before folding (a star's
    calls are the same either way)."""
    whole = not p["folded"] and p["shape"] == "tree"
    return shape_name(p["shape"], p["fanout"]) + (", calls whole" if whole else "")


def span(values):
    values = [abs(v) for v in values if v is not None]
    return max(values) if values else None


def report(model, points, project, fanouts, nets, source):
    out = ["## Control plane at scale: star against tree (issue 44, model)", ""]
    loads = [p["load"] for p in points if isinstance(p.get("load"), (int, float))]
    runs = sum(p.get("runs", 1) for p in points)
    merged = (f" ({len(points)} configurations, the runs of each merged: the median of each figure)"
              if runs > len(points) else "")
    out += [f"`scripts/model/control_plane.py {source}`: {runs} engine_bench runs{merged} on emulated "
            f"nodes (`scripts/model/measure.sh`: one rank per node, mpirun, 10,000 barriers each), "
            f"{min(p['nodes'] for p in points)}-{max(p['nodes'] for p in points)} nodes on one machine "
            f"of {model.cores:g} cores"
            + (f", load average {min(loads):.1f}-{max(loads):.1f} at the runs' starts" if loads else "")
            + ". Two regimes, kept apart: on that machine every leader is a process on the same "
            f"{model.cores:g} cores, so a barrier waits for the **whole job's CPU work divided by the "
            "cores**; on a real cluster each leader has cores of its own and a barrier waits for its "
            "**critical path** (hops, the busiest leaders' frames, the entries they parse). The "
            "measured runs fit the first; the projection uses only the second, with the CPU costs "
            "fitted here.", ""]

    out += ["### Fitted parameters", "", "| parameter | value | from |", "|---|---:|---|"]
    rank0_form = "a + b F0 + c E0" if model.entry_fitted else "a + b F0 (stars only: c not separable, 0)"
    out.append(f"| a: fixed CPU per barrier at rank 0 | {num(model.cpu_fixed, 2)} us | rank 0's CPU = {rank0_form} |")
    out.append(f"| b: CPU per frame | {num(model.cpu_per_frame, 2)} us | same fit |")
    out.append(f"| c: CPU per rank entry (rank 0 parses and checks every rank's call) | "
               f"{num(model.cpu_per_entry, 3)} us | same fit |")
    out.append(f"| a_all: fixed CPU per barrier per leader | {num(model.job_fixed, 2)} us | "
               f"job CPU = a_all N + a_inner I + b 4(N-1) + c_all E_all, b as above; from {model.job_cpu_from} |")
    out.append(f"| a_inner: an inner leader's own CPU per barrier (its poll over the leaders below, the "
               f"fold, the answer down) | {num(model.job_per_inner, 2)} us | "
               + ("same fit, I = the leaders with leaders below (ceil((N - 1) / k))" if model.job_inner_fitted
                  else "not fitted (0): the runs do not tell it from the entries") + " |")
    out.append(f"| c_all: CPU per entry and leader crossed (parse + re-encode) | {num(model.job_per_entry, 3)} us | "
               + ("same fit (tree runs)" if model.job_entry_fitted
                  else "c (not fitted: no tree runs, or no all_cpu_us_per_barrier)") + " |")
    out.append(f"| alpha: measured machine | {num(model.alpha, 3)} | barrier = alpha max(P, job CPU / "
               f"{model.cores:g}) + beta; 1/alpha = {num(1 / model.alpha if model.alpha else None, 2)} of the cores |")
    out.append(f"| beta: measured machine | {num(model.beta, 1)} us | same fit |")
    bound = ", ".join(f"{p['nodes']} {shape_name(p['shape'], p['fanout'])}" for p in model.path_bound)
    out.append(f"| w_m: wake-up per hop, measured machine | {num(model.measured_wakeup, 1)} us | scan 0-200 us; "
               + (f"the runs bound by their path: {bound} (loopback and a wake-up on shared cores)" if bound else
                  "no run is bound by its critical path: not determined (the scan's first minimum)") + " |")
    if model.start_fixed is not None:
        out.append(f"| start-up on the measured machine | {num(model.start_fixed / 1000, 1)} ms + "
                   f"{num(model.start_per_node / 1000, 2)} ms per node | rendezvous_us: the launcher "
                   f"starting N processes on {model.cores:g} cores; not projected |")
    out.append(f"| w: wake-up per hop, real cluster | {num(model.wakeup, 1)} us | assumed (--wakeup-us) |")
    out.append(f"| L: allocate + free beyond its collectives and payload | {num(model.alloc_local, 1)} us | "
               "least squares on the measured allocate + free (the provider's own work) |")
    out.append(f"| payload per rank, allocation | {num(model.payload_bytes, 0)} B at {num(model.byte_ns, 1)} "
               f"ns/B | assumed (--payload-bytes, --byte-ns) |")
    out.append(f"| handshake h | {num(model.handshake, 0)} us CPU, {HANDSHAKE_TRIPS} one-way trips, "
               f"{MAX_HANDSHAKES} at once | assumed (--handshake-us), cap from tcp.rs |")
    out += [""]

    out += ["### Measured runs against the model", "",
            "CPU per barrier (us): rank 0's and the whole job's.", "",
            "| nodes | shape | runs | load | rank 0 frames | rank 0 CPU | model | err % | job frames "
            "| job CPU | model | err % |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    misses = []
    warnings = []

    def note_miss(what, p, model_value, measured):
        e = percent(model_value, measured)
        if e is not None and abs(e) > MISS_PERCENT:
            misses.append(f"{what} at {p['nodes']} nodes, {run_name(p)}: "
                          f"model {num(model_value)} against {num(measured)} measured ({e:+.0f} %)")

    for p in points:
        n, shape, k, f = key(p)
        cpu = model.rank0_cpu(n, shape, k, f)
        job = model.job_cpu(n, shape, k, f)
        frames = rank0_frames(n, shape, k)
        if p["rank0_frames"] is not None and abs(p["rank0_frames"] - frames) > 0.01:
            warnings.append(f"{n} nodes, {shape_name(shape, k)}: rank 0 handled {p['rank0_frames']} frames "
                            f"per barrier, the model's tree {frames}: is the tree shaped otherwise?")
        if p["all_frames"] is not None and abs(p["all_frames"] - job_frames(n)) > 0.01:
            warnings.append(f"{n} nodes, {shape_name(shape, k)}: the job handled {p['all_frames']} frames "
                            f"per barrier, the model {job_frames(n)}")
        note_miss("rank 0 CPU", p, cpu, p["rank0_cpu"])
        note_miss("job CPU", p, job, job_cpu_of(p))
        out.append(f"| {n} | {run_name(p)} | {p.get('runs', 1)} | {num(p['load'])} | {num(p['rank0_frames'], 0)} "
                   f"| {num(p['rank0_cpu'])} | {num(cpu)} | {err(cpu, p['rank0_cpu'])} "
                   f"| {num(p['all_frames'], 0)} | {num(job_cpu_of(p))} | {num(job)} | {err(job, job_cpu_of(p))} |")
    out += ["", f"Latency (us) on the measured machine: barrier = {num(model.alpha, 3)} max(P, job CPU / "
            f"{model.cores:g}) + {num(model.beta, 1)}, the job CPU the model's (\"law only\": the same on "
            "the measured job CPU); allocate + free = 2 such barriers + payload; start-up (ms) = "
            f"{num(model.start_fixed / 1000 if model.start_fixed is not None else None, 1)} + "
            f"{num(model.start_per_node / 1000 if model.start_per_node is not None else None, 2)} N.", "",
            "| nodes | shape | P | job CPU / cores | bound | barrier | model | err % | law only | err % "
            "| alloc + free | model | err % | start-up ms | model | err % |",
            "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        n, shape, k, f = key(p)
        path, cpu = model.contended_parts(n, shape, k, folded=f)
        b = model.contended(n, shape, k, folded=f)
        measured_job = job_cpu_of(p)
        law = model.contended(n, shape, k, measured_job, f) if measured_job is not None else None
        af = model.alloc_free_contended(n, shape, k, f)
        start = model.measured_start(n)
        rendezvous = p["rendezvous"]
        note_miss("barrier", p, b, p["barrier"])
        note_miss("allocate + free", p, af, p["alloc_free"])
        note_miss("start-up", p, start, rendezvous)
        out.append(f"| {n} | {run_name(p)} | {num(path)} | {num(cpu)} | {bound_by(model, p)} "
                   f"| {num(p['barrier'])} | {num(b)} | {err(b, p['barrier'])} | {num(law)} | {err(law, p['barrier'])} "
                   f"| {num(p['alloc_free'])} | {num(af)} | {err(af, p['alloc_free'])} "
                   f"| {num(rendezvous / 1000 if rendezvous is not None else None)} "
                   f"| {num(start / 1000 if start is not None else None)} | {err(start, rendezvous)} |")
    out.append("")
    worst = {
        "rank 0 CPU": span(percent(model.rank0_cpu(*key(p)), p["rank0_cpu"]) for p in points),
        "job CPU": span(percent(model.job_cpu(*key(p)), job_cpu_of(p)) for p in points),
        "barrier": span(percent(model.contended(*key(p)[:3], folded=p["folded"]), p["barrier"]) for p in points),
        "barrier, law only": span(percent(model.contended(*key(p)[:3], job_cpu_of(p), p["folded"]), p["barrier"])
                                  for p in points if job_cpu_of(p) is not None),
        "allocate + free": span(percent(model.alloc_free_contended(*key(p)), p["alloc_free"])
                                for p in points),
        "start-up": span(percent(model.measured_start(p["nodes"]), p["rendezvous"]) for p in points),
    }
    out.append("Largest error: " + "; ".join(f"{what} {e:.1f} %" for what, e in worst.items() if e is not None) + ".")
    out.append("")
    if misses:
        out.append(f"**Misses (over {MISS_PERCENT:.0f} %)**: " + "; ".join(misses) + ".")
    else:
        out.append(f"Every measured point is within {MISS_PERCENT:.0f} % of the model.")
    out.append("")
    def path_only(p):
        n, shape, k, f = key(p)
        return model.critical_path(n, shape, k, 0.0, model.measured_wakeup, f) + model.beta

    worst_path = max(points, key=lambda p: abs(percent(path_only(p), p["barrier"])))
    out.append(f"The critical path alone (P + beta, as if each leader had its own core) is off by up to "
               f"{abs(percent(path_only(worst_path), worst_path['barrier'])):.0f} % (at {worst_path['nodes']} nodes, "
               f"{run_name(worst_path)}: {num(path_only(worst_path))} us against "
               f"{num(worst_path['barrier'])}): on this machine the job's CPU, not the path, sets the latency "
               "once the nodes outnumber the cores a few times.")
    out += alternatives(model, points)
    ratios = sorted(p["alloc_free"] / p["barrier"] for p in points if p["alloc_free"] is not None and p["barrier"])
    if ratios:
        out += ["", f"Allocate + free is modelled as {ALLOC_FREE_COLLECTIVES} barriers, the payload and L = "
                f"{num(model.alloc_local, 1)} us (fitted: the provider's own work): measured, it took "
                f"{ratios[0]:.1f}-{ratios[-1]:.1f} barriers (median {ratios[len(ratios) // 2]:.1f}); 32 nodes' "
                f"payloads (about {num(32 * model.payload_bytes / 1000, 1)} KB) are too small to fit a cost "
                "per byte."]
    if len(points) <= 3:
        warnings.append("as many runs as fitted constants, or nearly: the errors say little")
    out += [""] + [f"Note: {w}" for w in warnings] + ([""] if warnings else [])

    shapes = [("star", None)] + [("tree", k) for k in fanouts]
    out += ["### Projection: a real cluster (each leader its own cores, critical path only)", "",
            f"Barrier = a + H (net + w) + b S + c E_path, w = {num(model.wakeup, 0)} us. **As built** each "
            "leader folds its subtree's calls into one entry (E_path = S / 2); **calls whole**, the "
            "build before (PROTOCOL 3): every rank's call went up to rank 0 (E_path entries parsed on "
            "the path). Rank 0's CPU = a + b F0 + c E0. Times in us.", "",
            "| nodes | shape | levels | rank 0 frames | rank 0 CPU | rank 0 CPU, calls whole | "
            + " | ".join(f"barrier, net {num(net, 0)} us" for net in nets) + " | "
            + " | ".join(f"calls whole, net {num(net, 0)} us" for net in nets) + " | "
            + " | ".join(f"allocate + free, net {num(net, 0)} us" for net in nets) + " |",
            "|---:|---|---:|---:|---:|---:|" + "---:|" * (3 * len(nets))]
    for n in project:
        for shape, k in shapes:
            cells = [f"{n:,}", shape_name(shape, k), str(tree_height(n, fanout_of(shape, n, k))),
                     f"{rank0_frames(n, shape, k):,}", num(model.rank0_cpu(n, shape, k), 0),
                     num(model.rank0_cpu(n, shape, k, folded=False), 0)]
            cells += [num(model.barrier(n, shape, k, net), 0) for net in nets]
            cells += [num(model.barrier(n, shape, k, net, folded=False), 0) for net in nets]
            cells += [num(model.alloc_free(n, shape, k, net), 0) for net in nets]
            out.append("| " + " | ".join(cells) + " |")
    out += [""] + verdicts(model, project, fanouts, nets) + [""]

    out += ["### Start-up at scale (assumptions, not fitted)", "",
            f"Start-up = fence + connections. Connections: a level costs ceil(children / {MAX_HANDSHAKES}) "
            f"(h + {HANDSHAKE_TRIPS} net), h = {num(model.handshake, 0)} us, levels one after the other "
            f"(a star: one level of N - 1). The launcher's and PMIx's fence is assumed: tree-shaped "
            f"{num(model.fence_floor_ms, 0)} ms + {num(model.fence_per_doubling_ms, 0)} ms x log2 N, or per "
            f"rank {num(model.fence_per_rank_ms, 1)} ms x N as the central-store anchors below show. The "
            "measured start-up grows about "
            f"{num(model.start_per_node / 1000 if model.start_per_node is not None else None, 1)} ms a node "
            f"only because the launcher starts every process on {model.cores:g} cores.", "",
            "| nodes | shape | " + " | ".join(f"connections ms, net {num(net, 0)} us" for net in nets)
            + " | fence ms, tree-shaped | fence ms, per rank |",
            "|---:|---|" + "---:|" * (len(nets) + 2)]
    for n in project:
        for shape, k in shapes:
            cells = [f"{n:,}", shape_name(shape, k)]
            cells += [num(model.connections(n, shape, k, net) / 1000, 2) for net in nets]
            cells += [num(model.fence_tree_ms(n), 0), num(model.fence_rank_ms(n), 0)]
            out.append("| " + " | ".join(cells) + " |")
    top = max(project)
    star_cpu_bound = (top - 1) * model.handshake / 16 / 1000
    out += ["", f"At {top:,} nodes the star's connections are "
            f"{num(model.connections(top, 'star', None, nets[0]) / 1000, 1)} ms with rank 0's node serving "
            f"{MAX_HANDSHAKES} at once ({num(star_cpu_bound, 0)} ms if its handshakes get 16 cores), a "
            "tree's about a millisecond: either is small against the fence, so start-up does not "
            "decide star against tree; the barrier does.", ""]

    out += ["### Anchors (published)", "",
            "| system | bootstrap at scale | barrier latency curve published |", "|---|---|---|"]
    out += [f"| {name} | {what} | {curve} |" for name, what, curve in ANCHORS]
    out += ["", "None of them publishes a barrier latency curve against node count; their start-up "
            "figures anchor the fence's per-rank bound above (about 1 ms a rank)."]
    return "\n".join(out)


def alternatives(model, points):
    """The simpler forms the fits were checked against: their largest error."""
    lines = []
    cpu = [p for p in points if p.get("rank0_cpu") is not None]
    if model.entry_fitted:
        ys = [p["rank0_cpu"] for p in cpu]
        rows = [[1.0, rank0_frames(p["nodes"], p["shape"], p["fanout"])] for p in cpu]
        solved = least_squares(rows, ys, relative(ys))
        if solved is not None:
            errors = [percent(solved[0] + solved[1] * r[1], y) for r, y in zip(rows, ys)]
            big = [p for p, e in zip(cpu, errors) if p["nodes"] == max(q["nodes"] for q in cpu) and p["shape"] == "tree"]
            lines.append(f"Without the entries, rank 0's CPU = a + b F0 fits a = {num(solved[0], 1)}, b = "
                         f"{num(solved[1], 2)} us and is off by up to {span(errors):.0f} %, its largest trees "
                         + ("all low (" + ", ".join(f"{err(solved[0] + solved[1] * rank0_frames(p['nodes'], p['shape'], p['fanout']), p['rank0_cpu'])} %" for p in big) + ")"
                            if big else "") + ": at a fixed fan-out rank 0's CPU still grows with N.")
    runs = [p for p in points if p.get("all_cpu") is not None]
    if model.job_entry_fitted and runs:
        ys = [p["all_cpu"] for p in runs]
        solved = least_squares([[p["nodes"], job_frames(p["nodes"])] for p in runs], ys, relative(ys))
        if solved is not None:
            errors = [percent(solved[0] * p["nodes"] + solved[1] * job_frames(p["nodes"]), y) for p, y in zip(runs, ys)]
            used = span(percent(model.job_cpu(*key(p)), p["all_cpu"]) for p in runs)
            top = max(p["nodes"] for p in runs)
            stars = [p["all_cpu"] for p in runs if p["nodes"] == top and p["shape"] == "star"]
            trees = [p["all_cpu"] for p in runs if p["nodes"] == top and p["shape"] == "tree"]
            at_top = (f" (measured at {top} nodes: star {num(stars[0], 0)}, trees {num(min(trees), 0)}-"
                      f"{num(max(trees), 0)} us)" if stars and trees else "")
            lines.append(f"The job's CPU as a_all N + b all_frames, both fitted, is off by up to {span(errors):.0f} % "
                         f"(the form used: {used:.1f} %), but all_frames = 4 (N - 1) in every run: it gives star "
                         f"and tree the same CPU at a given N{at_top}, and its b ({num(solved[1], 2)} us) only "
                         "trades off against a_all. The form used takes b from rank 0 and puts the trees' extra "
                         "work in the entries.")
    return [""] + [" ".join(lines)] if lines else []


def verdicts(model, project, fanouts, nets):
    top = max(project)
    lines = []

    def which(ks):
        return ("yes for k = " + ", ".join(map(str, ks))) if ks else "no"

    for net in nets:
        trees = [(k, model.barrier(top, "tree", k, net), model.barrier(top, "tree", k, net, folded=False))
                 for k in fanouts]
        star = model.barrier(top, "star", None, net)
        lines.append(f"- **A barrier under 1 ms at {top:,} nodes, net {num(net, 0)} us?** Star: "
                     + ("yes" if star < 1000 else "no") + f" ({num(star / 1000, 1)} ms: rank 0 handles "
                     f"{rank0_frames(top, 'star', None):,} frames one after the other). Tree as built "
                     "(calls folded): " + which([k for k, b, _ in trees if b < 1000])
                     + " (" + ", ".join(f"k={k} {num(b / 1000, 2)} ms" for k, b, _ in trees) + "). Tree "
                     "with calls whole (the build before): " + which([k for k, _, b in trees if b < 1000])
                     + " (" + ", ".join(f"k={k} {num(b / 1000, 2)} ms" for k, _, b in trees) + ").")
    net = min(nets)
    af = [(k, model.alloc_free(top, "tree", k, net), model.payload(top, "tree", k)) for k in fanouts]
    lines.append(f"- **Allocate + free at {top:,} nodes, net {num(net, 0)} us**: star "
                 f"{num(model.alloc_free(top, 'star', None, net) / 1000, 0)} ms (rank 0 tags the "
                 f"{num(top * model.payload_bytes / 1000, 0)} KB answer once per leader); tree "
                 + ", ".join(f"k={k} {num(a / 1000, 1)} ms (payload {num(p / 1000, 1)})" for k, a, p in af)
                 + f", the payload at an assumed {num(model.byte_ns, 1)} ns a byte.")
    if model.cpu_per_entry > 0 and fanouts:
        k = max(fanouts)
        whole = path_entries(top, "tree", k)
        folded = path_entries(top, "tree", k, folded=True)
        lines += ["", f"Calls whole, the tree's barrier at {top:,} nodes was set by the rank entries, not the "
                  f"frames: every rank's call travelled up to rank 0, which parsed {top - 1:,} of them "
                  f"({num(model.cpu_per_entry, 2)} us each, fitted: {num(model.cpu_per_entry * (top - 1) / 1000, 1)} "
                  f"ms), and the leaders below it on the path {whole - (top - 1):,} more (k={k}). Folded, as "
                  f"built, the leaders of that path parse {folded} entries in all, one per child, and the "
                  f"barrier is {num(model.barrier(top, 'tree', k, net) / 1000, 2)} ms against "
                  f"{num(model.barrier(top, 'tree', k, net, folded=False) / 1000, 2)}. With several ranks per "
                  "node the folded entries stay one per child (the ranks travel as runs); only payloads that "
                  "differ (an all-gather of distinct values) still grow with the ranks."]
    return lines


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
    measured_top = max(p["nodes"] for p in points)
    ms = [n for n in ns if n <= measured_top]
    net = min(nets)
    shapes = [("star", None)] + [("tree", k) for k in fanouts]
    markers = ["o", "s", "^", "D", "v", "P"]
    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(13, 5.2))
    for index, (shape, k) in enumerate(shapes):
        colour = f"C{index % 10}"
        marker = markers[index % len(markers)]
        lat.plot(ns, [model.barrier(n, shape, k, net) for n in ns], "-", color=colour)
        cpu.plot(ns, [model.rank0_cpu(n, shape, k) for n in ns], "-", color=colour)
        if shape == "tree":
            lat.plot(ns, [model.barrier(n, shape, k, net, folded=False) for n in ns], "--", color=colour,
                     linewidth=1)
            cpu.plot(ns, [model.rank0_cpu(n, shape, k, folded=False) for n in ns], "--", color=colour,
                     linewidth=1)
        lat.plot(ms, [model.contended(n, shape, k) for n in ms], ":", color=colour, linewidth=1.5)
        for folded in (True, False):
            mine = [p for p in points if p["shape"] == shape and p["fanout"] == k and p["folded"] == folded]
            face = colour if folded else "none"
            lat.scatter([p["nodes"] for p in mine], [p["barrier"] for p in mine], facecolor=face,
                        marker=marker, edgecolor=colour if not folded else "k", zorder=3)
            mine = [p for p in mine if p["rank0_cpu"] is not None]
            cpu.scatter([p["nodes"] for p in mine], [p["rank0_cpu"] for p in mine], facecolor=face,
                        marker=marker, edgecolor=colour if not folded else "k", zorder=3)
    lat.axhline(1000, color="grey", linewidth=0.8)
    lat.text(ns[0], 1100, "1 ms", color="grey", fontsize=8)
    lat.set_title(f"barrier latency (us): measured on {model.cores:g} cores, projected at net {net:g} us",
                  fontsize=10)
    cpu.set_title("rank 0 CPU per barrier (us)", fontsize=10)
    from matplotlib.lines import Line2D

    by_shape = [Line2D([], [], color=f"C{i % 10}", marker=markers[i % len(markers)], markeredgecolor="k",
                       label=shape_name(shape, k)) for i, (shape, k) in enumerate(shapes)]
    styles = {
        lat: [("-", "real cluster (critical path), as built: calls folded"),
              ("--", "real cluster, calls whole (the build before)"),
              (":", f"measured machine's model ({model.cores:g} cores), as built")],
        cpu: [("-", "model, as built: calls folded"), ("--", "model, calls whole (the build before)")],
    }
    for ax in (lat, cpu):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes (one leader each)")
        ax.grid(True, which="both", alpha=0.3)
        handles = by_shape + [Line2D([], [], color="k", linestyle=style, label=label) for style, label in styles[ax]]
        handles.append(Line2D([], [], color="w", marker="o", markerfacecolor="grey", markeredgecolor="k",
                              label="measured, calls folded (filled)"))
        handles.append(Line2D([], [], color="w", marker="o", markerfacecolor="none", markeredgecolor="grey",
                              label="measured, calls whole (hollow)"))
        ax.legend(handles=handles, fontsize=7, loc="upper left")
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
        for folded in (False, True):
            assert path_entries(n, "star", None, folded) == n - 1
            assert job_entries(n, "star", None, folded) == n - 1
            assert rank0_entries(n, "star", None, folded) == n - 1
        for k in (2, 3, 8):
            levels = busiest_per_level(n, k)
            assert len(levels) == tree_height(n, k)
            assert all(1 <= c <= k for c in levels), (n, k, levels)
            assert levels[0] == min(k, n - 1)
            # Subtree sizes and depths against a walk of the parent links.
            depth = [0] * n
            size = [1] * n
            for i in range(1, n):
                depth[i] = depth[(i - 1) // k] + 1
            for i in range(n - 1, 0, -1):
                size[(i - 1) // k] += size[i]
            assert all(subtree_size(n, k, i) == size[i] for i in range(n)), (n, k)
            assert job_entries(n, "tree", k) == sum(depth), (n, k)
            chain, node = 0, 0
            while node < n and size[node] > 1:
                chain += size[node] - 1
                node = k * node + 1
            assert path_entries(n, "tree", k) == chain, (n, k)
            # Folded: one entry per child, whatever lies below it.
            assert job_entries(n, "tree", k, True) == n - 1
            assert rank0_entries(n, "tree", k, True) == len(range(1, min(k, n - 1) + 1))
            assert 2 * path_entries(n, "tree", k, True) == serial_frames(n, "tree", k)
    assert busiest_per_level(10, 8) == [8, 1]
    assert busiest_per_level(8192, 8) == [8, 8, 8, 8, 8]

    # Known constants, exact synthetic runs: the fit must give them back. Cores enough that
    # the small runs are bound by their critical path, so that w_m is determined too.
    truth = Model()
    truth.cores = 3.0
    truth.cpu_fixed, truth.cpu_per_frame, truth.cpu_per_entry = 20.0, 6.0, 0.75
    truth.job_fixed, truth.job_per_entry, truth.job_per_inner = 15.0, 3.0, 20.0
    truth.alpha, truth.beta, truth.measured_wakeup = 1.2, 40.0, 12.5
    truth.start_fixed, truth.start_per_node = 30_000.0, 9_000.0
    truth.alloc_local = 55.0
    runs = [(n, "star", None) for n in (2, 4, 8, 16, 32)]
    runs += [(n, "tree", 2) for n in (4, 8, 16, 32)] + [(n, "tree", 4) for n in (8, 16, 32)]
    runs += [(n, "tree", 8) for n in (16, 32)]
    # The trees twice: calls whole (the build before, which tells entries from frames) and
    # folded (as built).
    runs = [(n, shape, k, False) for n, shape, k in runs] + [(n, "tree", k, True) for n, shape, k in runs
                                                             if shape == "tree"]
    points = []
    for n, shape, k, f in runs:
        points.append({
            "nodes": n, "shape": shape, "fanout": k, "folded": f, "load": None,
            "barrier": truth.contended(n, shape, k, folded=f),
            "rank0_cpu": truth.rank0_cpu(n, shape, k, f), "rank0_frames": rank0_frames(n, shape, k),
            "leaders_cpu": None, "all_cpu": truth.job_cpu(n, shape, k, f), "all_frames": job_frames(n),
            "alloc_free": truth.alloc_free_contended(n, shape, k, f),
            "rendezvous": truth.measured_start(n),
        })
    bound = {bound_by(truth, p) for p in points}
    assert bound == {"path", "CPU"}, f"the synthetic runs must hold both regimes, not {bound}"

    def close(got, want, what, tolerance=1e-6):
        assert abs(got - want) <= tolerance * max(1.0, abs(want)), f"{what}: fitted {got}, not {want}"

    got = fit(points, cores=truth.cores)
    assert got.entry_fitted and got.job_entry_fitted
    assert got.job_inner_fitted
    for name in ("cpu_fixed", "cpu_per_frame", "cpu_per_entry", "job_fixed", "job_per_entry", "job_per_inner",
                 "alpha", "beta", "start_fixed", "start_per_node", "alloc_local"):
        close(getattr(got, name), getattr(truth, name), name)
    close(got.measured_wakeup, truth.measured_wakeup, "measured_wakeup", 1e-4)
    for p in points:
        close(got.contended(*key(p)[:3], folded=p["folded"]), p["barrier"], "barrier", 1e-4)
        close(got.alloc_free_contended(*key(p)), p["alloc_free"], "alloc", 1e-4)

    # Stars alone: frames and entries move together at rank 0 (c folds into b), the job's
    # entries per leader are N - 1 (c_all is taken as c).
    stars = [p for p in points if p["shape"] == "star"]
    # Folded trees alone: the same (rank 0 parses one entry per two frames, the job one per
    # link), so b takes c's share and the fit still predicts them.
    folded = [p for p in points if p["folded"] or p["shape"] == "star"]
    got = fit(folded, cores=truth.cores)
    assert not got.entry_fitted and got.cpu_per_entry == 0.0
    close(got.cpu_per_frame, truth.cpu_per_frame + truth.cpu_per_entry / 2, "per-frame cost, calls folded")
    for p in folded:
        close(got.rank0_cpu(*key(p)), p["rank0_cpu"], "rank 0 CPU, calls folded")
    got = fit(stars, cores=truth.cores)
    assert not got.entry_fitted and not got.job_entry_fitted and got.cpu_per_entry == 0.0
    close(got.cpu_per_frame, truth.cpu_per_frame + truth.cpu_per_entry / 2, "per-frame cost of stars alone")
    close(got.cpu_fixed, truth.cpu_fixed, "fixed cost of stars alone")

    # Runs without the job's sums (older engine_bench): the leaders' median stands in.
    older = [dict(p, all_cpu=None, leaders_cpu=10.0) for p in points]
    got = fit(older, cores=truth.cores)
    assert got.job_cpu_from.startswith("rank 0's plus")
    report(got, older, [128, 8192], [2, 8], [2.0, 20.0], "synthetic")

    # A real cluster: the tree's frames stay flat in N, the star's grow with it.
    assert truth.barrier(8192, "tree", 8, 2.0) < 1000 < truth.barrier(8192, "tree", 8, 2.0, folded=False)
    assert truth.barrier(8192, "star", None, 2.0) > 50 * truth.barrier(8192, "tree", 8, 2.0)
    assert truth.connections(8192, "tree", 8, 2.0) == 5 * (truth.handshake + HANDSHAKE_TRIPS * 2.0)
    assert truth.connections(8192, "star", None, 2.0) == 128 * (truth.handshake + HANDSHAKE_TRIPS * 2.0)
    print("self-test: ok (tree heights, subtrees, entries; the fits recover known constants: rank 0's "
          "CPU, the job's CPU, the measured machine's alpha, beta and wake-up, its start-up)")


# ---------------------------------------------------------------------------------------------


def numbers(text, kind):
    return [kind(v) for v in text.split(",") if v.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="control_plane.py",
        description="Model of the leaders' control plane (star or k-ary tree), fitted to "
                    "engine_bench runs on a machine with few cores and projected to real clusters.",
        epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", help="JSON-lines file of engine_bench runs (see below)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the tree's arithmetic and that the fits recover known constants, then exit")
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="which barrier_us and alloc_free_after_us figure is taken (default: median)")
    parser.add_argument("--cores", type=float, default=2.0,
                        help="cores of the machine the runs were taken on, all emulated nodes sharing "
                             "them (default 2: the development VM of issue 44)")
    parser.add_argument("--project", default="128,1024,8192", metavar="N,N,...",
                        help="node counts to project to (default: 128,1024,8192)")
    parser.add_argument("--fanout", default="2,4,8", metavar="K,K,...",
                        help="tree fan-outs to project (default: 2,4,8)")
    parser.add_argument("--net-us", default="2,20", metavar="US,US,...",
                        help="one-way network latencies to project with, microseconds "
                             "(default: 2 for InfiniBand, 20 for TCP over Ethernet)")
    parser.add_argument("--wakeup-us", type=float, default=5.0, metavar="US",
                        help="a real cluster's wake-up per hop: a blocked leader woken on an idle core "
                             "(assumed; default 5)")
    parser.add_argument("--payload-bytes", type=float, default=30.0, metavar="B",
                        help="an allocation's payload per rank on the wire (default 30: an 8-digit offset "
                             "as serde_json writes a byte vector)")
    parser.add_argument("--byte-ns", type=float, default=2.0, metavar="NS",
                        help="a leader's CPU per payload byte parsed or tagged (assumed; default 2)")
    parser.add_argument("--handshake-us", type=float, default=DEFAULT_HANDSHAKE_US, metavar="US",
                        help=f"one handshake's CPU at the serving leader (assumed; default {DEFAULT_HANDSHAKE_US:g})")
    parser.add_argument("--fence-floor-ms", type=float, default=40.0, metavar="MS",
                        help="the tree-shaped fence's floor (default 40: the 2-node start measured here)")
    parser.add_argument("--fence-ms-per-doubling", type=float, default=10.0, metavar="MS",
                        help="the tree-shaped fence's cost per doubling of the nodes (assumed; default 10)")
    parser.add_argument("--fence-ms-per-rank", type=float, default=1.0, metavar="MS",
                        help="the per-rank fence bound (default 1: TCPStore's and NVSHMEM's start-up)")
    parser.add_argument("--each-run", action="store_true",
                        help="fit and show every run apart (default: the runs of one configuration merged, "
                             "each figure their median)")
    parser.add_argument("--plot", metavar="PNG", help="also draw the model (needs matplotlib; skipped without)")
    args = parser.parse_args(argv)
    if args.self_test:
        self_test()
        return 0
    if not args.runs:
        parser.error("give the runs' JSON-lines file (or --self-test); --help describes it")
    try:
        if args.cores <= 0:
            raise ValueError("--cores takes a positive number")
        points = read_points(args.runs, args.stat)
        if not args.each_run:
            points = merge_repeats(points)
        model = fit(points, args.cores)
        model.wakeup, model.payload_bytes, model.byte_ns = args.wakeup_us, args.payload_bytes, args.byte_ns
        model.handshake = args.handshake_us
        model.fence_floor_ms, model.fence_per_doubling_ms = args.fence_floor_ms, args.fence_ms_per_doubling
        model.fence_per_rank_ms = args.fence_ms_per_rank
        project = numbers(args.project, int)
        nets = numbers(args.net_us, float)
        fanouts = numbers(args.fanout, int)
        if not project or not nets or any(n < 1 for n in project) or any(k < 1 for k in fanouts):
            raise ValueError("--project, --net-us and --fanout take positive numbers")
    except (OSError, ValueError) as e:
        print(f"control_plane.py: {e}", file=sys.stderr)
        return 2
    print(report(model, points, project, fanouts, nets, args.runs))
    if args.plot:
        plot(model, points, project, fanouts, nets, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
