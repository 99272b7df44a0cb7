#!/usr/bin/env bash
# Star against tree on the emulated nodes (issue 44): engine_bench_nodes at each node count and
# fan-out, one rank per node, appending rank 0's line (with "nodes", "shape", "fanout", "calls"
# and the machine's load added) to OUT, the input of scripts/model/control_plane.py. As root.
# "calls" is "folded": the leaders fold their subtree's calls into one entry (PROTOCOL 4 on).
# To measure an older build beside it, which sent every rank's call up whole: BENCH=<its
# engine_bench_nodes> CALLS=whole (engine_bench_nodes finds engine_bench beside itself).
#
#   cargo build --release -p symmem-bootstrap --example engine_bench --example engine_bench_nodes
#   scripts/model/measure.sh OUT.jsonl [BARRIERS] [NODES...]
#
# BARRIERS: 10000 by default. NODES: 2 4 8 16 32 by default. At each node count: the star
# (fan-out 1000) and every fan-out of 2, 4, 8 (FANOUTS="1000 4 8" in the environment picks
# others) below the node count less one (at or above it the tree is the star), interleaved, so
# a load change hits them alike.
set -euo pipefail
out=${1:?usage: measure.sh OUT.jsonl [BARRIERS] [NODES...]}
barriers=${2:-10000}
shift $(( $# >= 2 ? 2 : 1 ))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(2 4 8 16 32)
bench=${BENCH:-$(dirname "$0")/../../target/release/examples/engine_bench_nodes}
[ -x "$bench" ] || { echo "build it first: cargo build --release -p symmem-bootstrap --example engine_bench --example engine_bench_nodes" >&2; exit 1; }
for nodes in "${sizes[@]}"; do
  for fanout in ${FANOUTS:-1000 2 4 8}; do
    if [ "$fanout" != 1000 ] && [ "$fanout" -ge $((nodes - 1)) ]; then continue; fi
    shape=tree; [ "$fanout" = 1000 ] && shape=star
    echo "== $nodes nodes, $shape (fan-out $fanout), $barriers barriers" >&2
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$("$bench" mpirun "$nodes" 1 "$barriers" "SYMMEM_CONTROL_FANOUT=$fanout" 2>/dev/null | grep '^{')
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(nodes=int(sys.argv[2]), shape=sys.argv[3], fanout=None if sys.argv[3]=="star" else int(sys.argv[4]), calls=sys.argv[6], load=float(sys.argv[5])); print(json.dumps(d))' \
      "$line" "$nodes" "$shape" "$fanout" "$load" "${CALLS:-folded}" >>"$out"
    python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("   barrier median %.1f us, rank 0 CPU %.1f us/barrier, %g frames/barrier, start %.0f ms" % (d["barrier_us"]["median"], d["rank0_cpu_us_per_barrier"], d["rank0_frames_per_barrier"], d["rendezvous_us"]/1000))' "$out" >&2
  done
done
