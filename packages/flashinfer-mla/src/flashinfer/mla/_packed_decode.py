"""``trtllm_batch_decode_with_kv_cache_mla`` over the packed 656-byte FP8 cache.

FlashInfer v0.6.17 serves this form with its ``sparse`` backend (``auto`` picks it on SM120/121):
a BF16 query of width 576, a uint8 cache of 656-byte rows (:mod:`._packed_cache`), per-token
top-k lengths in ``seq_lens``, no ``bmm2_scale``. Here every device serves it, whatever the
backend name, as soon as ``kv_cache`` is uint8. The public function has checked the options
both cache forms share (``backend``, ``max_q_len``, the DCP options, ``use_fp16_softmax``);
:func:`check` states the rest of upstream's ``sparse`` branch
(``_trtllm_batch_decode_sparse_mla_v32_sm120`` and its helpers) in order and wording, each written
once, allocates the outputs and returns the :class:`~._args.Decode` record that the
implementation's ``packed_sparse_decode`` runs (``docs/internals.md``). Nothing is written before
every rule has passed.

Semantics that differ from the 576-wide form, as upstream's ``sparse`` backend has them:

- ``seq_lens`` holds one active top-k length per query token, ``[batch, q_len]`` or
  ``[batch * q_len]`` (a ``[batch]`` tensor is ignored when ``q_len > 1``); None means every
  column is active. Token ``i`` considers index positions ``p < seq_lens[i]`` (no causal shift).
- The LSE includes the sinks' mass, ``log2(sum_j 2^(s_j log2 e) + 2^(sink log2 e))``, and a token
  with no valid key gets LSE ``-inf`` (its sink's value when sinks are given) and output 0.
"""

from __future__ import annotations

import math

import torch

from .._core.checks import check_device, fail, require_tensors
from . import _checks
from ._args import Decode
from ._metadata import check_metadata
from ._packed_cache import KV_SCALE_FORMATS, NOPE, ROPE, ROW_BYTES

__all__ = ["check", "check_scale_format"]

# upstream's messages name its backend this way
_FORM = "SM120 sparse MLA v32/GLM"
MAX_HEADS = 128
_OPTIONAL_TENSORS = ("seq_lens", "out", "lse", "multi_ctas_kv_counter_buffer")
_TENSORS = ("query", "kv_cache", "workspace_buffer", "block_tables", *_OPTIONAL_TENSORS)


def check(
    query,
    kv_cache,
    workspace_buffer,
    kv_lora_rank,
    qk_rope_head_dim,
    block_tables,
    seq_lens,
    sparse_mla_top_k,
    out,
    bmm1_scale,
    bmm2_scale,
    sinks,
    skip_softmax_threshold_scale_factor,
    uses_shared_paged_kv_idx,
    lse,
    return_lse,
    kv_scale_format,
    cum_seq_lens_q,
    multi_ctas_kv_counter_buffer,
    sparse_mla_top_k_lens,
    metadata,
) -> tuple[Decode | None, object]:
    """Validate a call on the packed cache (``kv_cache`` is uint8) and make its record: returns
    ``(call, result)`` like :func:`._unpacked_decode.check` (``call.seq_lens`` holds the per-token
    top-k lengths, or None: every column). The parameters are the public function's, same names,
    in its order (``tests/mla/test_decode_options.py``)."""
    workspace, rope_dim, topk = workspace_buffer, qk_rope_head_dim, sparse_mla_top_k
    counter_buffer = multi_ctas_kv_counter_buffer
    # the serving call passes these rules: the helper states them, in order, for the others
    floats = type(bmm1_scale) is float and type(bmm2_scale) is float  # before any comparison
    usual = floats and -math.inf < bmm1_scale < math.inf and bmm2_scale == 1.0
    extra = sparse_mla_top_k_lens is not None or skip_softmax_threshold_scale_factor is not None
    if not usual or extra or type(topk) is not int or topk <= 0:
        _check_options(
            bmm1_scale, bmm2_scale, topk, sparse_mla_top_k_lens, skip_softmax_threshold_scale_factor
        )
    if not uses_shared_paged_kv_idx:
        raise ValueError(f"{_FORM} expects shared sparse page indices (uses_shared_paged_kv_idx=True)")
    if kv_scale_format not in KV_SCALE_FORMATS:
        check_scale_format(kv_scale_format)
    # ---- tensors, in upstream's order
    try:
        q_shape = query.shape
        if len(q_shape) != 4:
            raise ValueError(f"Expected query.ndim == 4, got {len(q_shape)}")
        if query.dtype != torch.bfloat16:
            raise ValueError(f"{_FORM} expects BF16 query, got {query.dtype}")
        if kv_lora_rank != NOPE or rope_dim != ROPE or q_shape[-1] != NOPE + ROPE:
            raise ValueError(
                f"{_FORM} expects kv_lora_rank=512, qk_rope_head_dim=64, and query head dim 576; got "
                f"kv_lora_rank={kv_lora_rank}, qk_rope_head_dim={rope_dim}, query dim={q_shape[-1]}"
            )
        if not query.is_contiguous():
            fail(ValueError, "query", "a contiguous tensor", query)
        device = query.device
        _checks.check_workspace(workspace, device)
        batch, q_len, heads, _ = q_shape
        # upstream's rules of the slot lists: int32 [batch, q_len, sparse_mla_top_k] on the query's
        # device, contiguous
        if block_tables.dtype != torch.int32:
            raise ValueError(f"block_tables must have dtype torch.int32, got {block_tables.dtype}")
        if block_tables.device != device:
            raise ValueError(f"block_tables must be on query device {device}, got {block_tables.device}")
        if block_tables.shape != (batch, q_len, topk):
            raise ValueError(
                f"{_FORM} expects sparse block_tables shape {(batch, q_len, topk)}, got {tuple(block_tables.shape)}"
            )
        if not block_tables.is_contiguous():
            fail(ValueError, "block_tables", "a contiguous tensor", block_tables)
        _check_cache(kv_cache, device)
        lengths = None if seq_lens is None else _token_lengths(seq_lens, batch, q_len, device)
        if heads > MAX_HEADS:
            raise ValueError(f"Expected num_heads <= {MAX_HEADS}, got {heads}")
        if cum_seq_lens_q is not None:
            expected = "None with the packed kv_cache (its query is [batch, q_len, ...])"
            fail(ValueError, "cum_seq_lens_q", expected, cum_seq_lens_q)
        if sinks is not None:
            sinks = _checks.check_sinks(sinks, heads, device)
        if counter_buffer is not None:
            _checks.check_counter_buffer(counter_buffer, batch, heads, device)
        if metadata is not None:
            check_metadata(metadata, batch, q_len, heads, topk, device)
        out_shape = (batch, q_len, heads, NOPE)
        if out is not None:
            out4 = _checks.check_decode_out(out, out_shape, query, kv_cache, accept_3d=q_len == 1)
        if lse is not None:
            _checks.check_lse(lse, batch * q_len, q_len, heads, device)
    except AttributeError:  # a non-tensor where a tensor belongs: name it (the error path only)
        given = locals()
        require_tensors(ValueError, **{name: given[name] for name in _TENSORS}, optional=_OPTIONAL_TENSORS)
        raise

    # ---- outputs, the record
    if out is None:  # sizes as arguments (docs/internals.md, host time)
        out = out4 = torch.empty(*out_shape, dtype=torch.bfloat16, device=device)
    if lse is None and return_lse:
        lse = torch.empty(batch * q_len, heads, dtype=torch.float32, device=device)
    result = (out, lse) if return_lse else out
    if batch * q_len * heads == 0:
        return None, result
    plan = None if metadata is None else metadata.plan
    record = (
        query,
        kv_cache,
        block_tables,
        lengths,
        float(bmm1_scale),
        1.0,
        sinks,
        out4,
        lse,
        plan,
        workspace,
    )
    return Decode._make(record), result


def _check_options(bmm1_scale, bmm2_scale, topk, sparse_mla_top_k_lens, skip_softmax_threshold_scale_factor):
    """The first option rules of this form, in upstream's order (the page-index and scale-format
    rules follow in :func:`check`)."""
    if (
        type(bmm1_scale) is not float
        or not -math.inf < bmm1_scale < math.inf
        or type(bmm2_scale) is not float
        or bmm2_scale != 1.0
    ):
        _check_packed_scales(bmm1_scale, bmm2_scale)
    if sparse_mla_top_k_lens is not None:
        raise ValueError(
            "sparse_mla_top_k_lens is only supported by the native qk_rope_head_dim=0 MLA path, not with "
            "the packed 656-byte kv_cache (pass the per-token top-k lengths as seq_lens)"
        )
    if type(topk) is not int or topk <= 0:
        raise ValueError(f"{_FORM} requires sparse_mla_top_k > 0, got {topk!r}")
    if skip_softmax_threshold_scale_factor is not None:
        raise ValueError("skip_softmax is not supported for sparse MLA")


def check_scale_format(kv_scale_format) -> str:
    """Upstream's normalization: case-insensitive, ``-`` read as ``_``; returns the normalized name."""
    name = str(kv_scale_format).lower().replace("-", "_")
    if name not in KV_SCALE_FORMATS:
        raise ValueError(f"kv_scale_format must be one of {list(KV_SCALE_FORMATS)}, got {kv_scale_format!r}")
    return name


def _check_packed_scales(bmm1_scale, bmm2_scale) -> None:
    """Upstream's scale rules of this form: Python floats, ``bmm2_scale`` exactly 1.0."""
    for name, scale in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(scale, torch.Tensor) and scale.dtype != torch.float32:
            raise TypeError(f"{name} tensor must have dtype torch.float32, got {scale.dtype}")
    for name, scale in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(scale, torch.Tensor):
            raise ValueError(f"{_FORM} expects {name} to be a float")
    if isinstance(bmm2_scale, bool) or not isinstance(bmm2_scale, (int, float)) or float(bmm2_scale) != 1.0:
        raise ValueError(f"{_FORM} does not support bmm2_scale (it must be 1.0), got {bmm2_scale!r}")
    _checks.check_decode_scale(bmm1_scale, "bmm1_scale", None)


def _check_cache(kv_cache, device) -> None:
    """Upstream's ``_check_sm120_sparse_v32_kv_cache``, then device, alignment and the flat pool."""
    if kv_cache.dim() == 3:
        if kv_cache.shape[-1] != ROW_BYTES:
            raise ValueError(
                f"{_FORM} expects packed kv_cache last dim {ROW_BYTES}, got {tuple(kv_cache.shape)}"
            )
    elif kv_cache.dim() == 4:
        if kv_cache.shape[1] != 1 or kv_cache.shape[-1] != ROW_BYTES:
            raise ValueError(
                f"{_FORM} expects public HND kv_cache shape [num_pages, 1, page_size, {ROW_BYTES}] or 3D "
                f"shorthand [num_pages, page_size, {ROW_BYTES}], got {tuple(kv_cache.shape)}"
            )
    else:
        raise ValueError(f"Expected kv_cache.ndim == 3 or 4, got {kv_cache.dim()}")
    if kv_cache.device != device:
        check_device(kv_cache, "kv_cache", device, "query")
    if kv_cache.data_ptr() % 16:
        fail(
            ValueError,
            "kv_cache",
            "a packed cache starting on a 16-byte boundary",
            f"an address {kv_cache.data_ptr() % 16} bytes past one",
        )
    # whole rows back to back within a page; pages a whole number of rows apart (FlashMLA's
    # cache pads each page by a row): the implementations read one flat pool of 656-byte rows
    strides = kv_cache.stride()
    if strides[-1] != 1 or (kv_cache.shape[-2] > 1 and strides[-2] != ROW_BYTES):
        fail(ValueError, "kv_cache", "whole 656-byte rows back to back within each page", kv_cache)
    if kv_cache.shape[-2] == 1 and kv_cache.shape[0] > 1 and strides[0] % ROW_BYTES:
        fail(ValueError, "kv_cache", "pages a whole number of 656-byte rows apart", kv_cache)
    _checks.check_page_stride(kv_cache, "656-byte")


def _token_lengths(seq_lens, batch, q_len, device):
    """Upstream's ``_normalize_sm120_sparse_v32_topk_length``: ``[batch * q_len]`` int32 or None."""
    if seq_lens.dtype != torch.int32:
        raise ValueError(f"seq_lens must have dtype torch.int32, got {seq_lens.dtype}")
    if seq_lens.device != device:
        raise ValueError(f"seq_lens must be on device {device}, got {seq_lens.device}")
    tokens = batch * q_len
    shape = tuple(seq_lens.shape)
    if shape == (tokens,) and seq_lens.is_contiguous():
        return seq_lens
    if shape == (batch, q_len) or shape == (tokens,):
        # a copy only for a strided tensor (upstream's .contiguous() does the same)
        return seq_lens.reshape(tokens).contiguous()
    if shape == (batch,):
        return None  # per-request KV lengths carry no top-k length: every column is active
    raise ValueError(
        f"seq_lens for {_FORM} must be shaped either ({batch},), ({tokens},), or ({batch}, {q_len}); "
        f"got {shape}"
    )
