"""Markdown tables and plots of benchmark rows: pure formatting, importable without a GPU.

The benchmark scripts that need CUDA at import time (``bench_mla.py``, ``gluon_gemm_probe.py``)
import their formatting from here, and so does ``report.py``, which rebuilds
``benchmarks/RESULTS.md`` from ``benchmarks/results/*.json`` on any machine. Standard library
only (matplotlib for the plot, imported when it draws).
"""

from __future__ import annotations

DECODE_KINDS = ("fp8", "bf16")


# ----------------------------------------------------------------------------- bench_mla.py


def decode_table(rows) -> str:
    """The sparse decode rows (``op == "sparse_decode"``) of a ``bench_mla.py`` run, one a line.

    Parameters
    ----------
    rows : list of dict
        The ``rows`` of ``bench_mla.json``; rows of other ops are skipped.

    Returns
    -------
    str
        A Markdown table: time, time in a CUDA graph, throughput, floor, floor / time and the
        reference's time where it was measured.
    """
    lines = [
        "| dtype | batch | heads | q_len | splits | time (us) | in a graph (us) | TFLOP/s | GB/s | floor (us) | "
        "floor/time | reference (us) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["op"] == "sparse_decode":
            ref = f"{r['reference_ms'] * 1e3:.0f}" if "reference_ms" in r else ""
            lines.append(
                f"| {r['dtype']} | {r['batch']} | {r['heads']} | {r['q_len']} | {r['splits']} | "
                f"{r['ms'] * 1e3:.1f} | {r['graph_us']:.1f} | {r['tflops']:.0f} | {r['gbps']:.0f} | {r['floor_ms'] * 1e3:.1f} | "
                f"{r['floor_ms'] / r['ms'] * 100:.0f}% | {ref} |"
            )
    return "\n".join(lines)


def eager_table(rows) -> str:
    """The batch-1 decode rows' eager wall time per call, with FastLaunch and with Triton's JIT launch."""
    lines = [
        "| decode, batch 1 | eager (us/call) | same, Triton's JIT launch (us/call) |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r['dtype']} H={r['heads']} q_len={r['q_len']} | {r['eager_us']:.1f} | {r['eager_jit_us']:.1f} |"
        for r in rows
        if "eager_us" in r
    ]
    return "\n".join(lines)


def rope_table(rows) -> str:
    """The RoPE + FP8 quantize rows (``op == "rope_quantize"``) of a ``bench_mla.py`` run."""
    lines = [
        "| tokens | kernel (us) | GB/s | % of copy | in a graph (us/call) | eager public API (us/call) | "
        "same, Triton's JIT launch (us/call) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["op"] == "rope_quantize":
            lines.append(
                f"| {r['tokens']} | {r['ms'] * 1e3:.1f} | {r['gbps']:.0f} | {r['copy_fraction'] * 100:.0f}% | "
                f"{r['graph_us']:.2f} | {r['eager_api_us']:.1f} | {r.get('eager_api_jit_us', 0):.1f} |"
            )
    return "\n".join(lines)


def markdown(meta, rows) -> str:
    """All tables of a ``bench_mla.py`` run (``bench_mla.md``): decode, eager batch-1 decode, RoPE."""
    head = (
        f"{meta['device']}, torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}; "
        f"measured D2D copy {meta['copy_bandwidth_gbps']:.0f} GB/s."
    )
    return "\n\n".join([head, decode_table(rows), eager_table(rows), rope_table(rows)]) + "\n"


def packed_markdown(meta, rows) -> str:
    """The packed-cache table of ``bench_mla.py --packed`` (with FlashMLA's columns under ``--flashmla``)."""
    topk = rows[0]["topk"] if rows else "-"
    lines = [
        f"{meta['device']}, torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}; "
        f"measured D2D copy {meta['copy_bandwidth_gbps']:.0f} GB/s. Top-k {topk}, bf16 query, 656-byte rows.",
        "",
        "| batch | heads | q_len | cache | kernel | splits | time (us) | in a graph (us) | TFLOP/s | floor (us) | "
        "rel. error | FlashMLA in a graph (us) | FlashMLA / ours (graph) | max diff / max FlashMLA |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        anchor = " | | "
        if "flashmla_graph_us" in r:
            anchor = (
                f"{r['flashmla_graph_us']:.1f} (H={r['flashmla_heads']}) | "
                f"{r['flashmla_graph_us'] / r['graph_us']:.2f}x | {r['max_diff_vs_flashmla']:.1e}"
            )
        lines.append(
            f"| {r['batch']} | {r['heads']} | {r['q_len']} | {r.get('layout', 'dense')} | {r.get('kernel', 'tl')} | "
            f"{r['splits']} | {r['ms'] * 1e3:.1f} | {r['graph_us']:.1f} | {r['tflops']:.0f} | "
            f"{r['floor_ms'] * 1e3:.1f} | {r['rel_err']:.1e} | {anchor} |"
        )
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- eager_calls.py

# each call of eager_calls.py: (its anchor, the target of issue 32: ours / anchor at most)
EAGER_CALLS = {
    "mla_rope_quantize_fp8, 1 token": ("upstream", 0.8),
    "bmm_fp8, m=1 n=2112 k=7168": ("upstream", 0.8),
    "fp8_blockscale_gemm_sm90, BF16 input, m=1 n=2112 k=7168": ("upstream", 0.8),
    "fp8_blockscale_gemm_sm90, FP8 input, m=1 n=2112 k=7168": ("upstream", 0.8),
    "sparse decode B1 H128 top-k 2048": ("FlashMLA", 1.0),
}


def eager_calls_table(rows) -> str:
    """Each call's eager wall time, its anchor's, the ratio and issue 32's target.

    Parameters
    ----------
    rows : list of dict
        ``{"op", "impl", "wall_us"}`` rows of ``eager_calls.py`` runs (ours, upstream, FlashMLA).

    Returns
    -------
    str
        A Markdown table; an anchor with no row reads "not run".
    """
    us = {(r["op"], r["impl"]): r["wall_us"] for r in rows}
    lines = [
        "| call | ours (us) | anchor | anchor (us) | ours / anchor | target |",
        "|---|---|---|---|---|---|",
    ]
    for op, (anchor, target) in EAGER_CALLS.items():
        ours, theirs = us.get((op, "ours")), us.get((op, anchor))
        if ours is None or theirs is None:
            ratio, verdict, theirs_text = "-", "not run", "-" if theirs is None else f"{theirs:.1f}"
        else:
            ratio, theirs_text = f"{ours / theirs:.2f}x", f"{theirs:.1f}"
            verdict = "met" if ours / theirs <= target else "missed"
        ours_text = "-" if ours is None else f"{ours:.1f}"
        lines.append(f"| {op} | {ours_text} | {anchor} | {theirs_text} | {ratio} | <= {target}x: {verdict} |")
    return "\n".join(lines)


def eager_split_table(rows) -> str:
    """Each call's host issue time and GPU time, ours and the anchor's (``eager_split.py``).

    Parameters
    ----------
    rows : list of dict
        ``{"op", "impl", "host_us", "gpu_us"}`` rows (``gpu_us`` None where the call was not
        captured).

    Returns
    -------
    str
        A Markdown table in ``EAGER_CALLS``' order; a call or anchor with no row reads "-".
    """
    by = {(r["op"], r["impl"]): r for r in rows}

    def cell(op, impl, field):
        value = by.get((op, impl), {}).get(field)
        return "-" if value is None else f"{value:.1f}"

    lines = [
        "| call | ours: host (us) | ours: GPU (us) | anchor | anchor: host (us) | anchor: GPU (us) |",
        "|---|---|---|---|---|---|",
    ]
    for op, (anchor, _) in EAGER_CALLS.items():
        lines.append(
            f"| {op} | {cell(op, 'ours', 'host_us')} | {cell(op, 'ours', 'gpu_us')} | {anchor} | "
            f"{cell(op, anchor, 'host_us')} | {cell(op, anchor, 'gpu_us')} |"
        )
    return "\n".join(lines)


def plot(rows, path):
    """Two panels: sparse decode's floor / time by batch (q_len 1) and RoPE's share of the copy
    bandwidth by tokens, from ``bench_mla.py`` rows; written to ``path`` (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_dec, ax_rope) = plt.subplots(1, 2, figsize=(13, 5))
    for kind in DECODE_KINDS:
        for heads in (16, 64, 128):
            sel = [r for r in rows if r["op"] == "sparse_decode" and r["dtype"] == kind
                   and r["heads"] == heads and r["q_len"] == 1]  # fmt: skip
            if sel:
                ax_dec.plot([r["batch"] for r in sel], [r["floor_ms"] / r["ms"] * 100 for r in sel],
                            marker="o", label=f"{kind} H={heads}")  # fmt: skip
    ax_dec.set(xscale="log", xlabel="batch (q_len 1, topk 2048)", ylabel="% of roofline floor",
               title="Sparse MLA decode: floor / time")  # fmt: skip
    ax_dec.legend()
    sel = [r for r in rows if r["op"] == "rope_quantize"]
    if sel:
        ax_rope.plot([r["tokens"] for r in sel], [r["copy_fraction"] * 100 for r in sel], marker="o")
    ax_rope.set(xscale="log", xlabel="tokens (128 heads, 576 wide)", ylabel="% of D2D copy bandwidth",
                title="RoPE + FP8 quantize")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- gluon_gemm_probe.py


def probe_tables(report) -> str:
    """Markdown tables of a ``gluon_gemm_probe.py`` run's grouped and dense rows.

    Parameters
    ----------
    report : dict
        The probe's ``gluon_probe.json`` (``meta`` and ``rows``).

    Returns
    -------
    str
        A line naming the run, then the grouped table (Gluon, DeepGEMM and, where the run has them,
        the tl kernels, next to a dense cuBLASLt GEMM of equal FLOPs) and, where the run has dense
        rows, the dense table (the tile ``pick_config`` picks against the fastest tile, cuBLASLt and
        DeepGEMM). Cells read "microseconds (TFLOP/s)"; a ratio is the other's time over Gluon's.
    """
    rows = [r for r in report["rows"] if "ms" in r]
    by_shape: dict = {}
    for r in rows:
        by_shape.setdefault((r["section"], r["shape"]), {})[r["impl"]] = r

    def cell(r):
        return f"{r['ms'] * 1e3:.1f} ({r['tflops']:.0f})" if r else "-"

    def ratio(theirs, ours):
        return f"{theirs['ms'] / ours['ms']:.2f}x" if theirs and ours else "-"

    out = [
        f"Probe of {report['meta']['date']} (`{report['meta']['command']}`), {report['meta']['device']}.",
        "",
    ]
    out += [
        "| grouped shape | floor | Gluon contiguous | DeepGEMM contiguous | contiguous vs DeepGEMM | Gluon masked "
        "| DeepGEMM masked | masked vs DeepGEMM | tl contiguous / masked | vs tl, contiguous / masked "
        "| dense cuBLASLt, equal FLOPs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (section, shape), impls in by_shape.items():
        if section != "grouped":
            continue
        ours, ours_masked = impls.get("gluon contiguous"), impls.get("gluon masked")
        deep, deep_masked = impls.get("DeepGEMM contiguous"), impls.get("DeepGEMM masked")
        tl, tl_masked = impls.get("tl contiguous"), impls.get("tl masked")
        tl_cells = f"{cell(tl)} / {cell(tl_masked)}" if tl else "-"
        tl_ratios = f"{ratio(tl, ours)} / {ratio(tl_masked, ours_masked)}" if tl else "-"
        out.append(
            f"| {shape} | {ours['floor_ms'] * 1e3:.1f} | {cell(ours)} | {cell(deep)} | {ratio(deep, ours)} "
            f"| {cell(ours_masked)} | {cell(deep_masked)} | {ratio(deep_masked, ours_masked)} | {tl_cells} "
            f"| {tl_ratios} | {cell(impls.get('dense cuBLASLt, equal FLOPs'))} |"
        )
    if not any(section == "dense" for section, _ in by_shape):
        return "\n".join(out)
    out += [
        "",
        "| dense shape | floor | Gluon (picked tile) | fastest Gluon tile | cuBLASLt blockwise | DeepGEMM "
        "| picked vs cuBLASLt | picked vs DeepGEMM |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (section, shape), impls in by_shape.items():
        if section != "dense":
            continue
        picked = impls.get("gluon")
        tiles = [r for name, r in impls.items() if name.startswith("gluon")]
        best = min(tiles, key=lambda r: r["ms"])
        cublas, deep = impls.get("cuBLASLt blockwise"), impls.get("DeepGEMM")
        out.append(
            f"| {shape} | {picked['floor_ms'] * 1e3:.1f} | {cell(picked)} {picked['config']} | {cell(best)} "
            f"{best['config']} | {cell(cublas)} | {cell(deep)} | {ratio(cublas, picked)} | {ratio(deep, picked)} |"
        )
    return "\n".join(out)
