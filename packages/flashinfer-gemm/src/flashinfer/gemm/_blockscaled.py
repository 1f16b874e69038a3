"""``gemm_fp8_nt_blockscaled``: the groupwise FP8 GEMM with 128 x 128 scale blocks on both operands."""

from __future__ import annotations

from flashinfer._core.backends import gated
from flashinfer.api_logging import flashinfer_api

from ._backends import GEMM_FP8_NT_BLOCKSCALED
from ._groupwise import gemm_fp8_nt_groupwise

_BLOCK_GRANULARITY = (128, 128, 128)


@flashinfer_api
@gated(GEMM_FP8_NT_BLOCKSCALED)
def gemm_fp8_nt_blockscaled(
    a,
    b,
    a_scale,
    b_scale,
    scale_major_mode="MN",
    mma_sm=1,
    out=None,
    out_dtype=None,
    *,
    skip_check=False,
):
    """Block-scaled FP8 NT GEMM: :func:`gemm_fp8_nt_groupwise` with granularity ``(128, 128, 128)``.

    ``out[i, j] = sum_kb sa(i // 128, kb) * sb(j // 128, kb) * sum_{k in kb} a[i, k] * b[j, k]``,
    accumulated in float32 and cast once (the ``cutlass`` rules of the groupwise GEMM apply).

    Parameters
    ----------
    a : torch.Tensor
        ``[m, k]`` float8_e4m3fn, K-major.
    b : torch.Tensor
        ``[n, k]`` float8_e4m3fn, K-major (the weight, transposed).
    a_scale : torch.Tensor
        float32, one multiplier per 128 x 128 block of ``a``: ``[ceil(k/128), ceil(m/128)]``
        for ``"MN"`` (default), ``[ceil(m/128), ceil(k/128)]`` for ``"K"``; any strides.
    b_scale : torch.Tensor
        float32 per 128 x 128 block of ``b``: ``[ceil(k/128), ceil(n/128)]`` (``"MN"``) or
        ``[ceil(n/128), ceil(k/128)]`` (``"K"``).
    scale_major_mode : {"MN", "K"}
        How the scales are stored; required (None raises, as upstream's CUTLASS path).
    mma_sm : int
        A performance hint of upstream's CUTLASS kernel; accepted and ignored.
    out : torch.Tensor, optional
        ``[m, n]`` bf16/fp16, written in place and returned (its dtype wins over
        ``out_dtype``); any strides. When None, a contiguous tensor is allocated.
    out_dtype : torch.dtype, optional
        ``torch.bfloat16`` (default) or ``torch.float16``.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[m, n]``.

    Raises
    ------
    ValueError
        As :func:`gemm_fp8_nt_groupwise` with ``backend="cutlass"``: shapes, dtypes, scale
        shapes, ``scale_major_mode=None`` ("scale_major_mode is required in CUTLASS"), ``out``.

    Notes
    -----
    Upstream runs this on Blackwell only; here it runs on every device, through the groupwise
    GEMM's implementations.

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import gemm_fp8_nt_blockscaled
    >>> a = torch.randn(256, 256).to(torch.float8_e4m3fn)
    >>> b = torch.randn(128, 256).to(torch.float8_e4m3fn)
    >>> gemm_fp8_nt_blockscaled(a, b, torch.ones(2, 2), torch.ones(2, 1)).shape
    torch.Size([256, 128])
    """
    # positional: keywords cost host time; `cutlass` keeps its rules, no FP8 output
    return gemm_fp8_nt_groupwise(
        a, b, a_scale, b_scale, scale_major_mode, mma_sm, _BLOCK_GRANULARITY, out, out_dtype, "cutlass", None,
        skip_check=skip_check,
    )  # fmt: skip
