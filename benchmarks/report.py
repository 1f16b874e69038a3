"""Rebuild the generated parts of ``benchmarks/RESULTS.md``, and its plots, from ``benchmarks/results/``.

RESULTS.md is prose around blocks ``<!-- results:NAME -->`` ... ``<!-- /results -->``, each built
by ``BLOCKS[NAME]`` of its section's module in ``report_sections/`` from the newest run of each
kind (``report_sections.FILES``). Run from anywhere, no GPU::

    python benchmarks/report.py              # rewrite the blocks and redraw the plots (matplotlib)
    python benchmarks/report.py --no-plots   # the blocks only
    python benchmarks/report.py --check      # exit 1 if RESULTS.md is not what it would write
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from report_sections import RESULTS, deepseek, gemm, host, load, mla, suites, summary  # noqa: E402

RESULTS_MD = HERE / "RESULTS.md"
BLOCKS = summary.BLOCKS | gemm.BLOCKS | deepseek.BLOCKS | mla.BLOCKS | host.BLOCKS | suites.BLOCKS
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.DOTALL)


def render(text: str) -> str:
    """``text`` (RESULTS.md) with each block's content replaced by what ``BLOCKS[NAME]`` builds.

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
    """Redraw ``results/mla_h200.png`` (the tl decode grid, RoPE) and ``results/gemm_h200.png`` (the
    ``bench_gemm.py`` tables) from the rows the tables show (needs matplotlib); returns their paths."""
    mla_rows = [r for r in load("decode_grid")["rows"] if r["op"] == "sparse_decode"]
    mla_rows += [r for r in load("rope")["rows"] if r["op"] == "rope_quantize"]
    paths = [RESULTS / "mla_h200.png", RESULTS / "gemm_h200.png"]
    mla.plot(mla_rows, paths[0])
    gemm.plot([r for rows in gemm.gemm_sections().values() for r in rows], paths[1])
    return paths


def main(argv=None) -> int:
    """Rewrite RESULTS.md and the plots, or with ``--check`` compare only: 1 when RESULTS.md is out
    of date (the difference goes to stderr), else 0."""
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
