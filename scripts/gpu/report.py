#!/usr/bin/env python3
"""Turns a GPU run's files (machine.txt, results.txt from `xtask test`, bench.jsonl from
`xtask bench`) into docs/gpu-results.md and an SVG plot of the copy sweep.

    scripts/gpu/report.py RESULTS_DIR [DOCS_DIR]
"""
import json
import re
import sys
from pathlib import Path


def python_section(folder):
    """The Triton run of scripts/gpu/run-python.sh, whose files are kept in docs/gpu/python."""
    summary = folder / "summary.txt"
    if not summary.exists():
        return []
    machine = (folder / "machine.txt").read_text().strip() if (folder / "machine.txt").exists() else ""
    out = ["## Python: an unmodified Triton kernel over `(tensor, peer_bases)`", "",
           "`scripts/gpu/run-python.sh` (bundle from `scripts/gpu/bundle-python.sh`): the abi3 wheel",
           "installed with `pip --target`, `crates/symmem-py/tests/gpu/triton_alltoall.py` under",
           "`symmem-run` on NVSHMEM, all PEs on one GPU. Each rank's `@triton.jit` kernel takes the",
           "tensor and its int64 `peer_bases` as two plain arguments, stores into every peer with",
           "`bases[to] + (ptr - bases[from])`, and every rank reads back what the others wrote",
           "(logs: docs/gpu/python/).", "", "```text", machine, "", summary.read_text().strip(), "```", ""]
    return out


# The copy paths of the bench, in the order they are drawn and tabled: JSON key, label, colour.
# Older bench files lack the untranslated and peer paths; only what a file has is shown.
COPY_PATHS = [
    ("translated_kernel_gbps", "translated copy kernel (table)", "#c03"),
    ("untranslated_kernel_gbps", "same kernel, no table", "#06c"),
    ("runtime_peer_gbps", "runtime peer copy", "#393"),
    ("runtime_d2d_gbps", "runtime device to device", "#888"),
]


def copy_paths(copies):
    return [p for p in COPY_PATHS if all(isinstance(c.get(p[0]), (int, float)) for c in copies)]


def svg_plot(copies, path, gpu):
    """Bandwidth (GB/s) against size for every copy path of the bench: a plain SVG."""
    w, h, left, right, top, bottom = 640, 380, 70, 20, 30, 70
    sizes = [c["bytes"] for c in copies]
    paths = copy_paths(copies)
    ymax = max(c[key] for c in copies for key, _, _ in paths) * 1.1

    def x(i):
        return left + i * (w - left - right) / max(1, len(sizes) - 1)

    def y(v):
        return top + (h - top - bottom) * (1 - v / ymax)

    def line(key, colour):
        pts = " ".join(f"{x(i):.1f},{y(c[key]):.1f}" for i, c in enumerate(copies))
        return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>'

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{w/2}" y="18" text-anchor="middle">NVSHMEM on {gpu}: copy into a peer PE (GB/s copied)</text>']
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        v = ymax * frac
        out.append(f'<line x1="{left}" x2="{w-right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left-6}" y="{y(v)+4:.1f}" text-anchor="end">{v:.0f}</text>')
    for i, s in enumerate(sizes):
        label = f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB"
        out.append(f'<text x="{x(i):.1f}" y="{h-bottom+18}" text-anchor="middle">{label}</text>')
    for i, (key, label, colour) in enumerate(paths):
        out.append(line(key, colour))
        lx, ly = left + 10 + (i % 2) * 280, h - 30 + (i // 2) * 16
        out.append(f'<text x="{lx}" y="{ly}" fill="{colour}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    results = Path(sys.argv[1])
    docs = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[2] / "docs"
    # nvidia-smi underlines its header with terminal escapes: drop them.
    machine = re.sub(r"\x1b\[[0-9;]*m", "", (results / "machine.txt").read_text().strip())
    matrix = (results / "results.txt").read_text()
    # The GPU line of machine.txt: "NVIDIA H200, 580.159.04, 143771 MiB".
    gpu = next((l.split(",")[0] for l in machine.splitlines() if l.count(",") >= 2), "the GPU")
    pes_per_gpu = "All PEs share one GPU" if "GPU1" not in machine else "PEs spread over the GPUs"
    bench = results / "bench.jsonl"
    figures = [json.loads(l) for l in bench.read_text().splitlines() if l.strip()] if bench.exists() else []
    start = matrix.find("    check")
    table = matrix[start:].strip() if start >= 0 else matrix.strip()
    allocs = {f["ranks"]: f for f in figures if f["figure"] == "alloc_free_4KiB"}
    copies = [f for f in figures if f["figure"] == "copy"]
    stores = [f for f in figures if f["figure"] == "store_1GiB"]
    alltoall = {f["ranks"]: f for f in figures if f["figure"] == "all_to_all_store"}
    lines = ["# GPU results: NVSHMEM provider", "",
             "Produced by `scripts/gpu/report.py` from a run of `scripts/gpu/run-nvshmem.sh` (bundle made",
             f"by `scripts/gpu/bundle-nvshmem.sh`). {pes_per_gpu} (LOCAL_RANK % GPUs).", "",
             "## Machine", "", "```text", machine, "```", "",
             "## Conformance: `xtask test --provider nvshmem --ranks 1,2,4,8`", "", "```text", table, "```", ""]
    if allocs:
        lines += ["## Collective allocate + free of 4 KiB (median of 50 pairs, rank 0)", "",
                  "| PEs | raw nvshmem_malloc + free | symmem Context | difference |", "| --- | --- | --- | --- |"]
        for r in sorted(allocs):
            a = allocs[r]
            lines.append(f"| {r} | {a['raw_us']:.1f} us | {a['context_us']:.1f} us | {a['context_us']-a['raw_us']:+.1f} us |")
        lines.append("")
    if allocs:
        first = allocs[min(allocs)]
        if "gpus" in first:
            lines[lines.index("## Machine")-1:lines.index("## Machine")-1] = [
                f"GPUs the ranks used: {first['gpus']} ({first['placement']})."]
    if copies:
        paths = copy_paths(copies)
        placement = copies[0].get("placement", "")
        timing = copies[0].get("timing", "host wall clock over all repetitions")
        lines += ["## Copy from rank 0's buffer into rank 1's", "",
                  f"Bytes copied per second (each byte is read and written once); timing: {timing}"
                  + (f"; {placement}." if placement else "."), ""]
        if len(paths) > 2:
            lines += ["The untranslated path is the same kernel with no table (rank 1's address translated",
                      "once on the host): translated/untranslated is the translation's own cost. The kernel's",
                      "shape (one 16-byte vector per thread, uncapped grid) was chosen by",
                      "`scripts/gpu/copy-sweep.cu` over plain cudaMalloc buffers (docs/gpu/copy-sweep.txt).", ""]
        ratios = [("translated_over_runtime", "translated / runtime D2D"),
                  ("untranslated_over_runtime", "untranslated / runtime D2D"),
                  ("translated_over_untranslated", "translated / untranslated"),
                  ("translated_over_peer_runtime", "translated / runtime peer")]
        ratios = [r for r in ratios if all(r[0] in c for c in copies)] or [("ratio", "ratio")]
        head = ["size"] + [label for _, label, _ in paths] + [label for _, label in ratios]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for c in copies:
            s = c["bytes"]
            label = f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB"
            cells = [label] + [f"{c[key]:.0f} GB/s" for key, _, _ in paths] + [f"{c[key]:.3f}" for key, _ in ratios]
            lines.append("| " + " | ".join(cells) + " |")
        peer_errors = sorted({c["runtime_peer_error"] for c in copies if "runtime_peer_error" in c})
        if peer_errors:
            lines += ["", "The runtime peer copy failed, so it has no column: " + "; ".join(peer_errors)]
        lines += ["", "![copy bandwidth](gpu/nvshmem-copy.svg)", ""]
        svg_plot(copies, docs / "gpu" / "nvshmem-copy.svg", gpu)
    for s in stores:
        lines += ["## Stores of 1 GiB: translated into a peer PE vs plain local stores", "",
                  f"translated {s['translated_to_peer_gbps']:.0f} GB/s, local {s['plain_local_gbps']:.0f} GB/s, "
                  f"ratio {s['ratio']:.3f}" + (f" ({s['placement']})" if "placement" in s else ""), ""]
    if alltoall:
        lines += ["## All-to-all store: every rank copies its 64 MiB chunk into every PE through the table", "",
                  "All ranks at once, one translated copy launch per PE; the slowest rank's GPU time (median",
                  "of the repetitions) over all bytes moved gives the aggregate.", "",
                  "| PEs | GPUs | aggregate | per rank |", "| --- | --- | --- | --- |"]
        for r in sorted(alltoall):
            a = alltoall[r]
            lines.append(f"| {r} | {a['gpus']} ({a['placement']}) | {a['aggregate_gbps']:.0f} GB/s | {a['per_rank_gbps']:.0f} GB/s |")
        lines.append("")
    for extra in sorted(results.glob("check-*.txt")):
        # Single checks run alone (`xtask test --check IDS`), e.g. check-9-10b.txt.
        ids = extra.stem.removeprefix("check-").replace("-", ",")
        text = extra.read_text()
        start = text.find("    check")
        lines += [f"## Checks {ids} run alone: `xtask test --provider nvshmem --check {ids}`", "",
                  "```text", (text[start:] if start >= 0 else text).strip(), "```", ""]
    lines += python_section(docs / "gpu" / "python")
    (docs / "gpu-results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {docs / 'gpu-results.md'}")


if __name__ == "__main__":
    main()
