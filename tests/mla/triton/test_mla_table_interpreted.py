"""The MLA op table (``tests/mla_ops.py``) on the CUDA implementation without a GPU: CPU tensors
routed to ``flashinfer.mla._cuda`` with its Triton kernels under the interpreter
(``tests/triton_interpreter.py``), every sample against its float64 oracle by the CUDA rules of
``tests/optable.py`` (float16 decode takes the reference there, as on a GPU)."""

from __future__ import annotations

import pytest
from mla_ops import OPS
from optable import build, run_sample, sample_params

pytestmark = pytest.mark.triton


@pytest.fixture
def interpreted_cuda(kernels, monkeypatch):
    from triton_interpreter import route_cpu_to_cuda

    route_cpu_to_cuda(monkeypatch)


@pytest.mark.parametrize(
    "implementation, op, name", sample_params([op for op in OPS if op.interpreted], ("cuda",))
)
def test_matches_oracle_with_poisoned_outputs(interpreted_cuda, implementation, op, name, seed):
    run_sample(op, build(op, name), tensor_cores=True)
