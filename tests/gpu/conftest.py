"""The GPU tests need compiled Triton kernels.

The CPU test folders switch Triton to its interpreter when they are collected
(``tests/core``, ``tests/{gemm,mla}/triton``), and Triton decides at import; in a pytest run that
also collects them, these tests would silently run interpreted kernels. Run
``python -m pytest tests/gpu`` (optionally with ``tests/integration/test_cuda_hardening.py``) on
its own.
"""

import os

import pytest
import torch

if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") == "1":
    raise pytest.UsageError(
        "tests/gpu needs compiled Triton kernels but TRITON_INTERPRET=1 is set (the CPU test folders set "
        "it when collected in the same run): run `python -m pytest tests/gpu` on its own"
    )
