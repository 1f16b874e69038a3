"""``gemm_fp8_nt_groupwise`` and ``gemm_fp8_nt_blockscaled``: the dense block-scaled FP8 NT GEMMs.

``gemm_fp8_nt_blockscaled`` is ``gemm_fp8_nt_groupwise`` at granularity ``(128, 128, 128)`` with
the ``cutlass`` name's rules; both hand :class:`~._args.Groupwise` to the implementation.
"""

from __future__ import annotations

import torch

from flashinfer._core.backends import gated
from flashinfer._core.checks import (
    E4M3,
    FLOAT32,
    check_device,
    check_fp8,
    check_k_major,
    check_no_overlap,
    check_out,
    check_scale,
    describe,
    fail,
    require_tensors,
)
from flashinfer._core.compile import one_node
from flashinfer._core.constants import OUTPUT_SCALE_BLOCK
from flashinfer._core.errors import KernelCheckError
from flashinfer.api_logging import flashinfer_api

from ._args import Groupwise
from ._backends import GEMM_FP8_NT_BLOCKSCALED, GEMM_FP8_NT_GROUPWISE
from ._dispatch import DISPATCH, compile_layer, run

_E4M3 = torch.float8_e4m3fn
_BF16 = torch.bfloat16
_OUT_16BIT = (torch.bfloat16, torch.float16)
# (gm, gn, gk) that upstream's kernels run: per-row or 128-row A blocks, 128x128 B blocks.
_GRANULARITIES = ((1, 128, 128), (128, 128, 128))
_BLOCK_GRANULARITY = _GRANULARITIES[1]
_MODES = (None, "K", "MN")
_NAMES = frozenset(GEMM_FP8_NT_GROUPWISE.names)
_HOLDS = GEMM_FP8_NT_GROUPWISE.holds
_INPUTS = ("a", "b", "a_scale", "b_scale", "output_scale")


def _check_fp8_output(out, dtype, m: int, n: int, device, output_scale) -> None:
    """With ``output_scale``: FP8 E4M3 output and a contiguous float32 ``(m, ceil(n / 128))`` scale."""
    if dtype != _E4M3:
        expected = "torch.float8_e4m3fn (the output dtype when `output_scale` is given)"
        fail(ValueError, "out" if out is not None else "out_dtype", expected, describe(dtype))
    shape = (m, -(-n // OUTPUT_SCALE_BLOCK))
    if output_scale.dtype != FLOAT32 or output_scale.shape != shape or output_scale.device != device:
        check_scale(output_scale, "output_scale", shape, device, "a")
    if not output_scale.is_contiguous():
        fail(ValueError, "output_scale", f"a contiguous tensor of shape {shape}", output_scale)


def _trtllm_orientation(scale, arg: str, blocks: int, kb: int) -> bool:
    """Whether the logical ``(blocks, kb)`` view of ``scale`` is its transpose under the trtllm
    name's convention (whatever ``scale_major_mode`` says): ``a_scale`` MN-major in memory, as a
    contiguous ``(kb, m)`` tensor or its ``(m, kb)`` column-major view (any ``(m, kb)`` view is
    read through its strides; when m == kb a unit first stride means the column-major view);
    ``b_scale`` K-major ``(nb, kb)``, a ``(kb, nb)`` tensor (upstream's docstring) being its
    transpose.
    """
    shape = scale.shape
    if shape == (blocks, kb) and (
        blocks != kb or arg == "b_scale" or (scale.stride(0) == 1 and scale.stride(1) != 1)
    ):
        return False
    if shape == (kb, blocks):
        return True
    layout = "MN-major" if arg == "a_scale" else "K-major"
    fail(
        ValueError,
        arg,
        f"shape ({blocks}, {kb}) or ({kb}, {blocks}) (trtllm: {layout})",
        f"shape {tuple(shape)}",
    )


@one_node(compile_layer)
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
        A performance hint of upstream's CUTLASS kernel, 1 or 2 (under ``cutlass``, as upstream);
        no effect on results.
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
        ``"mudnn"`` (bf16/fp16 output only), ``"mubin"`` (needs ``output_scale``). Every name
        runs on every device.
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
        ``out``, ``[m, n]``: ``out_dtype`` (bfloat16 by default), or float8_e4m3fn with
        ``output_scale``.

    Raises
    ------
    ValueError
        Unknown ``backend``; ``a``/``b`` not 2-D e4m3 K-major or with different k ("Shape
        mismatch"); output dtype not bf16/fp16 ("Unsupported output dtype"), or not e4m3 with
        ``output_scale``; ``cutlass`` without ``scale_major_mode``; ``trtllm`` with another
        granularity or k < 256; ``cutile`` with ``"MN"`` or another granularity; scales that
        are not float32 or of the expected shape; ``out`` / ``output_scale`` of the wrong shape
        or device, or overlapping an input.
        Upstream's C++ checks, so a ``RuntimeError`` as well: a granularity other than the two
        above ("Unsupported scale granularity"); ``cutlass`` with ``mma_sm`` not 1 or 2
        ("Unsupported MMA SM").
    TypeError
        ``scale_granularity_mnk`` that is not a sequence.
    flashinfer.utils.BackendSupportedError
        ``backend="mubin"`` without ``output_scale``, ``backend="mudnn"`` with it.

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
        try:
            granularity = tuple(scale_granularity_mnk)
        except TypeError:
            fail(TypeError, "scale_granularity_mnk", "a tuple (gm, gn, gk)", describe(scale_granularity_mnk))
        # out's dtype wins over out_dtype; output_scale means FP8 E4M3
        if out is not None:
            dtype = out.dtype
        else:
            dtype = out_dtype if out_dtype is not None else (_BF16 if output_scale is None else _E4M3)
        if not skip_check:
            if backend not in _NAMES:
                GEMM_FP8_NT_GROUPWISE.check(backend)
            if len(a_shape) != 2 or len(b_shape) != 2:
                arg, x = ("a", a) if len(a_shape) != 2 else ("b", b)
                expected = (
                    f"a 2-D tensor (shape mismatch. a.shape = {tuple(a_shape)}, b.shape = {tuple(b_shape)})"
                )
                fail(ValueError, arg, expected, x)
            if b_shape[1] != a_shape[1]:
                expected = f"shape (n, {a_shape[1]}) (shape mismatch. a.shape[1] = {a_shape[1]})"
                fail(ValueError, "b", expected, f"shape {tuple(b_shape)}")
            if b.device != device:
                check_device(b, "b", device, "a")
            if a.dtype not in E4M3:
                check_fp8(a, "a")
            if b.dtype not in E4M3:
                check_fp8(b, "b")
            if not (a.is_contiguous() and b.is_contiguous()):  # else both are K-major
                check_k_major(a, "a")
                check_k_major(b, "b")
            if scale_major_mode not in _MODES:
                fail(ValueError, "scale_major_mode", "'K', 'MN' or None", describe(scale_major_mode))
            holds = _HOLDS.get(backend)
            if holds is not None and not holds(scale_major_mode, granularity, a_shape[1], output_scale):
                GEMM_FP8_NT_GROUPWISE.enforce(
                    backend, scale_major_mode, granularity, a_shape[1], output_scale
                )
            # upstream's C++ checks, after its Python rules above
            if granularity not in _GRANULARITIES:
                expected = "(1, 128, 128) or (128, 128, 128) (unsupported scale granularity)"
                fail(KernelCheckError, "scale_granularity_mnk", expected, str(granularity))
            if mma_sm != 1 and mma_sm != 2 and backend == "cutlass":
                fail(
                    KernelCheckError, "mma_sm", "1 or 2 (Unsupported MMA SM; backend='cutlass')", repr(mma_sm)
                )
        if backend == "auto":  # FlashInfer's hook; the mubin rule reads only whether a scale came
            GEMM_FP8_NT_GROUPWISE.fill_suitable(
                scale_major_mode, granularity, a_shape[1], None if output_scale is None else True
            )
        (m, k), n = a_shape, b_shape[0]
        gm, gn, gk = granularity
        mb, nb, kb = -(-m // gm), -(-n // gn), -(-k // gk)
        trtllm = backend == "trtllm"
        if not skip_check:
            # the scales' stored shapes: (blocks, k blocks), transposed for "MN"; trtllm takes both
            mn = scale_major_mode == "MN"
            a_blocks = None if trtllm else (kb, mb) if mn else (mb, kb)
            b_blocks = None if trtllm else (kb, nb) if mn else (nb, kb)
            if (
                a_scale.dtype != FLOAT32
                or a_scale.device != device
                or (a_blocks and a_scale.shape != a_blocks)
            ):
                check_scale(a_scale, "a_scale", a_blocks, device, "a")
            if (
                b_scale.dtype != FLOAT32
                or b_scale.device != device
                or (b_blocks and b_scale.shape != b_blocks)
            ):
                check_scale(b_scale, "b_scale", b_blocks, device, "a")
            if output_scale is not None:
                _check_fp8_output(out, dtype, m, n, device, output_scale)
            elif dtype not in _OUT_16BIT:
                expected = "torch.bfloat16 or torch.float16 (unsupported output dtype)"
                fail(ValueError, "out" if out is not None else "out_dtype", expected, describe(dtype))
            if out is not None:  # its dtype is `dtype`
                if out.shape != (m, n) or out.device != device:
                    check_out(out, (m, n), dtype, device)
                check_no_overlap(out, "out", _INPUTS, a, b, a_scale, b_scale, output_scale)
        if trtllm:
            a_mn = _trtllm_orientation(a_scale, "a_scale", mb, kb)
            b_mn = _trtllm_orientation(b_scale, "b_scale", nb, kb)
        else:
            a_mn = b_mn = scale_major_mode == "MN"
    except AttributeError:
        require_tensors(
            a=a,
            b=b,
            a_scale=a_scale,
            b_scale=b_scale,
            out=out,
            output_scale=output_scale,
            optional=("out", "output_scale"),
        )
        raise
    if out is None:  # sizes as arguments (docs/internals.md, host time)
        out = torch.empty(m, n, dtype=dtype, device=device)
    call = Groupwise._make((a, b, a_scale, b_scale, a_mn, b_mn, gm, gn, gk, out, output_scale))
    return run(DISPATCH.module(device).gemm_groupwise, call, k)


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
        A performance hint of upstream's CUTLASS kernel, 1 or 2 (under ``cutlass``, as upstream);
        no effect on results.
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
        ``out``, ``[m, n]`` of ``out_dtype`` (bfloat16 by default).

    Raises
    ------
    ValueError
        As :func:`gemm_fp8_nt_groupwise` with ``backend="cutlass"``: shapes, dtypes, scale
        shapes, ``scale_major_mode=None`` ("scale_major_mode is required in CUTLASS"), ``out``.
        ``mma_sm`` not 1 or 2 ("Unsupported MMA SM", a ``RuntimeError`` as well).

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
        a,
        b,
        a_scale,
        b_scale,
        scale_major_mode,
        mma_sm,
        _BLOCK_GRANULARITY,
        out,
        out_dtype,
        "cutlass",
        None,
        skip_check=skip_check,
    )
