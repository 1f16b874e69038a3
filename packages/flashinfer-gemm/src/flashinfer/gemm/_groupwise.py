"""``gemm_fp8_nt_groupwise``: the groupwise-scaled FP8 NT GEMM with FlashInfer's signature."""

from __future__ import annotations

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import fail
from flashinfer._core.constants import E4M3_MAX, OUTPUT_SCALE_BLOCK, OUTPUT_SCALE_FLOOR
from flashinfer._core.errors import BackendSupportedError
from flashinfer.utils import ceil_div

from ._backends import GEMM_FP8_NT_GROUPWISE
from ._dispatch import DISPATCH
from ._validate import (
    E4M3,
    FLOAT32,
    check_fp8,
    check_out_overlap,
    check_same_device,
    check_scale,
    check_tensor,
    out_overlaps,
)

_OUT_16BIT = (torch.bfloat16, torch.float16)
# (gm, gn, gk) that upstream's kernels run: per-row or 128-row A blocks, 128x128 B blocks.
_GRANULARITIES = ((1, 128, 128), (128, 128, 128))
_TRTLLM_MIN_K = 256


def _check_operands(a, b) -> None:
    check_tensor(a, "a")
    check_tensor(b, "b")
    if a.dim() != 2 or b.dim() != 2:
        arg, x = ("a", a) if a.dim() != 2 else ("b", b)
        fail(
            ValueError,
            arg,
            f"a 2-D tensor (shape mismatch. a.shape = {tuple(a.shape)}, b.shape = {tuple(b.shape)})",
            x,
        )
    if a.shape[1] != b.shape[1]:
        fail(
            ValueError,
            "b",
            f"shape (n, {a.shape[1]}) (shape mismatch. a.shape[1] = {a.shape[1]})",
            f"shape {tuple(b.shape)}",
        )
    check_same_device(b, "b", a.device, "a")
    check_fp8(a, "a", (E4M3,))
    check_fp8(b, "b", (E4M3,))
    for arg, x in (("a", a), ("b", b)):
        if x.shape[1] > 1 and x.stride(1) != 1:
            fail(ValueError, arg, "a K-major tensor (stride 1 along k)", x)


def _output_dtype(out, out_dtype, output_scale) -> torch.dtype:
    """The output dtype: ``out``'s wins over ``out_dtype``; ``output_scale`` means FP8 E4M3."""
    if out is not None:
        return getattr(out, "dtype", None)  # a non-tensor `out` is reported by the checks
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if output_scale is None else E4M3


def _check_output(out, out_dtype, output_scale, dtype, a, b, a_scale, b_scale) -> None:
    m, n, device = a.shape[0], b.shape[0], a.device
    if out is not None:
        check_tensor(out, "out")
    arg = "out" if out is not None else "out_dtype"
    if output_scale is None:
        if dtype not in _OUT_16BIT:
            fail(ValueError, arg, "torch.bfloat16 or torch.float16 (unsupported output dtype)", dtype)
    else:
        if dtype != E4M3:
            fail(
                ValueError, arg, "torch.float8_e4m3fn (the output dtype when `output_scale` is given)", dtype
            )
        check_scale(output_scale, "output_scale", device, "a")
        shape = (m, ceil_div(n, OUTPUT_SCALE_BLOCK))
        if output_scale.shape != shape or not output_scale.is_contiguous():
            fail(ValueError, "output_scale", f"a contiguous tensor of shape {shape}", output_scale)
    if out is not None:
        if out.shape != (m, n):
            fail(ValueError, "out", f"shape {(m, n)} (output shape mismatch)", f"shape {tuple(out.shape)}")
        check_same_device(out, "out", device, "a")
        inputs = {"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, "output_scale": output_scale}
        check_out_overlap(out, inputs)


def _check_backend_rules(backend, scale_major_mode, granularity, k, output_scale) -> None:
    GEMM_FP8_NT_GROUPWISE.check(backend)
    if scale_major_mode not in (None, "K", "MN"):
        fail(ValueError, "scale_major_mode", "'K', 'MN' or None", scale_major_mode)
    if granularity not in _GRANULARITIES:
        fail(ValueError, "scale_granularity_mnk", "(1, 128, 128) or (128, 128, 128)", granularity)
    if backend == "mubin" and output_scale is None:
        raise BackendSupportedError(
            "gemm_fp8_nt_groupwise backend 'mubin' writes FP8 E4M3 output and needs `output_scale`; "
            "got output_scale=None (use backend='auto' or 'mudnn' for bf16/fp16 output)"
        )
    if backend == "cutlass" and scale_major_mode is None:
        fail(ValueError, "scale_major_mode", "'K' or 'MN' (scale_major_mode is required in CUTLASS)", None)
    if backend == "trtllm":
        if granularity != (1, 128, 128):
            fail(
                ValueError,
                "scale_granularity_mnk",
                "(1, 128, 128) (scale_granularity_mnk must be (1, 128, 128) in TRTLLM)",
                granularity,
            )
        if k < _TRTLLM_MIN_K:
            fail(
                ValueError,
                "a",
                f"a.shape[1] >= {_TRTLLM_MIN_K} (a.shape[1] must be >= 256 in TRTLLM)",
                f"a.shape[1] = {k}",
            )
    if backend == "cutile":
        if scale_major_mode == "MN":
            fail(
                ValueError,
                "scale_major_mode",
                "'K' or None (cutile supports scale_major_mode='K' only)",
                scale_major_mode,
            )
        if granularity != (1, 128, 128):
            fail(
                ValueError,
                "scale_granularity_mnk",
                "(1, 128, 128) (cutile supports scale_granularity_mnk=(1, 128, 128) only)",
                granularity,
            )


def _blocks_view(scale, arg: str, blocks: int, kb: int, mode: str):
    """The logical ``(blocks, kb)`` view of a scale stored K-major ``(blocks, kb)`` or MN-major ``(kb, blocks)``."""
    if mode == "K" and scale.shape == (blocks, kb):
        return scale
    if mode == "MN" and scale.shape == (kb, blocks):
        return scale.t()
    expected = (blocks, kb) if mode == "K" else (kb, blocks)
    fail(ValueError, arg, f"shape {expected} (scale_major_mode={mode!r})", f"shape {tuple(scale.shape)}")


def _trtllm_a_view(a_scale, m: int, kb: int):
    """trtllm's a_scale is MN-major in memory: element (i, kb) at offset ``kb * m + i``.

    A contiguous ``(kb, m)`` tensor and its ``(m, kb)`` column-major view (strides ``(1, m)``)
    both qualify; any ``(m, kb)`` view is read through its strides. When m == kb the shape
    cannot tell, so a unit first stride means the column-major view.
    """
    if a_scale.shape == (m, kb) and (m != kb or (a_scale.stride(0) == 1 and a_scale.stride(1) != 1)):
        return a_scale
    if a_scale.shape == (kb, m):
        return a_scale.t()
    fail(
        ValueError,
        "a_scale",
        f"shape ({kb}, {m}) or ({m}, {kb}) with strides (1, {m}) (trtllm: MN-major)",
        f"shape {tuple(a_scale.shape)}",
    )


def _trtllm_b_view(b_scale, nb: int, kb: int):
    """trtllm's b_scale is K-major ``(nb, kb)``; a ``(kb, nb)`` tensor (upstream's docstring) is its transpose."""
    if b_scale.shape == (nb, kb):
        return b_scale
    if b_scale.shape == (kb, nb):
        return b_scale.t()
    fail(ValueError, "b_scale", f"shape ({nb}, {kb}) (trtllm: K-major)", f"shape {tuple(b_scale.shape)}")


def _scale_views(a_scale, b_scale, backend, scale_major_mode, granularity, m, n, k):
    gm, gn, gk = granularity
    kb = ceil_div(k, gk)
    if backend == "trtllm":
        return _trtllm_a_view(a_scale, m, kb), _trtllm_b_view(b_scale, ceil_div(n, gn), kb)
    mode = scale_major_mode or "K"
    return (
        _blocks_view(a_scale, "a_scale", ceil_div(m, gm), kb, mode),
        _blocks_view(b_scale, "b_scale", ceil_div(n, gn), kb, mode),
    )


_NAMES = frozenset(GEMM_FP8_NT_GROUPWISE.names)
_MODES = (None, "K", "MN")


def _args_ok(
    a, b, a_scale, b_scale, scale_major_mode, granularity, out, dtype, backend, output_scale
) -> bool:
    """True when every check passes (the hot path); FP8 output and ``mubin`` take the detailed checks."""
    try:
        a_shape, b_shape, device = a.shape, b.shape, a.device
        ok = (
            backend in _NAMES
            and output_scale is None
            and dtype in _OUT_16BIT
            and scale_major_mode in _MODES
            and granularity in _GRANULARITIES
            and len(a_shape) == 2
            and len(b_shape) == 2
            and a_shape[1] == b_shape[1]
            and a.dtype == E4M3
            and b.dtype == E4M3
            and (a_shape[1] <= 1 or (a.stride(1) == 1 and b.stride(1) == 1))
            and b.device == device
            and a_scale.dtype == FLOAT32
            and b_scale.dtype == FLOAT32
            and a_scale.device == device
            and b_scale.device == device
            and backend != "mubin"
            and (backend != "cutlass" or scale_major_mode is not None)
            and (backend != "trtllm" or (granularity == (1, 128, 128) and a_shape[1] >= _TRTLLM_MIN_K))
            and (backend != "cutile" or (scale_major_mode != "MN" and granularity == (1, 128, 128)))
        )
        if ok and out is not None:
            ok = (
                out.device == device and out.shape == (a_shape[0], b_shape[0]) and not out_overlaps(out, a, b)
            )
        return ok
    except AttributeError:
        return False


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
    granularity = tuple(scale_granularity_mnk)
    dtype = _output_dtype(out, out_dtype, output_scale)
    if not skip_check and not _args_ok(
        a, b, a_scale, b_scale, scale_major_mode, granularity, out, dtype, backend, output_scale
    ):
        _check_operands(a, b)
        _check_backend_rules(backend, scale_major_mode, granularity, a.shape[1], output_scale)
        check_scale(a_scale, "a_scale", a.device, "a")
        check_scale(b_scale, "b_scale", a.device, "a")
        _check_output(out, out_dtype, output_scale, dtype, a, b, a_scale, b_scale)
    m, k = a.shape
    n = b.shape[0]
    a_view, b_view = _scale_views(a_scale, b_scale, backend, scale_major_mode, granularity, m, n, k)
    if out is None:
        out = torch.empty((m, n), dtype=dtype, device=a.device)
    if out.numel() == 0:
        return out
    if k == 0:
        if output_scale is not None:
            output_scale.fill_(OUTPUT_SCALE_FLOOR / E4M3_MAX)
        return out.zero_()
    gm, gn, gk = granularity
    DISPATCH.module(a.device).gemm_groupwise(a, b, a_view, b_view, gm, gn, gk, out, output_scale)
    return out
