"""Generic tests driven by the op table (mla_ops.OPS) x the implementations on this machine.

Implementations: ``reference`` (what CPU runs) and ``mate`` (the MATE adapter over the float64
MATE stand-in, with CPU tensors routed to it). Every sample is checked element by element
against its independent float64 oracle, with caller-given outputs poisoned with NaN first.
"""

from __future__ import annotations

import pytest
from mla_ops import OPS, poison

IMPLEMENTATIONS = ["reference", "mate"]


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request):
    if request.param == "mate":
        request.getfixturevalue("mate_standin")
    return request.param


def _cases(kind):
    for op in OPS:
        for entry in getattr(op, kind)():
            yield pytest.param(op, entry.name, id=f"{op.name}-{entry.name}")


def _find(op, kind, name):
    entry = next(e for e in getattr(op, kind)() if e.name == name)
    return entry.build() if kind == "samples" else entry


@pytest.mark.parametrize("op, sample_name", list(_cases("samples")))
def test_matches_oracle_with_poisoned_outputs(op, sample_name, implementation, seed):
    sample = _find(op, "samples", sample_name)
    for name in sample.outputs:
        poison(sample.kwargs[name])
    result = op.fn(**sample.kwargs)
    op.compare(result, sample.oracle(), sample)


@pytest.mark.parametrize("op, error_name", list(_cases("errors")))
def test_error_inputs(op, error_name, implementation, seed):
    error = _find(op, "errors", error_name)
    with pytest.raises(error.exc, match=error.match):
        op.fn(**error.make_kwargs())
