"""STAND-IN for ``mate.flashmla`` (MATE 0.2.6): the scheduler metadata and FlashMLA's sparse decode.

Not MATE, and nothing here says how MATE behaves on MUSA hardware. The functions have MATE
0.2.6's signatures (mate-api.md §7-8, MATE's ``mate/flashmla.py`` and ``mate/sparse_mla``):

- ``_dispatch_mla_metadata`` fills the preallocated ``tile_scheduler_metadata`` /
  ``num_splits`` in place; ``get_mla_metadata`` allocates them. The schedule is deliberately
  simple but keeps the property an adapter must respect: ``num_splits`` is a prefix sum of
  64-slot blocks per batch, computed from ``topk_length`` (or the full ``topk`` when it is None),
  and the decodes only visit the scheduled blocks, so metadata built from lengths shorter than
  the runtime ones silently drops keys, as MATE's would.
- ``flash_mla_with_kvcache`` in sparse mode (``indices`` given) with MATE's V3.2 rules: BF16
  query ``[B, s_q, H, 576]`` with a contiguous last dim, a ``[blocks, block, 1, 656]`` byte
  cache (uint8, int8 or e4m3) of FlashMLA's packed rows, int32 ``[B, s_q, topk]`` indices with
  ``topk % 64 == 0``, ``topk_length`` int32 ``[B]`` (one per batch row, shared by its s_q
  tokens), ``attn_sink`` float32 ``[H]``, metadata required, H > 64 only as a multiple of 64,
  a host-float ``softmax_scale``. Entries that are negative, ``>=`` the pool size or at a
  position ``>= topk_length[b]`` are ignored. Returns freshly allocated ``out [B, s_q, H, 512]``
  bf16 and a natural-log ``lse [B, H, s_q]`` (+inf for an empty row, sinks not included);
  ``attn_sink`` multiplies the output by ``sigmoid(lse - sink)``. Violations raise
  AssertionError, as MATE's asserts do.
"""

from __future__ import annotations

import math

import torch

from ._recorder import record

BLOCK = 64
NUM_MP_PARTS = 8


def _dispatch_mla_metadata(
    cache_seqlens,
    num_q_tokens_per_head_k,
    num_heads_k,
    num_heads_q=None,
    is_fp8_kvcache=False,
    topk=None,
    extra_topk=None,
    q=None,
    bs=None,
    topk_length=None,
    extra_topk_length=None,
    *,
    tile_scheduler_metadata=None,
    num_splits=None,
):
    record(
        "_dispatch_mla_metadata",
        cache_seqlens=cache_seqlens,
        num_q_tokens_per_head_k=num_q_tokens_per_head_k,
        topk=topk,
        bs=bs,
        topk_length=topk_length,
    )
    assert tile_scheduler_metadata is not None and num_splits is not None, (
        "stand-in: preallocated outputs only"
    )
    assert num_splits.shape == (bs + 1,) and num_splits.dtype == torch.int32
    if topk_length is None:
        lengths = torch.full((bs,), topk, dtype=torch.int64)
    else:
        lengths = topk_length.long().cpu().clamp(0, topk)
    blocks = torch.where(lengths == 0, 1, lengths).add(BLOCK - 1).div(BLOCK, rounding_mode="floor")
    num_splits.copy_(torch.cat((torch.zeros(1, dtype=torch.int64), blocks.cumsum(0))).to(torch.int32))
    tile_scheduler_metadata.zero_()
    return tile_scheduler_metadata, num_splits


def get_mla_metadata(
    cache_seqlens,
    num_q_tokens_per_head_k,
    num_heads_k,
    num_heads_q=None,
    is_fp8_kvcache=False,
    topk=None,
    extra_topk=None,
    q=None,
    bs=None,
    topk_length=None,
    extra_topk_length=None,
):
    record("get_mla_metadata", cache_seqlens=cache_seqlens, num_q_tokens_per_head_k=num_q_tokens_per_head_k,
           num_heads_k=num_heads_k, num_heads_q=num_heads_q, is_fp8_kvcache=is_fp8_kvcache, topk=topk, q=q,
           bs=bs, topk_length=topk_length)  # fmt: skip
    batch = bs if bs is not None else q.shape[0]
    device = q.device if q is not None else cache_seqlens.device
    scheduler = torch.empty((NUM_MP_PARTS, 8), dtype=torch.int32, device=device)
    num_splits = torch.empty((batch + 1,), dtype=torch.int32, device=device)
    return _dispatch_mla_metadata(
        cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q, is_fp8_kvcache, topk, extra_topk, q,
        batch, topk_length, extra_topk_length, tile_scheduler_metadata=scheduler, num_splits=num_splits,
    )  # fmt: skip


def flash_mla_with_kvcache(
    q,
    k_cache,
    block_table,
    cache_seqlens,
    head_dim_v,
    tile_scheduler_metadata,
    num_splits,
    softmax_scale=None,
    causal=False,
    is_fp8_kvcache=False,
    indices=None,
    attn_sink=None,
    extra_k_cache=None,
    extra_indices_in_kvcache=None,
    topk_length=None,
    extra_topk_length=None,
):
    record("flash_mla_with_kvcache", q=q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens,
           head_dim_v=head_dim_v, tile_scheduler_metadata=tile_scheduler_metadata, num_splits=num_splits,
           softmax_scale=softmax_scale, causal=causal, is_fp8_kvcache=is_fp8_kvcache, indices=indices,
           attn_sink=attn_sink, topk_length=topk_length)  # fmt: skip
    assert indices is not None, "stand-in: only the sparse (indices) mode is modelled"
    assert not causal, "causal must be `false` if sparse attention is enabled."
    assert is_fp8_kvcache, "sparse mla decode only support fp8 kvcache"
    assert extra_k_cache is None and extra_indices_in_kvcache is None and extra_topk_length is None
    batch, s_q, heads, dim = q.shape
    _, _, heads_k, row_bytes = k_cache.shape
    assert q.dtype == torch.bfloat16, "q must be bfloat16"
    assert k_cache.dtype in (torch.uint8, torch.int8, torch.float8_e4m3fn), (
        "k_cache must be uint8 or float8_e4m3fn"
    )
    assert indices.dtype == torch.int32, "indices must be int32"
    assert q.stride(-1) == 1 and indices.stride(-1) == 1, "last dimensions must be contiguous"
    assert dim == 576 and head_dim_v == 512 and row_bytes == 656 and heads_k == 1
    assert k_cache.is_contiguous(), "stand-in: the V3.2 kernel flattens the cache with a view"
    assert indices.dim() == 3 and tuple(indices.shape[:2]) == (batch, s_q)
    topk = indices.shape[-1]
    assert topk % BLOCK == 0, "topk must be a multiple of 64"
    assert heads <= 64 or heads % 64 == 0, "head_kv should be a multiple of block_h"
    if topk_length is not None:
        assert topk_length.dtype == torch.int32 and tuple(topk_length.shape) == (batch,)
    if attn_sink is not None:
        assert attn_sink.dtype == torch.float32 and tuple(attn_sink.shape) == (heads,)
    assert tile_scheduler_metadata is not None and num_splits is not None
    assert tuple(num_splits.shape) == (batch + 1,), "metadata for another batch size"
    assert not isinstance(softmax_scale, torch.Tensor), "softmax_scale is a host float"
    scale = dim**-0.5 if softmax_scale is None else float(softmax_scale)

    rows = k_cache.view(torch.uint8).reshape(-1, row_bytes)
    latent = rows[:, :512].view(torch.float8_e4m3fn).double()
    block_scales = rows[:, 512:528].view(torch.float32).double()
    keys = torch.cat(
        (latent * block_scales.repeat_interleave(128, -1), rows[:, 528:].view(torch.bfloat16).double()), -1
    )
    scheduled = num_splits.long().cpu().diff() * BLOCK  # keys past the scheduled blocks are never visited
    runtime = torch.full((batch,), topk) if topk_length is None else topk_length.long().cpu()
    limit = torch.minimum(runtime, scheduled).to(q.device)
    idx = indices.long()
    position = torch.arange(topk, device=q.device)
    valid = (position < limit[:, None, None]) & (idx >= 0) & (idx < rows.shape[0])
    gathered = keys[torch.where(valid, idx, 0)]  # [B, s_q, topk, 576]
    scores = torch.einsum("bthd,btkd->bthk", q.double(), gathered) * scale
    scores = scores.masked_fill(~valid[:, :, None, :], -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    empty = ~valid.any(-1)[:, :, None].expand_as(lse)
    probs = torch.where(empty[..., None], 0.0, torch.exp(scores - lse[..., None]))
    out = torch.einsum("bthk,btkv->bthv", probs, gathered[..., :512])
    lse = torch.where(empty, math.inf, lse)
    if attn_sink is not None:
        out = out * torch.sigmoid(lse - attn_sink.double())[..., None]
    return out.to(torch.bfloat16), lse.transpose(1, 2).float().contiguous()
