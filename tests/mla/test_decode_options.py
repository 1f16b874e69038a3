"""The decode hands its arguments to the cache form's ``check`` positionally (host time: by
keyword, or through an options record, costs about 1 us a call on a CI-class CPU,
``benchmarks/host_time.py --section api-layer``); these tests make that safe.

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


def _call_of_check() -> ast.Call:
    """The one ``form.check(...)`` call in the public function's module."""
    calls = [
        node
        for node in ast.walk(ast.parse(inspect.getsource(_decode)))
        if isinstance(getattr(node, "func", None), ast.Attribute) and node.func.attr == "check"
    ]
    assert len(calls) == 1, "a cache form's check is called in one place"
    return calls[0]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_check_takes_public_parameters_in_public_order(form):
    public = list(inspect.signature(_decode.trtllm_batch_decode_with_kv_cache_mla).parameters)
    names = list(inspect.signature(FORMS[form]).parameters)
    positions = [public.index(name) for name in names]  # ValueError: not a public parameter
    assert positions == sorted(positions)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_position_gets_the_argument_of_its_name(form):
    call = _call_of_check()
    assert not call.keywords
    passed = [arg.id if isinstance(arg, ast.Name) else ast.unparse(arg) for arg in call.args]
    assert passed == list(inspect.signature(FORMS[form]).parameters)
