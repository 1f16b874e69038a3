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


def cublas_blockscaled(a, b, a_scale, b_scale, block_m, out_dtype):
    """cuBLASLt's 1x128 / 128x128 block-scaled GEMM (``torch._scaled_mm``) on the same operands, the
    kernel suites' yardstick for FP8 tensor-core accumulation: zero-padded to the sizes it takes
    (m to 16 rows, n to 128 columns, k to 512; zeros add nothing to any sum, the padding's scales
    are 1), ``block_m``-row A scale blocks expanded per row, scales in its layouts."""
    m, k = a.shape
    n = b.shape[0]
    pm, pn, pk = -(-m // 16) * 16, -(-n // 128) * 128, -(-k // 512) * 512
    ap = torch.zeros(pm, pk, device=a.device).to(E4M3)
    ap[:m, :k] = a
    bp = torch.zeros(pn, pk, device=a.device).to(E4M3)
    bp[:n, :k] = b
    rows = a_scale.repeat_interleave(block_m, 0)[:m]
    sa = torch.ones(pm, pk // 128, device=a.device)
    sa[:m, : rows.shape[1]] = rows
    sb = torch.ones(pn // 128, pk // 128, device=a.device)
    sb[: b_scale.shape[0], : b_scale.shape[1]] = b_scale
    out = torch._scaled_mm(ap, bp.t(), sa.t().contiguous().t(), sb.t(), out_dtype=out_dtype)
    return out[:m, :n]


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
