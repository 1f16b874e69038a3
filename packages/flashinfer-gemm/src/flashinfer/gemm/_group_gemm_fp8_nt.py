"""``group_gemm_fp8_nt_groupwise``: the grouped groupwise-scaled FP8 GEMM over row segments."""

from __future__ import annotations

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import (
    check_device,
    check_k_major,
    check_no_overlap,
    check_scale,
    fail,
    require_tensors,
)
from flashinfer._core.compile import one_node
from flashinfer.api_logging import flashinfer_api

from ._args import GroupedSegments
from ._backends import GROUP_GEMM_FP8_NT_GROUPWISE
from ._dispatch import DISPATCH, compile_layer, run
from ._group_gemm_segments import row_block_scales

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_FLOAT32 = torch.float32
_OUT_16BIT = (torch.bfloat16, torch.float16)
_GRANULARITIES = ((1, 128, 128), (128, 128, 128))
_NAMES = frozenset(GROUP_GEMM_FP8_NT_GROUPWISE.names)
_RANKS = (("a", 2, "(cum_m, k)"), ("b", 3, "(G, n, k)"), ("m_indptr", 1, "(G + 1,)"))


@one_node(compile_layer)
@flashinfer_api
@gated(GROUP_GEMM_FP8_NT_GROUPWISE)
def group_gemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    m_indptr,
    scale_granularity_mnk=(1, 128, 128),
    scale_major_mode="MN",
    mma_sm=1,
    out=None,
    out_dtype=None,
    backend="trtllm",
    *,
    skip_check=False,
):
    """Grouped groupwise-scaled FP8 NT GEMM: group ``g`` owns rows ``[m_indptr[g], m_indptr[g + 1])``.

    For a row ``r`` of group ``g``:
    ``out[r, j] = sum_kb sa(r, kb) * sb[g](j // gn, kb) * sum_{k in kb} a[r, k] * b[g, j, k]``,
    accumulated in float32 and cast once.

    Parameters
    ----------
    a : torch.Tensor
        ``[cum_m, k]`` float8 (e4m3 or e5m2), K-major (``a.stride(1) == 1``): the groups' rows,
        back to back.
    b : torch.Tensor
        ``[G, n, k]`` float8 (e4m3 or e5m2), K-major: one ``[n, k]`` weight per group.
    a_scale : torch.Tensor
        float32 multipliers per ``gm x gk`` block of ``a``: ``[ceil(cum_m/gm), ceil(k/gk)]`` when
        ``scale_major_mode="K"``, ``[ceil(k/gk), ceil(cum_m/gm)]`` when ``"MN"``. With
        ``gm = 128`` a group's scale rows start at ``m_indptr[g] // 128`` (upstream's kernel).
    b_scale : torch.Tensor
        float32 per ``gn x gk`` block of each group's ``b``: ``[G, ceil(n/gn), ceil(k/gk)]``
        (``"K"``) or ``[G, ceil(k/gk), ceil(n/gn)]`` (``"MN"``).
    m_indptr : torch.Tensor
        ``[G + 1]`` int32 row offsets (non-decreasing, ``m_indptr[G] <= cum_m``; upstream asks
        for multiples of 4, here any offsets work). Empty groups are allowed. Rows outside
        ``[m_indptr[0], m_indptr[G])`` are not written. Offsets are read on the device only; an
        offset outside ``[0, cum_m]`` is clamped and a decreasing one treated as the running
        maximum, so no memory outside the tensors is read.
    scale_granularity_mnk : tuple of int
        ``(1, 128, 128)`` (default) or ``(128, 128, 128)``.
    scale_major_mode : {"MN", "K"}
        How the scales are stored; default ``"MN"``.
    mma_sm : int
        1 or 2: upstream's CUTLASS cluster size, a performance hint; checked, otherwise ignored.
    out : torch.Tensor, optional
        ``[cum_m, n]`` bf16/fp16, written in place and returned; any strides. When None, a
        contiguous tensor is allocated (rows outside every group then hold garbage).
    out_dtype : torch.dtype, optional
        ``torch.bfloat16`` (default) or ``torch.float16``; must equal ``out.dtype`` when both
        are given.
    backend : str
        FlashInfer's ``"trtllm"`` (default) or ``"cutile"`` (K-major scales and ``gm = 1``
        only), or MATE's ``"auto"``, ``"mubin"``. Every name runs on every device.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[cum_m, n]``, bfloat16 or float16.

    Raises
    ------
    ValueError
        FlashInfer's checks (non-FP8 ``a``/``b``, non-float32 scales, non-int32 ``m_indptr``,
        ``scale_major_mode``, ``mma_sm``, ``out`` shape or dtype, output dtype not bf16/fp16,
        k mismatch, ``n % 8``, ``k % 16``), and ours: ranks, an unknown ``backend``, another
        granularity, scale or ``m_indptr`` shapes, devices, non-K-major ``a``/``b``, an ``out``
        overlapping an input.
    NotImplementedError
        ``backend="cutile"`` with MN-major scales or ``gm != 1`` (as upstream's cuTile kernel).
    TypeError
        A non-tensor argument.

    Notes
    -----
    Upstream runs this on Blackwell only; here it runs on every device (the Triton grouped
    kernel on CUDA, MATE's ``ragged_m_moe_gemm_8bit`` in ``per_expert`` mode on MUSA). Scales
    are read through their strides.

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import group_gemm_fp8_nt_groupwise
    >>> G, n, k = 3, 128, 256
    >>> m_indptr = torch.tensor([0, 4, 4, 12], dtype=torch.int32)  # group 1 is empty
    >>> a = torch.randn(12, k).to(torch.float8_e4m3fn)
    >>> b = torch.randn(G, n, k).to(torch.float8_e4m3fn)
    >>> a_scale = torch.ones(k // 128, 12)  # MN-major
    >>> b_scale = torch.ones(G, k // 128, n // 128)
    >>> group_gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, m_indptr).shape
    torch.Size([12, 128])
    """
    granularity = tuple(scale_granularity_mnk)
    try:
        a_shape, b_shape, device = a.shape, b.shape, a.device
        if skip_check:
            dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
        else:  # FlashInfer's rules first, in its order and words; then what it leaves to its kernels
            _check_upstream_dtypes(a, b, a_scale, b_scale, m_indptr)
            if scale_major_mode not in ("MN", "K"):
                raise ValueError(f"scale_major_mode must be either 'MN' or 'K', but got {scale_major_mode}")
            if mma_sm not in (1, 2):
                raise ValueError(f"mma_sm must be either 1 or 2, but got {mma_sm}")
            dtype = _check_upstream_shapes(a, b, m_indptr, a_shape, b_shape, out, out_dtype)
            if backend not in _NAMES:
                GROUP_GEMM_FP8_NT_GROUPWISE.check(backend)
            if granularity not in _GRANULARITIES:
                expected = "(1, 128, 128) or (128, 128, 128)"
                fail(ValueError, "scale_granularity_mnk", expected, str(granularity))
            if backend in GROUP_GEMM_FP8_NT_GROUPWISE.rules:
                GROUP_GEMM_FP8_NT_GROUPWISE.enforce(backend, scale_major_mode, granularity)
            if b.device != device:
                check_device(b, "b", device, "a")
            if m_indptr.device != device:
                check_device(m_indptr, "m_indptr", device, "a")
            if not (a.is_contiguous() and b.is_contiguous()):  # else both are K-major
                check_k_major(a, "a")
                check_k_major(b, "b")
            groups, n, k = b_shape
            if m_indptr.shape[0] != groups + 1:
                expected = f"shape ({groups + 1},) (one offset per group of `b`, plus one)"
                fail(ValueError, "m_indptr", expected, m_indptr)
            gm, gn, gk = granularity
            mb, nb, kb = -(-a_shape[0] // gm), -(-n // gn), -(-k // gk)
            mn = scale_major_mode == "MN"
            a_blocks = (kb, mb) if mn else (mb, kb)
            b_blocks = (groups, kb, nb) if mn else (groups, nb, kb)
            if a_scale.shape != a_blocks or a_scale.device != device:
                check_scale(a_scale, "a_scale", a_blocks, device, "a")
            if b_scale.shape != b_blocks or b_scale.device != device:
                check_scale(b_scale, "b_scale", b_blocks, device, "a")
            if out is not None:
                if out.device != device:
                    check_device(out, "out", device, "a")
                check_no_overlap(out, "out", ("a", "b"), a, b)
        m, k = a_shape
        groups, n = b_shape[0], b_shape[1]
        if backend == "auto":  # FlashInfer's hook (MATE's name here)
            GROUP_GEMM_FP8_NT_GROUPWISE.fill_suitable(scale_major_mode, granularity)
    except AttributeError:
        require_tensors(
            a=a, b=b, a_scale=a_scale, b_scale=b_scale, m_indptr=m_indptr, out=out, optional=("out",)
        )
        raise
    if out is None:
        out = torch.empty(m, n, dtype=dtype, device=device)
    if groups == 0:
        return out
    a_view, b_view = _scale_views(a_scale, b_scale, m_indptr, m, scale_major_mode, granularity[0])
    call = GroupedSegments._make((a, b, a_view, b_view, m_indptr, out))
    return run(DISPATCH.module(device).group_gemm_segments, call, k)


def _check_upstream_dtypes(a, b, a_scale, b_scale, m_indptr) -> None:
    """FlashInfer's dtype checks, in its order and words."""
    if a.dtype not in _FP8:
        raise ValueError(f"a must be a float8 tensor, but got {a.dtype}")
    if b.dtype not in _FP8:
        raise ValueError(f"b must be a float8 tensor, but got {b.dtype}")
    if a_scale.dtype != _FLOAT32:
        raise ValueError(f"a_scale must be a float32 tensor, but got {a_scale.dtype}")
    if b_scale.dtype != _FLOAT32:
        raise ValueError(f"b_scale must be a float32 tensor, but got {b_scale.dtype}")
    if m_indptr.dtype != torch.int32:
        raise ValueError(f"m_indptr must be a int32 tensor, but got {m_indptr.dtype}")


def _check_upstream_shapes(a, b, m_indptr, a_shape, b_shape, out, out_dtype) -> torch.dtype:
    """The ranks (ours: upstream reads ``b.shape[1:]`` and ``a.shape[1]`` without checking), then
    FlashInfer's output and shape checks in its order and words; returns the output dtype."""
    for (arg, rank, layout), x, shape in zip(_RANKS, (a, b, m_indptr), (a_shape, b_shape, m_indptr.shape)):
        if len(shape) != rank:
            fail(ValueError, arg, f"a {rank}-D tensor {layout} (shape mismatch)", x)
    n, k = b_shape[1], b_shape[2]
    if out is None:
        dtype = torch.bfloat16 if out_dtype is None else out_dtype
    else:
        dtype = out.dtype if out_dtype is None else out_dtype
        if out.shape != (a_shape[0], n):
            raise ValueError(
                f"Shape mismatch. out.shape = {tuple(out.shape)}, (a.shape[0], n) = {(a_shape[0], n)}"
            )
        if out.dtype != dtype:
            raise ValueError(f"dtype mismatch. out.dtype = {out.dtype}, out_dtype = {dtype}")
    if dtype not in _OUT_16BIT:
        raise ValueError(
            f"Unsupported output dtype: {dtype}. "
            f"Only torch.bfloat16 and torch.float16 are supported for FP8 GEMM operations."
        )
    if a_shape[1] != k:
        raise ValueError(f"Shape mismatch. a.shape[1] = {a_shape[1]}, k = {k}")
    if n % 8 != 0:
        raise ValueError(f"n must be a multiple of 8, but got {n}")
    if k % 16 != 0:
        raise ValueError(f"k must be a multiple of 16, but got {k}")
    return dtype


def _scale_views(a_scale, b_scale, m_indptr, m, scale_major_mode, block_m):
    """Per-row A scales ``[m, kb]`` and logical B scales ``[G, nb, kb]`` (views unless block_m > 1)."""
    if scale_major_mode == "MN":
        a_scale, b_scale = a_scale.t(), b_scale.transpose(1, 2)
    if block_m != 1:  # a copy of m x kb floats: upstream's per-group 128-row scale blocks, per row
        a_scale = row_block_scales(a_scale, m_indptr, m, block_m)
    return a_scale, b_scale
