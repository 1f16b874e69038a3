"""``bmm_bf16`` and ``bmm_fp8``: batched GEMMs with FlashInfer v0.6.17's signatures."""

from __future__ import annotations

import torch

from flashinfer._core.backends import BackendTable, gated
from flashinfer._core.checks import (
    FLOAT32,
    FP8,
    check_device,
    check_fp8,
    check_no_overlap,
    check_out,
    check_scale,
    describe,
    fail,
    require_tensors,
)
from flashinfer._core.compile import one_node
from flashinfer._core.dispatch import implementation_kind
from flashinfer._core.errors import KernelCheckError
from flashinfer.api_logging import flashinfer_api

from ._args import Bmm
from ._backends import BMM_BF16, BMM_FP8
from ._dispatch import DISPATCH, compile_layer, run

_16BIT = (torch.bfloat16, torch.float16)
_INPUTS = ("A", "B", "A_scale", "B_scale")


def _check_bmm_fp8_scale(scale, arg: str, device, batch: int, rows: int) -> None:
    """A float32 scale on ``device``: ``()``, ``(1,)``, ``(batch, rows, 1)`` or ``(batch, 1, rows)``."""
    if scale.dtype != FLOAT32 or scale.device != device:
        check_scale(scale, arg, None, device, "A")
    ndim = scale.dim()
    # per-tensor first, the common case: () needs no numel (a C call, host time), (1,) one
    if ndim == 0 or (ndim == 1 and scale.numel() == 1):
        return
    shape = scale.shape
    if shape != (batch, rows, 1) and shape != (batch, 1, rows):  # channelwise: whole-shape tests
        expected = (
            f"shape (), (1,), ({batch}, {rows}, 1) or ({batch}, 1, {rows}) (per-tensor or channelwise scale)"
        )
        fail(ValueError, arg, expected, f"shape {tuple(shape)}")


def _make_bmm(
    table: BackendTable,
    scaled: bool,
    out_dtypes: tuple,
    dtype_arg: str,
    dtype_expected: str,
    shape_error: type[Exception],
):
    """The body ``bmm_bf16`` and ``bmm_fp8`` share, after their ``torch.compile`` line: check,
    allocate ``out`` when None, run ``bmm`` on the tensors' device.

    What sets the two apart is bound here, once: the backend ``table``; ``scaled``, FP8 operands
    with dequantization scales (else one 16-bit dtype, ``A_scale``/``B_scale`` None); the output
    dtypes accepted, their argument's name and the words of its error; ``shape_error``, the type
    for an ``out`` of the wrong shape (``bmm_bf16`` checks it in Python upstream, a
    ``ValueError``; ``bmm_fp8`` leaves it to cuBLAS's C++ checks, a
    :class:`~flashinfer._core.errors.KernelCheckError`, which is a ``RuntimeError`` as well).
    Operand ranks and a batch/k mismatch are C++ checks in both. They are closure constants, so
    a call reads no record's attributes.
    """
    names, rules = frozenset(table.names), table.rules
    fill_suitable = table.fill_suitable
    # the context of the last auto call: FlashInfer's hook is refilled only when it changes
    auto_first = auto_second = None

    def bmm(A, B, A_scale, B_scale, out, dtype, backend, skip_check):
        nonlocal auto_first, auto_second
        try:
            a_shape, b_shape, device = A.shape, B.shape, A.device
            a_dtype, b_dtype = A.dtype, B.dtype
            if not skip_check:
                if backend not in names:
                    table.check(backend)
                if scaled:
                    if a_dtype not in FP8:
                        check_fp8(A, "A", FP8)
                    if b_dtype not in FP8:
                        check_fp8(B, "B", FP8)
                else:
                    if a_dtype not in _16BIT:
                        expected = "dtype torch.bfloat16 or torch.float16 (first tensor)"
                        fail(ValueError, "A", expected, f"dtype {a_dtype}")
                    if b_dtype != a_dtype:
                        expected = f"dtype {a_dtype} (the dtype of `A`; second tensor)"
                        fail(ValueError, "B", expected, f"dtype {b_dtype}")
                if dtype not in out_dtypes:
                    fail(ValueError, dtype_arg, dtype_expected, describe(dtype))
                # A (b, m, k) and B (b, k, n) on one device
                if len(a_shape) != 3:
                    fail(KernelCheckError, "A", "a 3-D tensor (batch, m, k) (shape mismatch)", A)
                if len(b_shape) != 3:
                    fail(KernelCheckError, "B", "a 3-D tensor (batch, k, n) (shape mismatch)", B)
                # unpacked once: each subscript of a torch.Size costs host time
                (batch, m, k), (b_batch, b_k, n) = a_shape, b_shape
                if b_batch != batch or b_k != k:
                    expected = f"shape ({batch}, {k}, n) (batch and k of `A`; incompatible matrix sizes)"
                    fail(KernelCheckError, "B", expected, f"shape {tuple(b_shape)}")
                if B.device != device:
                    check_device(B, "B", device, "A")
                if out is not None:
                    shape = (batch, m, n)
                    if out.shape != shape or out.dtype != dtype or out.device != device:
                        check_out(out, shape, dtype, device, f"with `{dtype_arg}`", shape_error)
                    check_no_overlap(out, "out", _INPUTS, A, B, A_scale, B_scale)
                if scaled:
                    _check_bmm_fp8_scale(A_scale, "A_scale", device, batch, m)
                    _check_bmm_fp8_scale(B_scale, "B_scale", device, batch, n)
                    if backend in rules:
                        table.enforce(backend, a_dtype, b_dtype)
                elif backend in rules:
                    table.enforce(backend, dtype)
            if backend == "auto":  # FlashInfer's hook, filled with or without the checks
                if scaled:
                    if a_dtype is not auto_first or b_dtype is not auto_second:
                        auto_first, auto_second = a_dtype, b_dtype
                        fill_suitable(a_dtype, b_dtype)
                elif dtype is not auto_first:
                    auto_first = dtype
                    fill_suitable(dtype)
        except AttributeError:
            optional = ("out",) if scaled else ("A_scale", "B_scale", "out")  # None in 16 bits
            require_tensors(A=A, B=B, A_scale=A_scale, B_scale=B_scale, out=out, optional=optional)
            raise
        if scaled and skip_check and (A_scale is None or B_scale is None):
            # kept under skip_check: the implementations read a None scale as 1 (the 16-bit
            # form), which would be a silent wrong answer; upstream fails on it too
            require_tensors(A_scale=A_scale, B_scale=B_scale)
        if out is None:  # sizes as arguments (docs/internals.md, host time)
            out = torch.empty(a_shape[0], a_shape[1], b_shape[2], dtype=dtype, device=device)
        call = Bmm._make((A, B, out, A_scale, B_scale))
        if a_shape[2] and out.numel():  # the usual call, launched here: run()'s frame is host time
            DISPATCH.module(device).bmm(call)
            return out
        return run(DISPATCH.module(device).bmm, call, a_shape[2])

    return bmm


_bmm_bf16 = _make_bmm(
    BMM_BF16,
    scaled=False,
    out_dtypes=(torch.bfloat16, torch.float16, torch.float32),
    dtype_arg="out_dtype",
    dtype_expected="torch.bfloat16, torch.float16 or torch.float32 (unsupported output dtype)",
    shape_error=ValueError,
)
_bmm_fp8 = _make_bmm(
    BMM_FP8,
    scaled=True,
    out_dtypes=(torch.bfloat16, torch.float16),
    dtype_arg="dtype",
    dtype_expected="torch.bfloat16 or torch.float16 (unsupported output dtype for FP8 GEMM)",
    shape_error=KernelCheckError,
)


@one_node(compile_layer)
@flashinfer_api
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
        ``out``, ``[batch, m, n]`` of ``out_dtype`` (bfloat16 by default).

    Raises
    ------
    ValueError
        Unknown ``backend``; ``A``/``B`` not both bfloat16 or both float16; tensors on different
        devices; ``out_dtype`` not bf16/fp16/fp32; ``tgv`` with non-bf16 output; ``out`` of the
        wrong shape, dtype (it must equal ``out_dtype``) or device, or overlapping an input.
        ``A``/``B`` not 3-D or with mismatched batch/k: upstream leaves these to its C++ layer,
        so the error is a ``RuntimeError`` as well.

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
    return _bmm_bf16(A, B, None, None, out, out_dtype, backend, skip_check)


@one_node(compile_layer)
@flashinfer_api
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
        ``out``, ``[batch, m, n]``, of dtype ``dtype``.

    Raises
    ------
    ValueError
        Unknown ``backend``; ``A``/``B`` not FP8; tensors on different devices; ``dtype`` not
        bf16/fp16 ("Unsupported output dtype"); ``cutlass`` with an e5m2 input; a scale that is
        not float32 or of an accepted shape; ``out`` of the wrong shape, dtype or device, or
        overlapping an input. ``A``/``B`` not 3-D or with mismatched batch/k and ``out`` of the
        wrong shape are cuBLAS's C++ checks upstream ("Incompatible matrix sizes", "Result
        tensor has incorrect shape"), so those errors are a ``RuntimeError`` as well.

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
    return _bmm_fp8(A, B, A_scale, B_scale, out, dtype, backend, skip_check)


# ------------------------------------------------ upstream's cuTile module (kernels/cutile)
# Upstream's cuTile BF16 batched GEMM needs the ``cuda.tile`` compiler, which this build does not
# have: ``bmm_bf16_cutile`` checks its arguments as upstream does (plus one device and no overlap
# with ``out``), then computes with ``bmm_bf16``'s implementation on the tensors' device; the tune
# cache records one entry per problem key, as upstream's does after its first call for a shape.


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
    if B.device != device:
        check_device(B, "B", device, "A")
    if out.device != device:
        check_device(out, "out", device, "A")
    check_no_overlap(out, "out", ("A", "B"), A, B)
    cache = _BMM_BF16_TUNE_CACHE if tune_cache is None else tune_cache
    cache.setdefault((batch, m, n, k, A.dtype, device), implementation_kind(device))
    return run(DISPATCH.module(device).bmm, Bmm(A, B, out), k)
