"""RoPE + FP8 quantization for MLA and GQA/MHA attention (public as ``flashinfer.rope``).

``rope_quantize_fp8`` and ``mla_rope_quantize_fp8`` have FlashInfer v0.6.17's signatures. The
implementation is chosen by the tensors' device (see :mod:`flashinfer.mla._dispatch`).

Exception types follow upstream: its C++ checks (every tensor dtype, shape, stride and device)
surface as ``RuntimeError``, its Python check of the cache's dtype as ``ValueError``;
non-tensors and non-float scales are ``TypeError``, non-finite scales ``ValueError``.
"""

from __future__ import annotations

import inspect
import math
import types

import torch

from .._core.checks import check_device, check_last_dim_contiguous, describe, fail, require_tensors
from .._core.compile import one_node
from .._core.replay import Replays
from ..api_logging import flashinfer_api
from ._args import ROPE_OUTPUTS as _OUTPUTS
from ._args import Rope, rope_output_dtype, rope_outputs
from ._dispatch import DISPATCH, compile_layer

__all__ = ["mla_rope_quantize_fp8", "rope_quantize_fp8"]

_INPUT_DTYPES = (torch.float16, torch.bfloat16)
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_CACHE_DTYPES = (torch.float32, torch.bfloat16)
_POS_DTYPES = (torch.int32, torch.int64)
_PARTS = ("q_rope", "k_rope", "q_nope", "k_nope")


@one_node(compile_layer)
@flashinfer_api
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
        ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``: the dtype of the outputs allocated
        here (as upstream, it is not read when all four outputs are given; the given outputs
        share one FP8 dtype). Default: the dtype of the first given output, else e4m3.
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
    RuntimeError
        Every tensor mistake FlashInfer checks in C++: dtypes, ranks, matching ``nnz``, head
        counts, rope and nope dims, last-dimension contiguity, devices, the cache's shape and
        ``pos_ids``; ``quantize_dtype`` not FP8.
    ValueError
        ``"cos_sin_cache should be float32"`` (upstream's Python check) for a cache that is
        neither float32 nor bfloat16; a scale that is not finite.
    TypeError
        A non-tensor where a tensor belongs; a scale that is not a Python float or int.

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
    # a call signature seen before: its checks passed, its launch repeats (flashinfer._core.replay);
    # the serving call: both nope parts and every output given
    key = None
    replayed = _REPLAYS.serves(q_rope)  # False for a non-tensor: the checks below say
    if replayed and (
        q_nope is not None
        and k_nope is not None
        and q_rope_out is not None
        and k_rope_out is not None
        and q_nope_out is not None
        and k_nope_out is not None
    ):
        tensors = (
            q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, q_rope_out, k_rope_out, q_nope_out, k_nope_out
        )  # fmt: skip
        options = (is_neox, quantize_dtype, quant_scale_q, quant_scale_kv, enable_pdl)
        key = (q_rope.shape, options, tuple(map(type, options)))
        replay = _REPLAYS.find(key, tensors)
        if replay is not None:
            is_neox, quant_scale_q, quant_scale_kv, impl_replay = replay
            impl_replay(
                Rope._make((
                    q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox, quant_scale_q,
                    quant_scale_kv, q_rope_out, k_rope_out, q_nope_out, k_nope_out,
                ))
            )  # fmt: skip
            return given
    try:
        dtype_arg = "quantize_dtype"
        if quantize_dtype is None:  # upstream: the first given output's dtype, else e4m3
            quantize_dtype, dtype_arg = rope_output_dtype(given)
        elif (
            q_rope_out is not None
            and k_rope_out is not None
            and q_nope_out is not None
            and k_nope_out is not None
            and quantize_dtype in _FP8_DTYPES  # anything else is refused, as a misuse
        ):  # upstream reads quantize_dtype only to allocate missing outputs
            dtype_arg, quantize_dtype = "q_rope_out", q_rope_out.dtype
        if q_nope is None:  # FlashInfer turns a missing nope part into an empty one
            q_nope = q_rope.new_empty((*q_rope.shape[:-1], 0))
        if k_nope is None:
            k_nope = k_rope.new_empty((*k_rope.shape[:-1], 0))
        inputs = (q_rope, k_rope, q_nope, k_nope)
        _check_tensors(inputs, given, cos_sin_cache, pos_ids, quantize_dtype, dtype_arg)
    except AttributeError:
        require_tensors(
            q_rope=q_rope,
            k_rope=k_rope,
            q_nope=q_nope,
            k_nope=k_nope,
            cos_sin_cache=cos_sin_cache,
            pos_ids=pos_ids,
            **dict(zip(_OUTPUTS, given)),
            optional=("q_nope", "k_nope", *_OUTPUTS),
        )
        raise
    # Host numbers only: reading a tensor would synchronize (and break graph capture).
    if type(quant_scale_q) is not float or not math.isfinite(quant_scale_q):
        quant_scale_q = _check_quant_scale(quant_scale_q, "quant_scale_q")
    if type(quant_scale_kv) is not float or not math.isfinite(quant_scale_kv):
        quant_scale_kv = _check_quant_scale(quant_scale_kv, "quant_scale_kv")
    if q_rope_out is None or k_rope_out is None or q_nope_out is None or k_nope_out is None:
        q_rope_out, k_rope_out, q_nope_out, k_nope_out = rope_outputs(inputs, given, quantize_dtype)
    if q_rope.shape[0] > 0:
        impl_replay = DISPATCH.module(q_rope.device).rope_quantize(
            Rope(
                q_rope,
                k_rope,
                q_nope,
                k_nope,
                cos_sin_cache,
                pos_ids,
                bool(is_neox),
                quant_scale_q,
                quant_scale_kv,
                q_rope_out,
                k_rope_out,
                q_nope_out,
                k_nope_out,
            )
        )
        if key is not None and impl_replay is not None:
            _REPLAYS.put(key, tensors, (bool(is_neox), quant_scale_q, quant_scale_kv, impl_replay))
    return q_rope_out, k_rope_out, q_nope_out, k_nope_out


# replays of the call signatures seen (flashinfer._core.replay)
_REPLAYS = Replays("rope_quantize_fp8")


def _check_quant_scale(scale, name: str) -> float:
    """A finite Python float or int (a tensor would need a host read)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        fail(TypeError, name, "a Python float", describe(scale))
    if not math.isfinite(scale):
        fail(ValueError, name, "a finite float", describe(scale))
    return float(scale)


def _check_tensors(inputs, outputs, cache, pos_ids, quantize_dtype, dtype_arg: str) -> None:
    """Every tensor rule, each once, in the order FlashInfer checks them."""
    q_rope, k_rope, q_nope, k_nope = inputs
    dtype, device = q_rope.dtype, q_rope.device
    q_shape = q_rope.shape
    if len(q_shape) != 3:
        fail(RuntimeError, "q_rope", "a 3-D [nnz, num_q_heads, rope_dim] tensor", q_rope)
    nnz, q_heads, rope_dim = q_shape
    nope_dim = q_nope.shape[-1]
    rotary = cache.shape[-1] if cache.dim() == 2 else rope_dim
    if rotary != rope_dim and rotary == nope_dim:
        # the rope and nope parts passed in each other's places: say so, not that the cache is wrong
        expected = (
            f"last dimension {rotary} (the rotary dim of `cos_sin_cache`; rope and nope parts swapped?)"
        )
        fail(RuntimeError, "q_rope", expected, q_rope)
    k_dim = k_rope.dim()
    if k_dim not in (2, 3) or k_nope.dim() != k_dim:
        fail(
            RuntimeError,
            "k_rope and k_nope",
            "both 2-D (MLA) or both 3-D (GQA/MHA)",
            f"{k_dim}-D and {k_nope.dim()}-D",
        )
    k_lead = (nnz,) if k_dim == 2 else (nnz, k_rope.shape[1])
    shapes = (q_shape, (*k_lead, rope_dim), (nnz, q_heads, nope_dim), (*k_lead, nope_dim))
    if dtype not in _INPUT_DTYPES:
        fail(
            RuntimeError,
            "q_rope",
            "float16 or bfloat16 (Input dtype must be float16 or bfloat16)",
            f"dtype {dtype}",
        )
    if quantize_dtype not in _FP8_DTYPES:
        expected = (
            "torch.float8_e4m3fn or torch.float8_e5m2 (Output dtype must be float8_e4m3fn or float8_e5m2)"
        )
        fail(RuntimeError, dtype_arg, expected, describe(quantize_dtype))
    for name, x, shape, out_name, out in zip(_PARTS, inputs, shapes, _OUTPUTS, outputs):
        if x.dtype != dtype:
            fail(
                RuntimeError,
                name,
                f"dtype {dtype} like `q_rope` (all inputs one 16-bit dtype)",
                f"dtype {x.dtype}",
            )
        if x.shape != shape:
            fail(
                RuntimeError,
                name,
                f"shape {shape} (nnz, head count, rope/nope dim consistent with q_rope, q_nope)",
                x,
            )
        if x.device != device:
            check_device(x, name, device, "q_rope", RuntimeError)
        if x.stride()[-1] != 1:
            check_last_dim_contiguous(x, name, RuntimeError)
        if out is None:
            continue
        if out.dtype != quantize_dtype:
            expected = (
                f"dtype {quantize_dtype} like every output (that of `{dtype_arg}`; Output dtype must be "
                "float8_e4m3fn or float8_e5m2)"
            )
            fail(RuntimeError, out_name, expected, f"dtype {out.dtype}")
        if out.shape != shape:
            fail(RuntimeError, out_name, f"shape {shape} (the shape of `{name}`)", out)
        if out.device != device:
            check_device(out, out_name, device, "q_rope", RuntimeError)
        if out.stride()[-1] != 1:
            check_last_dim_contiguous(out, out_name, RuntimeError)
    if rope_dim % 2:
        fail(RuntimeError, "q_rope", "an even rope_dim", f"rope_dim {rope_dim}")
    if cache.dtype not in _CACHE_DTYPES:
        raise ValueError(f"cos_sin_cache should be float32 (or bfloat16), got dtype {cache.dtype}")
    cache_shape = cache.shape
    if (
        len(cache_shape) != 2
        or cache_shape[1] != rope_dim
        or cache_shape[0] == 0
        or not cache.is_contiguous()
    ):
        fail(
            RuntimeError,
            "cos_sin_cache",
            f"a contiguous 2-D [max_pos > 0, {rope_dim}] tensor (rows as long as rope_dim)",
            cache,
        )
    if cache.device != device:
        check_device(cache, "cos_sin_cache", device, "q_rope", RuntimeError)
    if pos_ids.dtype not in _POS_DTYPES or pos_ids.shape != (nnz,) or not pos_ids.is_contiguous():
        fail(RuntimeError, "pos_ids", f"a contiguous int32 or int64 tensor of shape ({nnz},)", pos_ids)
    if pos_ids.device != device:
        check_device(pos_ids, "pos_ids", device, "q_rope", RuntimeError)


def _another_name(fn, name: str, doc: str, annotations: dict[str, str]):
    """``fn`` (as decorated) under another public name, with its own docstring and annotations.

    The function runs ``fn``'s code with ``fn``'s defaults: a forwarding call in between would
    cost host time on every call.
    """
    named = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    named.__dict__.update(fn.__dict__)
    # fn's hand-off under torch.compile, for torch.compile(named) too (flashinfer._core.compile)
    named._torchdynamo_wrapper_id = id(named)
    named.__qualname__, named.__doc__, named.__module__ = name, doc, fn.__module__
    named.__annotations__ = {**fn.__annotations__, **annotations}
    signature = inspect.signature(fn)
    named.__signature__ = signature.replace(
        parameters=[
            parameter.replace(annotation=annotations.get(parameter.name, parameter.annotation))
            for parameter in signature.parameters.values()
        ]
    )
    return named


_MLA_ROPE_DOC = """MLA spelling of :func:`rope_quantize_fp8`: the same function under upstream's other name.

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


# upstream's signature has the nope parts required; the function accepts None like rope_quantize_fp8
mla_rope_quantize_fp8 = flashinfer_api(
    _another_name(
        rope_quantize_fp8,
        "mla_rope_quantize_fp8",
        _MLA_ROPE_DOC,
        {"q_nope": "torch.Tensor", "k_nope": "torch.Tensor"},
    )
)
