"""What the GPU benchmarks need, checked before they import Triton or touch a device."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "out"  # the default output folder (git-ignored)


def cuda_gpu_problems() -> list[str]:
    """Why this machine cannot time the CUDA kernels (empty when it can)."""
    problems = []
    if torch.version.cuda is None:
        problems.append(f"torch {torch.__version__} is built without CUDA")
    elif not torch.cuda.is_available():
        problems.append("no CUDA device is visible")
    if importlib.util.find_spec("triton") is None:
        problems.append("Triton is not installed")
    return problems


def require_cuda_gpu(script: str) -> None:
    """Exit with a message saying what ``script`` needs when this machine lacks it."""
    problems = cuda_gpu_problems()
    if problems:
        sys.exit(
            f"{script} times kernels on an NVIDIA GPU and cannot run here: {'; '.join(problems)}.\n"
            "It needs a CUDA build of torch (2.11 or newer), a visible CUDA device and Triton "
            "(pip install 'triton>=3.6'). benchmarks/host_overhead.py measures the API layer on the CPU."
        )
