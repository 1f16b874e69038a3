"""Rebuild the generated parts of ``benchmarks/RESULTS.md``, and its plots, from ``benchmarks/results/``.

RESULTS.md is prose around generated blocks::

    <!-- results:NAME -->
    (written by this script: a table, the Summary, a sentence with numbers)
    <!-- /results -->

Each block is built by the function ``BLOCKS[NAME]`` from the JSON files of ``FILES`` (one file,
the newest run, per kind of measurement; the older files in ``results/`` are history), and the
Summary's numbers come from the same rows as the section tables. Run from anywhere, no GPU::

    python benchmarks/report.py              # rewrite the blocks and redraw the plots (matplotlib)
    python benchmarks/report.py --no-plots   # the blocks only
    python benchmarks/report.py --check      # exit 1 if RESULTS.md is not what it would write

To update a section: copy the new run's JSON into ``results/``, point ``FILES`` at it, run this.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import textwrap
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _tables  # noqa: E402
import bench_gemm  # noqa: E402  (its markdown and plot; importable without a GPU)

RESULTS_MD = HERE / "RESULTS.md"
RESULTS = HERE / "results"
# the run each kind of measurement is reported from (file names in RESULTS)
FILES = {
    "gemm": "gemm_h200.json",  # every bench_gemm.py section ...
    "gemm_mla": "gemm_mla_h200_persistent.json",  # ... but the MLA absorb one, re-measured
    "gemm_mla_upstream": "gemm_mla_upstream_h200.log",  # upstream's bmm_fp8 (a log, no JSON)
    "blockscale": "blockscale_h200.json",  # fp8_blockscale_gemm_sm90, ours, and ...
    "blockscale_upstream": "blockscale_upstream_h200.json",  # ... upstream's, the same session
    "decode_gemm_sweep": "decode_gemm_sweep_h200.json",  # the run that wrote decode_gemm_table.json
    "probe": "gluon_probe_h200.json",
    "probe_tl": "gluon_probe_h200_with_tl.json",  # the run before it, with the tl kernels
    "rope": "mla_targets_h200.json",  # its RoPE rows; its decode rows re-time the grid's targets
    "rope_upstream": "upstream_mla_h200.json",
    "decode_tiers": "decode_tiers_h200_two_part_p.json",
    "decode_grid": "mla_h200.json",  # the tl tier's full grid; its decode rows only
    "decode_eager": "decode_eager_h200.json",
    "decode_eager_tl": "decode_eager_h200_tl.json",
    "decode_accuracy": "decode_accuracy_h200.json",
    "host": "host_overhead_cpu.json",
    "launch": "launch_overhead_gluon_h200.json",
    "gpu_suite": "gpu_suite_h100.json",
    # bench_mla.py --packed --flashmla --targets-only --tiers gluon --layouts dense,padded (the tl
    # tier beside it: packed_mla_h100.json)
    "packed_decode": "packed_mla_flashmla_h100.json",
    "eager_calls": "eager_calls_h100.json",  # eager_calls.py --impl ours (FlashMLA beside it)
    "eager_split": "eager_split_h100.json",  # eager_split.py --impl ours, then --impl upstream, joined
    "triton_releases": "triton_releases_h100.json",  # triton_release_gpu.sh, one call per release
}
# FlashMLA's sparse FP8 decode as quoted where the decode targets were set (a separate run, not
# in results/; RESULTS.md's footnote says so): (dtype, batch, heads, q_len) -> us in a graph
FLASHMLA_US = {("fp8", 128, 128, 1): 188.2, ("fp8", 128, 64, 1): 120.7, ("fp8", 32, 128, 2): 94.2,
               ("fp8", 1, 128, 1): 17.3}  # fmt: skip
# FlashMLA on the packed 656-byte bytes as issue 30 quotes it (an H200, a separate run): (batch,
# heads, q_len) -> us in a graph
FLASHMLA_PACKED_US = {(1, 128, 1): 17.0, (32, 128, 1): 62.7, (128, 128, 1): 186.0, (128, 64, 1): 119.7,
                      (64, 64, 1): 77.9, (32, 128, 2): 93.0, (128, 128, 2): 361.5}  # fmt: skip
DECODE_TARGETS_US = {
    (128, 128, 1): 150,
    (128, 64, 1): 100,
    (32, 128, 2): 80,
    (1, 128, 1): 15,
}  # FP8, in a graph


@cache
def load(kind: str):
    """The parsed JSON of one run.

    Parameters
    ----------
    kind : str
        A key of ``FILES``.

    Returns
    -------
    dict or list
        The file's JSON (read once).
    """
    return json.loads((RESULTS / FILES[kind]).read_text())


def prose(text: str) -> str:
    """``text`` as a paragraph wrapped like the hand-written ones."""
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


def data_line(*kinds: str) -> str:
    """The line under a generated table that names its raw data."""
    return prose("Data: " + ", ".join(f"[`results/{FILES[k]}`](results/{FILES[k]})" for k in kinds) + ".")


def sci(value: float) -> str:
    """``value`` in the short scientific notation of the prose (2.1e-3)."""
    return f"{value:.1e}".replace("e-0", "e-").replace("e+0", "e")


def span(values, digits=2, unit="x") -> str:
    """The range of ``values`` as the tables print them.

    Parameters
    ----------
    values : iterable of float
        The values of a column's rows.
    digits : int
        Decimals, as the table prints the column (the ends are then cells of that column).
    unit : str
        Appended once: ``"x"`` gives ``1.09-1.44x``.

    Returns
    -------
    str
        ``lo-hi`` and the unit, or the one value where all print alike.
    """
    cells = sorted({f"{v:.{digits}f}" for v in values}, key=float)
    return (cells[0] if len(cells) == 1 else f"{cells[0]}-{cells[-1]}") + unit


def shown(value, digits=2) -> float:
    """``value`` rounded as a table prints it (targets are judged on what the tables show)."""
    return round(value, digits)


def verdict(passed, where=None) -> str:
    """The Summary's last column.

    Parameters
    ----------
    passed : list of bool
        Whether each check of the target passes (on the values as the tables print them).
    where : list of str, optional
        What each check covers ("at m = 4096"), to say where the target is missed.

    Returns
    -------
    str
        ``met`` when all pass, ``miss`` when none does, else where it misses.
    """
    if all(passed):
        return "met"
    if not any(passed):
        return "miss"
    if where is None:
        return "miss at some shapes"
    return "miss " + ", ".join(w for w, ok in zip(where, passed) if not ok)


# ----------------------------------------------------------------------------- the rows


def gemm_sections() -> dict[str, list]:
    """``bench_gemm.py`` rows by section, a later file's section replacing an earlier one's
    (as ``bench_gemm.py --replot``)."""
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


def versus_gluon(kind: str, theirs: str) -> list[list[float]]:
    """Per layout (contiguous, masked), the time of ``theirs`` ("DeepGEMM", "tl") over Gluon's on
    each grouped shape of a probe run."""
    by_shape: dict = {}
    for r in load(kind)["rows"]:
        if r.get("section") == "grouped" and "ms" in r:
            by_shape.setdefault(r["shape"], {})[r["impl"]] = r["ms"]
    return [
        [
            impls[f"{theirs} {layout}"] / impls[f"gluon {layout}"]
            for impls in by_shape.values()
            if f"{theirs} {layout}" in impls
        ]
        for layout in ("contiguous", "masked")
    ]


def decode_tiers() -> dict[tuple, dict]:
    """The tier rows of the decode-tiers run: (dtype, batch, heads, q_len, tier) -> row."""
    return {(r["dtype"], r["batch"], r["heads"], r["q_len"], r["tier"]): r
            for r in load("decode_tiers")["rows"] if "tier" in r}  # fmt: skip


def rope_rows(kind: str) -> dict[int, dict]:
    """tokens -> RoPE row of a ``bench_mla.py`` run."""
    return {r["tokens"]: r for r in load(kind)["rows"] if r["op"] == "rope_quantize"}


def eager_call(op: str, *impls: str) -> list[float]:
    """Eager wall time per call of ``op`` in the ``eager_calls.py`` run, one value per impl."""
    us = {(r["op"], r["impl"]): r["wall_us"] for r in load("eager_calls")["rows"]}
    return [us[(op, impl)] for impl in impls]


def eager_device() -> str:
    """The GPU of the ``eager_calls.py`` run, short (H100, H200)."""
    return load("eager_calls")["meta"][0]["device"].split()[1]


def eager_us(kind: str, op: str, layer: str) -> float:
    """One layer's time per call in a ``decode_eager.py`` run."""
    row = next(r for r in load(kind)["rows"] if r["op"].startswith(op) and r["layer"] == layer)
    return row.get("host_us", row.get("wall_us"))


# ----------------------------------------------------------------------------- the blocks


def machine() -> str:
    """The Machine and Method paragraphs: versions, dates and the constants of the floors."""
    runs = [load(k) for k in FILES if FILES[k].endswith(".json")]
    metas = [run["meta"] for run in runs if isinstance(run, dict) and "meta" in run]
    gpu = [m for m in metas if "triton" in m]
    one = {key: sorted({m[key] for m in gpu}) for key in ("device", "torch", "triton")}
    dates = sorted({m["date"][:10] for m in gpu if "date" in m})
    copy = [load(k)["meta"]["copy_bandwidth_gbps"] for k in ("rope", "rope_upstream", "decode_grid")]
    copy.append(load("decode_tiers")["copy_gbps"])
    machine_line = (
        f"**Machine.** One {', '.join(one['device'])}, torch {', '.join(one['torch'])}, Triton "
        f"{', '.join(one['triton'])}; runs of {' and '.join(dates)}. The API layer's host time is "
        f"measured on a CPU machine ({load('host')['meta']['machine']}, torch {load('host')['meta']['torch']})."
    )
    method = (
        "**Method.** GPU times are medians of CUDA-event timings (`triton.testing`), host overhead "
        'excluded unless a column says "eager". Inputs exceed the '
        f"{bench_gemm.L2_BYTES / 2**20:.0f} MB L2: GEMM calls rotate through fresh random input sets, "
        'decode gathers random slots of a large KV pool. "floor" is max(bytes / bandwidth, FLOPs / peak) '
        f"with {bench_gemm.HBM_BYTES_PER_S / 1e12:.1f} TB/s for the GEMMs and the device-to-device copy "
        f"bandwidth measured in the same run ({span(copy, 0, ' GB/s')}) for MLA, and "
        f"{bench_gemm.PEAK_FLOPS['bf16'] / 1e12:.0f} TFLOP/s BF16 / {bench_gemm.PEAK_FLOPS['fp8'] / 1e12:.0f} "
        'TFLOP/s FP8 dense. GEMM cells read "microseconds (TFLOP/s)". A ratio "ours vs anchor" is the '
        "anchor's time over ours: above 1 is faster than the anchor."
    )
    return prose(machine_line) + "\n\n" + prose(method)


def summary() -> str:
    """The Summary table: per op, its anchor, its target and where it is now (from the rows the
    section tables show), and whether it meets the target."""
    rows = gemm_summary() + decode_summary() + rope_summary()
    lines = ["| op | anchor | target | now | |", "|---|---|---|---|---|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def gemm_summary() -> list[list[str]]:
    """The GEMM rows of the Summary: ratio ranges over the rows of the GEMM tables."""
    gemm = gemm_sections()
    absorb = [r["vs_anchor"] for r in ours(gemm["mla"]) if "bmm_fp8" in r["impl"]]
    single = [r["vs_anchor"] for r in ours(gemm["bmm_fp8"])]
    groupwise = {r["shape"]: r["vs_anchor"] for r in ours(gemm["groupwise"]) if r["vs_anchor"]}
    large = [v for shape, v in groupwise.items() if " m=4096 " in f" {shape} "]
    small = [v for shape, v in groupwise.items() if int(re.search(r"m=(\d+)", shape)[1]) <= 512]
    now, before = versus_gluon("probe", "DeepGEMM"), versus_gluon("probe_tl", "DeepGEMM")
    over_tl = sum(versus_gluon("probe_tl", "tl"), [])
    bf16 = {
        out: [r["vs_anchor"] for r in ours(gemm["bf16"]) if r["shape"].endswith(out)]
        for out in ("bfloat16", "float32")
    }
    blockscale = blockscale_rows()
    decode_size = [r["ratio"] for r in blockscale if int(re.search(r"m=(\d+)", r["shape"])[1]) <= 128]
    larger = [r["ratio"] for r in blockscale if int(re.search(r"m=(\d+)", r["shape"])[1]) >= 512]
    ahead = sum(shown(v) >= 1 for v in decode_size)
    return [
        ["`fp8_blockscale_gemm_sm90`, FP8 and BF16 input", "upstream FlashInfer 0.6.17's sm90 kernel, same session",
         ">= 1.0x at every row", f"{span(decode_size)} at m <= 128 ({ahead} of {len(decode_size)} rows ahead), "
         f"{span(larger)} at m >= 512",
         verdict([min(map(shown, decode_size)) >= 1, min(map(shown, larger)) >= 1], ["at m <= 128", "at m >= 512"])],
        ["`bmm_fp8`, MLA absorb, 128 heads", "`torch.bmm` BF16", "no slower", span(absorb),
         verdict([shown(v) >= 1 for v in absorb])],
        ["`bmm_fp8`, one batch", "`torch._scaled_mm` per-tensor", "-", f"{span(single)} (the same cuBLASLt call)", ""],
        ["`gemm_fp8_nt_groupwise`", "`torch._scaled_mm` blockwise", ">= 0.95x",
         f"{span(large)} at m = 4096, {span(small)} at m <= 512",
         verdict([min(map(shown, large)) >= 0.95, min(map(shown, small)) >= 0.95], ["at m = 4096", "at m <= 512"])],
        ["`group_deepgemm_fp8_nt_groupwise` / `batch_deepgemm_fp8_nt_groupwise` (Gluon, 128 x 256 tiles)",
         "DeepGEMM (78d8362), same run", ">= 0.95x",
         f"{span(now[0])} / {span(now[1])} (the run before it, {load('probe_tl')['meta']['date']}: "
         f"{span(before[0])} / {span(before[1])})",
         verdict([shown(v) >= 0.95 for v in now[0] + now[1]])],
        ["the same, against the tl kernels they replace under `auto`", "the tl kernels, same run", "-",
         f"{span(over_tl)} (the run before it)", ""],
        ["`bmm_bf16`", "`torch.bmm`", "-",
         f"{span(bf16['bfloat16'])} (BF16 out), {span(bf16['float32'])} (FP32 out, against `torch.bmm` + a copy)", ""],
    ]  # fmt: skip


def decode_summary() -> list[list[str]]:
    """The sparse decode rows of the Summary: cells of the decode-tiers and eager tables."""
    tiers = decode_tiers()
    rows = []
    for (batch, heads, q_len), limit in DECODE_TARGETS_US.items():
        glu, tl = tiers[("fp8", batch, heads, q_len, "gluon")], tiers[("fp8", batch, heads, q_len, "tl")]
        flashmla = FLASHMLA_US[("fp8", batch, heads, q_len)]
        met = verdict([shown(glu["graph_us"], 1) <= limit])
        if met == "miss" and glu["graph_us"] < flashmla:
            met += " (faster than FlashMLA)"
        rows.append([
            f"sparse MLA decode, FP8, B={batch}, H={heads}{f', q_len {q_len}' if q_len > 1 else ''} (Gluon)",
            f"FlashMLA {flashmla} us*; floor {glu['floor_us']:.1f} us", f"<= {limit} us",
            f"{glu['graph_us']:.1f} us in a graph (tl: {tl['graph_us']:.1f})", met,
        ])  # fmt: skip
    share = [
        r["floor_us"] / r["graph_us"] * 100 for r in (tiers[("fp8", 128, 16, 1, t)] for t in ("gluon", "tl"))
    ]
    glu, tl = tiers[("bf16", 128, 128, 1, "gluon")], tiers[("bf16", 128, 128, 1, "tl")]
    eager, flashmla_eager = eager_call("sparse decode B1 H128 top-k 2048", "ours", "FlashMLA")
    return rows + [
        ["sparse MLA decode, FP8, H=16 (Gluon)", "the floor (copy bandwidth)", "floor/time >= 60%",
         f"{share[0]:.0f}% at B=128 (tl: {share[1]:.0f}%)", verdict([shown(share[0], 0) >= 60])],
        ["sparse MLA decode, BF16, B=128, H=128 (Gluon)", "the tl kernel", "no slower",
         f"{glu['graph_us']:.1f} us (tl: {tl['graph_us']:.1f})",
         verdict([shown(glu["graph_us"], 1) <= shown(tl["graph_us"], 1)])],
        ["sparse MLA decode, FP8, B=1, H=128, eager public API with metadata",
         f"FlashMLA {flashmla_eager:.1f} us, same run ({eager_device()})", "<= 30 us", f"{eager:.1f} us",
         verdict([shown(eager, 1) <= 30])],
    ]  # fmt: skip


def rope_summary() -> list[list[str]]:
    """The RoPE rows of the Summary: cells of the RoPE table."""
    rope, rope_up = rope_rows("rope"), rope_rows("rope_upstream")
    share = {t: (rope[t]["copy_fraction"] * 100, rope_up[t]["copy_fraction"] * 100) for t in (4096, 16384)}
    one, one_up = rope[1], rope_up[1]
    eager, upstream = eager_call("mla_rope_quantize_fp8, 1 token", "ours", "upstream")
    return [
        ["`mla_rope_quantize_fp8`", "device-to-device copy of the same bytes", ">= 85% at >= 4096 tokens",
         ", ".join(f"{mine:.1f}% at {t}" for t, (mine, _) in share.items())
         + f" (upstream {', '.join(f'{up:.1f}%' for _, up in share.values())})",
         verdict([shown(mine, 1) >= 85 for mine, _ in share.values()], [f"at {t}" for t in share])],
        ["`mla_rope_quantize_fp8`, 1 token", "-", "<= 3 us in a graph",
         f"{one['graph_us']:.2f} us (upstream {one_up['graph_us']:.2f})", verdict([shown(one["graph_us"]) <= 3])],
        ["`mla_rope_quantize_fp8`, 1 token, eager public API", f"upstream, same run ({eager_device()})",
         "<= 15 us", f"{eager:.1f} us (upstream {upstream:.1f})", verdict([shown(eager, 1) <= 15])],
    ]  # fmt: skip


def summary_notes() -> str:
    """The reference's speed and the decode accuracy, in sentences, from the section tables' rows."""
    reference = [r["ms"] / ref_ours(r)["ms"] for r in gemm_sections()["reference"]]
    decode_ref = [r["reference_ms"] * 1e3 for r in load("decode_grid")["rows"]
                  if r.get("batch") == 1 and "reference_ms" in r]  # fmt: skip
    errors = [r["rel_err"] for r in decode_tiers().values()]
    cases = [r for r in load("decode_accuracy") if "case" in r]
    worst = {tier: max(r["worst_over_bound"] for r in cases if r["tier"] == tier) for tier in ("gluon", "tl")}
    passed = all(r["passed"] == r["repeats"] for r in cases)
    repeatable = all(r["distinct_outputs"] == 1 for r in cases)
    return prose(
        "The float32 reference implementation, which any device without a faster path runs, is "
        f"{span(reference, 1)} slower than ours on the GEMM shapes measured and takes {span(decode_ref, 0, ' us')} "
        "per sparse decode at B=1, 128 heads. Every decode row of the tiers table, both tiers, is within "
        f"{sci(min(errors))} to {sci(max(errors))} (max error / max |reference|) of a float64 computation. "
        f"On {len(cases) // 2} of upstream's own sparse decode test cases, each run "
        f"{cases[0]['repeats']} times on each tier, {'every call passed' if passed else 'some calls failed'}, "
        f"{'each case giving one output' if repeatable else 'some cases giving several outputs'}; "
        f"the worst element reaches {worst['gluon']:.2f} of upstream's bound on the Gluon tier and "
        f"{worst['tl']:.2f} on the tl tier."
    )


def probe() -> str:
    """The Gluon GEMM probe's tables, and how DeepGEMM's outputs compared with ours."""
    report = load("probe")
    diffs = [r["rel_err_vs_ours"] for r in report["rows"] if "rel_err_vs_ours" in r]
    agreement = (
        f"All {len(diffs)} DeepGEMM outputs agreed bit for bit with ours (relative Frobenius difference 0.0)."
        if max(diffs) == 0
        else f"DeepGEMM's outputs against ours: relative Frobenius difference up to {max(diffs):.1e}."
    )
    return _tables.probe_tables(report) + "\n\n" + prose(agreement) + "\n\n" + data_line("probe")


def probe_tl() -> str:
    """The probe run before it, with the tl kernels."""
    return _tables.probe_tables(load("probe_tl")) + "\n\n" + data_line("probe_tl")


def gemm_table(section: str) -> str:
    """One section of the ``bench_gemm.py`` run as ``bench_gemm.markdown`` writes it (its table)."""
    text = bench_gemm.markdown(gemm_sections()[section])
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
    tiers = decode_tiers()
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
    run, beside FlashMLA's on the same bytes in the same process (or, for a run without it,
    FlashMLA's times as quoted: another GPU, another run)."""
    run = load("packed_decode")
    by = {(r["batch"], r["heads"], r["q_len"], r["layout"], r["kernel"]): r for r in run["rows"]}
    meta = run["meta"]
    in_run = all("flashmla_graph_us" in r for r in run["rows"])
    with_tl = any(r["kernel"] == "tl" for r in run["rows"])
    anchor = (
        "FlashMLA ran in the same process on the same bytes (its page-strided cache: 64-row pages)."
        if in_run
        else "FlashMLA's column is issue 30's figure from an H200 in another run, not this one: a pointer, not a ratio."
    )
    head = ["batch", "heads", "q_len", "cache", "Gluon in a graph (us)"]
    head += ["tl in a graph (us)", "Gluon vs tl"] if with_tl else []
    head += ["Gluon error"]
    head += ["FlashMLA, same run (us)", "FlashMLA / Gluon"] if in_run else ["FlashMLA, H200, quoted (us)"]
    lines = [
        prose(
            f"{meta['device']}, torch {meta['torch']}, Triton {meta['triton']}, {meta['date'][:10]}; top-k "
            "2048, bf16 query, 656-byte rows, every column active. `dense`: the pool as one-row pages; "
            f"`padded`: FlashMLA's pages of 64 rows, 65 rows apart. {anchor}"
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
        else:
            cells += [f"{FLASHMLA_PACKED_US.get((batch, heads, q_len), float('nan')):.1f}"]
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
    return (
        _tables.decode_table(grid.values()) + "\n\n" + prose(note) + "\n\n" + data_line("decode_grid", "rope")
    )


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


def host_overhead() -> str:
    """The API layer's host time per call on the CPU, against its budget and, where the run has
    one, against an older commit's packages timed alternately in the same run."""
    run = load("host")
    meta = run["meta"]
    base = meta.get("baseline")
    lines = [
        "| api | case | API layer (us) | "
        + (f"at `{base[:10]}` (us) | difference (us) | " if base else "")
        + "budget (us) |",
        "|---|---|---|" + ("---|---|" if base else "") + "---|",
    ]
    budgeted, slower = [], []
    for r in run["rows"]:
        budget = r["budget_us"]
        verdict_cell = "-"
        if budget is not None:
            ok = shown(r["api_layer_us"], 1) <= budget
            budgeted.append((r, ok))
            verdict_cell = f"{budget:.0f} {'ok' if ok else 'over'}"
        then = r.get("baseline_us")
        compared = ""
        if base:
            compared = "- | - | " if then is None else f"{then:.1f} | {r['api_layer_us'] - then:+.1f} | "
            if then is not None and shown(r["api_layer_us"], 1) > shown(then, 1):
                slower.append(f"{r['api']} ({r['case']})")
        lines.append(f"| {r['api']} | {r['case']} | {r['api_layer_us']:.1f} | {compared}{verdict_cell} |")
    over = [f"{r['api']} ({r['case']})" for r, ok in budgeted if not ok]
    head = (
        f"{meta['machine']}, torch {meta['torch']}, {meta['threads']} thread, {meta['date']}; best of "
        f"{meta['rounds']} interleaved rounds of {meta['iters']} calls, minus a no-op call. "
        + (
            f"Over its budget: {', '.join(over)}."
            if over
            else f"All {len(budgeted)} rows with a budget are within it."
        )
    )
    if base:
        head += (
            f" Against commit `{base[:10]}` (each tree's packages in fresh processes, alternately, "
            f"best of {meta['repeat']} runs each): "
            + (
                f"slower at one decimal: {', '.join(slower)}."
                if slower
                else "no row is slower at one decimal."
            )
        )
    return prose(head) + "\n\n" + "\n".join(lines) + "\n\n" + data_line("host")


LAUNCH_CALLS = {
    "rope 1 token, public API": "`mla_rope_quantize_fp8`, 1 token, 128 heads (public API)",
    "rope 1 token, _cuda": "`_cuda.rope_quantize`, same call",
    "decode B=1 H=128 fp8, _cuda (2 launches)": "`_cuda.sparse_decode`, B=1, H=128, FP8 (decode + combine)",
    "bmm_fp8 128 x (4 x 128) x (128 x 512), public API": "`bmm_fp8`, 128 x (4 x 128) x (128 x 512) (public API)",
    "group_deepgemm 4 rows, n 2048, k 7168, public API":
        "`group_deepgemm_fp8_nt_groupwise`, 4 rows, n 2048, k 7168 (public API)",
}  # fmt: skip


def launch_overhead() -> str:
    """Eager calls' wall time per call: FastLaunch, Triton's JIT launch, the Autotuner."""
    run = load("launch")
    lines = [
        "| call | FastLaunch (us) | Triton's JIT launch (us) | Autotuner on every call (us) |",
        "|---|---|---|---|",
    ]
    for r in run["rows"]:
        name = LAUNCH_CALLS.get(r["call"], r["call"])
        if r["call"].startswith("decode") and run["meta"].get("decode_compiled_entries") == 0:
            name += (
                ": the Gluon tier, whose launchers the script does not switch (FastLaunch in both columns)"
            )
        tuner = f"{r['autotuner_launch_us']:.1f}" if "autotuner_launch_us" in r else "-"
        lines.append(f"| {name} | {r['fast_launch_us']:.1f} | {r['jit_launch_us']:.1f} | {tuner} |")
    return "\n".join(lines) + "\n\n" + data_line("launch")


EAGER_LAYERS = {
    "run": "the compiled kernels' launchers alone (`CompiledKernel.run`)",
    "FastLaunch": "+ FastLaunch (key, pointers, stream)",
    "_cuda": "+ `_cuda` (tier choice, key rows, host arguments, views)",
    "public API": "+ validation and dispatch: the public API",
    "public API, synchronized": "the public API, wall time per call of back-to-back calls",
}


def decode_eager() -> str:
    """An eager call's host time, layer by layer: decode on each tier, RoPE at one token."""
    lines = [
        "| layer | decode B=1 H=128 FP8, `auto` (Gluon) (us) | the same, tl tier (us) | RoPE 1 token (us) |",
        "|---|---|---|---|",
    ]
    for layer, text in EAGER_LAYERS.items():
        cells = [eager_us("decode_eager", "decode", layer), eager_us("decode_eager_tl", "decode", layer),
                 eager_us("decode_eager", "rope", layer)]  # fmt: skip
        lines.append(f"| {text} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return "\n".join(lines) + "\n\n" + data_line("decode_eager", "decode_eager_tl")


def _eager_block(kind: str, table, missing: str) -> str:
    """A generated block of the eager sections: the runs, ``table`` of their rows, the data."""
    run = load(kind)
    ran = ", ".join(f"{m['impl']} on {m['device']} ({m['date'][:10]})" for m in run["meta"])
    return prose(f"Runs: {ran}. {missing}") + "\n\n" + table(run["rows"]) + "\n\n" + data_line(kind)


def eager_calls() -> str:
    """Eager wall time of one public call against its anchor (issue 32's table)."""
    return _eager_block(
        "eager_calls", _tables.eager_calls_table, "A call whose anchor did not run reads 'not run'."
    )


def eager_split() -> str:
    """Each eager call's host issue time and GPU time, ours and upstream's (where the time goes)."""
    return _eager_block("eager_split", _tables.eager_split_table, "An impl that did not run reads '-'.")


def triton_releases() -> str:
    """Per Triton release: the gpu session and the headline rows next to Triton 3.6, same call."""
    run = load("triton_releases")
    head = ["row"] + [f"Triton {r['release']}: us (3.6 same call), ratio" for r in run["runs"]]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    kernels = {}
    for i, row in enumerate(run["runs"][0]["base"]["rows"]):
        cells = [row["row"]]
        for r in run["runs"]:
            base, other = r["base"]["rows"][i], r["under_release"]["rows"][i]
            if "us" not in base or "us" not in other:
                cells.append("not run")
                continue
            cells.append(f"{other['us']:.1f} ({base['us']:.1f}), {base['us'] / other['us']:.2f}x")
            kernels.setdefault(row["row"], set()).update({tuple(other["kernels"]), tuple(base["kernels"])})
        lines.append("| " + " | ".join(cells) + " |")
    differ = [name for name, taken in kernels.items() if len(taken) > 1]
    taken = "; ".join(f"{name}: {' / '.join(', '.join(k) for k in sorted(t))}" for name, t in kernels.items())
    same = "the same under every release" if not differ else f"differing for {', '.join(differ)}"
    suites = ", ".join(
        f"{r['release']} {r['gpu_session']['tests'] - r['gpu_session']['failures'] - r['gpu_session']['errors']}"
        f" of {r['gpu_session']['tests']} passed"
        for r in run["runs"]
    )
    base = run["base_gpu_session"]
    suites += (
        f"; under the machine's Triton {base['release']}, at {base['commit']} in a later call: "
        f"{base['gpu_session']['tests'] - base['gpu_session']['failures'] - base['gpu_session']['errors']} "
        f"of {base['gpu_session']['tests']} passed. `examples/fp8_mla_decode.py` in that call: "
        + ", ".join(
            f"under {release} OK (max relative error {sci(e['max_relative_error'])})"
            for release, e in base["example"].items()
        )
    )
    devices = sorted({r["under_release"]["device"] for r in run["runs"]})
    return (
        f"```\n{run['command']}\n```\n\n"
        + prose(
            f"{', '.join(devices)}, {run['runs'][0]['base']['date'][:10]}, torch "
            f"{run['runs'][0]['base']['torch']}; packages at {run['commit']}. The `gpu` session's tests "
            f'(`tests/gpu -m "not slow"`) under each release: {suites}. Each cell: time per call '
            "under the release, in parentheses under Triton 3.6 in the same call, and 3.6's time over "
            "the release's (above 1: the release is faster). CUDA-graph replays, medians. "
            f"The kernels `auto` launched, {same}: {taken}."
        )
        + "\n\n"
        + "\n".join(lines)
        + "\n\n"
        + data_line("triton_releases")
    )


def plot_caption(path: str, alt: str, kinds: tuple, drawn: str, current: str) -> str:
    """A plot, what it is drawn from, and where the kernels it shows stand now.

    The plots are redrawn from the rows of the sections they sit in, which are runs of kernels that
    later ones superseded; the caption says so, so that nobody reads them as the current state.
    """
    note = (
        f"The plot is drawn from {drawn} ({', '.join(f'`results/{FILES[k]}`' for k in kinds)}): the kernels "
        f"of that run, since superseded; {current}."
    )
    return f"![{alt}]({path})\n\n" + prose(note)


def gemm_plot() -> str:
    return plot_caption(
        "results/gemm_h200.png",
        "GEMM throughput on the H200, by section",
        ("gemm", "gemm_mla"),
        "the rows of this section's tables",
        "the grouped GEMMs' current numbers are the Gluon kernels' in \"The Hopper Gluon block-scaled "
        'GEMMs next to DeepGEMM" above',
    )


def mla_plot() -> str:
    return plot_caption(
        "results/mla_h200.png",
        "Sparse decode and RoPE against their floors on the H200",
        ("decode_grid", "rope"),
        "this table's decode rows at q_len 1 (left) and the RoPE table's \"ours % of copy\" (right)",
        "the decode's current numbers are the Gluon tier's in \"The Gluon tier (what runs on an H200)\" "
        "above",
    )


def gpu_suite() -> str:
    """The GPU test suite's run: command, wall time, counts, and every test that did not pass."""
    run = load("gpu_suite")
    lines = []
    for name, part in run["parts"].items():
        counts = part["counts"]
        total = sum(counts.values())
        tally = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        command = (
            f"python benchmarks/gpu_suite.py --workers {run['workers']} --parts {name} "
            f"--json benchmarks/results/{FILES['gpu_suite']}"
        )
        head = (
            f'The `{name}` nox session\'s selection (`tests/gpu -m "{part["marker"]}"`), {run["workers"]} '
            f"pytest-xdist workers, {run['device']}, {run['cpus']} CPU cores, {run['date'][:10]}: "
            f"{part['wall_s']:.0f} s wall, {total} tests: {tally}."
        )
        lines.append(f"```\n{command}\n```\n\n" + prose(head))
        if part["not_passed"]:
            lines.append("\nNot passed:\n")
            lines += [f"- `{test.rpartition('::')[2]}`" for test in sorted(part["not_passed"])]
    missing = [name for name in ("gpu", "gpu-slow") if name not in run["parts"]]
    if missing:
        lines.append("\n" + prose(f"Not in this run: {', '.join(f'`{m}`' for m in missing)}."))
    return "\n".join(lines) + "\n\n" + data_line("gpu_suite")


BLOCKS = {
    "machine": machine,
    "eager_calls": eager_calls,
    "eager_split": eager_split,
    "summary": summary,
    "summary_notes": summary_notes,
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
    "rope": rope,
    "decode_tiers": decode_tiers_table,
    "decode_grid": decode_grid,
    "packed_decode": packed_decode,
    "decode_accuracy": decode_accuracy,
    "host_overhead": host_overhead,
    "launch_overhead": launch_overhead,
    "decode_eager": decode_eager,
    "gemm_plot": gemm_plot,
    "mla_plot": mla_plot,
    "gpu_suite": gpu_suite,
    "triton_releases": triton_releases,
}
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.DOTALL)


# ----------------------------------------------------------------------------- RESULTS.md and plots


def render(text: str) -> str:
    """RESULTS.md's text with every generated block rewritten from the JSON files.

    Parameters
    ----------
    text : str
        RESULTS.md as it is.

    Returns
    -------
    str
        The same text, each block's content replaced by what ``BLOCKS[NAME]`` builds.

    Raises
    ------
    ValueError
        If a block's name is not in ``BLOCKS``, or a name of ``BLOCKS`` has no block.
    """
    names = [match[2] for match in BLOCK.finditer(text)]
    unknown, missing = set(names) - set(BLOCKS), set(BLOCKS) - set(names)
    if unknown or missing or len(names) != len(set(names)):
        raise ValueError(f"RESULTS.md blocks: unknown {sorted(unknown)}, missing {sorted(missing)}, {names}")
    return BLOCK.sub(lambda m: m[1] + BLOCKS[m[2]]().strip() + "\n" + m[4], text)


def draw_plots() -> list[Path]:
    """Redraw the two plots from the rows the tables show (needs matplotlib).

    Returns
    -------
    list of Path
        ``results/mla_h200.png`` (the tl decode grid and the RoPE rows) and ``results/gemm_h200.png``
        (every ``bench_gemm.py`` section of the tables).
    """
    mla_rows = [r for r in load("decode_grid")["rows"] if r["op"] == "sparse_decode"]
    mla_rows += [r for r in load("rope")["rows"] if r["op"] == "rope_quantize"]
    paths = [RESULTS / "mla_h200.png", RESULTS / "gemm_h200.png"]
    _tables.plot(mla_rows, paths[0])
    bench_gemm.plot([r for rows in gemm_sections().values() for r in rows], paths[1])
    return paths


def main(argv=None) -> int:
    """Rewrite RESULTS.md and the plots, or with ``--check`` compare only.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: the command line).

    Returns
    -------
    int
        The exit status: 1 when ``--check`` finds RESULTS.md out of date (the difference goes to
        stderr), else 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if RESULTS.md is out of date; write nothing"
    )
    parser.add_argument("--no-plots", action="store_true", help="leave the plots as they are")
    args = parser.parse_args(argv)
    text = RESULTS_MD.read_text()
    new = render(text)
    if args.check:
        if new != text:
            diff = difflib.unified_diff(
                text.splitlines(), new.splitlines(), "RESULTS.md", "generated", lineterm=""
            )
            print(
                "\n".join(diff) + "\nRESULTS.md is out of date: run python benchmarks/report.py",
                file=sys.stderr,
            )
            return 1
        print("RESULTS.md is up to date with benchmarks/results/")
        return 0
    RESULTS_MD.write_text(new)
    print(f"wrote {RESULTS_MD}")
    if not args.no_plots:
        for path in draw_plots():
            print(f"drew {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
