"""The MLA op table (``tests/mla_ops.py``) on the CUDA implementation without a GPU: CPU tensors
routed to ``flashinfer.mla._cuda`` with its Triton kernels under the interpreter
(``tests/triton_interpreter.py``), every sample against its float64 oracle by the CUDA rules of
``tests/optable.py`` (float16 decode takes the reference there, as on a GPU)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from compile_checks import check_sample
from mla_ops import OPS
from optable import build, run_sample, run_sample_twice, sample_params

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


@pytest.mark.parametrize(
    "implementation, op, name", sample_params([op for op in OPS if op.replayed], ("cuda",))
)
def test_a_repeated_call_signature_is_replayed_and_matches_oracle(
    interpreted_cuda, implementation, op, name, seed
):
    """A serving call's second call of its signature on new memory takes the replay the first left
    (``flashinfer._core.replay``: no checks, the launches repeated) and still matches the oracle."""
    run_sample_twice(op, name, tensor_cores=True)


@pytest.mark.parametrize(
    "implementation, op",
    [pytest.param("cuda", op, id=f"cuda-{op.name}") for op in OPS if op.interpreted],
)
def test_compiled_call_is_one_node_and_bit_identical(interpreted_cuda, implementation, op, seed):
    """The op's first sample under ``torch.compile(fullgraph=True)``: the custom op runs the CUDA
    implementation's Triton launches when the graph runs (``tests/integration/test_torch_compile.py``
    has the reference and the MATE stand-in)."""
    torch._dynamo.reset()
    check_sample(op, build(op, op.samples()[0].name))
