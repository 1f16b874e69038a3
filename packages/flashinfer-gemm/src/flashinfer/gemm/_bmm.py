"""``bmm_bf16`` and ``bmm_fp8``: batched GEMMs with FlashInfer v0.6.17's signatures."""

from __future__ import annotations

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import fail

from ._backends import BMM_BF16, BMM_FP8
from ._dispatch import DISPATCH
from ._validate import (
    FLOAT32,
    FP8,
    check_fp8,
    check_out,
    check_out_overlap,
    check_rank,
    check_same_device,
    check_scale,
    check_tensor,
    out_overlaps,
)

_16BIT = (torch.bfloat16, torch.float16)
_BF16_OUT = (torch.bfloat16, torch.float16, torch.float32)
_FP8_OUT = (torch.bfloat16, torch.float16)
_E5M2 = torch.float8_e5m2


def _check_operands(A, B) -> None:
    """``A (b, m, k)`` and ``B (b, k, n)`` on one device with matching batch and K."""
    check_tensor(A, "A")
    check_tensor(B, "B")
    check_rank(A, "A", 3, "(batch, m, k)")
    check_rank(B, "B", 3, "(batch, k, n)")
    if B.shape[0] != A.shape[0] or B.shape[1] != A.shape[2]:
        fail(
            ValueError,
            "B",
            f"shape ({A.shape[0]}, {A.shape[2]}, n) (batch and k of `A`)",
            f"shape {tuple(B.shape)}",
        )
    check_same_device(B, "B", A.device, "A")


_BF16_NAMES = frozenset(BMM_BF16.names)
_FP8_NAMES = frozenset(BMM_FP8.names)

# Validation is one expression that is True when every check passes (the hot path, a few
# attribute reads); only when it is False do the detailed checks run to say what is wrong.


def _out_ok(out, dtype, device, shape, A, B) -> bool:
    # a given ``out`` on the fast path: ``shape`` and ``dtype`` on ``device``, overlapping no input
    return out.dtype == dtype and out.device == device and out.shape == shape and not out_overlaps(out, A, B)


def _bmm_bf16_args_ok(A, B, out, out_dtype, backend) -> bool:
    try:
        a_shape, b_shape, device = A.shape, B.shape, A.device
        ok = (
            backend in _BF16_NAMES
            and out_dtype in _BF16_OUT
            and (backend != "tgv" or out_dtype == torch.bfloat16)
            and len(a_shape) == 3
            and len(b_shape) == 3
            and b_shape[0] == a_shape[0]
            and b_shape[1] == a_shape[2]
            and A.dtype in _16BIT
            and B.dtype == A.dtype
            and B.device == device
        )
        return ok and (
            out is None or _out_ok(out, out_dtype, device, (a_shape[0], a_shape[1], b_shape[2]), A, B)
        )
    except AttributeError:
        return False


def _bmm_fp8_args_ok(A, B, A_scale, B_scale, dtype, out, backend) -> bool:
    try:
        a_shape, b_shape, device = A.shape, B.shape, A.device
        a_dtype, b_dtype = A.dtype, B.dtype
        ok = (
            backend in _FP8_NAMES
            and dtype in _FP8_OUT
            and len(a_shape) == 3
            and len(b_shape) == 3
            and b_shape[0] == a_shape[0]
            and b_shape[1] == a_shape[2]
            and a_dtype in FP8
            and b_dtype in FP8
            and (backend != "cutlass" or (a_dtype != _E5M2 and b_dtype != _E5M2))
            and B.device == device
            and A_scale.dtype == FLOAT32
            and B_scale.dtype == FLOAT32
            and A_scale.device == device
            and B_scale.device == device
        )
        return ok and (out is None or _out_ok(out, dtype, device, (a_shape[0], a_shape[1], b_shape[2]), A, B))
    except AttributeError:
        return False


@gated(BMM_BF16)
def bmm_bf16(A, B, out=None, out_dtype=torch.bfloat16, backend="auto", *, skip_check=False):
    """Batched 16-bit GEMM: ``out[i] = A[i] @ B[i]``, accumulated in float32, cast once.

    Parameters
    ----------
    A : torch.Tensor
        ``[batch, m, k]``, bfloat16 or float16. Any strides.
    B : torch.Tensor
        ``[batch, k, n]``, the same dtype as ``A``. Usually column-major: the
        ``transpose(-2, -1)`` view of a contiguous ``[batch, n, k]`` weight
        (``B.stride(-2) == 1``); row-major ``B`` (``B.stride(-1) == 1``) works too. Neither
        layout is copied.
    out : torch.Tensor, optional
        ``[batch, m, n]`` of dtype ``out_dtype``, written in place and returned. Any strides.
        When None, a contiguous tensor is allocated.
    out_dtype : torch.dtype
        ``torch.bfloat16`` (default), ``torch.float16`` or ``torch.float32``.
    backend : str
        ``"auto"`` (default), FlashInfer's ``"cudnn"``, ``"cutlass"``, ``"cutile"``, ``"tgv"``
        (bfloat16 output only), or MATE's ``"mudnn"``. Every name runs on every device.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[batch, m, n]``.

    Raises
    ------
    ValueError
        Unknown ``backend``; ``A``/``B`` not 3-D, not both bfloat16 or both float16, or with
        mismatched batch/k; tensors on different devices; ``out_dtype`` not bf16/fp16/fp32;
        ``tgv`` with non-bf16 output; ``out`` of the wrong shape, dtype (it must equal
        ``out_dtype``) or device, or overlapping an input.

    Notes
    -----
    Unlike upstream (bfloat16 inputs only, default ``backend="cudnn"``), float16 inputs are
    accepted and ``backend`` defaults to ``"auto"``. k == 0 zero-fills ``out``.

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import bmm_bf16
    >>> A = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    >>> B = torch.randn(2, 5, 64, dtype=torch.bfloat16).transpose(-2, -1)
    >>> bmm_bf16(A, B).shape
    torch.Size([2, 3, 5])
    >>> bmm_bf16(A, B, out_dtype=torch.float32).dtype
    torch.float32
    """
    if not skip_check and not _bmm_bf16_args_ok(A, B, out, out_dtype, backend):
        BMM_BF16.check(backend)
        _check_operands(A, B)
        if A.dtype not in _16BIT:
            fail(ValueError, "A", "dtype torch.bfloat16 or torch.float16 (first tensor)", f"dtype {A.dtype}")
        if B.dtype != A.dtype:
            fail(ValueError, "B", f"dtype {A.dtype} (the dtype of `A`; second tensor)", f"dtype {B.dtype}")
        if out_dtype not in _BF16_OUT:
            fail(
                ValueError,
                "out_dtype",
                "torch.bfloat16, torch.float16 or torch.float32 (unsupported output dtype)",
                out_dtype,
            )
        if backend == "tgv" and out_dtype != torch.bfloat16:
            fail(
                ValueError,
                "out_dtype",
                "torch.bfloat16 (the TGV backend for bmm_bf16 only supports bfloat16 output)",
                out_dtype,
            )
        if out is not None:
            check_out(out, (A.shape[0], A.shape[1], B.shape[2]), out_dtype, A.device, "out_dtype")
            check_out_overlap(out, {"A": A, "B": B})
    batch, m, k = A.shape
    if out is None:
        out = torch.empty((batch, m, B.shape[2]), dtype=out_dtype, device=A.device)
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()
    DISPATCH.module(A.device).bmm(A, B, out)
    return out


def _scale_view(scale, arg: str, batch: int, rows: int, rows_last: bool):
    """A per-tensor scale as a 0-dim view; a channelwise one as a broadcastable 3-D view.

    ``rows_last=False`` gives ``(batch, rows, 1)`` (A's convention), True gives
    ``(batch, 1, rows)`` (B's); either stored order is accepted.
    """
    ndim = scale.dim()
    if ndim == 0:
        return scale
    shape = scale.shape
    if ndim == 1 and shape[0] == 1:
        return scale.squeeze()  # the cheapest 0-dim view of a (1,) tensor
    if scale.dim() == 3 and shape[0] == batch:
        if shape[1] == rows and shape[2] == 1:
            return scale.transpose(1, 2) if rows_last else scale
        if shape[1] == 1 and shape[2] == rows:
            return scale if rows_last else scale.transpose(1, 2)
    fail(
        ValueError,
        arg,
        f"shape (), (1,), ({batch}, {rows}, 1) or ({batch}, 1, {rows}) (per-tensor or channelwise scale)",
        f"shape {tuple(shape)}",
    )


@gated(BMM_FP8)
def bmm_fp8(A, B, A_scale, B_scale, dtype, out=None, backend="auto", *, skip_check=False):
    """Batched FP8 GEMM: ``out[i] = cast((A[i].float() @ B[i].float()) * A_scale * B_scale)``.

    Parameters
    ----------
    A : torch.Tensor
        ``[batch, m, k]``, float8_e4m3fn or float8_e5m2. Any strides.
    B : torch.Tensor
        ``[batch, k, n]``, float8_e4m3fn or float8_e5m2 (may differ from ``A``). Usually
        column-major: the ``transpose(-2, -1)`` view of a contiguous ``[batch, n, k]`` weight
        (``B.stride(-2) == 1``); row-major ``B`` works too. Neither layout is copied.
    A_scale : torch.Tensor
        float32 dequantization multiplier(s) for ``A``: one value of shape ``[]`` or ``[1]``
        (per-tensor), or channelwise (an extension) ``[batch, m, 1]`` or ``[batch, 1, m]``.
    B_scale : torch.Tensor
        float32 for ``B``: ``[]`` or ``[1]``, or channelwise ``[batch, n, 1]`` or
        ``[batch, 1, n]``.
    dtype : torch.dtype
        Output dtype: ``torch.bfloat16`` or ``torch.float16``.
    out : torch.Tensor, optional
        ``[batch, m, n]`` of dtype ``dtype``, written in place and returned. Any strides
        (``out.unsqueeze(0)`` of a 2-D buffer is fine). When None, a contiguous tensor is
        allocated.
    backend : str
        ``"auto"`` (default), FlashInfer's ``"cublas"``, ``"cudnn"``, ``"cutlass"`` (no e5m2), or
        MATE's ``"mudnn"``. Every name runs on every device.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[batch, m, n]``.

    Raises
    ------
    ValueError
        Unknown ``backend``; ``A``/``B`` not 3-D FP8 or with mismatched batch/k; tensors on
        different devices; ``dtype`` not bf16/fp16 ("Unsupported output dtype"); ``cutlass`` with
        an e5m2 input; a scale that is not float32 or of an accepted shape; ``out`` of the wrong
        shape, dtype or device, or overlapping an input.

    Notes
    -----
    The scales are FlashInfer's dequantization multipliers (the reciprocal of the quantization
    multiplier). Unlike upstream's cuBLAS path, e5m2 x e5m2 is computed (the math is the same),
    strides are honoured, and ``backend`` defaults to ``"auto"``. k == 0 zero-fills ``out``.
    A backend name given positionally in ``out``'s slot (vLLM's
    ``bmm_fp8(a, b, sa, sb, dtype, "auto")``) is taken as ``backend`` with ``out=None``.

    Examples
    --------
    >>> import torch
    >>> from flashinfer import bmm_fp8
    >>> A = torch.randn(1, 4, 32).to(torch.float8_e4m3fn)
    >>> B = torch.randn(1, 8, 32).to(torch.float8_e4m3fn).transpose(-2, -1)
    >>> one = torch.ones(1)
    >>> bmm_fp8(A, B, one, one, torch.bfloat16, backend="cublas").view(4, 8).shape
    torch.Size([4, 8])
    """
    if isinstance(out, str):
        # vLLM's flashinfer_scaled_fp8_mm passes the backend name positionally in `out`'s slot.
        out, backend = None, out
    if not skip_check and not _bmm_fp8_args_ok(A, B, A_scale, B_scale, dtype, out, backend):
        BMM_FP8.check(backend)
        _check_operands(A, B)
        check_fp8(A, "A")
        check_fp8(B, "B")
        if backend == "cutlass" and (A.dtype == _E5M2 or B.dtype == _E5M2):
            fail(
                ValueError,
                "backend",
                "not 'cutlass' with e5m2 inputs (e5m2 is not supported for bmm_fp8 with cutlass backend)",
                backend,
            )
        if dtype not in _FP8_OUT:
            fail(
                ValueError,
                "dtype",
                "torch.bfloat16 or torch.float16 (unsupported output dtype for FP8 GEMM)",
                dtype,
            )
        check_scale(A_scale, "A_scale", A.device, "A")
        check_scale(B_scale, "B_scale", A.device, "A")
        if out is not None:
            check_out(out, (A.shape[0], A.shape[1], B.shape[2]), dtype, A.device, "dtype")
            check_out_overlap(out, {"A": A, "B": B, "A_scale": A_scale, "B_scale": B_scale})
    batch, m, k = A.shape
    n = B.shape[2]
    A_scale = _scale_view(A_scale, "A_scale", batch, m, rows_last=False)
    B_scale = _scale_view(B_scale, "B_scale", batch, n, rows_last=True)
    if out is None:
        out = torch.empty((batch, m, n), dtype=dtype, device=A.device)
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()
    DISPATCH.module(A.device).bmm(A, B, out, A_scale, B_scale)
    return out
