"""``gemm_fp8_nt_groupwise``: the groupwise-scaled FP8 NT GEMM with FlashInfer's signature."""

from __future__ import annotations

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import check_no_overlap, describe, fail, require_tensors
from flashinfer._core.constants import E4M3_MAX, OUTPUT_SCALE_BLOCK, OUTPUT_SCALE_FLOOR
from flashinfer.api_logging import flashinfer_api
from flashinfer.utils import ceil_div

from ._args import Groupwise
from ._backends import GEMM_FP8_NT_GROUPWISE
from ._dispatch import DISPATCH

_E4M3 = torch.float8_e4m3fn
_FLOAT32 = torch.float32
_OUT_16BIT = (torch.bfloat16, torch.float16)
# (gm, gn, gk) that upstream's kernels run: per-row or 128-row A blocks, 128x128 B blocks.
_GRANULARITIES = ((1, 128, 128), (128, 128, 128))
_MODES = (None, "K", "MN")
_NAMES = frozenset(GEMM_FP8_NT_GROUPWISE.names)
_INPUTS = ("a", "b", "a_scale", "b_scale", "output_scale")


def _scale_orientation(scale, arg: str, blocks: int, kb: int, trtllm: bool) -> bool:
    """Whether the logical ``(blocks, kb)`` view of ``scale`` is its transpose, for
    ``scale_major_mode="MN"`` (storage ``(kb, blocks)``) and the trtllm name.

    The trtllm name keeps its own convention whatever the mode: ``a_scale`` MN-major in memory,
    as a contiguous ``(kb, m)`` tensor or its ``(m, kb)`` column-major view (any ``(m, kb)`` view
    is read through its strides; when m == kb a unit first stride means the column-major view);
    ``b_scale`` K-major ``(nb, kb)``, a ``(kb, nb)`` tensor (upstream's docstring) being its
    transpose.
    """
    shape = scale.shape
    if trtllm:
        if shape == (blocks, kb) and (
            blocks != kb or arg == "b_scale" or (scale.stride(0) == 1 and scale.stride(1) != 1)
        ):
            return False
        if shape == (kb, blocks):
            return True
        layout = "MN-major" if arg == "a_scale" else "K-major"
        expected = f"shape ({blocks}, {kb}) or ({kb}, {blocks}) (trtllm: {layout})"
        fail(ValueError, arg, expected, f"shape {tuple(shape)}")
    if shape == (kb, blocks):
        return True
    fail(ValueError, arg, f"shape {(kb, blocks)} (scale_major_mode='MN')", f"shape {tuple(shape)}")


@flashinfer_api
@gated(GEMM_FP8_NT_GROUPWISE)
def gemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    scale_major_mode=None,
    mma_sm=1,
    scale_granularity_mnk=(1, 128, 128),
    out=None,
    out_dtype=None,
    backend="cutlass",
    output_scale=None,
    *,
    skip_check=False,
):
    """Groupwise-scaled FP8 NT GEMM: ``out = dequant(a) @ dequant(b).T``.

    With granularity ``(gm, gn, gk)`` and K blocks ``kb``:
    ``out[i, j] = sum_kb sa(i // gm, kb) * sb(j // gn, kb) * sum_{k in kb} a[i, k] * b[j, k]``,
    accumulated in float32 and cast once.

    Parameters
    ----------
    a : torch.Tensor
        ``[m, k]`` float8_e4m3fn, K-major (``a.stride(1) == 1``; the row stride is free).
    b : torch.Tensor
        ``[n, k]`` float8_e4m3fn, K-major (the "NT" layout: B stored column-major).
    a_scale : torch.Tensor
        float32 multipliers, one per ``gm x gk`` block of ``a``: ``[ceil(m/gm), ceil(k/gk)]``
        when ``scale_major_mode="K"``, ``[ceil(k/gk), ceil(m/gm)]`` when ``"MN"``. For
        ``backend="trtllm"``, see Notes.
    b_scale : torch.Tensor
        float32, one per ``gn x gk`` block of ``b``: ``[ceil(n/gn), ceil(k/gk)]`` (``"K"``) or
        ``[ceil(k/gk), ceil(n/gn)]`` (``"MN"``); trtllm: ``[ceil(n/128), ceil(k/128)]``.
    scale_major_mode : {"K", "MN"}, optional
        How the scales are stored. Required by ``cutlass``; ignored by ``trtllm``; None means
        ``"K"`` for the other names.
    mma_sm : int
        A performance hint of upstream's CUTLASS kernel; accepted and ignored.
    scale_granularity_mnk : tuple of int
        ``(1, 128, 128)`` (default: per-row x 128-K-block A scales, 128 x 128 B blocks) or
        ``(128, 128, 128)``.
    out : torch.Tensor, optional
        ``[m, n]``, written in place and returned; its dtype wins over ``out_dtype``. Any
        strides. When None, a contiguous tensor is allocated.
    out_dtype : torch.dtype, optional
        ``torch.bfloat16`` (default) or ``torch.float16``; ``torch.float8_e4m3fn`` (the default)
        when ``output_scale`` is given.
    backend : str
        FlashInfer's ``"cutlass"`` (default), ``"trtllm"``, ``"cutile"``, or MATE's ``"auto"``,
        ``"mudnn"``, ``"mubin"`` (needs ``output_scale``). Every name runs on every device.
    output_scale : torch.Tensor, optional
        An extension: when given, the output is FP8 E4M3 and this float32 contiguous
        ``[m, ceil(n/128)]`` tensor is *written* with one dequantization scale per 1 x 128 block
        of the output: ``output_scale[i, jb] = max(amax_{j in block jb} |acc[i, j]|, 1e-12) / 448``
        and ``out[i, j] = e4m3(clamp(acc[i, j] / output_scale[i, j // 128], -448, 448))``, where
        ``acc`` is the float32 result. Dequantize with
        ``out.float() * output_scale.repeat_interleave(128, 1)[:, :n]``.
    skip_check : bool, keyword-only
        Skip argument validation (FlashInfer's hidden keyword).

    Returns
    -------
    torch.Tensor
        ``out``, ``[m, n]``.

    Raises
    ------
    ValueError
        Unknown ``backend``; ``a``/``b`` not 2-D e4m3 K-major or with different k ("Shape
        mismatch"); output dtype not bf16/fp16 ("Unsupported output dtype"), or not e4m3 with
        ``output_scale``; ``cutlass`` without ``scale_major_mode``; ``trtllm`` with another
        granularity or k < 256; ``cutile`` with ``"MN"`` or another granularity; a granularity
        other than the two above; scales that are not float32 or of the expected shape;
        ``out`` / ``output_scale`` of the wrong shape or device, or overlapping an input.
    flashinfer.utils.BackendSupportedError
        ``backend="mubin"`` without ``output_scale``.

    Notes
    -----
    Majorness and strides: only ``a`` and ``b`` must have unit stride along k. Scales are read
    through their strides, so K-major, MN-major and transposed views all work without copies.
    The ``trtllm`` name keeps FlashInfer's trtllm convention whatever ``scale_major_mode`` says:
    ``a_scale`` is MN-major in memory, given either as a contiguous ``[ceil(k/128), m]`` tensor
    or as its ``[m, ceil(k/128)]`` column-major view (strides ``(1, m)``; any ``[m, kb]`` view
    is read through its strides), and ``b_scale`` is K-major ``[ceil(n/128), ceil(k/128)]``.
    Upstream has no Hopper path for this API; here it runs on every device.

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import gemm_fp8_nt_groupwise
    >>> m, n, k = 4, 256, 256
    >>> a = torch.randn(m, k).to(torch.float8_e4m3fn)
    >>> b = torch.randn(n, k).to(torch.float8_e4m3fn)
    >>> a_scale = torch.ones(m, k // 128)
    >>> b_scale = torch.ones(n // 128, k // 128)
    >>> gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, "K").shape
    torch.Size([4, 256])
    >>> out_scale = torch.empty(m, 2)
    >>> gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, "K", backend="mubin", output_scale=out_scale).dtype
    torch.float8_e4m3fn
    """
    try:
        a_shape, b_shape, device = a.shape, b.shape, a.device
        granularity = tuple(scale_granularity_mnk)
        if out is not None:
            dtype = out.dtype  # out's dtype wins over out_dtype; output_scale means FP8 E4M3
        else:
            dtype = (
                out_dtype if out_dtype is not None else (torch.bfloat16 if output_scale is None else _E4M3)
            )
        if not skip_check:  # every rule, each once, each attribute read once (reads are the cost)
            if backend not in _NAMES:
                GEMM_FP8_NT_GROUPWISE.check(backend)
            if len(a_shape) != 2 or len(b_shape) != 2:
                arg, x = ("a", a) if len(a_shape) != 2 else ("b", b)
                expected = (
                    f"a 2-D tensor (shape mismatch. a.shape = {tuple(a_shape)}, b.shape = {tuple(b_shape)})"
                )
                fail(ValueError, arg, expected, x)
            k = a_shape[1]
            if b_shape[1] != k:
                fail(
                    ValueError,
                    "b",
                    f"shape (n, {k}) (shape mismatch. a.shape[1] = {k})",
                    f"shape {tuple(b_shape)}",
                )
            if b.device != device:
                fail(ValueError, "b", f"a tensor on {device} (the device of `a`)", f"a tensor on {b.device}")
            if a.dtype != _E4M3:
                fail(ValueError, "a", "dtype torch.float8_e4m3fn (a must be FP8)", f"dtype {a.dtype}")
            if b.dtype != _E4M3:
                fail(ValueError, "b", "dtype torch.float8_e4m3fn (b must be FP8)", f"dtype {b.dtype}")
            if k > 1 and not (a.is_contiguous() or a.stride()[1] == 1):
                fail(ValueError, "a", "a K-major tensor (stride 1 along k)", a)
            if k > 1 and not (b.is_contiguous() or b.stride()[1] == 1):
                fail(ValueError, "b", "a K-major tensor (stride 1 along k)", b)
            if scale_major_mode not in _MODES:
                fail(ValueError, "scale_major_mode", "'K', 'MN' or None", describe(scale_major_mode))
            if granularity not in _GRANULARITIES:
                fail(
                    ValueError, "scale_granularity_mnk", "(1, 128, 128) or (128, 128, 128)", str(granularity)
                )
            if backend in GEMM_FP8_NT_GROUPWISE.rules:
                GEMM_FP8_NT_GROUPWISE.enforce(backend, scale_major_mode, granularity, k, output_scale)
            if a_scale.dtype != _FLOAT32 or a_scale.device != device:
                _fail_scale(a_scale, "a_scale", device)
            if b_scale.dtype != _FLOAT32 or b_scale.device != device:
                _fail_scale(b_scale, "b_scale", device)
            if output_scale is not None and (output_scale.dtype != _FLOAT32 or output_scale.device != device):
                _fail_scale(output_scale, "output_scale", device)
            if output_scale is None:
                if dtype not in _OUT_16BIT:
                    expected = "torch.bfloat16 or torch.float16 (unsupported output dtype)"
                    fail(ValueError, "out" if out is not None else "out_dtype", expected, describe(dtype))
            else:
                _check_fp8_output(a_shape[0], b_shape[0], out, dtype, output_scale)
            if out is not None:
                if out.shape != (a_shape[0], b_shape[0]):
                    shape = (a_shape[0], b_shape[0])
                    fail(
                        ValueError,
                        "out",
                        f"shape {shape} (output shape mismatch)",
                        f"shape {tuple(out.shape)}",
                    )
                if out.device != device:
                    fail(
                        ValueError,
                        "out",
                        f"a tensor on {device} (the device of `a`)",
                        f"a tensor on {out.device}",
                    )
                check_no_overlap(out, "out", _INPUTS, a, b, a_scale, b_scale, output_scale)
        (m, k), n = a_shape, b_shape[0]
        gm, gn, gk = granularity
        a_mn = b_mn = False
        if scale_major_mode == "MN" or backend == "trtllm":
            kb = ceil_div(k, gk)
            trtllm = backend == "trtllm"
            a_mn = _scale_orientation(a_scale, "a_scale", ceil_div(m, gm), kb, trtllm)
            b_mn = _scale_orientation(b_scale, "b_scale", ceil_div(n, gn), kb, trtllm)
        elif not skip_check:  # K-major storage: the logical (blocks, k blocks) shape itself
            kb = ceil_div(k, gk)
            if a_scale.shape != (ceil_div(m, gm), kb) or b_scale.shape != (ceil_div(n, gn), kb):
                arg, scale, blocks = ("a_scale", a_scale, ceil_div(m, gm))
                if a_scale.shape == (blocks, kb):
                    arg, scale, blocks = ("b_scale", b_scale, ceil_div(n, gn))
                expected = f"shape {(blocks, kb)} (scale_major_mode={scale_major_mode or 'K'!r})"
                fail(ValueError, arg, expected, f"shape {tuple(scale.shape)}")
    except AttributeError:
        require_tensors(
            a=a, b=b, a_scale=a_scale, b_scale=b_scale, out=out, output_scale=output_scale,
            optional=("out", "output_scale"),
        )  # fmt: skip
        raise
    if out is None:
        out = torch.empty((m, n), dtype=dtype, device=device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        if output_scale is not None:
            output_scale.fill_(OUTPUT_SCALE_FLOOR / E4M3_MAX)
        return out.zero_()
    DISPATCH.module(device).gemm_groupwise(
        Groupwise(a, b, a_scale, b_scale, a_mn, b_mn, gm, gn, gk, out, output_scale)
    )
    return out


def _fail_scale(scale, arg: str, device) -> None:
    if scale.dtype != _FLOAT32:
        fail(ValueError, arg, "dtype torch.float32 (dequantization multipliers)", f"dtype {scale.dtype}")
    fail(ValueError, arg, f"a tensor on {device} (the device of `a`)", f"a tensor on {scale.device}")


def _check_fp8_output(m: int, n: int, out, dtype, output_scale) -> None:
    """With ``output_scale``: FP8 E4M3 output and a contiguous ``(m, ceil(n / 128))`` scale."""
    if dtype != _E4M3:
        expected = "torch.float8_e4m3fn (the output dtype when `output_scale` is given)"
        fail(ValueError, "out" if out is not None else "out_dtype", expected, describe(dtype))
    shape = (m, ceil_div(n, OUTPUT_SCALE_BLOCK))
    if output_scale.shape != shape or not output_scale.is_contiguous():
        fail(ValueError, "output_scale", f"a contiguous tensor of shape {shape}", output_scale)
