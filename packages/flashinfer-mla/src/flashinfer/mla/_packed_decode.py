"""``trtllm_batch_decode_with_kv_cache_mla`` over the packed 656-byte FP8 cache.

FlashInfer v0.6.17 serves this form with its ``sparse`` backend (``auto`` picks it on SM120/121):
a BF16 query of width 576, a uint8 cache of 656-byte rows (:mod:`._packed_cache`), per-token
top-k lengths in ``seq_lens``, no ``bmm2_scale``. Here every device serves it, whatever the
backend name, as soon as ``kv_cache`` is uint8. The checks follow upstream's ``sparse`` branch
(``_trtllm_batch_decode_sparse_mla_v32_sm120`` and its helpers) in order and wording; then
outputs are allocated and the implementation's ``packed_sparse_decode`` is called once
(``docs/internals.md``). Nothing is written before every check has passed.

Semantics that differ from the 576-wide form, as upstream's ``sparse`` backend has them:

- ``seq_lens`` holds one active top-k length per query token, ``[batch, q_len]`` or
  ``[batch * q_len]`` (a ``[batch]`` tensor is ignored when ``q_len > 1``); None means every
  column is active. Token ``i`` considers index positions ``p < seq_lens[i]`` (no causal shift).
- The LSE includes the sinks' mass, ``log2(sum_j 2^(s_j log2 e) + 2^(sink log2 e))``, and a token
  with no valid key gets LSE ``-inf`` (its sink's value when sinks are given) and output 0.
"""

from __future__ import annotations

import torch

from .._core import implementation_kind
from .._core.checks import check_device, check_tensor, fail
from . import _checks
from ._dispatch import DISPATCH
from ._metadata import DecodeMetadata
from ._packed_cache import KV_SCALE_FORMATS, NOPE, ROPE, ROW_BYTES

__all__ = ["packed_decode"]

# upstream's messages name its backend this way
_FORM = "SM120 sparse MLA v32/GLM"
MAX_HEADS = 128


def packed_decode(
    query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim, block_tables,
    seq_lens, max_seq_len, sparse_mla_top_k, out, bmm1_scale, bmm2_scale, sinks,
    skip_softmax_threshold_scale_factor, enable_pdl, backend, is_var_seq, uses_shared_paged_kv_idx, lse,
    return_lse, cute_dsl_impl, kv_scale_format, cum_seq_lens_q, max_q_len, multi_ctas_kv_counter_buffer,
    sparse_mla_top_k_lens, enable_dcp, cp_world, cp_rank, causal_seqlens_kv_global, use_fp16_softmax,
    metadata,
):  # fmt: skip
    """The packed-cache form; the public function's arguments, ``kv_cache`` being uint8."""
    for name, scale in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(scale, torch.Tensor) and scale.dtype != torch.float32:
            raise TypeError(f"{name} tensor must have dtype torch.float32, got {scale.dtype}")
    # The options every form shares (backend name, max_q_len, DCP, use_fp16_softmax), checked
    # by the common helper with this form's fixed dims and no top-k rule of its own.
    _checks.check_options(
        NOPE, ROPE, 0, None, backend, True, cum_seq_lens_q, max_q_len, None, enable_dcp, cp_world, cp_rank,
        causal_seqlens_kv_global, use_fp16_softmax,
    )  # fmt: skip
    if sparse_mla_top_k_lens is not None:
        raise ValueError(
            "sparse_mla_top_k_lens is only supported by the native qk_rope_head_dim=0 MLA path, not with "
            "the packed 656-byte kv_cache (pass the per-token top-k lengths as seq_lens)"
        )
    _check_form_options(sparse_mla_top_k, skip_softmax_threshold_scale_factor, uses_shared_paged_kv_idx,
                        bmm1_scale, bmm2_scale)  # fmt: skip
    bmm1 = _checks.check_scale(bmm1_scale, "bmm1_scale", None)
    _check_query(query, kv_lora_rank, qk_rope_head_dim)
    device = query.device
    check_tensor(workspace_buffer, "workspace_buffer", ValueError)
    if workspace_buffer.device != device:
        raise ValueError(f"workspace_buffer must be on query device {device}, got {workspace_buffer.device}")
    batch, q_len, heads, _ = query.shape
    _check_indices(block_tables, (batch, q_len, sparse_mla_top_k), device)
    _check_cache(kv_cache, device)
    lengths = _token_lengths(seq_lens, batch, q_len, device)
    if heads > MAX_HEADS:
        raise ValueError(f"Expected num_heads <= {MAX_HEADS}, got {heads}")
    if cum_seq_lens_q is not None:
        fail(ValueError, "cum_seq_lens_q", "None with the packed kv_cache (its query is [batch, q_len, ...])",
             cum_seq_lens_q)  # fmt: skip
    check_scale_format(kv_scale_format)
    sinks = _checks.check_sinks(sinks, heads, device)
    _checks.check_counter_buffer(multi_ctas_kv_counter_buffer, batch, heads, device)
    if metadata is not None:
        if not isinstance(metadata, DecodeMetadata):
            fail(TypeError, "metadata", "a DecodeMetadata from get_batch_decode_metadata_mla",
                 type(metadata).__name__)  # fmt: skip
        metadata.check(batch, q_len, heads, sparse_mla_top_k, device, implementation_kind(device))

    out_shape = (batch, q_len, heads, NOPE)
    if out is None:
        out = out4 = torch.empty(out_shape, dtype=torch.bfloat16, device=device)
    else:
        out4 = _checks.check_out(out, out_shape, query, kv_cache, accept_3d=q_len == 1)
    lse3 = None
    if lse is not None:
        lse3 = _checks.check_lse(lse, batch * q_len, q_len, heads, device)
    elif return_lse:
        lse = torch.empty(batch * q_len, heads, dtype=torch.float32, device=device)
        lse3 = lse.view(batch, q_len, heads)
    result = (out, lse) if return_lse else out
    if batch * q_len * heads == 0:
        return result
    kv = _flat_rows(kv_cache)
    plan = None if metadata is None else metadata.plan
    DISPATCH.module(device).packed_sparse_decode(
        query, kv, block_tables, lengths, bmm1, sinks, out4, lse3, plan, workspace_buffer
    )
    return result


def check_scale_format(kv_scale_format) -> str:
    """Upstream's normalization: case-insensitive, ``-`` read as ``_``; returns the normalized name."""
    name = str(kv_scale_format).lower().replace("-", "_")
    if name not in KV_SCALE_FORMATS:
        raise ValueError(f"kv_scale_format must be one of {list(KV_SCALE_FORMATS)}, got {kv_scale_format!r}")
    return name


def _check_form_options(topk, skip_softmax, shared_index, bmm1_scale, bmm2_scale) -> None:
    if not isinstance(topk, int) or isinstance(topk, bool) or topk <= 0:
        raise ValueError(f"{_FORM} requires sparse_mla_top_k > 0, got {topk!r}")
    if skip_softmax is not None:
        raise ValueError("skip_softmax is not supported for sparse MLA")
    if not shared_index:
        raise ValueError(f"{_FORM} expects shared sparse page indices (uses_shared_paged_kv_idx=True)")
    if isinstance(bmm1_scale, torch.Tensor):
        raise ValueError(f"{_FORM} expects bmm1_scale to be a float")
    if isinstance(bmm2_scale, torch.Tensor):
        raise ValueError(f"{_FORM} expects bmm2_scale to be a float")
    if isinstance(bmm2_scale, bool) or not isinstance(bmm2_scale, (int, float)) or float(bmm2_scale) != 1.0:
        raise ValueError(f"{_FORM} does not support bmm2_scale (it must be 1.0), got {bmm2_scale!r}")


def _check_query(query, kv_lora_rank, qk_rope_head_dim) -> None:
    check_tensor(query, "query")
    if query.dim() != 4:
        raise ValueError(f"Expected query.ndim == 4, got {query.dim()}")
    if query.dtype != torch.bfloat16:
        raise ValueError(f"{_FORM} expects BF16 query, got {query.dtype}")
    if kv_lora_rank != NOPE or qk_rope_head_dim != ROPE or query.shape[-1] != NOPE + ROPE:
        raise ValueError(
            f"{_FORM} expects kv_lora_rank=512, qk_rope_head_dim=64, and query head dim 576; got "
            f"kv_lora_rank={kv_lora_rank}, qk_rope_head_dim={qk_rope_head_dim}, query dim={query.shape[-1]}"
        )
    if not query.is_contiguous():
        fail(ValueError, "query", "a contiguous tensor", query)


def _check_indices(block_tables, shape, device) -> None:
    check_tensor(block_tables, "block_tables", ValueError)
    if block_tables.dtype != torch.int32:
        raise ValueError(f"block_tables must have dtype torch.int32, got {block_tables.dtype}")
    if block_tables.device != device:
        raise ValueError(f"block_tables must be on query device {device}, got {block_tables.device}")
    if tuple(block_tables.shape) != shape:
        raise ValueError(
            f"{_FORM} expects sparse block_tables shape {shape}, got {tuple(block_tables.shape)}"
        )
    if not block_tables.is_contiguous():
        fail(ValueError, "block_tables", "a contiguous tensor", block_tables)


def _check_cache(kv_cache, device) -> None:
    """Upstream's ``_check_sm120_sparse_v32_kv_cache``, then device and alignment."""
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
    check_device(kv_cache, "kv_cache", device, "query")
    if kv_cache.data_ptr() % 16:
        fail(ValueError, "kv_cache", "a packed cache starting on a 16-byte boundary",
             f"an address {kv_cache.data_ptr() % 16} bytes past one")  # fmt: skip


def _flat_rows(kv_cache) -> torch.Tensor:
    """The cache as the flat ``[num_pages * page_size, 656]`` token pool (a view, never a copy)."""
    try:
        rows = kv_cache.view(-1, ROW_BYTES)
    except RuntimeError:
        rows = None
    if rows is None or rows.stride(-1) != 1 or (rows.shape[0] > 1 and rows.stride(0) != ROW_BYTES):
        fail(ValueError, "kv_cache", "whole 656-byte rows back to back, viewable as one "
             "[num_pages * page_size, 656] token pool", kv_cache)  # fmt: skip
    return rows


def _token_lengths(seq_lens, batch, q_len, device):
    """Upstream's ``_normalize_sm120_sparse_v32_topk_length``: ``[batch * q_len]`` int32 or None."""
    if seq_lens is None:
        return None
    check_tensor(seq_lens, "seq_lens", ValueError)
    if seq_lens.dtype != torch.int32:
        raise ValueError(f"seq_lens must have dtype torch.int32, got {seq_lens.dtype}")
    if seq_lens.device != device:
        raise ValueError(f"seq_lens must be on device {device}, got {seq_lens.device}")
    tokens = batch * q_len
    shape = tuple(seq_lens.shape)
    if shape == (batch, q_len) or shape == (tokens,):
        # a copy only for a strided tensor (upstream's .contiguous() does the same)
        return seq_lens.reshape(tokens).contiguous()
    if shape == (batch,):
        return None  # per-request KV lengths carry no top-k length: every column is active
    raise ValueError(
        f"seq_lens for {_FORM} must be shaped either ({batch},), ({tokens},), or ({batch}, {q_len}); "
        f"got {shape}"
    )
