"""Every GEMM implementation module offers what :class:`flashinfer.gemm._dispatch.GemmImpl` states:
the same function names, each taking the same one argument record."""

from __future__ import annotations

import importlib
import inspect

import pytest

from flashinfer.gemm._dispatch import GemmImpl

OPERATIONS = [name for name in vars(GemmImpl) if not name.startswith("_")]


def test_the_protocol_lists_every_operation():
    assert OPERATIONS == [
        "bmm",
        "gemm_groupwise",
        "group_gemm_contiguous",
        "group_gemm_masked",
        "group_gemm_segments",
        "quantize_fp8_blocks",
    ]


@pytest.mark.parametrize("module_name", ["_reference", "_cuda", "_mate"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_implementation_module_satisfies_the_protocol(module_name, operation):
    """Importable on CPU (Triton and MATE load lazily); the function takes the record the
    protocol names, by the same parameter name, and nothing else."""
    module = importlib.import_module(f"flashinfer.gemm.{module_name}")
    function = getattr(module, operation, None)
    assert callable(function), f"{module_name} has no {operation}"
    expected = list(inspect.signature(getattr(GemmImpl, operation)).parameters.values())[1:]
    got = list(inspect.signature(function).parameters.values())
    assert [(p.name, p.kind, p.annotation) for p in got] == [(p.name, p.kind, p.annotation) for p in expected]
    # an implementation returns what the protocol says, or never a replay (None)
    returns = inspect.signature(function).return_annotation
    assert returns in (inspect.signature(getattr(GemmImpl, operation)).return_annotation, "None")
