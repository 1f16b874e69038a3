"""Shared test fixtures: replayable seeds, the MATE stand-in, hypothesis profiles."""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import pytest
import torch

try:
    from hypothesis import settings

    settings.register_profile("ci", max_examples=25, deadline=None, derandomize=False)
    settings.register_profile("long", max_examples=2000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # hypothesis is a test dependency; tests that need it import it themselves
    pass

TESTS = Path(__file__).parent


@pytest.fixture
def seed(request) -> int:
    """A per-test seed, printed so a failure can be replayed with FLASHINFER_TEST_SEED."""
    base = os.environ.get("FLASHINFER_TEST_SEED")
    value = int(base) if base else zlib.crc32(request.node.nodeid.encode())
    print(f"seed={value} (replay with FLASHINFER_TEST_SEED={value})")
    torch.manual_seed(value)
    return value


@pytest.fixture(params=["reference", "mate"])
def implementation(request) -> str:
    """Where a test's CPU tensors run (the op table's CPU implementations): ``reference``, or
    ``mate``, the MATE adapter over the float64 MATE stand-in. Tests parametrize it indirectly."""
    if request.param == "mate":
        request.getfixturevalue("mate_standin")
    return request.param


def _purge_mate_modules() -> None:
    for name in list(sys.modules):
        if name == "mate" or name.startswith("mate."):
            del sys.modules[name]


def _use_mate_from(path: Path, monkeypatch):
    from flashinfer._core import dispatch
    from flashinfer._core import mate as mate_loader

    _purge_mate_modules()
    monkeypatch.syspath_prepend(str(path))
    mate_loader.reset_cache()
    # CPU tensors take the MUSA route, so the adapter runs against the stand-in here.
    routing = dispatch.ROUTING.routed("cpu", "mate")._replace(force_reference=False)
    monkeypatch.setattr(dispatch, "ROUTING", routing)


@pytest.fixture
def mate_standin(monkeypatch):
    """Route CPU tensors through the MATE adapter, backed by the float64 MATE stand-in."""
    _use_mate_from(TESTS / "standin", monkeypatch)
    import mate

    mate.reset()
    yield mate
    _purge_mate_modules()
    from flashinfer._core import mate as mate_loader

    mate_loader.reset_cache()


@pytest.fixture
def unrelated_mate(monkeypatch):
    """Route CPU tensors through the MATE adapter with PyPI's unrelated `mate` installed."""
    _use_mate_from(TESTS / "standin_unrelated", monkeypatch)
    yield
    _purge_mate_modules()
    from flashinfer._core import mate as mate_loader

    mate_loader.reset_cache()


@pytest.fixture
def no_mate(monkeypatch, tmp_path):
    """Route CPU tensors through the MATE adapter with no MATE installed at all."""
    from flashinfer._core import dispatch
    from flashinfer._core import mate as mate_loader

    _purge_mate_modules()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "standin" not in p])
    mate_loader.reset_cache()
    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "mate"))
    yield
    mate_loader.reset_cache()
