"""Every MLA implementation module offers the functions of ``MlaImpl``, with compatible signatures.

Dispatch is a table lookup (``DISPATCH.module(device).<op>(record)``), so a function missing from
one module, or one taking other parameters, would fail only on that device. ``_cuda`` and
``_mate`` import neither Triton nor MATE at import time, so all three are checked on CPU.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from flashinfer.mla._dispatch import MlaImpl

MODULES = ("flashinfer.mla._reference", "flashinfer.mla._cuda", "flashinfer.mla._mate")
FUNCTIONS = [name for name, member in vars(MlaImpl).items() if inspect.isfunction(member) and name[0] != "_"]


def _parameters(fn) -> list[tuple[str, object]]:
    """(name, kind) of each parameter; the Protocol's methods without ``self``."""
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [(p.name, p.kind) for p in params]


def test_the_protocol_names_every_dispatched_function():
    assert FUNCTIONS == [
        "rope_quantize",
        "decode_plan",
        "sparse_decode",
        "packed_sparse_decode",
        "dense_decode",
    ]


@pytest.mark.parametrize("module_name", MODULES)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_module_satisfies_the_protocol(module_name, function):
    module = importlib.import_module(module_name)
    fn = getattr(module, function, None)
    assert callable(fn), f"{module_name} has no {function}"
    assert _parameters(fn) == _parameters(getattr(MlaImpl, function)), (
        f"{module_name}.{function}{inspect.signature(fn)} does not match "
        f"MlaImpl.{function}{inspect.signature(getattr(MlaImpl, function))}"
    )
