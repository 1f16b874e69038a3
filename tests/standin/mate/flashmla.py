"""STAND-IN for ``mate.flashmla`` (MATE 0.2.6): only the scheduler-metadata entry point.

Not MATE. ``_dispatch_mla_metadata`` has MATE's signature and fills the preallocated
``tile_scheduler_metadata`` / ``num_splits`` in place. The stand-in's schedule is deliberately
simple but keeps the property the adapter must respect: ``num_splits`` is a prefix sum of
64-slot blocks per batch, computed from ``topk_length`` (or the full ``topk`` when it is None),
and the stand-in decode only visits the scheduled blocks, so metadata built from lengths
shorter than the runtime ones silently drops keys, as MATE's would.
"""

from __future__ import annotations

import torch

from ._recorder import record

BLOCK = 64


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
