"""The DeepGEMM-style grouped FP8 GEMMs: contiguous (``m_indices``) and masked (``masked_m``)."""

from __future__ import annotations

import operator

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import (
    check_device,
    check_last_dim_contiguous,
    check_no_overlap,
    check_scale,
    describe,
    fail,
    require_tensors,
)
from flashinfer._core.compile import one_node
from flashinfer.api_logging import flashinfer_api

from ._args import GroupedContiguous, GroupedMasked
from ._backends import BATCH_DEEPGEMM_FP8_NT_GROUPWISE, GROUP_DEEPGEMM_FP8_NT_GROUPWISE
from ._dispatch import DISPATCH, compile_layer, run

_BLOCK = 128
_E4M3 = torch.float8_e4m3fn
_FLOAT32 = torch.float32
_INT32 = torch.int32
_GRANULARITY = (1, _BLOCK, _BLOCK)
_CONTIGUOUS_INPUTS = ("a", "b", "a_scale", "b_scale", "m_indices")
_MASKED_INPUTS = ("a", "b", "a_scale", "b_scale", "masked_m")


def _check_operand(x, arg: str) -> None:
    """DeepGEMM's operand asserts, in its words: float8_e4m3fn, K-major."""
    if x.dtype != _E4M3:
        fail(ValueError, arg, f"dtype torch.float8_e4m3fn ({arg} must be float8_e4m3fn)", f"dtype {x.dtype}")
    if not x.is_contiguous():
        check_last_dim_contiguous(x, arg, why=f"major_{arg} must be KMajor")


def _check_common(a, b, a_scale, b_scale, index, names: tuple, out, dtype) -> None:
    """The rules both layouts share (operands, index, scales, output); the scale shapes are the
    layouts' own. ``names`` names the inputs, the index last."""
    device, index_arg = a.device, names[-1]
    if b.device != device:
        check_device(b, "b", device, "a")
    if index.device != device:
        check_device(index, index_arg, device, "a")
    _check_operand(a, "a")
    _check_operand(b, "b")
    if index.dtype != _INT32:
        fail(ValueError, index_arg, f"dtype torch.int32 ({index_arg} must be int32)", f"dtype {index.dtype}")
    if index.dim() != 1 or not index.is_contiguous():
        fail(ValueError, index_arg, f"a contiguous 1-D tensor ({index_arg} must be contiguous)", index)
    if a_scale.dtype != _FLOAT32 or a_scale.device != device:
        check_scale(a_scale, "a_scale", None, device, "a")
    if b_scale.dtype != _FLOAT32 or b_scale.device != device:
        check_scale(b_scale, "b_scale", None, device, "a")
    if dtype != torch.bfloat16:
        arg = "out" if out is not None else "out_dtype"
        fail(ValueError, arg, "torch.bfloat16 (d must be bfloat16)", describe(dtype))
    if out is not None:
        if out.device != device:
            check_device(out, "out", device, "a")
        if not out.is_contiguous():
            check_last_dim_contiguous(out, "out", why="d must be N-major")
        check_no_overlap(out, "out", names, a, b, a_scale, b_scale, index)


def _check_scale_shapes(a_scale, b_scale, a_blocks: tuple, b_blocks: tuple) -> None:
    # Upstream checks scale layouts with Python asserts, so the type is AssertionError.
    if a_scale.shape != a_blocks or b_scale.shape != b_blocks:
        arg, scale, shape = ("a_scale", a_scale, a_blocks)
        if a_scale.shape == a_blocks:
            arg, scale, shape = ("b_scale", b_scale, b_blocks)
        fail(AssertionError, arg, f"shape {shape}", f"shape {tuple(scale.shape)}")


@one_node(compile_layer)
@flashinfer_api
@gated(GROUP_DEEPGEMM_FP8_NT_GROUPWISE)
def group_deepgemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    m_indices,
    scale_granularity_mnk=(1, 128, 128),
    out=None,
    out_dtype=None,
    *,
    skip_check=False,
):
    """Contiguous grouped FP8 NT GEMM: ``out[r] = dequant(a)[r] @ dequant(b[m_indices[r]]).T``.

    Parameters
    ----------
    a : torch.Tensor
        ``[m, k]`` float8_e4m3fn, K-major (``a.stride(1) == 1``).
    b : torch.Tensor
        ``[G, n, k]`` float8_e4m3fn, K-major (``b.stride(2) == 1``).
    a_scale : torch.Tensor
        float32 ``[m, ceil(k/128)]``: one multiplier per row and 128-wide K block. Any strides:
        K-major, or the ``[m, ceil(k/128)]`` view of MN-major ``[ceil(k/128), m]`` storage.
    b_scale : torch.Tensor
        float32 ``[G, ceil(n/128), ceil(k/128)]``: one multiplier per 128 x 128 block.
    m_indices : torch.Tensor
        ``[m]`` int32, contiguous: the group of each row of ``a``. Rows with a group id outside
        ``[0, G)`` (DeepGEMM pads with -1) are not computed and their ``out`` rows are left
        untouched. Each group's rows are expected to form one segment starting at a multiple of
        128 (DeepGEMM's and MATE's layout); the reference and NVIDIA paths do not need it.
    scale_granularity_mnk : tuple of int
        Must be ``(1, 128, 128)``.
    out : torch.Tensor, optional
        ``[m, n]`` bfloat16 with unit stride along n (N-major), written in place and returned.
        When None, a contiguous tensor is allocated (padding rows then hold garbage).
    out_dtype : torch.dtype, optional
        ``torch.bfloat16`` (the only output dtype) or None.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[m, n]`` bfloat16.

    Raises
    ------
    ValueError
        ``a``/``b`` not e4m3 or not K-major; ``m_indices`` not contiguous 1-D int32; shape
        mismatch among ``a``, ``b``, ``m_indices`` and ``out``; output dtype not bf16; ``out``
        not N-major or overlapping an input; another granularity; tensors on different devices.
    AssertionError
        Scale shapes other than the above (as upstream's asserts).

    Notes
    -----
    Scales are used exactly as float32 (upstream's SM100 path floors them to powers of two;
    the results agree for power-of-two scales). Upstream has no Hopper path; this runs on
    every device.

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import group_deepgemm_fp8_nt_groupwise
    >>> G, m, n, k = 2, 256, 128, 128
    >>> a = torch.randn(m, k).to(torch.float8_e4m3fn)
    >>> b = torch.randn(G, n, k).to(torch.float8_e4m3fn)
    >>> m_indices = torch.arange(G, dtype=torch.int32).repeat_interleave(128)
    >>> out = group_deepgemm_fp8_nt_groupwise(
    ...     a, b, torch.ones(m, 1), torch.ones(G, 1, 1), m_indices, out_dtype=torch.bfloat16)
    >>> out.shape
    torch.Size([256, 128])
    """
    try:
        a_shape, b_shape = a.shape, b.shape
        dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
        if not skip_check:
            granularity = tuple(scale_granularity_mnk)
            if (
                len(a_shape) != 2
                or len(b_shape) != 3
                or b_shape[2] != a_shape[1]
                or m_indices.shape[0] != a_shape[0]
            ):
                expected = "a (m, k), b (G, n, k), m_indices (m,) (shape mismatch)"
                got = f"a {tuple(a_shape)}, b {tuple(b_shape)}, m_indices {tuple(m_indices.shape)}"
                fail(ValueError, "b" if len(a_shape) == 2 else "a", expected, got)
            if granularity != _GRANULARITY:
                fail(ValueError, "scale_granularity_mnk", "(1, 128, 128)", str(granularity))
            _check_common(a, b, a_scale, b_scale, m_indices, _CONTIGUOUS_INPUTS, out, dtype)
            (m, k), (groups, n) = a_shape, b_shape[:2]
            if out is not None and out.shape != (m, n):
                expected = f"shape {(m, n)} (shape mismatch. m = {m}, n = {n})"
                fail(ValueError, "out", expected, f"shape {tuple(out.shape)}")
            kb = -(-k // _BLOCK)
            _check_scale_shapes(a_scale, b_scale, (m, kb), (groups, -(-n // _BLOCK), kb))
    except AttributeError:
        require_tensors(
            a=a, b=b, a_scale=a_scale, b_scale=b_scale, m_indices=m_indices, out=out, optional=("out",)
        )
        raise
    m, k = a_shape
    if out is None:
        out = torch.empty(m, b_shape[1], dtype=dtype, device=a.device)
    call = GroupedContiguous._make((a, b, a_scale, b_scale, m_indices, out))
    return run(DISPATCH.module(a.device).group_gemm_contiguous, call, k)


@one_node(compile_layer)
@flashinfer_api
@gated(BATCH_DEEPGEMM_FP8_NT_GROUPWISE)
def batch_deepgemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    masked_m,
    expected_m,
    scale_granularity_mnk=(1, 128, 128),
    out=None,
    out_dtype=None,
    *,
    skip_check=False,
):
    """Masked batched FP8 NT GEMM: ``out[g, r] = dequant(a[g])[r] @ dequant(b[g]).T`` for ``r < masked_m[g]``.

    Parameters
    ----------
    a : torch.Tensor
        ``[G, m, k]`` float8_e4m3fn, K-major (``a.stride(2) == 1``).
    b : torch.Tensor
        ``[G, n, k]`` float8_e4m3fn, K-major.
    a_scale : torch.Tensor
        float32 ``[G, m, ceil(k/128)]``, one multiplier per row and 128-wide K block. Any
        strides (K-major, or the view of MN-major ``[G, ceil(k/128), m]`` storage).
    b_scale : torch.Tensor
        float32 ``[G, ceil(n/128), ceil(k/128)]``, one multiplier per 128 x 128 block.
    masked_m : torch.Tensor
        ``[G]`` int32, contiguous: the number of valid rows of each group. Rows
        ``r >= masked_m[g]`` are not written (their ``out`` rows are left untouched) and their
        ``a`` rows do not affect the result.
    expected_m : int
        A positive hint of the typical ``masked_m`` (kernel configuration only).
    scale_granularity_mnk : tuple of int
        Must be ``(1, 128, 128)``.
    out : torch.Tensor, optional
        ``[G, m, n]`` bfloat16, N-major (unit stride along n), written in place and returned.
        When None, a contiguous tensor is allocated (masked rows then hold garbage).
    out_dtype : torch.dtype, optional
        ``torch.bfloat16`` (the only output dtype) or None.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[G, m, n]`` bfloat16.

    Raises
    ------
    ValueError
        ``a``/``b`` not e4m3 or not K-major; ``masked_m`` not contiguous 1-D int32; group count
        ("num_groups mismatch") or m/n/k mismatch; ``expected_m``, m, n, k or G not positive;
        output dtype not bf16; ``out`` not N-major or overlapping an input; another
        granularity; tensors on different devices.
    AssertionError
        Scale shapes other than the above (as upstream's asserts).

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import batch_deepgemm_fp8_nt_groupwise
    >>> G, m, n, k = 2, 64, 128, 128
    >>> a = torch.randn(G, m, k).to(torch.float8_e4m3fn)
    >>> b = torch.randn(G, n, k).to(torch.float8_e4m3fn)
    >>> masked_m = torch.tensor([10, 64], dtype=torch.int32)
    >>> out = torch.zeros(G, m, n, dtype=torch.bfloat16)
    >>> _ = batch_deepgemm_fp8_nt_groupwise(
    ...     a, b, torch.ones(G, m, 1), torch.ones(G, 1, 1), masked_m, 37, out=out)
    >>> bool(out[0, 10:].eq(0).all())
    True
    """
    try:
        a_shape, b_shape = a.shape, b.shape
        dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
        if not skip_check:
            granularity = tuple(scale_granularity_mnk)
            if len(a_shape) != 3 or len(b_shape) != 3:
                arg, x = ("a", a) if len(a_shape) != 3 else ("b", b)
                fail(ValueError, arg, "a 3-D tensor (G, rows, k)", x)
            if granularity != _GRANULARITY:
                fail(ValueError, "scale_granularity_mnk", "(1, 128, 128)", str(granularity))
            _check_common(a, b, a_scale, b_scale, masked_m, _MASKED_INPUTS, out, dtype)
            groups, m, k = a_shape
            n = b_shape[1]
            out_shape = None if out is None else out.shape
            if (
                b_shape[0] != groups
                or masked_m.shape[0] != groups
                or (out is not None and out_shape[0] != groups)
            ):
                expected = f"{groups} groups in b, masked_m and out (num_groups mismatch)"
                fail(ValueError, "b", expected, f"b {tuple(b_shape)}, masked_m {tuple(masked_m.shape)}")
            if b_shape[2] != k or (out is not None and out_shape != (groups, m, n)):
                got = f"b {tuple(b_shape)}" + ("" if out is None else f", out {tuple(out_shape)}")
                expected = f"b ({groups}, n, {k}) and out ({groups}, {m}, n) (m, n, k mismatch)"
                fail(ValueError, "b" if b_shape[2] != k else "out", expected, got)
            expected_m = operator.index(expected_m)
            if expected_m <= 0 or m <= 0 or n <= 0 or k <= 0 or groups <= 0:
                expected = "expected_m, m, n, k, num_groups all greater than 0"
                got = f"expected_m={expected_m}, m={m}, n={n}, k={k}, num_groups={groups}"
                fail(ValueError, "expected_m", expected, got)
            kb = -(-k // _BLOCK)
            _check_scale_shapes(a_scale, b_scale, (groups, m, kb), (groups, -(-n // _BLOCK), kb))
    except AttributeError:
        require_tensors(
            a=a, b=b, a_scale=a_scale, b_scale=b_scale, masked_m=masked_m, out=out, optional=("out",)
        )
        raise
    if out is None:
        out = torch.empty(a_shape[0], a_shape[1], b_shape[1], dtype=dtype, device=a.device)
    DISPATCH.module(a.device).group_gemm_masked(
        GroupedMasked._make((a, b, a_scale, b_scale, masked_m, expected_m, out))
    )
    return out
