"""The README's first call and its "Use it" block run as they stand (on CPU here) and computes what it says.

The block is read from the README, executed in a fresh namespace, and its results are checked
against float64 oracles written here (``tests/oracles.py``), so an edit that breaks a call, a
shape or a value in the README fails this test.
"""

from __future__ import annotations

from pathlib import Path

import torch
from oracles import dequant

README = Path(__file__).resolve().parents[2] / "README.md"


def use_it_block() -> str:
    section = README.read_text().split("\n## Use it\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def first_call_block() -> str:
    section = README.read_text().split("\n## Install and a first call\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_first_call_comes_first_and_computes_what_it_says():
    text = README.read_text()
    assert text.index("\n## Install and a first call\n") < text.index("\n## Use it\n")
    block = first_call_block()
    assert len([line for line in block.splitlines() if line.strip()]) == 5, block  # ruff's blank line aside
    names: dict = {}
    exec(compile(block, str(README), "exec"), names)  # noqa: S102 - the README's own code
    out = names["out"]
    assert out.shape == (2, 16, 32) and out.dtype == torch.bfloat16
    assert relative_error(out, names["A"].double() @ names["B"].double()) < 1e-2


def relative_error(got, want) -> float:
    want = want.double()
    return ((got.double() - want).norm() / want.norm()).item()


def test_the_use_it_block_runs_and_computes_what_it_says():
    names: dict = {}
    exec(compile(use_it_block(), str(README), "exec"), names)  # noqa: S102 - the README's own code
    out, y, moe, moe_masked, attn = (names[n] for n in ("out", "y", "moe", "moe_masked", "attn"))
    assert out.shape == (16, 32, 512) and out.dtype == torch.bfloat16
    assert relative_error(out, names["A"].double() @ names["B"].double()) < 1e-2
    a, w, a_scale, w_scale = (names[n] for n in ("a", "w", "a_scale", "w_scale"))
    assert y.shape == (64, 384)
    assert relative_error(y, dequant(a, a_scale, 1) @ dequant(w, w_scale, 128).t()) < 1e-2
    assert moe.shape == (256, 384) and moe_masked.shape == (2, 128, 384)
    assert attn.shape == (2, 1, 16, 512) and attn.dtype == torch.bfloat16
    assert attn.isfinite().all() and names["q_fp8"].float().isfinite().all()
