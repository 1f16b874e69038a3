"""The decode hands its arguments to the cache form's ``check`` positionally (host time: by
keyword, or through an options record, costs about 1 us a call on a CI-class CPU,
``benchmarks/host_overhead.py``); these tests make that safe.

Each form's ``check`` takes public parameters, under the public names and in the public order,
and the public function passes, position by position, the argument of the parameter's name: a
reordered parameter or a swapped argument fails here instead of reaching a rule under another
name.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from flashinfer.mla import _decode, _packed_decode, _unpacked_decode

FORMS = {"_packed_decode": _packed_decode.check, "_unpacked_decode": _unpacked_decode.check}


def _calls_of_check() -> dict[str, ast.Call]:
    """The ``<form>.check(...)`` calls in the public function's module, by form."""
    calls = {}
    for node in ast.walk(ast.parse(inspect.getsource(_decode))):
        func = getattr(node, "func", None)
        if isinstance(func, ast.Attribute) and func.attr == "check" and isinstance(func.value, ast.Name):
            assert func.value.id not in calls, f"{func.value.id}.check is called in one place"
            calls[func.value.id] = node
    return calls


@pytest.mark.parametrize("form", sorted(FORMS))
def test_check_takes_public_parameters_in_public_order(form):
    public = list(inspect.signature(_decode.trtllm_batch_decode_with_kv_cache_mla).parameters)
    names = list(inspect.signature(FORMS[form]).parameters)
    positions = [public.index(name) for name in names]  # ValueError: not a public parameter
    assert positions == sorted(positions)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_position_gets_the_argument_of_its_name(form):
    call = _calls_of_check()[form]
    assert not call.keywords
    passed = [arg.id if isinstance(arg, ast.Name) else ast.unparse(arg) for arg in call.args]
    assert passed == list(inspect.signature(FORMS[form]).parameters)
