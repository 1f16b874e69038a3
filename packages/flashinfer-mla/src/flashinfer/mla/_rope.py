"""RoPE + FP8 quantization for MLA and GQA/MHA attention (public as ``flashinfer.rope``).

``rope_quantize_fp8`` and ``mla_rope_quantize_fp8`` have FlashInfer v0.6.17's signatures. The
implementation is chosen by the tensors' device (see :mod:`flashinfer.mla._dispatch`).
"""

from __future__ import annotations

import math

import torch

from .._core.checks import check_device, check_last_dim_contiguous, check_tensor, fail
from ._dispatch import DISPATCH

__all__ = ["mla_rope_quantize_fp8", "rope_quantize_fp8"]

_INPUT_DTYPES = (torch.float16, torch.bfloat16)
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_CACHE_DTYPES = (torch.float32, torch.bfloat16)
_POS_DTYPES = (torch.int32, torch.int64)


def rope_quantize_fp8(
    q_rope: torch.Tensor,
    k_rope: torch.Tensor,
    q_nope: torch.Tensor | None,
    k_nope: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    pos_ids: torch.Tensor,
    is_neox: bool = True,
    quantize_dtype: torch.dtype | None = None,
    quant_scale_q: float = 1.0,
    quant_scale_kv: float = 1.0,
    q_rope_out: torch.Tensor | None = None,
    k_rope_out: torch.Tensor | None = None,
    q_nope_out: torch.Tensor | None = None,
    k_nope_out: torch.Tensor | None = None,
    enable_pdl: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Apply RoPE to the rope parts of Q and K, then scale and cast all four parts to FP8.

    Parameters
    ----------
    q_rope : torch.Tensor
        ``[nnz, num_q_heads, rope_dim]`` float16 or bfloat16.
    k_rope : torch.Tensor
        MLA mode: 2-D ``[nnz, rope_dim]`` (one latent KV head). GQA/MHA mode: 3-D
        ``[nnz, num_k_heads, rope_dim]`` (``num_k_heads`` may be 1; a stride-0 head dimension
        from ``expand`` is fine).
    q_nope : torch.Tensor or None
        ``[nnz, num_q_heads, nope_dim]``, same dtype as ``q_rope``. None means ``nope_dim == 0``.
    k_nope : torch.Tensor or None
        ``[nnz, nope_dim]`` or ``[nnz, num_k_heads, nope_dim]`` (same rank as ``k_rope``).
    cos_sin_cache : torch.Tensor
        ``[max_pos, rope_dim]`` float32 (or bfloat16), contiguous. Row ``p`` holds
        ``cos(p f_0) .. cos(p f_{rope_dim/2-1})`` then the matching sines.
    pos_ids : torch.Tensor
        ``[nnz]`` int32 or int64, contiguous: the position of each token. A position outside
        ``[0, max_pos)`` is never read; that token's rope outputs are NaN.
    is_neox : bool
        True: rotate the two halves (NeoX). False: rotate adjacent pairs (GPT-J, DeepSeek).
    quantize_dtype : torch.dtype, optional
        ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``. Default: the dtype of the first given
        output, else e4m3.
    quant_scale_q, quant_scale_kv : float
        Quantization multipliers: ``q_out = fp8(rot(q) * quant_scale_q)``, likewise for K with
        ``quant_scale_kv``. The cast saturates to the format's finite maximum.
    q_rope_out, k_rope_out, q_nope_out, k_nope_out : torch.Tensor, optional
        FP8 outputs with the shapes of their inputs, written in place. Only the last dimension
        must be contiguous, so they may be slices of one merged buffer, e.g.
        ``q_fp8[..., :512]`` and ``q_fp8[..., 512:]`` of a ``[nnz, H, 576]`` tensor.
        Missing outputs are allocated contiguous.
    enable_pdl : bool
        Accepted for compatibility (a launch attribute on NVIDIA); no effect on results.

    Returns
    -------
    tuple of torch.Tensor
        ``(q_rope_out, k_rope_out, q_nope_out, k_nope_out)``: the given buffers themselves, or
        the allocated ones.

    Raises
    ------
    ValueError
        ``"cos_sin_cache should be float32"`` for a cache that is neither float32 nor bfloat16;
        a cache whose row length is not ``rope_dim``; tensors on different devices.
    RuntimeError
        The checks FlashInfer makes in C++: input/output dtypes, ranks, matching ``nnz``, head
        counts, rope and nope dims, and last-dimension contiguity.

    Notes
    -----
    Inputs may have any token and head strides (e.g. a transposed ``bmm`` output) as long as
    the last dimension is contiguous. The math is float32 from the 16-bit inputs, with no
    intermediate rounding.

    Examples
    --------
    >>> import torch, flashinfer.rope
    >>> q = torch.randn(3, 4, 576, dtype=torch.bfloat16)
    >>> k = torch.randn(3, 576, dtype=torch.bfloat16)
    >>> inv = 10000.0 ** (-torch.arange(0, 64, 2).float() / 64)
    >>> ang = torch.arange(16).float()[:, None] * inv
    >>> cache = torch.cat((ang.cos(), ang.sin()), dim=-1)
    >>> q_fp8 = torch.empty(3, 4, 576, dtype=torch.float8_e4m3fn)
    >>> outs = flashinfer.rope.rope_quantize_fp8(
    ...     q[..., 512:], k[:, 512:], q[..., :512], k[:, :512], cache, torch.arange(3),
    ...     is_neox=False, q_rope_out=q_fp8[..., 512:], q_nope_out=q_fp8[..., :512])
    >>> outs[0].data_ptr() == q_fp8[..., 512:].data_ptr()
    True
    """
    given = (q_rope_out, k_rope_out, q_nope_out, k_nope_out)
    if quantize_dtype is None:
        quantize_dtype = next((o.dtype for o in given if o is not None), torch.float8_e4m3fn)
    if not _args_ok(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, quantize_dtype,
                    quant_scale_q, quant_scale_kv, given):  # fmt: skip
        # Not the common, valid case: run every check to say exactly what is wrong.
        k_is_2d = k_rope.dim() == 2 if isinstance(k_rope, torch.Tensor) else False
        q_nope, k_nope = _check_all(
            q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, quantize_dtype,
            quant_scale_q, quant_scale_kv, given, k_is_2d,
        )  # fmt: skip
    inputs = (q_rope, k_rope, q_nope, k_nope)
    q_rope_out, k_rope_out, q_nope_out, k_nope_out = (
        out if out is not None else torch.empty(x.shape, dtype=quantize_dtype, device=x.device)
        for out, x in zip(given, inputs)
    )
    if q_rope.shape[0] > 0:
        DISPATCH.module(q_rope.device).rope_quantize(
            q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, bool(is_neox),
            float(quant_scale_q), float(quant_scale_kv), q_rope_out, k_rope_out, q_nope_out, k_nope_out,
        )  # fmt: skip
    return q_rope_out, k_rope_out, q_nope_out, k_nope_out


def _args_ok(
    q_rope, k_rope, q_nope, k_nope, cache, pos_ids, quantize_dtype, scale_q, scale_kv, given
) -> bool:
    """True when every check passes, read in one pass (the hot path); False says "check in detail".

    It may be stricter than the detailed checks (then they run and pass), never looser.
    """
    try:
        dtype, device = q_rope.dtype, q_rope.device
        nnz, heads, rope_dim = q_rope.shape
        nope_dim = q_nope.shape[-1]
        k_dim = k_rope.dim()
        k_lead = (nnz,) if k_dim == 2 else (nnz, k_rope.shape[1]) if k_dim == 3 else None
        ok = (
            k_lead is not None
            and dtype in _INPUT_DTYPES
            and q_nope.dtype == dtype
            and k_rope.dtype == dtype
            and k_nope.dtype == dtype
            and q_nope.shape == (nnz, heads, nope_dim)
            and k_rope.shape == (*k_lead, rope_dim)
            and k_nope.shape == (*k_lead, nope_dim)
            and rope_dim % 2 == 0
            and q_rope.stride()[-1] == 1
            and q_nope.stride()[-1] == 1
            and k_rope.stride()[-1] == 1
            and k_nope.stride()[-1] == 1
            and q_nope.device == device
            and k_rope.device == device
            and k_nope.device == device
            and cache.dtype in _CACHE_DTYPES
            and cache.dim() == 2
            and cache.shape[1] == rope_dim
            and cache.shape[0] > 0
            and cache.is_contiguous()
            and cache.device == device
            and pos_ids.dtype in _POS_DTYPES
            and pos_ids.shape == (nnz,)
            and pos_ids.is_contiguous()
            and pos_ids.device == device
            and quantize_dtype in _FP8_DTYPES
            and type(scale_q) is float
            and type(scale_kv) is float
            and math.isfinite(scale_q)
            and math.isfinite(scale_kv)
        )
        for out, x in zip(given, (q_rope, k_rope, q_nope, k_nope)):
            if ok and out is not None:
                ok = (
                    out.dtype == quantize_dtype
                    and out.shape == x.shape
                    and out.stride()[-1] == 1
                    and out.device == device
                )
        return ok
    except (AttributeError, TypeError, ValueError):
        return False


def _check_all(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, quantize_dtype, quant_scale_q,
               quant_scale_kv, given, k_is_2d):  # fmt: skip
    """Every check, each failure naming its argument; returns the nope inputs (None made empty)."""
    tensors = {"q_rope": q_rope, "k_rope": k_rope, "cos_sin_cache": cos_sin_cache, "pos_ids": pos_ids}
    for name, x in tensors.items():
        check_tensor(x, name)
    q_nope = _empty_nope(q_nope, q_rope, "q_nope")
    k_nope = _empty_nope(k_nope, k_rope, "k_nope")
    inputs = {"q_rope": q_rope, "k_rope": k_rope, "q_nope": q_nope, "k_nope": k_nope}
    outputs = dict(zip(("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"), given))
    _check_rope(inputs, outputs, cos_sin_cache, pos_ids, quantize_dtype, k_is_2d)
    for name, scale in (("quant_scale_q", quant_scale_q), ("quant_scale_kv", quant_scale_kv)):
        # Host numbers only: reading a tensor would synchronize (and break graph capture).
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            fail(TypeError, name, "a Python float", scale)
        if not math.isfinite(scale):
            fail(ValueError, name, "a finite float", scale)
    return q_nope, k_nope


def mla_rope_quantize_fp8(
    q_rope: torch.Tensor,
    k_rope: torch.Tensor,
    q_nope: torch.Tensor,
    k_nope: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    pos_ids: torch.Tensor,
    is_neox: bool = True,
    quantize_dtype: torch.dtype | None = None,
    quant_scale_q: float = 1.0,
    quant_scale_kv: float = 1.0,
    q_rope_out: torch.Tensor | None = None,
    k_rope_out: torch.Tensor | None = None,
    q_nope_out: torch.Tensor | None = None,
    k_nope_out: torch.Tensor | None = None,
    enable_pdl: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA spelling of :func:`rope_quantize_fp8`; forwards every argument to it.

    DeepSeek MLA shapes: ``q_rope [nnz, H, 64]``, ``q_nope [nnz, H, 512]``,
    ``k_rope [nnz, 64]``, ``k_nope [nnz, 512]``; the outputs are typically the two slices of a
    merged ``[..., 576]`` FP8 buffer. See :func:`rope_quantize_fp8` for every parameter.

    Examples
    --------
    >>> import torch, flashinfer.rope
    >>> cache = torch.cat((torch.ones(8, 32), torch.zeros(8, 32)), dim=-1)  # position 0 rows
    >>> q = torch.randn(2, 16, 576, dtype=torch.bfloat16)
    >>> k = torch.randn(2, 576, dtype=torch.bfloat16)
    >>> q8, k8 = torch.empty(2, 16, 576, dtype=torch.float8_e4m3fn), torch.empty(2, 576, dtype=torch.float8_e4m3fn)
    >>> _ = flashinfer.rope.mla_rope_quantize_fp8(
    ...     q[..., 512:], k[:, 512:], q[..., :512], k[:, :512], cache, torch.zeros(2, dtype=torch.int64),
    ...     False, torch.float8_e4m3fn, 2.0, 0.5, q8[..., 512:], k8[:, 512:], q8[..., :512], k8[:, :512])
    >>> bool((q8.float() == (q.float() * 2).to(torch.float8_e4m3fn).float()).all())
    True
    """
    return rope_quantize_fp8(
        q_rope,
        k_rope,
        q_nope,
        k_nope,
        cos_sin_cache,
        pos_ids,
        is_neox,
        quantize_dtype,
        quant_scale_q,
        quant_scale_kv,
        q_rope_out,
        k_rope_out,
        q_nope_out,
        k_nope_out,
        enable_pdl,
    )


def _empty_nope(nope: torch.Tensor | None, rope: torch.Tensor, name: str) -> torch.Tensor:
    # FlashInfer turns a missing nope part into an empty tensor (nope_dim == 0).
    if nope is None:
        return rope.new_empty((*rope.shape[:-1], 0))
    check_tensor(nope, name)
    return nope


def _check_rope(inputs, outputs, cos_sin_cache, pos_ids, quantize_dtype, k_is_2d) -> None:
    """FlashInfer's checks: C++ ones as RuntimeError, Python ones as ValueError."""
    q_rope = inputs["q_rope"]
    if q_rope.dim() != 3:
        fail(RuntimeError, "q_rope", "a 3-D [nnz, num_q_heads, rope_dim] tensor", q_rope)
    if inputs["q_nope"].dim() != 3:
        fail(RuntimeError, "q_nope", "a 3-D [nnz, num_q_heads, nope_dim] tensor", inputs["q_nope"])
    k_ndim = inputs["k_rope"].dim()
    if k_ndim not in (2, 3) or inputs["k_nope"].dim() != k_ndim:
        fail(
            RuntimeError,
            "k_rope and k_nope",
            "both 2-D (MLA) or both 3-D (GQA/MHA)",
            f"{k_ndim}-D and {inputs['k_nope'].dim()}-D",
        )
    for name, x in inputs.items():
        if x.dtype not in _INPUT_DTYPES or x.dtype != q_rope.dtype:
            fail(
                RuntimeError,
                name,
                "float16 or bfloat16 (Input dtype must be float16 or bfloat16, all the same)",
                f"dtype {x.dtype}",
            )
    if quantize_dtype not in _FP8_DTYPES:
        fail(
            RuntimeError,
            "quantize_dtype",
            "torch.float8_e4m3fn or torch.float8_e5m2 (Output dtype must be float8_e4m3fn or float8_e5m2)",
            quantize_dtype,
        )
    nnz, q_heads, rope_dim = q_rope.shape
    nope_dim = inputs["q_nope"].shape[-1]
    k_heads = 1 if k_is_2d else inputs["k_rope"].shape[1]
    for name, x in inputs.items():
        last = rope_dim if "rope" in name else nope_dim
        heads = q_heads if name.startswith("q") else k_heads
        expected = (nnz, last) if (name.startswith("k") and k_is_2d) else (nnz, heads, last)
        if tuple(x.shape) != expected:
            fail(
                RuntimeError,
                name,
                f"shape {expected} (nnz, head count, rope/nope dim consistent with q_rope, q_nope)",
                x,
            )
        check_last_dim_contiguous(x, name, RuntimeError)
        check_device(x, name, q_rope.device, "q_rope")
    for (name, out), x in zip(outputs.items(), inputs.values()):
        if out is None:
            continue
        check_tensor(out, name)
        if out.dtype != quantize_dtype:
            fail(
                RuntimeError,
                name,
                f"dtype {quantize_dtype} like every output (Output dtype must be float8_e4m3fn or float8_e5m2)",
                f"dtype {out.dtype}",
            )
        if out.shape != x.shape:
            fail(RuntimeError, name, f"shape {tuple(x.shape)} (the shape of its input)", out)
        check_last_dim_contiguous(out, name, RuntimeError)
        check_device(out, name, q_rope.device, "q_rope")
    if rope_dim % 2:
        fail(RuntimeError, "q_rope", "an even rope_dim", f"rope_dim {rope_dim}")
    if cos_sin_cache.dtype not in _CACHE_DTYPES:
        raise ValueError(f"cos_sin_cache should be float32 (or bfloat16), got dtype {cos_sin_cache.dtype}")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != rope_dim or cos_sin_cache.shape[0] == 0:
        fail(
            ValueError,
            "cos_sin_cache",
            f"a 2-D [max_pos > 0, {rope_dim}] tensor (rows as long as rope_dim)",
            cos_sin_cache,
        )
    if pos_ids.dtype not in (torch.int32, torch.int64) or tuple(pos_ids.shape) != (nnz,):
        fail(ValueError, "pos_ids", f"an int32 or int64 tensor of shape ({nnz},)", pos_ids)
    for name, x in (("cos_sin_cache", cos_sin_cache), ("pos_ids", pos_ids)):
        if not x.is_contiguous():
            fail(ValueError, name, "a contiguous tensor", x)
        check_device(x, name, q_rope.device, "q_rope")
