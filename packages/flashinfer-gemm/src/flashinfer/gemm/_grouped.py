"""The DeepGEMM-style grouped FP8 GEMMs: contiguous (``m_indices``) and masked (``masked_m``)."""

from __future__ import annotations

import operator

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import fail
from flashinfer.utils import ceil_div

from ._backends import BATCH_DEEPGEMM_FP8_NT_GROUPWISE, GROUP_DEEPGEMM_FP8_NT_GROUPWISE
from ._dispatch import DISPATCH
from ._validate import E4M3, check_out_overlap, check_same_device, check_scale, check_tensor

_BLOCK = 128
_INT32 = torch.int32


def _check_k_major(x, arg: str, what: str) -> None:
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        fail(ValueError, arg, f"a tensor with unit stride in its last dimension ({what})", x)


def _check_common(a, b, a_scale, b_scale, index, index_arg, granularity, out, out_dtype):
    """Checks shared by both layouts; returns the output dtype."""
    for arg, x in (("a", a), ("b", b), (index_arg, index)):
        check_tensor(x, arg)
    if out is not None:
        check_tensor(out, "out")
    device = a.device
    check_same_device(b, "b", device, "a")
    check_same_device(index, index_arg, device, "a")
    if a.dtype != E4M3:
        fail(ValueError, "a", "dtype torch.float8_e4m3fn (a must be float8_e4m3fn)", f"dtype {a.dtype}")
    if b.dtype != E4M3:
        fail(ValueError, "b", "dtype torch.float8_e4m3fn (b must be float8_e4m3fn)", f"dtype {b.dtype}")
    if index.dtype != _INT32:
        fail(ValueError, index_arg, f"dtype torch.int32 ({index_arg} must be int32)", f"dtype {index.dtype}")
    if index.dim() != 1 or not index.is_contiguous():
        fail(ValueError, index_arg, f"a contiguous 1-D tensor ({index_arg} must be contiguous)", index)
    _check_k_major(a, "a", "major_a must be KMajor")
    _check_k_major(b, "b", "major_b must be KMajor")
    if granularity != (1, _BLOCK, _BLOCK):
        fail(ValueError, "scale_granularity_mnk", "(1, 128, 128)", granularity)
    check_scale(a_scale, "a_scale", device, "a")
    check_scale(b_scale, "b_scale", device, "a")
    dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
    if dtype != torch.bfloat16:
        fail(
            ValueError,
            "out" if out is not None else "out_dtype",
            "torch.bfloat16 (d must be bfloat16)",
            dtype,
        )
    if out is not None:
        check_same_device(out, "out", device, "a")
        _check_k_major(out, "out", "d must be N-major")
        check_out_overlap(out, {"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, index_arg: index})
    return dtype


def _check_scale_shape(scale, arg: str, shape: tuple) -> None:
    # Upstream checks scale layouts with Python asserts, so the type is AssertionError.
    if scale.shape != shape:
        fail(AssertionError, arg, f"shape {shape}", f"shape {tuple(scale.shape)}")


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
    granularity = tuple(scale_granularity_mnk)
    if not skip_check:
        dtype = _check_common(a, b, a_scale, b_scale, m_indices, "m_indices", granularity, out, out_dtype)
        if a.dim() != 2 or b.dim() != 3 or b.shape[2] != a.shape[1] or m_indices.shape[0] != a.shape[0]:
            fail(
                ValueError,
                "b" if a.dim() == 2 else "a",
                "a (m, k), b (G, n, k), m_indices (m,) (shape mismatch)",
                f"a {tuple(a.shape)}, b {tuple(b.shape)}, m_indices {tuple(m_indices.shape)}",
            )
        m, k = a.shape
        groups, n = b.shape[0], b.shape[1]
        if out is not None and out.shape != (m, n):
            fail(
                ValueError,
                "out",
                f"shape {(m, n)} (shape mismatch. m = {m}, n = {n})",
                f"shape {tuple(out.shape)}",
            )
        _check_scale_shape(a_scale, "a_scale", (m, ceil_div(k, _BLOCK)))
        _check_scale_shape(b_scale, "b_scale", (groups, ceil_div(n, _BLOCK), ceil_div(k, _BLOCK)))
    else:
        dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
    m, k = a.shape
    if out is None:
        out = torch.empty((m, b.shape[1]), dtype=dtype, device=a.device)
    if out.numel() == 0:
        return out
    if k == 0:
        valid = (m_indices >= 0) & (m_indices < b.shape[0])
        return out.masked_fill_(valid.unsqueeze(1), 0)
    DISPATCH.module(a.device).group_gemm_contiguous(a, b, a_scale, b_scale, m_indices, out)
    return out


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
    granularity = tuple(scale_granularity_mnk)
    if not skip_check:
        dtype = _check_common(a, b, a_scale, b_scale, masked_m, "masked_m", granularity, out, out_dtype)
        if a.dim() != 3 or b.dim() != 3:
            fail(
                ValueError,
                "a" if a.dim() != 3 else "b",
                "a 3-D tensor (G, rows, k)",
                a if a.dim() != 3 else b,
            )
        groups, m, k = a.shape
        n = b.shape[1]
        if (
            b.shape[0] != groups
            or masked_m.shape[0] != groups
            or (out is not None and out.shape[0] != groups)
        ):
            fail(
                ValueError,
                "b",
                f"{groups} groups in b, masked_m and out (num_groups mismatch)",
                f"b {tuple(b.shape)}, masked_m {tuple(masked_m.shape)}",
            )
        if b.shape[2] != k or (out is not None and out.shape != (groups, m, n)):
            got = f"b {tuple(b.shape)}" + ("" if out is None else f", out {tuple(out.shape)}")
            fail(
                ValueError,
                "b" if b.shape[2] != k else "out",
                f"b ({groups}, n, {k}) and out ({groups}, {m}, n) (m, n, k mismatch)",
                got,
            )
        expected_m = operator.index(expected_m)
        if min(expected_m, m, n, k, groups) <= 0:
            fail(
                ValueError,
                "expected_m",
                "expected_m, m, n, k, num_groups all greater than 0",
                f"expected_m={expected_m}, m={m}, n={n}, k={k}, num_groups={groups}",
            )
        _check_scale_shape(a_scale, "a_scale", (groups, m, ceil_div(k, _BLOCK)))
        _check_scale_shape(b_scale, "b_scale", (groups, ceil_div(n, _BLOCK), ceil_div(k, _BLOCK)))
    else:
        dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
    if out is None:
        out = torch.empty((a.shape[0], a.shape[1], b.shape[1]), dtype=dtype, device=a.device)
    DISPATCH.module(a.device).group_gemm_masked(a, b, a_scale, b_scale, masked_m, expected_m, out)
    return out
