"""``bmm_bf16_cutile`` and ``make_bmm_bf16_tune_cache`` under upstream's import path.

Upstream v0.6.17's cuTile BF16 batched GEMM needs the ``cuda.tile`` compiler, which this build
does not have. Here the function checks its arguments as upstream does (plus one device and no
overlap with ``out``), then computes the product with ``bmm_bf16``'s implementation on the tensors'
device (:func:`flashinfer.gemm._bmm.run_bmm`, no second validation); the tune cache records one
entry per problem key, as upstream's does after its first call for a shape.
"""

from __future__ import annotations

import torch

__all__ = ["bmm_bf16_cutile", "make_bmm_bf16_tune_cache"]


def make_bmm_bf16_tune_cache() -> dict:
    """A fresh, empty tune cache for :func:`bmm_bf16_cutile` (a dict keyed by problem)."""
    return {}


_BMM_BF16_TUNE_CACHE: dict = make_bmm_bf16_tune_cache()


def bmm_bf16_cutile(A: torch.Tensor, B: torch.Tensor, out: torch.Tensor, tune_cache: dict | None = None):
    """``out[b] = A[b] @ B[b]`` for bf16 operands, written into ``out`` and returned.

    Parameters
    ----------
    A : torch.Tensor
        ``[batch, m, k]`` bfloat16.
    B : torch.Tensor
        ``[batch, k, n]`` bfloat16 (upstream expects the column-major view of ``[batch, n, k]``).
    out : torch.Tensor
        ``[batch, m, n]`` bfloat16, float16 or float32, contiguous.
    tune_cache : dict, optional
        Where the problem key ``(batch, m, n, k, a_dtype, device)`` is recorded (the module's
        default cache when None). Nothing is tuned: the key maps to the implementation used.

    Returns
    -------
    torch.Tensor
        ``out``.

    Raises
    ------
    ValueError
        Upstream's checks: 3-D operands, matching batch and k, ``out`` of shape
        ``[batch, m, n]``, bf16 operands, a bf16/fp16/fp32 contiguous ``out``; ours: tensors on
        different devices, an ``out`` sharing memory with ``A`` or ``B``.
    """
    from flashinfer._core.checks import check_device, check_no_overlap
    from flashinfer._core.dispatch import implementation_kind
    from flashinfer.gemm._args import Bmm
    from flashinfer.gemm._bmm import run_bmm

    if A.dim() != 3 or B.dim() != 3:
        raise ValueError(
            f"bmm_bf16_cutile expects 3D inputs; got A.shape={tuple(A.shape)}, B.shape={tuple(B.shape)}"
        )
    batch, m, k = A.shape
    batch_b, k_b, n = B.shape
    if batch != batch_b:
        raise ValueError(f"Batch dim mismatch: A.shape[0]={batch}, B.shape[0]={batch_b}")
    if k_b != k:
        raise ValueError(f"K dim mismatch: A.shape[2]={k}, B.shape[1]={k_b}")
    if out.shape != (batch, m, n):
        raise ValueError(f"out.shape must be {(batch, m, n)}; got {tuple(out.shape)}")
    if A.dtype != torch.bfloat16 or B.dtype != torch.bfloat16:
        raise ValueError(f"bmm_bf16_cutile requires bf16 A and B; got A.dtype={A.dtype}, B.dtype={B.dtype}")
    if out.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"bmm_bf16_cutile supports bfloat16 / float16 / float32 out; got {out.dtype}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous (B, M, N) row-major")
    device = A.device
    check_device(B, "B", device, "A")
    check_device(out, "out", device, "A")
    check_no_overlap(out, "out", ("A", "B"), A, B)
    cache = _BMM_BF16_TUNE_CACHE if tune_cache is None else tune_cache
    cache.setdefault((batch, m, n, k, A.dtype, device), implementation_kind(device))
    return run_bmm(Bmm(A, B, out), k, device)
