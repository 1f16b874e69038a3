"""MUSA implementation of the MLA ops through MATE 0.2.6 (``mate.sparse_mla_interface``).

What MATE's kernels cannot take runs the reference implementation on the MUSA tensors:
RoPE outside ``mla_rope_quantize_fp8``'s shapes (fp16, e5m2, 3-D K with several heads, nope
other than 512), BF16 sparse decode, tensor ``bmm1_scale``, and dense decode. MATE is looked up
lazily on the first call; a MATE that is missing or unrelated raises ``LibraryError``, a MATE
without these functions (0.2.2) uses the reference.

Conversions between FlashInfer's contract and MATE's, done here and nowhere else:

- MTP limit: MATE limits every token of a request to ``min(topk, seq_lens[b])``; FlashInfer
  limits token t to ``seq_lens[b] - (q_len - 1 - t)``. The call is flattened to
  ``[B * q_len, 1, H, 576]`` (views) with per-token lengths computed on the device.
- ``topk % 64 != 0`` (FlashInfer allows multiples of 4): indices padded with -1 into a scratch.
- ``64 < H`` not a multiple of 64: heads padded with zeros into a scratch query.
- LSE: MATE returns the natural log; FlashInfer base 2 (multiplied by log2(e) in place).
- Sinks: MATE ignores them; the output is corrected with ``out *= sigmoid(lse_nat - sink)``.
- A tensor ``bmm2_scale`` is applied after the kernel; a strided ``out``/``lse`` goes through a
  contiguous scratch and a copy.
- Only FlashInfer v0.6.16's keywords plus ``metadata=`` are forwarded (MATE rejects the rest).
- A padded page stride (FlashMLA pads each page by a row): MATE flattens the cache with a view,
  so it gets the pool with the padding rows (``Decode.pool``) and the slot ids mapped to its rows
  (a copy of the indices; ids outside the cache become -1).

The packed 656-byte cache goes to ``mate.flashmla.flash_mla_with_kvcache`` (FlashMLA's sparse
FP8 decode; see :func:`packed_sparse_decode`).
"""

from __future__ import annotations

import math

import torch

from .._core import mate as mate_loader
from .._core.constants import FP8_NAN_BITS, LOG2E
from .._core.fallback import warn_reference
from . import _reference

MODULE = "mate.sparse_mla_interface"
FLASHMLA = "mate.flashmla"
# MATE's kernel shape: 64 heads per CTA, index rows in 64-slot blocks, 512 + 64 head dims.
HEAD_BLOCK = 64
TOPK_BLOCK = 64
NOPE, ROPE = 512, 64
# MATE ignores qk_nope_head_dim (callers fold it into bmm1_scale); any value is passed through.
QK_NOPE_HEAD_DIM = 128


# MATE has no dense decode for 576-wide FP8/BF16 rows (its FlashMLA path needs 656-byte rows).
def dense_decode(call) -> None:
    """MATE has no paged (dense) MLA decode: the reference runs on the MUSA device."""
    warn_reference(
        "trtllm_batch_decode_with_kv_cache_mla (dense)", call.query.device, "MATE has no dense MLA decode"
    )
    _reference.dense_decode(call)


def _function(name: str, op: str, module: str = MODULE):
    """MATE's function, None if this MATE lacks it; LibraryError if MATE is missing/unrelated."""
    fn = mate_loader.find_function(module, name)
    if fn is None and mate_loader.mate_version() is None:
        mate_loader.require_function(module, name, op)
    return fn


def _rope_eligible(q_rope, k_rope, q_nope, k_nope, q_rope_out) -> bool:
    return (
        q_rope.dtype == torch.bfloat16
        and q_rope_out.dtype == torch.float8_e4m3fn
        and q_rope.shape[-1] == ROPE
        and q_nope.shape[-1] == NOPE
        and k_rope.shape[1] == 1  # one latent KV head (2-D K arrives as an unsqueeze(1) view)
    )


def rope_quantize(call) -> None:
    """``mate.sparse_mla_interface.mla_rope_quantize_fp8`` when its kernel fits, else the reference."""
    q_rope, q_nope, cos_sin_cache, pos_ids, q_rope_out, q_nope_out = (
        call.q_rope,
        call.q_nope,
        call.cos_sin_cache,
        call.pos_ids,
        call.q_rope_out,
        call.q_nope_out,
    )
    k_rope, k_nope, k_rope_out, k_nope_out = _reference.keys_3d(
        call.k_rope, call.k_nope, call.k_rope_out, call.k_nope_out
    )
    eligible = _rope_eligible(q_rope, k_rope, q_nope, k_nope, q_rope_out)
    fn = _function("mla_rope_quantize_fp8", "rope_quantize_fp8") if eligible else None
    if fn is None:
        reason = (
            f"{MODULE} has no mla_rope_quantize_fp8"
            if eligible
            else "MATE's kernel takes bf16 -> e4m3 with 64 rope and 512 nope dims and one K head"
        )
        warn_reference("mla_rope_quantize_fp8", q_rope.device, reason)
        _reference.rope_quantize(call)
        return
    max_pos = cos_sin_cache.shape[0]
    # MATE does not range-check positions: clamp them so it never reads outside the cache, then
    # mark those tokens' rope outputs NaN as the reference does (no host read either way).
    fn(
        q_rope,
        k_rope[:, 0],
        q_nope,
        k_nope[:, 0],
        cos_sin_cache,
        pos_ids.clamp(0, max_pos - 1),
        is_neox=call.is_neox,
        quantize_dtype=torch.float8_e4m3fn,
        quant_scale_q=call.quant_scale_q,
        quant_scale_kv=call.quant_scale_kv,
        q_rope_out=q_rope_out,
        k_rope_out=k_rope_out[:, 0],
        q_nope_out=q_nope_out,
        k_nope_out=k_nope_out[:, 0],
        enable_pdl=False,
    )
    outside = ((pos_ids < 0) | (pos_ids >= max_pos)).view(-1, 1, 1)
    q_rope_out.view(torch.uint8).masked_fill_(outside, FP8_NAN_BITS)
    k_rope_out.view(torch.uint8).masked_fill_(outside, FP8_NAN_BITS)


def _padded(heads: int, topk: int) -> tuple[int, int]:
    """Head count and top-k MATE's kernel is called with."""
    padded_heads = heads if heads <= HEAD_BLOCK else -(-heads // HEAD_BLOCK) * HEAD_BLOCK
    return padded_heads, -(-topk // TOPK_BLOCK) * TOPK_BLOCK


def decode_plan(batch, q_len, heads, topk, device):
    """MATE scheduler metadata for the call MATE receives: ``[batch * q_len, 1, H', topk']``.

    It is built with every row's length set to the (padded) top-k, i.e. full-top-k scheduling,
    so it does not depend on ``seq_lens``: rows that turn out shorter are masked by the kernel,
    never skipped. (Metadata built from real lengths would silently drop keys once a length
    grows past its 64-slot block.) This is the schedule of the private
    ``mate.flashmla._dispatch_mla_metadata(..., topk_length=None)``, obtained through the public
    ``get_batch_decode_metadata_mla`` so the result is the object MATE's decode accepts.
    Returns None when this MATE has no metadata function (MATE then plans inside each call).
    """
    fn = mate_loader.find_function(MODULE, "get_batch_decode_metadata_mla")
    if fn is None:
        return None
    rows = batch * q_len
    padded_heads, padded_topk = _padded(heads, topk)
    # Only the query's shape and device are read: a broadcast view avoids allocating it.
    query_shape = torch.empty((1, 1, 1, NOPE + ROPE), dtype=torch.float8_e4m3fn, device=device)
    query_shape = query_shape.expand(rows, 1, padded_heads, NOPE + ROPE)
    full_lengths = torch.full((rows,), padded_topk, dtype=torch.int32, device=device)
    return fn(query_shape, full_lengths, padded_topk)


def _pool_slots(call) -> torch.Tensor:
    """``call.table``'s slot ids as rows of ``call.pool`` (the same tensor unless the page stride is
    padded; then a copy, ids outside the cache -1)."""
    indices, kv = call.table, call.kv_cache
    page_size = kv.shape[-2]
    if call.rows_per_page == page_size:
        return indices
    slots = indices.long()
    inside = (slots >= 0) & (slots < kv.shape[0] * page_size)
    return torch.where(inside, call.pool_rows(slots), -1).to(torch.int32)


def _one_token_rows(call, padded_heads: int, padded_topk: int):
    """The query and slot indices MATE takes, one query token per row: ``[rows, 1, H', D]``
    (heads zero-padded to ``padded_heads``) and ``[rows, 1, topk']`` pool rows (-1-padded to
    ``padded_topk``). Views where no padding is needed, else copies."""
    query, indices = call.query, _pool_slots(call)
    batch, q_len, heads, dim = query.shape
    rows, topk = batch * q_len, indices.shape[-1]
    mate_query = query.view(rows, 1, heads, dim)
    if padded_heads != heads:
        mate_query = query.new_zeros((rows, 1, padded_heads, dim))
        mate_query[:, :, :heads] = query.view(rows, 1, heads, dim)
    mate_indices = indices.view(rows, 1, topk)
    if padded_topk != topk:
        mate_indices = torch.full((rows, 1, padded_topk), -1, dtype=torch.int32, device=query.device)
        mate_indices[..., :topk] = indices.view(rows, 1, topk)
    return mate_query, mate_indices


def _decode_eligible(query, kv, bmm1_scale, out) -> bool:
    return (
        query.dtype == torch.float8_e4m3fn
        and query.shape[-1] == NOPE + ROPE
        and out.shape[-1] == NOPE
        and kv.is_contiguous()
        # A tensor bmm1_scale would need .item() (a host sync): MATE takes host floats only.
        and not isinstance(bmm1_scale, torch.Tensor)
    )


def sparse_decode(call):
    """``mate.sparse_mla_interface.sparse_mla_fp8_decode`` for FP8 e4m3 512/64 calls."""
    query, kv, indices, seq_lens, out, lse, sinks = (
        call.query,
        call.pool,
        call.table,
        call.seq_lens,
        call.out,
        call.lse3,
        call.sinks,
    )
    bmm1_scale, bmm2_scale = call.bmm1_scale, call.bmm2_scale
    op = "trtllm_batch_decode_with_kv_cache_mla (sparse)"
    if not _decode_eligible(query, kv, bmm1_scale, out):
        warn_reference(op, query.device, "MATE's kernel takes e4m3 512/64 decode with a float bmm1_scale")
        _reference.sparse_decode(call)
        return
    fn = _function("sparse_mla_fp8_decode", "trtllm_batch_decode_with_kv_cache_mla")
    if fn is None:
        warn_reference(op, query.device, f"{MODULE} has no sparse_mla_fp8_decode")
        _reference.sparse_decode(call)
        return
    batch, q_len, heads, dim = query.shape
    rows, topk = batch * q_len, indices.shape[-1]
    padded_heads, padded_topk = _padded(heads, topk)

    mate_query, mate_indices = _one_token_rows(call, padded_heads, padded_topk)
    if q_len == 1:
        row_lengths = seq_lens
    else:
        back = torch.arange(q_len - 1, -1, -1, device=query.device, dtype=torch.int32)
        row_lengths = (seq_lens[:, None] - back).view(rows)

    direct_out = padded_heads == heads and out.is_contiguous()
    mate_out = out.view(rows, 1, heads, NOPE) if direct_out else out.new_empty((rows, 1, padded_heads, NOPE))
    want_lse = lse is not None or sinks is not None  # the sink correction needs the LSE
    direct_lse = lse is not None and padded_heads == heads and lse.is_contiguous()
    mate_lse = None
    if want_lse:
        mate_lse = (
            lse.view(rows, heads)
            if direct_lse
            else torch.empty((rows, padded_heads), dtype=torch.float32, device=query.device)
        )
    tensor_bmm2 = isinstance(bmm2_scale, torch.Tensor)
    plan = call.plan  # the caller's metadata, planned for this shape; else this call's own
    fn(
        query=mate_query,
        kv_cache=kv.view(kv.shape[0], 1, dim),
        workspace_buffer=call.workspace,
        qk_nope_head_dim=QK_NOPE_HEAD_DIM,
        kv_lora_rank=NOPE,
        qk_rope_head_dim=ROPE,
        block_tables=mate_indices,
        seq_lens=row_lengths,
        max_seq_len=padded_topk,
        sparse_mla_top_k=padded_topk,
        out=mate_out,
        bmm1_scale=bmm1_scale,
        bmm2_scale=1.0 if tensor_bmm2 else bmm2_scale,
        lse=mate_lse,
        return_lse=want_lse,
        metadata=decode_plan(batch, q_len, heads, topk, query.device) if plan is None else plan,
    )

    out_rows = mate_out[:, 0, :heads]
    factor = None
    if sinks is not None:
        # Each sink adds exp(sink) to the denominator: out_with_sink = out * sigmoid(lse - sink).
        factor = torch.sigmoid(mate_lse[:, :heads] - sinks)[..., None]
    if tensor_bmm2:  # one element of any rank: a scalar, so the in-place product keeps the shape
        scale = bmm2_scale.reshape(())
        factor = scale if factor is None else factor * scale
    if factor is not None:
        out_rows.mul_(factor)
    if not direct_out:
        out.copy_(out_rows.view(batch, q_len, heads, NOPE))
    if lse is not None:
        lse_rows = mate_lse[:, :heads].mul_(LOG2E)
        if not direct_lse:
            lse.copy_(lse_rows.view(batch, q_len, heads))


def packed_sparse_decode(call):
    """``mate.flashmla.flash_mla_with_kvcache`` (FlashMLA's sparse FP8 decode) on the packed rows.

    MATE's FlashMLA entry point takes exactly this cache (BF16 query, 656-byte rows, int32 slot
    indices, one ``topk_length`` per batch row) but allocates its outputs, takes 64-head blocks
    and top-k in 64-slot blocks, and returns a natural-log LSE of ``[B, H, q_len]`` that excludes
    the sinks and is +inf for an empty row. The call is flattened to one query token per row
    (views) so that ``topk_length`` is per token; lengths are clamped to ``[0, topk]`` (MATE
    would read past a row for a longer one); heads are zero-padded to a multiple of 64 and the
    indices -1-padded to one of 64 when needed (copies); the output is copied into ``out`` and
    the LSE converted (base 2, sinks added, -inf when empty). The scheduler metadata is built
    per call for full-length rows (``topk_length`` not given to it), so it does not depend on
    the lengths; ``plan`` (the 576-wide decode's metadata) is not used. Without this entry
    point the reference runs.
    """
    op = "trtllm_batch_decode_with_kv_cache_mla"
    fn = _function("flash_mla_with_kvcache", op, FLASHMLA)
    metadata_fn = _function("get_mla_metadata", op, FLASHMLA)
    if fn is None or metadata_fn is None:
        reason = f"{FLASHMLA} has no flash_mla_with_kvcache / get_mla_metadata"
        warn_reference("trtllm_batch_decode_with_kv_cache_mla (packed cache)", call.query.device, reason)
        _reference.packed_sparse_decode(call)
        return
    query, kv, indices, lengths, sinks, out, lse = (
        call.query,
        call.pool,
        call.table,
        call.seq_lens,
        call.sinks,
        call.out,
        call.lse3,
    )
    batch, q_len, heads, dim = query.shape
    topk = indices.shape[-1]
    padded_heads = -(-heads // HEAD_BLOCK) * HEAD_BLOCK
    padded_topk = -(-topk // TOPK_BLOCK) * TOPK_BLOCK
    mate_query, mate_indices = _one_token_rows(call, padded_heads, padded_topk)
    mate_sinks = sinks
    if padded_heads != heads and sinks is not None:  # a -inf sink adds nothing
        mate_sinks = torch.full((padded_heads,), -math.inf, dtype=torch.float32, device=query.device)
        mate_sinks[:heads] = sinks
    topk_length = None if lengths is None else lengths.clamp(0, topk)
    scheduler, splits = metadata_fn(
        None, padded_heads, 1, num_heads_q=padded_heads, is_fp8_kvcache=True, topk=padded_topk, q=mate_query
    )
    mate_out, mate_lse = fn(
        mate_query,
        kv.view(kv.shape[0], 1, 1, kv.shape[1]),
        None,
        None,
        NOPE,
        scheduler,
        splits,
        softmax_scale=call.bmm1_scale,
        causal=False,
        is_fp8_kvcache=True,
        indices=mate_indices,
        attn_sink=mate_sinks,
        topk_length=topk_length,
    )
    out.copy_(mate_out[:, 0, :heads].view(batch, q_len, heads, NOPE))
    if lse is not None:
        lse_nat = mate_lse[:, :heads, 0]  # [rows, H]
        lse2 = torch.where(lse_nat == math.inf, -math.inf, lse_nat) * LOG2E
        if sinks is not None:
            lse2 = torch.logaddexp2(lse2, sinks * LOG2E)
        lse.copy_(lse2.view(batch, q_len, heads))
