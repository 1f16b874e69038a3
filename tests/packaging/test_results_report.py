"""``benchmarks/RESULTS.md`` against ``benchmarks/results/``: generated, and its Summary the tables' numbers.

Runs on the CPU, without a GPU, flashinfer or matplotlib. ``benchmarks/report.py --check``
rebuilds every generated block from the JSON files (no plots) and fails when RESULTS.md differs.
Then each number of the Summary's "now" column is derived here from the section table it
summarizes, as RESULTS.md prints that table (``EXPECTED_NOW``): independently of the generator,
which computes the Summary from the JSON rows. A number edited by hand, or a generator that
drifts from its tables, fails one or both.
"""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
RESULTS_MD = BENCHMARKS / "RESULTS.md"
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")  # not the 16 of BF16


def test_results_md_is_what_report_py_generates():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "report.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ----------------------------------------------------------------------------- RESULTS.md as printed


def blocks(text: str) -> dict[str, str]:
    """The generated blocks of RESULTS.md, by name."""
    return dict(re.findall(r"<!-- results:([\w-]+) -->\n(.*?)<!-- /results -->", text, re.DOTALL))


def tables(block: str) -> list[list[dict[str, str]]]:
    """The Markdown tables of a block, each a list of rows ``{header: cell}``."""
    found, lines = [], []
    for line in block.splitlines() + [""]:
        if line.startswith("|"):
            lines.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif lines:
            header, rows = lines[0], lines[2:]
            found.append([dict(zip(header, row, strict=True)) for row in rows])
            lines = []
    return found


def numbers(cell: str) -> list[str]:
    return NUMBER.findall(cell)


def column(rows, header, part=0, where=lambda row: True) -> list[str]:
    """The ``part``-th number of each cell of a column (cells "a / b" hold two), blank cells left out."""
    return [numbers(row[header])[part] for row in rows if where(row) and numbers(row[header])]


def span(values: list[str]) -> list[str]:
    """The smallest and the largest of printed values (one when they print alike)."""
    low, high = min(values, key=float), max(values, key=float)
    return [low] if low == high else [low, high]


def one(rows, **cells) -> dict[str, str]:
    """The one row whose cells have these values."""
    (row,) = [row for row in rows if all(row[k] == v for k, v in cells.items())]
    return row


# ----------------------------------------------------------------------------- the Summary's sources


def expected_now(op: str, found: dict[str, str]) -> list[str]:
    """The numbers the Summary row of ``op`` should print, in order, from the tables it summarizes."""
    table = {name: tables(block) for name, block in found.items()}

    def m(row):
        return int(re.search(r"m=(\d+)", row["shape"])[1])

    if op == "`fp8_blockscale_gemm_sm90`, FP8 and BF16 input":
        rows = table["gemm_blockscale"][0]
        small = column(rows, "upstream / ours", where=lambda r: m(r) <= 128)
        ahead = sum(float(v) >= 1 for v in small)
        return (span(small) + ["128", str(ahead), str(len(small))]
                + span(column(rows, "upstream / ours", where=lambda r: m(r) >= 512)) + ["512"])  # fmt: skip
    if op == "`bmm_fp8`, MLA absorb, 128 heads":
        return span(column(table["gemm_mla"][0], "bmm_fp8 vs torch.bmm"))
    if op == "`bmm_fp8`, one batch":
        return span(column(table["gemm_bmm_fp8"][0], "ours / anchor"))
    if op == "`gemm_fp8_nt_groupwise`":  # "ours / anchor" reads "public API / Triton kernel"
        rows = table["gemm_groupwise"][0]
        return (span(column(rows, "ours / anchor", where=lambda r: m(r) == 4096)) + ["4096"]
                + span(column(rows, "ours / anchor", where=lambda r: m(r) <= 512)) + ["512"])  # fmt: skip
    if op.startswith("`group_deepgemm_fp8_nt_groupwise` / `batch_deepgemm_fp8_nt_groupwise`"):
        now = table["gluon_probe"][0]
        return span(column(now, "contiguous vs DeepGEMM")) + span(column(now, "masked vs DeepGEMM"))
    if op == "`bmm_bf16`":
        rows = table["gemm_bf16"][0]
        return (span(column(rows, "ours / anchor", where=lambda r: r["shape"].endswith("bfloat16")))
                + span(column(rows, "ours / anchor", where=lambda r: r["shape"].endswith("float32"))))  # fmt: skip
    if op.startswith("sparse MLA decode") and "eager" not in op:
        kind = "fp8" if "FP8" in op else "bf16"
        batch = re.search(r"B=(\d+)", op)[1] if "B=" in op else "128"
        heads = re.search(r"H=(\d+)", op)[1]
        q_len = re.search(r"q_len (\d+)", op)[1] if "q_len" in op else "1"
        row = one(table["decode_tiers"][0], dtype=kind, batch=batch, heads=heads, q_len=q_len)
        if heads == "16":
            return numbers(row["floor/time"]) + [batch] + numbers(row["tl floor/time"])
        return numbers(row["Gluon in a graph (us)"]) + numbers(row["tl in a graph (us)"])
    if op == "sparse MLA decode, FP8, B=1, H=128, eager public API with metadata":
        row = one(table["eager_calls"][0], call="sparse decode B1 H128 top-k 2048")
        return numbers(row["ours (us)"])
    rope = table["rope"][0]
    if op == "`mla_rope_quantize_fp8`":
        large = [one(rope, tokens=t) for t in ("4096", "16384")]
        return [*numbers(large[0]["ours % of copy"]), "4096", *numbers(large[1]["ours % of copy"]), "16384",
                *numbers(large[0]["upstream % of copy"]), *numbers(large[1]["upstream % of copy"])]  # fmt: skip
    if op == "`mla_rope_quantize_fp8`, 1 token":
        row = one(rope, tokens="1")
        return numbers(row["ours in a graph (us)"]) + numbers(row["upstream in a graph (us)"])
    if op == "`mla_rope_quantize_fp8`, 1 token, eager public API":
        row = one(table["eager_calls"][0], call="mla_rope_quantize_fp8, 1 token")
        return numbers(row["ours (us)"]) + numbers(row["anchor (us)"])
    raise AssertionError(f"Summary row {op!r} is new to this test: add which table its numbers come from")


def summary_mismatches(text: str) -> list[str]:
    """Each Summary row whose "now" numbers are not the ones its table gives."""
    found = blocks(text)
    (summary,) = tables(found["summary"])
    assert summary, "the Summary table is empty"
    wrong = []
    for row in summary:
        expected = expected_now(row["op"], found)
        if numbers(row["now"]) != expected:
            wrong.append(f"{row['op']}: now {row['now']!r}, the tables give {expected}")
    return wrong


def test_every_summary_number_comes_from_the_table_it_summarizes():
    assert summary_mismatches(RESULTS_MD.read_text()) == []


def test_a_summary_number_edited_by_hand_fails_both_checks():
    """Each Summary row in turn, its first "now" number changed: both checks above must fail."""
    sys.path.insert(0, str(BENCHMARKS))
    import report

    text = RESULTS_MD.read_text()
    lines = [
        line for line in blocks(text)["summary"].splitlines() if line.startswith("| ") and NUMBER.search(line)
    ]
    assert len(lines) == len(tables(blocks(text)["summary"])[0])
    for line in lines:
        now = line.split(" | ")[3]
        first = NUMBER.search(now)
        edited_now = now[: first.start()] + str(float(first[0]) + 1) + now[first.end() :]
        edited = text.replace(line, line.replace(f" | {now} | ", f" | {edited_now} | ", 1), 1)
        assert edited != text
        assert summary_mismatches(edited), f"the edit of {now!r} to {edited_now!r} went unnoticed"
        assert report.render(edited) != edited, f"report.py --check would pass the edit of {now!r}"
