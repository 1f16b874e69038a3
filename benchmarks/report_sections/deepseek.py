"""RESULTS.md's DeepSeek-V3 decode layer section, from the newest ``results/deepseek_layer_*.json``.

Unlike the other sections' runs (``FILES``), this one is found by name: for each of the script's
sections (``layer``, ``moe``), the newest file of the pattern holding its rows, by the date its run
recorded (then by name). Without one the block says no run exists yet.
"""

from __future__ import annotations

import json

from report_sections import RESULTS, prose, sci

PATTERN = "deepseek_layer_*.json"
LAYERS = {"ours": "ours", "deepgemm": "DeepGEMM layer", "cublaslt": "cuBLASLt layer"}
PARTS = ("whole layer", "layer without MoE")  # the rows of whole layers in one graph


def newest(section):
    """``(file name, run)`` of the newest ``results/deepseek_layer_*.json`` with rows of ``section``,
    None without one."""
    runs = [(json.loads(path.read_text()), path.name) for path in sorted(RESULTS.glob(PATTERN))]
    runs = [found for found in runs if any(row["section"] == section for row in found[0]["rows"])]
    if not runs:
        return None
    run, name = max(runs, key=lambda found: (found[0]["meta"]["date"], found[1]))
    return name, run


def by_impl(rows, *keys) -> dict:
    """``{(row[key] for key in keys): {impl: row}}``, in the rows' order."""
    grouped = {}
    for row in rows:
        grouped.setdefault(tuple(row[key] for key in keys), {})[row["impl"]] = row
    return grouped


def times(impls) -> list[str]:
    """The cells of one row: each layer's us, then the other layers' time over ours ("n/a": not run)."""
    ours = impls["ours"]["us"]
    us = [f"{impls[i]['us']:.1f}" if i in impls else "n/a" for i in LAYERS]
    ratios = [f"{impls[i]['us'] / ours:.2f}x" if i in impls else "n/a" for i in ("deepgemm", "cublaslt")]
    return us + ratios


def layer_tables(rows) -> str:
    """The layers in one graph per batch, then each GEMM alone (with its share of our whole layer)."""
    head = (
        " | ".join(f"{name} us" for name in LAYERS.values())
        + " | DeepGEMM layer / ours | cuBLASLt layer / ours"
    )
    whole = by_impl([r for r in rows if r["gemm"] in PARTS], "batch", "gemm")
    lines = [f"| B | GEMMs | {head} |", "|---" * 7 + "|"]
    lines += [f"| {b} | {part} | " + " | ".join(times(impls)) + " |" for (b, part), impls in whole.items()]
    single = by_impl([r for r in rows if r["gemm"] not in PARTS], "batch", "gemm")
    lines += ["", f"| B | GEMM | shape | {head} | ours, share of our whole layer |", "|---" * 9 + "|"]
    for (b, gemm), impls in single.items():
        total = whole.get((b, PARTS[0]), {}).get("ours")
        share = f"{impls['ours']['us'] / total['us']:.0%}" if total else "n/a"
        lines.append(
            f"| {b} | {gemm} | {impls['ours']['shape']} | " + " | ".join(times(impls)) + f" | {share} |"
        )
    return "\n".join(lines)


def calls_table(rows) -> str:
    """What each layer calls for each GEMM, and the largest relative error of each other layer against ours."""
    lines = [
        "| GEMM | " + " | ".join(LAYERS.values()) + " | error: DeepGEMM layer | error: cuBLASLt layer |",
        "|---" * 6 + "|",
    ]
    for (gemm,), impls in by_impl([r for r in rows if r["gemm"] not in PARTS], "gemm").items():
        calls = [f"`{impls[i]['call'].split(',')[0]}`" if i in impls else "n/a" for i in LAYERS]
        for impl in ("deepgemm", "cublaslt"):
            errors = [r["rel_err_vs_ours"] for r in rows if (r["gemm"], r["impl"]) == (gemm, impl)]
            errors = [e for e in errors if e is not None]  # none: not run, or no token routed
            calls.append(sci(max(errors)) if errors else "n/a")
        lines.append(f"| {gemm} | " + " | ".join(calls) + " |")
    padded = sorted({r["batch"] for r in rows if "padded" in r.get("call", "")})
    note = (
        f" cuBLASLt's block scaling needs m % 4 == 0: at B = {', '.join(map(str, padded))} its calls compute "
        "m rounded up to a multiple of 4."
        if padded
        else ""
    )
    return (
        "\n".join(lines)
        + "\n\n"
        + prose(
            "The MLA absorptions have no DeepGEMM call: both other layers run `torch.bmm` on BF16 copies "
            "(the weight's per-tensor scales folded in once); the cuBLASLt layer has no masked grouped GEMM, so "
            f"its whole layer is not timed (n/a).{note} Errors: relative Frobenius norm against ours on the rows "
            "both define, the largest over the batches."
        )
    )


def moe_table(rows, copy_gbps) -> str:
    """The masked MoE down projection per expected_m: time and weight-streaming bandwidth."""
    lines = [
        "| expected_m | max_m | experts with a token | tokens | ours us | ours GB/s | ours, of copy | "
        "DeepGEMM us | DeepGEMM GB/s | DeepGEMM / ours | fastest tile swept (us) |",
        "|---" * 11 + "|",
    ]
    for (e,), impls in by_impl(rows, "expected_m").items():
        ours, theirs = impls["ours"], impls.get("deepgemm")
        tiles = {
            impl[len("decode-MoE ") :]: row["us"]
            for impl, row in impls.items()
            if impl.startswith("decode-MoE ")
        }
        best = min(tiles, key=tiles.get, default=None)
        dg = [f"{theirs['us']:.1f}", f"{theirs['gbps']:.0f}", f"{theirs['us'] / ours['us']:.2f}x"] if theirs else ["n/a"] * 3  # fmt: skip
        dg.append(f"{best} ({tiles[best]:.1f})" if best else "n/a")
        lines.append(
            f"| {e} | {ours['max_m']} | {ours['active_experts']} | {sum(ours['tokens'])} | {ours['us']:.1f} | "
            f"{ours['gbps']:.0f} | {ours['of_copy']:.0%} | " + " | ".join(dg) + " |"
        )
    return (
        prose(
            f"The masked MoE down projection alone (32 experts, {rows[0]['shape'].split('rows ')[-1]}; tokens per expert drawn from a "
            "Poisson law of mean expected_m), through the public API (`auto` takes the decode-MoE kernel "
            "up to expected_m 64): GB/s counts the weights and scales of the experts with a token over "
            f"the time; the device-to-device copy of the same run moved {copy_gbps:.0f} GB/s."
        )
        + "\n\n"
        + "\n".join(lines)
    )


def run_note(name, meta) -> str:
    """The run's command, machine and versions, and where its data is."""
    return f"```\n{meta['command']}\n```\n\n" + prose(
        f"{meta['device']}, {meta['date'][:10]}, torch {meta['torch']}, Triton {meta['triton']}, DeepGEMM "
        f"{(meta.get('deepgemm') or '?')[:12]}. Microseconds per call, medians of CUDA-graph replays; a "
        "ratio is the other layer's time over ours (above 1: ours is faster). Each GEMM alone cycles "
        "through input sets larger than twice the L2; each whole layer is one graph on one set."
        + (
            " `--decode-moe` made `auto` take the decode-MoE kernel, as it does now by default."
            if meta.get("decode_moe")
            else ""
        )
        + f" Data: [`results/{name}`](results/{name})."
    )


def deepseek_layer() -> str:
    """The block: per section, the newest run's command and machine and its tables, or a placeholder."""
    parts = []
    for section in ("layer", "moe"):
        found = newest(section)
        if found is None:
            continue
        name, run = found
        rows = [r for r in run["rows"] if r["section"] == section]
        parts.append(run_note(name, run["meta"]))
        if section == "layer":
            parts += [layer_tables(rows), calls_table(rows)]
        else:
            parts.append(moe_table(rows, run["meta"]["copy_gbps"]))
    if not parts:
        return prose(
            "No run yet. `benchmarks/deepseek_layer.py` writes `deepseek_layer.json`; copied to "
            "`results/deepseek_layer_<gpu>.json`, `python benchmarks/report.py` fills this block from it."
        )
    return "\n\n".join(parts)


BLOCKS = {"deepseek_layer": deepseek_layer}
