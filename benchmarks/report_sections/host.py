"""RESULTS.md's Host time section: the API layer on the CPU, eager launches and calls on a GPU."""

from __future__ import annotations

from report_sections import data_line, load, prose, shown

# each eager call (host_time.py --section calls): its anchor, and the eager-call target (ours / anchor at most)
EAGER_CALLS = {
    "mla_rope_quantize_fp8, 1 token": ("upstream", 0.8),
    "bmm_fp8, m=1 n=2112 k=7168": ("upstream", 0.8),
    "fp8_blockscale_gemm_sm90, BF16 input, m=1 n=2112 k=7168": ("upstream", 0.8),
    "fp8_blockscale_gemm_sm90, FP8 input, m=1 n=2112 k=7168": ("upstream", 0.8),
    "sparse decode B1 H128 top-k 2048": ("FlashMLA", 1.0),
}


def eager_calls_table(rows) -> str:
    """Each call's eager wall time, its anchor's, the ratio and the eager-call target.

    Parameters
    ----------
    rows : list of dict
        ``{"op", "impl", "wall_us"}`` rows of ``host_time.py --section calls`` runs (ours, upstream, FlashMLA).

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
    """Each call's host issue time and GPU time, ours and the anchor's (``host_time.py --section split``).

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


def eager_call(op: str, *impls: str) -> list[float]:
    """Eager wall time per call of ``op`` in the eager-calls run, one value per impl."""
    us = {(r["op"], r["impl"]): r["wall_us"] for r in load("eager_calls")["rows"]}
    return [us[(op, impl)] for impl in impls]


def eager_device() -> str:
    """The GPU of the eager-calls run, short (H100, H200)."""
    return load("eager_calls")["meta"][0]["device"].split()[1]


def eager_us(kind: str, op: str, layer: str) -> float:
    """One layer's time per call in a ``host_time.py --section decode-layers`` run."""
    row = next(r for r in load(kind)["rows"] if r["op"].startswith(op) and r["layer"] == layer)
    return row.get("host_us", row.get("wall_us"))


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
    """Eager wall time of one public call against its anchor and the eager-call target."""
    return _eager_block("eager_calls", eager_calls_table, "A call whose anchor did not run reads 'not run'.")


def eager_split() -> str:
    """Each eager call's host issue time and GPU time, ours and upstream's (where the time goes)."""
    return _eager_block("eager_split", eager_split_table, "An impl that did not run reads '-'.")


BLOCKS = {
    "host_overhead": host_overhead,
    "launch_overhead": launch_overhead,
    "eager_calls": eager_calls,
    "eager_split": eager_split,
    "decode_eager": decode_eager,
}
