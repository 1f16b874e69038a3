"""``flashinfer._core.triton_compat`` against the installed Triton release.

Each Gluon name is that release's own builtin under the spelling it uses (run under every
release by ``python -m nox -s triton``); the launch protocol is tested in ``test_triton_launch.py``.
"""

from __future__ import annotations

import re

import pytest
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import tma

from flashinfer._core import triton_compat

RELEASE = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", triton.__version__).groups())

# (name here, the module that holds it, its spelling up to the release before ``since``, from ``since``)
NAMES = [
    ("cta_barrier", gl, "thread_barrier", "barrier", (3, 7)),
    ("tma_load", tma, "async_copy_global_to_shared", "async_load", (3, 8)),
    ("tma_store", tma, "async_copy_shared_to_global", "async_store", (3, 8)),
    ("cp_async_load", async_copy, "async_copy_global_to_shared", "async_load", (3, 8)),
]


@pytest.mark.parametrize(("name", "module", "before", "after", "since"), NAMES, ids=[n[0] for n in NAMES])
def test_each_name_is_the_releases_own_builtin(name, module, before, after, since):
    expected = getattr(module, after if RELEASE >= since else before)
    assert getattr(triton_compat, name) is expected
    assert getattr(expected, "__triton_builtin__", False), f"{name} is not a Gluon builtin here"


def test_the_names_cover_what_the_kernels_would_otherwise_spell_by_release():
    """No kernel module spells a name the table says differs between releases."""
    import pathlib

    import flashinfer.gemm.kernels
    import flashinfer.mla.kernels

    spelled = []
    for package in (flashinfer.gemm.kernels, flashinfer.mla.kernels):
        for path in pathlib.Path(package.__path__[0]).rglob("*.py"):
            source = path.read_text()
            for _, module, before, after, _ in NAMES:
                prefix = {gl: "gl", tma: "tma", async_copy: "async_copy"}[module]
                for spelling in (before, after):
                    if re.search(rf"\b{prefix}\.{spelling}\(", source):
                        spelled.append(f"{path.name}: {prefix}.{spelling}")
    assert spelled == []
