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


def svg_plot(copies, path, gpu):
    """Bandwidth (GB/s) against size, translated copy kernel vs runtime copy: a plain SVG."""
    w, h, left, right, top, bottom = 640, 360, 70, 20, 30, 50
    sizes = [c["bytes"] for c in copies]
    ymax = max(max(c["translated_kernel_gbps"], c["runtime_d2d_gbps"]) for c in copies) * 1.1

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
    out.append(line("runtime_d2d_gbps", "#888"))
    out.append(line("translated_kernel_gbps", "#c03"))
    out.append(f'<text x="{left+10}" y="{h-12}" fill="#c03">translated copy kernel (table)</text>')
    out.append(f'<text x="{left+260}" y="{h-12}" fill="#888">cudaMemcpyAsync device to device</text>')
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
    if copies:
        lines += ["## Translated copy kernel into a peer PE vs cudaMemcpy device to device", "",
                  "Bytes copied per second (each byte is read and written once).", "",
                  "| size | translated kernel | cudaMemcpyAsync D2D | ratio |", "| --- | --- | --- | --- |"]
        for c in copies:
            s = c["bytes"]
            label = f"{s >> 30} GiB" if s >= 1 << 30 else f"{s >> 20} MiB"
            lines.append(f"| {label} | {c['translated_kernel_gbps']:.0f} GB/s | {c['runtime_d2d_gbps']:.0f} GB/s | {c['ratio']:.3f} |")
        lines += ["", "![copy bandwidth](gpu/nvshmem-copy.svg)", ""]
        svg_plot(copies, docs / "gpu" / "nvshmem-copy.svg", gpu)
    for s in stores:
        lines += ["## Stores of 1 GiB: translated into a peer PE vs plain local stores", "",
                  f"translated {s['translated_to_peer_gbps']:.0f} GB/s, local {s['plain_local_gbps']:.0f} GB/s, "
                  f"ratio {s['ratio']:.3f}", ""]
    lines += python_section(docs / "gpu" / "python")
    (docs / "gpu-results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {docs / 'gpu-results.md'}")


if __name__ == "__main__":
    main()
