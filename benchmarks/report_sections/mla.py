"""RESULTS.md's MLA sections: RoPE, the sparse decode's tiers, grid, packed cache and accuracy."""

from __future__ import annotations

from report_sections import FILES, data_line, load, plot_caption, prose

DECODE_KINDS = ("fp8", "bf16")


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


def tier_rows() -> dict[tuple, dict]:
    """The tier rows of the decode-tiers run: (dtype, batch, heads, q_len, tier) -> row."""
    return {(r["dtype"], r["batch"], r["heads"], r["q_len"], r["tier"]): r
            for r in load("decode_tiers")["rows"] if "tier" in r}  # fmt: skip


def rope_rows(kind: str) -> dict[int, dict]:
    """tokens -> RoPE row of a ``bench_mla.py`` run."""
    return {r["tokens"]: r for r in load(kind)["rows"] if r["op"] == "rope_quantize"}


def rope() -> str:
    """RoPE + FP8 quantize, ours next to upstream's, by tokens."""
    mine, theirs = rope_rows("rope"), rope_rows("rope_upstream")
    lines = [
        "| tokens | ours kernel (us) | ours % of copy | upstream kernel (us) | upstream % of copy | ours in a graph (us) "
        "| upstream in a graph (us) | ours eager API (us) | upstream eager API (us) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for tokens, a in mine.items():
        b = theirs[tokens]
        lines.append(
            f"| {tokens} | {a['ms'] * 1e3:.1f} | {a['copy_fraction'] * 100:.1f}% | {b['ms'] * 1e3:.1f} "
            f"| {b['copy_fraction'] * 100:.1f}% | {a['graph_us']:.2f} | {b['graph_us']:.2f} | {a['eager_api_us']:.1f} "
            f"| {b['eager_api_us']:.1f} |"
        )
    return "\n".join(lines) + "\n\n" + data_line("rope", "rope_upstream")


def decode_tiers_table() -> str:
    """Sparse decode, the Gluon tier next to the tl tier, CUDA-graph times of one run."""
    tiers = tier_rows()
    lines = [
        "| dtype | batch | heads | q_len | floor (us) | Gluon in a graph (us) | TFLOP/s | GB/s | floor/time "
        "| tl in a graph (us) | tl floor/time | Gluon vs tl | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (kind, batch, heads, q_len, tier), g in tiers.items():
        if tier != "gluon":
            continue
        tl = tiers[(kind, batch, heads, q_len, "tl")]
        lines.append(
            f"| {kind} | {batch} | {heads} | {q_len} | {g['floor_us']:.1f} | {g['graph_us']:.1f} | {g['tflops']:.0f} "
            f"| {g['gbps']:.0f} | {g['floor_us'] / g['graph_us'] * 100:.0f}% | {tl['graph_us']:.1f} "
            f"| {tl['floor_us'] / tl['graph_us'] * 100:.0f}% | {tl['graph_us'] / g['graph_us']:.2f}x | {g['rel_err']:.1e} |"
        )
    return "\n".join(lines) + "\n\n" + data_line("decode_tiers")


def packed_decode() -> str:
    """The packed 656-byte decode: its kernel tiers on its cache layouts, CUDA-graph times of one
    run, beside FlashMLA's on the same bytes in the same process where the run has it."""
    run = load("packed_decode")
    by = {(r["batch"], r["heads"], r["q_len"], r["layout"], r["kernel"]): r for r in run["rows"]}
    meta = run["meta"]
    in_run = all("flashmla_graph_us" in r for r in run["rows"])
    with_tl = any(r["kernel"] == "tl" for r in run["rows"])
    anchor = "FlashMLA ran in the same process on the same bytes (its page-strided cache: 64-row pages)."
    head = ["batch", "heads", "q_len", "cache", "Gluon in a graph (us)"]
    head += ["tl in a graph (us)", "Gluon vs tl"] if with_tl else []
    head += ["Gluon error"]
    head += ["FlashMLA, same run (us)", "FlashMLA / Gluon"] if in_run else []
    lines = [
        prose(
            f"{meta['device']}, torch {meta['torch']}, Triton {meta['triton']}, {meta['date'][:10]}; top-k "
            "2048, bf16 query, 656-byte rows, every column active. `dense`: the pool as one-row pages; "
            f"`padded`: FlashMLA's pages of 64 rows, 65 rows apart.{' ' + anchor if in_run else ''}"
        ),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for (batch, heads, q_len, layout, kernel), g in by.items():
        if kernel != "gluon":
            continue
        cells = [batch, heads, q_len, layout, f"{g['graph_us']:.1f}"]
        if with_tl:
            tl = by[(batch, heads, q_len, layout, "tl")]
            cells += [f"{tl['graph_us']:.1f}", f"{tl['graph_us'] / g['graph_us']:.2f}x"]
        cells += [f"{g['rel_err']:.1e}"]
        if in_run:
            cells += [f"{g['flashmla_graph_us']:.1f}", f"{g['flashmla_graph_us'] / g['graph_us']:.2f}x"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n\n" + data_line("packed_decode")


def decode_grid() -> str:
    """The tl tier's full decode grid (``bench_mla.py``'s table), and how the target shapes re-ran."""
    grid = {(r["dtype"], r["batch"], r["heads"], r["q_len"]): r for r in load("decode_grid")["rows"]
            if r["op"] == "sparse_decode"}  # fmt: skip
    rerun = [r for r in load("rope")["rows"] if r["op"] == "sparse_decode"]
    drift = max(abs(r["graph_us"] / grid[(r["dtype"], r["batch"], r["heads"], r["q_len"])]["graph_us"] - 1)
                for r in rerun)  # fmt: skip
    note = (
        f"The {len(rerun)} target shapes re-timed at {load('rope')['meta']['date'][11:16]} UTC with the final host path "
        f"(`{FILES['rope']}`) are within {drift * 100:.1f}% of these in a graph."
    )
    return decode_table(grid.values()) + "\n\n" + prose(note) + "\n\n" + data_line("decode_grid", "rope")


def decode_accuracy() -> str:
    """Upstream's sparse test cases and the op table's LSE samples, per tier."""
    rows = load("decode_accuracy")
    by = {(r["tier"], r.get("case", r.get("sample"))): r for r in rows}
    lines = [
        "| upstream test case (batch, q_len, topk, varlen, qk_nope, heads, dtype) | Gluon passed | Gluon worst / bound "
        "| tl passed | tl worst / bound |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if r["tier"] == "gluon" and "case" in r:
            case = r["case"].replace("torch.", "")
            tl = by[("tl", r["case"])]
            lines.append(
                f"| {case} | {r['passed']}/{r['repeats']} | {r['worst_over_bound']:.2f} | {tl['passed']}/{tl['repeats']} "
                f"| {tl['worst_over_bound']:.2f} |"
            )
    lines += ["", "| op-table sample | Gluon LSE error | tl LSE error | Gluon out error | tl out error |",
              "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if r["tier"] == "gluon" and "sample" in r:
            tl = by[("tl", r["sample"])]
            lines.append(
                f"| {r['sample']} | {r['lse_error']:.1e} | {tl['lse_error']:.1e} | {r['out_error']:.1e} "
                f"| {tl['out_error']:.1e} |"
            )
    return "\n".join(lines) + "\n\n" + data_line("decode_accuracy")


def mla_plot() -> str:
    return plot_caption(
        "results/mla_h200.png",
        "Sparse decode and RoPE against their floors on the H200",
        ("decode_grid", "rope"),
        "this table's decode rows at q_len 1 (left) and the RoPE table's \"ours % of copy\" (right)",
        "the decode's current numbers are the Gluon tier's in \"The Gluon tier (what runs on an H200)\" "
        "above",
    )


BLOCKS = {
    "rope": rope,
    "decode_tiers": decode_tiers_table,
    "decode_grid": decode_grid,
    "packed_decode": packed_decode,
    "decode_accuracy": decode_accuracy,
    "mla_plot": mla_plot,
}
