"""The GPU benchmark scripts on a machine without a CUDA GPU: a message saying what they need."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import ROOT

# each script (with its arguments), and the name its message gives it
SCRIPTS = [["bench_gemm.py"], ["bench_mla.py"], ["decode_tiers.py"], ["host_time.py", "--section", "launch"],
           ["profile_decode.py"]]  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU: the scripts would run")
@pytest.mark.parametrize("script", SCRIPTS, ids=" ".join)
def test_says_what_it_needs(script):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script[0]), *script[1:]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert f"{' '.join(script)} times kernels on an NVIDIA GPU and cannot run here" in result.stderr, (
        result.stderr
    )
    assert "a CUDA build of torch (2.11 or newer), a visible CUDA device and Triton" in result.stderr
