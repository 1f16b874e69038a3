"""The GEMM APIs as ``torch.library`` custom ops, for calls traced by ``torch.compile``.

Imported by a public GEMM only while Dynamo traces it (:mod:`flashinfer._core.compile` says
why and how). Each wrapper below takes the public function's arguments, allocates the output the
caller left to it (shape and dtype of the contract, contiguous) and calls its op, which runs the
public function eagerly with that output when the compiled graph runs. ``gemm_fp8_nt_blockscaled``
forwards to ``gemm_fp8_nt_groupwise`` and so is one ``flashinfer::gemm_fp8_nt_groupwise`` node.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flashinfer._core.custom_ops import custom_op

from ._bmm import bmm_bf16 as _eager_bmm_bf16
from ._bmm import bmm_fp8 as _eager_bmm_fp8
from ._deepgemm_fp8_nt import batch_deepgemm_fp8_nt_groupwise as _eager_batch_deepgemm
from ._deepgemm_fp8_nt import group_deepgemm_fp8_nt_groupwise as _eager_group_deepgemm
from ._fp8_blockscale_gemm_sm90 import fp8_blockscale_gemm_sm90 as _eager_blockscale_sm90
from ._gemm_fp8_nt import gemm_fp8_nt_groupwise as _eager_groupwise
from ._group_gemm_fp8_nt import group_gemm_fp8_nt_groupwise as _eager_group_gemm

Tensor = torch.Tensor
_BF16 = torch.bfloat16
_E4M3 = torch.float8_e4m3fn


def _empty(shape, dtype, like: Tensor) -> Tensor:
    return torch.empty(shape, dtype=dtype, device=like.device)


# ---------------------------------------------------------------------------------- bmm_bf16


@custom_op("bmm_bf16", mutates_args=("out",))
def _bmm_bf16(
    A: Tensor, B: Tensor, out: Tensor, out_dtype: torch.dtype, backend: str, skip_check: bool
) -> None:
    _eager_bmm_bf16(A, B, out, out_dtype, backend, skip_check=skip_check)


def bmm_bf16(A, B, out, out_dtype, backend, skip_check):
    """``bmm_bf16`` as one node: ``out`` ``[batch, m, n]`` of ``out_dtype`` when not given."""
    if out is None:
        out = _empty((A.shape[0], A.shape[1], B.shape[2]), out_dtype, A)
    _bmm_bf16(A, B, out, out_dtype, backend, skip_check)
    return out


# ----------------------------------------------------------------------------------- bmm_fp8


@custom_op("bmm_fp8", mutates_args=("out",))
def _bmm_fp8(
    A: Tensor,
    B: Tensor,
    A_scale: Tensor,
    B_scale: Tensor,
    dtype: torch.dtype,
    out: Tensor,
    backend: str,
    skip_check: bool,
) -> None:
    _eager_bmm_fp8(A, B, A_scale, B_scale, dtype, out, backend, skip_check=skip_check)


def bmm_fp8(A, B, A_scale, B_scale, dtype, out, backend, skip_check):
    """``bmm_fp8`` as one node: ``out`` ``[batch, m, n]`` of ``dtype`` when not given."""
    if out is None:
        out = _empty((A.shape[0], A.shape[1], B.shape[2]), dtype, A)
    _bmm_fp8(A, B, A_scale, B_scale, dtype, out, backend, skip_check)
    return out


# ------------------------------------------------------------------ gemm_fp8_nt_groupwise


@custom_op("gemm_fp8_nt_groupwise", mutates_args=("out", "output_scale"))
def _groupwise(
    a: Tensor,
    b: Tensor,
    a_scale: Tensor,
    b_scale: Tensor,
    scale_major_mode: str | None,
    mma_sm: int,
    scale_granularity_mnk: Sequence[int],
    out: Tensor,
    out_dtype: torch.dtype | None,
    backend: str,
    output_scale: Tensor | None,
    skip_check: bool,
) -> None:
    _eager_groupwise(
        a,
        b,
        a_scale,
        b_scale,
        scale_major_mode,
        mma_sm,
        scale_granularity_mnk,
        out,
        out_dtype,
        backend,
        output_scale,
        skip_check=skip_check,
    )


def gemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    scale_major_mode,
    mma_sm,
    scale_granularity_mnk,
    out,
    out_dtype,
    backend,
    output_scale,
    skip_check,
):
    """``gemm_fp8_nt_groupwise`` as one node: ``out`` ``[m, n]`` when not given, of ``out_dtype``,
    else bfloat16, or float8_e4m3fn with ``output_scale``."""
    if out is None:
        dtype = out_dtype if out_dtype is not None else (_BF16 if output_scale is None else _E4M3)
        out = _empty((a.shape[0], b.shape[0]), dtype, a)
    _groupwise(
        a,
        b,
        a_scale,
        b_scale,
        scale_major_mode,
        mma_sm,
        list(scale_granularity_mnk),
        out,
        out_dtype,
        backend,
        output_scale,
        skip_check,
    )
    return out


# ---------------------------------------------------------------- fp8_blockscale_gemm_sm90


@custom_op("fp8_blockscale_gemm_sm90", mutates_args=("out",))
def _blockscale_sm90(
    input: Tensor,
    weight: Tensor,
    input_scale: Tensor | None,
    weight_scale: Tensor | None,
    out: Tensor,
    out_dtype: torch.dtype | None,
) -> None:
    _eager_blockscale_sm90(input, weight, input_scale, weight_scale, out, out_dtype)


def fp8_blockscale_gemm_sm90(input, weight, input_scale, weight_scale, out, out_dtype):
    """``fp8_blockscale_gemm_sm90`` as one node: ``out`` ``[M, N]`` of ``out_dtype`` (bfloat16 by
    default) when not given."""
    if out is None:
        out = _empty((input.shape[0], weight.shape[0]), out_dtype or _BF16, input)
    _blockscale_sm90(input, weight, input_scale, weight_scale, out, out_dtype)
    return out


# ------------------------------------------------------------ group_gemm_fp8_nt_groupwise


@custom_op("group_gemm_fp8_nt_groupwise", mutates_args=("out",))
def _group_gemm(
    a: Tensor,
    b: Tensor,
    a_scale: Tensor,
    b_scale: Tensor,
    m_indptr: Tensor,
    scale_granularity_mnk: Sequence[int],
    scale_major_mode: str,
    mma_sm: int,
    out: Tensor,
    out_dtype: torch.dtype | None,
    backend: str,
    skip_check: bool,
) -> None:
    _eager_group_gemm(
        a,
        b,
        a_scale,
        b_scale,
        m_indptr,
        scale_granularity_mnk,
        scale_major_mode,
        mma_sm,
        out,
        out_dtype,
        backend,
        skip_check=skip_check,
    )


def group_gemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    m_indptr,
    scale_granularity_mnk,
    scale_major_mode,
    mma_sm,
    out,
    out_dtype,
    backend,
    skip_check,
):
    """``group_gemm_fp8_nt_groupwise`` as one node: ``out`` ``[cum_m, n]`` of ``out_dtype``
    (bfloat16 by default) when not given."""
    if out is None:
        out = _empty((a.shape[0], b.shape[1]), out_dtype or _BF16, a)
    _group_gemm(
        a,
        b,
        a_scale,
        b_scale,
        m_indptr,
        list(scale_granularity_mnk),
        scale_major_mode,
        mma_sm,
        out,
        out_dtype,
        backend,
        skip_check,
    )
    return out


# -------------------------------------------------------- group_deepgemm_fp8_nt_groupwise


@custom_op("group_deepgemm_fp8_nt_groupwise", mutates_args=("out",))
def _group_deepgemm(
    a: Tensor,
    b: Tensor,
    a_scale: Tensor,
    b_scale: Tensor,
    m_indices: Tensor,
    scale_granularity_mnk: Sequence[int],
    out: Tensor,
    out_dtype: torch.dtype | None,
    skip_check: bool,
) -> None:
    _eager_group_deepgemm(
        a, b, a_scale, b_scale, m_indices, scale_granularity_mnk, out, out_dtype, skip_check=skip_check
    )


def group_deepgemm_fp8_nt_groupwise(
    a, b, a_scale, b_scale, m_indices, scale_granularity_mnk, out, out_dtype, skip_check
):
    """``group_deepgemm_fp8_nt_groupwise`` as one node: ``out`` ``[m, n]`` of ``out_dtype``
    (bfloat16 by default) when not given."""
    if out is None:
        out = _empty((a.shape[0], b.shape[1]), out_dtype or _BF16, a)
    _group_deepgemm(
        a, b, a_scale, b_scale, m_indices, list(scale_granularity_mnk), out, out_dtype, skip_check
    )
    return out


# -------------------------------------------------------- batch_deepgemm_fp8_nt_groupwise


@custom_op("batch_deepgemm_fp8_nt_groupwise", mutates_args=("out",))
def _batch_deepgemm(
    a: Tensor,
    b: Tensor,
    a_scale: Tensor,
    b_scale: Tensor,
    masked_m: Tensor,
    expected_m: int,
    scale_granularity_mnk: Sequence[int],
    out: Tensor,
    out_dtype: torch.dtype | None,
    skip_check: bool,
) -> None:
    _eager_batch_deepgemm(
        a,
        b,
        a_scale,
        b_scale,
        masked_m,
        expected_m,
        scale_granularity_mnk,
        out,
        out_dtype,
        skip_check=skip_check,
    )


def batch_deepgemm_fp8_nt_groupwise(
    a, b, a_scale, b_scale, masked_m, expected_m, scale_granularity_mnk, out, out_dtype, skip_check
):
    """``batch_deepgemm_fp8_nt_groupwise`` as one node: ``out`` ``[G, m, n]`` of ``out_dtype``
    (bfloat16 by default) when not given."""
    if out is None:
        out = _empty((a.shape[0], a.shape[1], b.shape[1]), out_dtype or _BF16, a)
    _batch_deepgemm(
        a, b, a_scale, b_scale, masked_m, expected_m, list(scale_granularity_mnk), out, out_dtype, skip_check
    )
    return out
