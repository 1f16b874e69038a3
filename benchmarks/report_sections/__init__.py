"""The blocks of ``benchmarks/RESULTS.md``, one module per section, and what they share.

Each module maps block names to functions (``BLOCKS``) that build a block's text from the JSON
files of ``FILES``: one file, the newest run, per kind of measurement (the older files in
``results/`` are history). ``benchmarks/report.py`` puts the blocks into RESULTS.md.
"""

from __future__ import annotations

import json
import textwrap
from functools import cache
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"

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
    "host": "host_api_layer_cpu_vs_cbbbc55.json",  # host_time.py --section api-layer --baseline cbbbc55
    "launch": "launch_overhead_gluon_h200.json",
    "gpu_suite": "gpu_suite_h100.json",
    # bench_mla.py --packed --flashmla --targets-only --tiers gluon --layouts dense,padded (the tl
    # tier beside it: packed_mla_h100.json)
    "packed_decode": "packed_mla_flashmla_h100.json",
    "eager_calls": "eager_calls_h100.json",  # host_time.py --section calls --impl ours (FlashMLA beside it)
    "eager_split": "eager_split_h100.json",  # host_time.py --section split --impl ours, then upstream, joined
    "triton_releases": "triton_releases_h100.json",  # triton_release_gpu.sh, one call per release
}


@cache
def load(kind: str):
    """The parsed JSON of the run ``FILES[kind]`` (read once)."""
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
    """The range of ``values`` printed with ``digits`` decimals as their table prints them (so the
    ends are cells of that column), ``unit`` appended once: ``1.09-1.44x``, or the one value where
    all print alike."""
    cells = sorted({f"{v:.{digits}f}" for v in values}, key=float)
    return (cells[0] if len(cells) == 1 else f"{cells[0]}-{cells[-1]}") + unit


def shown(value, digits=2) -> float:
    """``value`` rounded as a table prints it (targets are judged on what the tables show)."""
    return round(value, digits)


def verdict(passed, where=None) -> str:
    """The Summary's last column: ``met`` when every check of the target passes (on the values as
    the tables print them), ``miss`` when none does, else ``miss`` and the ``where`` of each check
    that fails ("at m = 4096")."""
    if all(passed):
        return "met"
    if not any(passed):
        return "miss"
    if where is None:
        return "miss at some shapes"
    return "miss " + ", ".join(w for w, ok in zip(where, passed) if not ok)


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
