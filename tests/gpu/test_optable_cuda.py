"""The op tables (``tests/gemm_ops.py``, ``tests/mla_ops.py``) on the CUDA implementation.

Every sample of every op runs through the generic check of ``tests/optable.py`` with its tensors
copied to the GPU (strides, offsets and fused-buffer aliasing kept), caller outputs poisoned,
against the same float64 oracle on the CPU, with the tensor cores' slack of
``optable.CUDA_SLACK`` (RoPE and decode: the tensor-core rules of ``tests/oracles.py``). The
kernel tier is the environment's: run once as is and once with ``FLASHINFER_KERNEL_TIER=gluon``
(and ``=tl``) to put each tier through the whole table. What the table cannot express (graph
capture, allocation, threads, kernel-variant sweeps at real sizes) stays in the other files here.
"""

from __future__ import annotations

import gemm_ops
import mla_ops
import pytest
import torch
from optable import CUDA_SLACK, build, run_sample, sample_params

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

OPS = gemm_ops.OPS + mla_ops.OPS


@pytest.mark.parametrize("implementation, op, name", sample_params(OPS, ("cuda",)))
def test_matches_oracle_with_poisoned_outputs(implementation, op, name, seed):
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")
    run_sample(op, build(op, name), "cuda", CUDA_SLACK.get(op.name, 0.0))
