"""RESULTS.md's GEMM sections: the Gluon probe, ``bench_gemm.py``'s tables, the decode-size sweep."""

from __future__ import annotations

import re

from report_sections import FILES, RESULTS, data_line, load, plot_caption, prose


def gemm_sections() -> dict[str, list]:
    """``bench_gemm.py`` rows by section, a later file's section replacing an earlier one's."""
    sections: dict[str, list] = {}
    for kind in ("gemm", "gemm_mla"):
        rows = load(kind)["rows"]
        for section in dict.fromkeys(r["section"] for r in rows):
            sections[section] = [r for r in rows if r["section"] == section]
    return sections


def ours(rows, shape=None) -> list:
    """The public-API rows (``ours ... (public API -> _cuda)``), of one shape if given."""
    return [r for r in rows if r["impl"].startswith("ours") and "public API" in r["impl"]
            and shape in (None, r["shape"])]  # fmt: skip


def ref_ours(reference_row) -> dict:
    """Our public-API row of a reference row's GEMM (``bmm_fp8 ...`` or ``groupwise ...``)."""
    op, shape = reference_row["shape"].split(" ", 1)
    gemm = gemm_sections()
    if op == "bmm_fp8":
        return ours(gemm["bmm_fp8"], f"b=1 {shape}")[0]
    return ours(gemm["groupwise"], shape)[0]


def upstream_mla_us() -> dict[str, dict[str, float]]:
    """The MLA absorb section of upstream's run, from its log: shape -> {impl: us}."""
    found: dict[str, dict[str, float]] = {}
    pattern = r"mla\s+h=128 (t=\d+ \d+->\d+)\s+(torch\.bmm bf16|upstream bmm_fp8)(?: \(FlashInfer [\d.]+\))?\s+([\d.]+) us"
    for line in (RESULTS / FILES["gemm_mla_upstream"]).read_text().splitlines():
        match = re.match(pattern, line)
        if match:
            found.setdefault(match[1], {})[match[2]] = float(match[3])
    return found


def blockscale_rows() -> list[dict]:
    """``fp8_blockscale_gemm_sm90`` per shape and input dtype: ours and upstream's sm90 kernel (us)."""
    theirs = {
        (r["shape"], r["impl"].split(" input")[0].split()[-1]): r for r in load("blockscale_upstream")["rows"]
    }
    rows = []
    for r in ours(load("blockscale")["rows"]):
        dtype = r["impl"].split(" input")[0].split()[-1]
        upstream = theirs[(r["shape"], dtype)]
        rows.append({"shape": r["shape"], "input": dtype, "floor": r["floor_ms"] * 1e3, "ours": r["ms"] * 1e3,
                     "upstream": upstream["ms"] * 1e3, "ratio": upstream["ms"] / r["ms"]})  # fmt: skip
    return rows


# the Gluon tables' rows as ``bench_gemm.py --tiles`` names them, and as its predecessor
# ``gluon_gemm_probe.py`` named them (the runs in ``results/``, and the tables' names)
PROBE_NAMES = {"torch._scaled_mm blockwise": "cuBLASLt blockwise",
               "dense blockwise _scaled_mm": "dense cuBLASLt, equal FLOPs"}  # fmt: skip
TIER_ROW = re.compile(r"ours(?: (contiguous|masked))?: (Gluon|tl) kernel(.*)")


def probe_rows(report) -> list[dict]:
    """The timed rows of a run of the Gluon tables, named as the probe named them.

    Parameters
    ----------
    report : dict
        The JSON of a ``bench_gemm.py --tiles`` run (sections ``groupwise`` and ``grouped``) or of
        a ``gluon_gemm_probe.py`` run (``dense`` and ``grouped``).

    Returns
    -------
    list of dict
        Its rows with a time, section ``dense`` or ``grouped``; impl ``gluon`` (the picked tile),
        ``gluon TILE``, ``gluon contiguous``, ``tl masked``, ``DeepGEMM masked``, ``cuBLASLt
        blockwise``...
    """
    rows = []
    for r in report["rows"]:
        section = "dense" if r.get("section") == "groupwise" else r.get("section")
        if "ms" not in r or section not in ("dense", "grouped"):
            continue
        impl, tier = PROBE_NAMES.get(r["impl"], r["impl"]), TIER_ROW.fullmatch(r["impl"])
        if tier:  # ours LAYOUT: Gluon kernel TILE -> gluon LAYOUT TILE
            impl = " ".join(part for part in (tier[2].lower(), tier[1]) if part) + tier[3]
        rows.append({**r, "section": section, "impl": impl})
    return rows


def versus_gluon(kind: str, theirs: str) -> list[list[float]]:
    """Per layout (contiguous, masked), the time of ``theirs`` ("DeepGEMM", "tl") over Gluon's on
    each grouped shape of a probe run."""
    by_shape: dict = {}
    for r in probe_rows(load(kind)):
        if r["section"] == "grouped":
            by_shape.setdefault(r["shape"], {})[r["impl"]] = r["ms"]
    return [
        [
            impls[f"{theirs} {layout}"] / impls[f"gluon {layout}"]
            for impls in by_shape.values()
            if f"{theirs} {layout}" in impls
        ]
        for layout in ("contiguous", "masked")
    ]


def probe_tables(report) -> str:
    """Markdown tables of the grouped and dense rows of a run of the Gluon tables (``probe_rows``).

    Parameters
    ----------
    report : dict
        The run's JSON (``meta`` and ``rows``).

    Returns
    -------
    str
        A line naming the run, then the grouped table (Gluon, DeepGEMM and, where the run has them,
        the tl kernels, next to a dense cuBLASLt GEMM of equal FLOPs) and, where the run has dense
        rows, the dense table (the tile ``pick_config`` picks against the fastest tile, cuBLASLt and
        DeepGEMM). Cells read "microseconds (TFLOP/s)"; a ratio is the other's time over Gluon's.
    """
    by_shape: dict = {}
    for r in probe_rows(report):
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


def markdown(rows) -> str:
    """One table per section: shapes down, implementations across (us and TFLOP/s), the floor."""
    lines = []
    for section in dict.fromkeys(r["section"] for r in rows):
        sub = [r for r in rows if r["section"] == section]
        impls = list(dict.fromkeys(r["impl"] for r in sub))
        deepgemm = any("vs_deepgemm" in r for r in sub)
        versus = " | ours / DeepGEMM |" if deepgemm else " |"
        lines += [
            f"\n#### {section}\n",
            "| shape | floor us | " + " | ".join(impls) + " | ours / anchor" + versus,
        ]
        lines.append("|---" * (len(impls) + 3 + deepgemm) + "|")
        for shape in dict.fromkeys(r["shape"] for r in sub):
            cells = {r["impl"]: r for r in sub if r["shape"] == shape}
            first = next(iter(cells.values()))
            row = [shape, f"{first['floor_ms'] * 1e3:.1f}"]
            row += [
                f"{cells[i]['ms'] * 1e3:.1f} ({cells[i]['tflops']:.0f})" if i in cells else "" for i in impls
            ]
            ratios = [f"{r['vs_anchor']:.2f}x" for r in cells.values() if r["vs_anchor"]]
            row.append(" / ".join(ratios))
            if deepgemm:
                row.append(
                    " / ".join(f"{r['vs_deepgemm']:.2f}x" for r in cells.values() if "vs_deepgemm" in r)
                )
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    """One bar chart per ``bench_gemm.py`` section: TFLOP/s per shape and call (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = [
        s
        for s in ("groupwise", "bmm_fp8", "mla", "bf16", "grouped", "blockscale")
        if any(r["section"] == s for r in rows)
    ]
    fig, axes = plt.subplots(len(sections), 1, figsize=(16, 4.5 * len(sections)))
    for ax, section in zip(axes if len(sections) > 1 else [axes], sections):
        sub = [r for r in rows if r["section"] == section]
        shapes = list(dict.fromkeys(r["shape"] for r in sub))
        impls = list(dict.fromkeys(r["impl"] for r in sub))
        width = 0.8 / len(impls)
        for i, impl in enumerate(impls):
            values = {r["shape"]: r["tflops"] for r in sub if r["impl"] == impl}
            xs = [j + i * width for j, s in enumerate(shapes) if s in values]
            ax.bar(xs, [values[s] for s in shapes if s in values], width, label=impl)
        ax.set_xticks([j + 0.4 for j in range(len(shapes))])
        ax.set_xticklabels(shapes, rotation=60, ha="right", fontsize=6)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{section} (H200)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def probe() -> str:
    """The Gluon GEMM probe's tables, and how DeepGEMM's outputs compared with ours."""
    report = load("probe")
    diffs = [r["rel_err_vs_ours"] for r in report["rows"] if "rel_err_vs_ours" in r]
    agreement = (
        f"All {len(diffs)} DeepGEMM outputs agreed bit for bit with ours (relative Frobenius difference 0.0)."
        if max(diffs) == 0
        else f"DeepGEMM's outputs against ours: relative Frobenius difference up to {max(diffs):.1e}."
    )
    return probe_tables(report) + "\n\n" + prose(agreement) + "\n\n" + data_line("probe")


def probe_tl() -> str:
    """The probe run before it, with the tl kernels."""
    return probe_tables(load("probe_tl")) + "\n\n" + data_line("probe_tl")


def gemm_table(section: str) -> str:
    """One section of the ``bench_gemm.py`` run as ``bench_gemm.markdown`` writes it (its table)."""
    text = markdown(gemm_sections()[section])
    return "\n".join(line for line in text.splitlines() if line.startswith("|")) + "\n\n" + data_line("gemm")


def gemm_blockscale() -> str:
    """``fp8_blockscale_gemm_sm90`` against upstream's own sm90 kernel, same session."""
    lines = [
        "| shape | input | floor (us) | ours (us) | upstream (us) | upstream / ours |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['shape']} | {r['input']} | {r['floor']:.1f} | {r['ours']:.1f} | {r['upstream']:.1f} "
              f"| {r['ratio']:.2f}x |" for r in blockscale_rows()]  # fmt: skip
    return "\n".join(lines) + "\n\n" + data_line("blockscale", "blockscale_upstream")


def decode_gemm_sweep() -> str:
    """The decode-size GEMM's sweep: the fastest launch shape of the swept kernel per shape next to
    the other routes (the portable form's tabled shape among them, for the Gluon form's sweep)."""
    lines = [
        "| m x n x k | floor (us) | kernel | decode kernel (us) | launch shape | portable form, tabled (us) "
        "| cuBLASLt (us) | Gluon (us) | tl (us) | `auto` takes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in load("decode_gemm_sweep")["rows"]:
        block_n, block_m, split, stages, warps, tma, swap, *_ = r["best"]
        kernel = r.get("kernel", "tl")
        tile = f"{block_n} x {block_m}" if swap else f"{block_m} x {block_n} (tokens first)"
        loads = (
            "TMA + cp.async scales, producer warp" if kernel == "gluon" else "TMA" if tma else "pointer loads"
        )
        shape = (
            f"{tile}, split {split}, {stages} stages, "
            + (f"{warps} warps, " if kernel == "tl" else "")
            + loads
        )
        anchors = r["anchors_us"]
        others = [
            f"{anchors[k]:.1f}" if k in anchors else "-" for k in ("decode_tl_table", "cublas", "gluon", "tl")
        ]
        routes = {"decode kernel": r["best_us"], "portable form": anchors.get("decode_tl_table", float("inf")),
                  "cuBLASLt": anchors.get("cublas", float("inf"))}  # fmt: skip
        takes = min(routes, key=routes.get)
        lines.append(f"| {r['m']} x {r['n']} x {r['k']} | {r['floor_us']:.1f} | {kernel} | {r['best_us']:.1f} | "
                     f"{shape} | {' | '.join(others)} | {takes} |")  # fmt: skip
    return "\n".join(lines) + "\n\n" + data_line("decode_gemm_sweep")


def gemm_mla() -> str:
    """The MLA absorb products: ours (``bmm_fp8``, ``bmm_bf16``), ``torch.bmm`` and upstream's ``bmm_fp8``."""
    upstream = upstream_mla_us()
    lines = [
        "| shape (128 heads) | floor (us) | torch.bmm BF16 | upstream bmm_fp8 (us) | ours bmm_fp8 | ours bmm_bf16 "
        "| bmm_fp8 vs torch.bmm | bmm_fp8 vs upstream |",
        "|---|---|---|---|---|---|---|---|",
    ]
    bmm_drift = []
    rows = gemm_sections()["mla"]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        cells = {r["impl"].split(" (")[0]: r for r in rows if r["shape"] == shape}
        anchor, fp8, bf16 = cells["torch.bmm bf16"], cells["ours bmm_fp8"], cells["ours bmm_bf16"]
        theirs = upstream[shape.removeprefix("h=128 ")]
        bmm_drift.append(abs(theirs["torch.bmm bf16"] / (anchor["ms"] * 1e3) - 1))
        lines.append(
            f"| {shape.removeprefix('h=128 ')} | {anchor['floor_ms'] * 1e3:.1f} | {anchor['ms'] * 1e3:.1f} "
            f"({anchor['tflops']:.0f}) | {theirs['upstream bmm_fp8']:.1f} | {fp8['ms'] * 1e3:.1f} ({fp8['tflops']:.0f}) "
            f"| {bf16['ms'] * 1e3:.1f} ({bf16['tflops']:.0f}) | {fp8['vs_anchor']:.2f}x "
            f"| {theirs['upstream bmm_fp8'] / (fp8['ms'] * 1e3):.2f}x |"
        )
    note = f"`torch.bmm` in upstream's process was within {max(bmm_drift) * 100:.1f}% of this run's."
    return "\n".join(lines) + "\n\n" + prose(note) + "\n\n" + data_line("gemm_mla", "gemm_mla_upstream")


def gemm_reference() -> str:
    """The float32 reference next to our public API on the same shapes."""
    names = {"bmm_fp8": "`bmm_fp8`", "groupwise": "`gemm_fp8_nt_groupwise`"}
    lines = [
        "| shape | floor (us) | reference (us) | ours (us) | reference / ours |",
        "|---|---|---|---|---|",
    ]
    for r in gemm_sections()["reference"]:
        op, shape = r["shape"].split(" ", 1)
        mine = ref_ours(r)
        lines.append(
            f"| {names[op]} {shape} | {r['floor_ms'] * 1e3:.1f} | {r['ms'] * 1e3:.1f} | {mine['ms'] * 1e3:.1f} "
            f"| {r['ms'] / mine['ms']:.1f}x |"
        )
    return "\n".join(lines) + "\n\n" + data_line("gemm")


def gemm_plot() -> str:
    return plot_caption(
        "results/gemm_h200.png",
        "GEMM throughput on the H200, by section",
        ("gemm", "gemm_mla"),
        "the rows of this section's tables",
        "the grouped GEMMs' current numbers are the Gluon kernels' in \"The Hopper Gluon block-scaled "
        'GEMMs next to DeepGEMM" above',
    )


BLOCKS = {
    "gluon_probe": probe,
    "gluon_probe_with_tl": probe_tl,
    "gemm_mla": gemm_mla,
    "gemm_blockscale": gemm_blockscale,
    "decode_gemm_sweep": decode_gemm_sweep,
    "gemm_bmm_fp8": lambda: gemm_table("bmm_fp8"),
    "gemm_groupwise": lambda: gemm_table("groupwise"),
    "gemm_grouped": lambda: gemm_table("grouped"),
    "gemm_bf16": lambda: gemm_table("bf16"),
    "gemm_reference": gemm_reference,
    "gemm_plot": gemm_plot,
}
