"""The op tables (``tests/gemm_ops.py``, ``tests/mla_ops.py``) on the CUDA implementation.

Every sample of every op, the real-size rows only the GPU runs included, goes through the
generic check of ``tests/optable.py`` with its tensors copied to the GPU (strides, offsets and
fused-buffer aliasing kept), caller outputs poisoned, against the same float64 oracle, with the
tensor cores' slack of ``optable.CUDA_SLACK`` (RoPE and decode: the tensor-core rules of
``tests/oracles.py``). An op whose CUDA path has a Gluon kernel runs once per kernel tier
(``cuda-gluon``, ``cuda-tl``: the test sets ``FLASHINFER_KERNEL_TIER``; the Gluon tier skips
where it cannot run). Every error input runs on the GPU too: the same exception and message,
no caller tensor written first. The long tail of real sizes is marked ``slow`` (``nox -s
gpu-slow``). What the table cannot state (graph capture, allocation, threads, routing per tier,
sanitizer cases) stays in the other files here.
"""

from __future__ import annotations

import gemm_ops
import mla_ops
import pytest
import torch
from optable import (
    CUDA_SLACK,
    build,
    cuda_sample_params,
    error_named,
    error_params,
    raises_before_any_write,
    run_sample,
    use_tier,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

OPS = gemm_ops.OPS + mla_ops.OPS


@pytest.mark.parametrize("implementation, op, name", cuda_sample_params(OPS))
def test_matches_oracle_with_poisoned_outputs(implementation, op, name, seed, monkeypatch):
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")
    use_tier(implementation, monkeypatch)
    run_sample(op, build(op, name), "cuda", CUDA_SLACK.get(op.name, 0.0))


@pytest.mark.parametrize("implementation, op, name", error_params(OPS, ("cuda",)))
def test_error_inputs(implementation, op, name, seed):
    """Upstream's exception type, a message naming the argument, nothing written before: on the
    GPU, where the checks of device placement, alignment and strides see device tensors."""
    raises_before_any_write(op, error_named(op, name), "cuda")
