"""The MLA op table (``tests/mla_ops.py``) through the generic checks (``tests/optable.py``).

Implementations: ``reference`` (what CPU runs) and ``mate`` (the MATE adapter over the float64
MATE stand-in, with CPU tensors routed to it); the CUDA implementation runs the same table in
``tests/gpu/test_optable_cuda.py``. Every sample is checked element by element against its
independent float64 oracle, with caller-given outputs poisoned with NaN first; every error
input raises the expected exception, with the message naming the argument, before any write.
"""

from __future__ import annotations

import pytest
from mla_ops import OPS
from optable import build, error_named, error_params, raises_before_any_write, run_sample, sample_params


@pytest.mark.parametrize("implementation, op, name", sample_params(OPS), indirect=["implementation"])
def test_matches_oracle_with_poisoned_outputs(implementation, op, name, seed):
    run_sample(op, build(op, name))


@pytest.mark.parametrize("implementation, op, name", error_params(OPS), indirect=["implementation"])
def test_error_inputs(implementation, op, name, seed):
    raises_before_any_write(op, error_named(op, name))
