"""Inputs of the GPU kernel suites (``tests/gpu``): the shared builders of ``tests/oracles.py``
drawn on the GPU at unit variance (a k = 7168 product times two 8x scales stays far inside
fp16's range), NaN-poisoned outputs, and CUDA graph replay on new inputs."""

from __future__ import annotations

import oracles
import pytest
import torch

E4M3 = oracles.E4M3


def fp8(shape, dtype=E4M3):
    return oracles.fp8(shape, dtype=dtype, scale=1.0, device="cuda")


def pow2(shape):
    return oracles.pow2(shape, device="cuda")


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), device="cuda").to(dtype)


def needs_fp8():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")


def deepgemm_m_indices(group_rows, pad_rows=128):
    """Each group's rows padded with -1 up to a multiple of 128 (DeepGEMM's layout)."""
    parts = []
    for g, rows in enumerate(group_rows):
        parts += [torch.full((rows,), g), torch.full((-rows % pad_rows,), -1)]
    return torch.cat(parts).int().cuda()


def replay_with_new_inputs(run, inputs, fresh, out):
    """Capture ``run()`` in a CUDA graph, copy ``fresh`` into ``inputs``, replay; return out."""
    run()  # compile and autotune outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for dst, src in zip(inputs, fresh):
        dst.copy_(src)
    out.copy_(nan_like(out.shape, out.dtype))
    graph.replay()
    torch.cuda.synchronize()
    return out
