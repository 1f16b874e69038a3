"""Reference implementation of the MLA ops: plain PyTorch, float32 math, any device.

It is what runs on CPU, what the MATE adapter uses for calls MATE cannot take (BF16 and dense
decode, tensor ``bmm1_scale``, RoPE shapes outside MATE's kernel, a packed-cache decode without
MATE's FlashMLA entry point), and what ``FLASHINFER_FORCE_REFERENCE=1`` selects everywhere. Each
function takes the op's argument record (:mod:`._args`), validated by the API layer.

Every gather is clamp-then-mask: an index, page id or position that is out of range is replaced
by a safe in-range one before the gather and its result is masked afterwards, so no memory
outside the given tensors is read and no value is read back to the host (graph-capture safe).
Memory stays bounded: decode works on chunks of query rows and of keys with an online softmax.
"""

from __future__ import annotations

import math

import torch

from .._core.constants import FP8_MAX, LOG2E
from ._packed_cache import unpack_rows

# Upper bound on the float32 scratch one decode chunk gathers (keys x head dim + scores).
_CHUNK_BYTES = 64 << 20
_KEYS_PER_CHUNK = 2048
# Elements of q and k one RoPE chunk of tokens converts to float32 at once.
_ROPE_CHUNK_ELEMENTS = 1 << 22


def _saturating_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # FlashInfer's kernel converts with satfinite; clamp first so no torch version can
    # turn an overflow into NaN (NaN inputs stay NaN).
    fmax = FP8_MAX[dtype]
    return x.clamp(-fmax, fmax).to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Rotate ``x (nnz, H, R)`` by per-token ``cos``/``sin (nnz, 1, R/2)`` in float32."""
    x = x.float()
    if is_neox:
        lo, hi = x.chunk(2, dim=-1)
        return torch.cat((lo * cos - hi * sin, hi * cos + lo * sin), dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)


def keys_3d(*k_tensors):
    """2-D ``(nnz, D)`` K tensors (one K head) as ``(nnz, 1, D)`` views; 3-D ones unchanged."""
    return tuple(k.unsqueeze(1) if k.dim() == 2 else k for k in k_tensors)


def rope_quantize(call) -> None:
    """RoPE on the rope parts, scale and saturating FP8 cast on all four (:class:`~._args.Rope`)."""
    q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox, quant_scale_q, quant_scale_kv = call[:9]
    q_rope_out, k_rope_out, q_nope_out, k_nope_out = call[9:]
    k_rope, k_nope, k_rope_out, k_nope_out = keys_3d(k_rope, k_nope, k_rope_out, k_nope_out)
    max_pos, rope_dim = cos_sin_cache.shape
    nnz = q_rope.shape[0]
    width = q_rope.shape[1] * (q_rope.shape[2] + q_nope.shape[2]) + k_rope.shape[1] * (
        k_rope.shape[2] + k_nope.shape[2]
    )
    step = max(1, _ROPE_CHUNK_ELEMENTS // max(width, 1))  # bounds the float32 temporaries
    dtype = q_rope_out.dtype
    for t0 in range(0, nnz, step):
        t = slice(t0, min(nnz, t0 + step))
        pos = pos_ids[t]
        valid = (pos >= 0) & (pos < max_pos)
        rows = cos_sin_cache[torch.where(valid, pos, 0)].float()
        # A position outside the cache is never read: its rotation is NaN, so are its rope outputs.
        rows = torch.where(valid[:, None], rows, float("nan"))[:, None, :]
        cos, sin = rows[..., : rope_dim // 2], rows[..., rope_dim // 2 :]
        q_rope_out[t] = _saturating_cast(_rotate(q_rope[t], cos, sin, is_neox) * quant_scale_q, dtype)
        k_rope_out[t] = _saturating_cast(_rotate(k_rope[t], cos, sin, is_neox) * quant_scale_kv, dtype)
        if q_nope.shape[-1]:
            q_nope_out[t] = _saturating_cast(q_nope[t].float() * quant_scale_q, dtype)
        if k_nope.shape[-1]:
            k_nope_out[t] = _saturating_cast(k_nope[t].float() * quant_scale_kv, dtype)


def decode_plan(batch, q_len, heads, topk, device):
    """The reference needs no schedule."""
    return None


def sparse_decode(call) -> None:
    """Sparse MLA decode over per-token physical slot lists (:class:`~._args.Decode`)."""
    kv, indices = call.pages, call.table
    limit = _token_limits(call.seq_lens, call.query.shape[1]).clamp(max=indices.shape[-1])
    _attend(call, kv, _slot_keys(indices, limit, kv), indices.shape[-1])


def packed_sparse_decode(call) -> None:
    """Sparse MLA decode over the packed 656-byte rows (:class:`~._args.Decode`, packed form):
    dequantize each gathered row, then the 576-wide math with upstream's ``sparse``-backend LSE."""
    query, kv, indices, lengths = call.query, call.pages, call.table, call.seq_lens
    rows, topk = query.shape[0] * query.shape[1], indices.shape[-1]
    if lengths is None:
        limit = torch.full((rows,), topk, device=query.device)
    else:
        limit = lengths.long().clamp(max=topk)
    _attend(call, kv, _slot_keys(indices, limit, kv), topk, unpack=unpack_rows, sink_in_lse=True)


def _slot_keys(indices, limit, kv_pages):
    """``keys`` for :func:`_attend` over ``kv_pages`` ``[pages, page_size, D]``: row r takes list
    positions ``< limit[r]`` holding a slot ``page * page_size + row`` in range (the pages are
    indexed directly, whatever their stride)."""
    topk = indices.shape[-1]
    flat_indices = indices.reshape(-1, topk)
    positions = torch.arange(topk, device=indices.device)
    num_pages, page_size = kv_pages.shape[:2]

    def keys(r0, r1, k0, k1):
        slot = flat_indices[r0:r1, k0:k1].long()
        valid = (positions[k0:k1] < limit[r0:r1, None]) & (slot >= 0) & (slot < num_pages * page_size)
        return (slot // page_size, slot % page_size), valid

    return keys


def dense_decode(call) -> None:
    """Paged (dense) MLA decode, causal bottom-right for ``q_len > 1`` (:class:`~._args.Decode`)."""
    query, kv_pages, block_tables, seq_lens = call.query, call.pages, call.table, call.seq_lens
    batch, q_len, heads, _ = query.shape
    num_pages, page_size, _ = kv_pages.shape
    limit = _token_limits(seq_lens, q_len)
    width = block_tables.shape[1] * page_size
    if seq_lens.device.type == "cpu" and seq_lens.numel():
        # On the host the lengths are host memory: stop at the longest sequence instead of the
        # table width (which callers size for the model's whole context).
        width = min(width, max(int(seq_lens.max()), 0))
    positions = torch.arange(width, device=query.device)
    request = torch.arange(batch * q_len, device=query.device) // q_len

    def keys(r0, r1, k0, k1):
        pos = positions[k0:k1]
        attended = pos < limit[r0:r1, None]
        # Page entries past ceil(L / page_size) are masked before they are used.
        page_slot = torch.where(attended, pos // page_size, 0)
        page = block_tables[request[r0:r1, None], page_slot].long()
        valid = attended & (page >= 0) & (page < num_pages)
        # (page, offset) pairs index the paged cache directly, whatever its page stride.
        return (page, (pos % page_size).expand_as(page)), valid

    _attend(call, kv_pages, keys, width)


def _token_limits(seq_lens: torch.Tensor, q_len: int) -> torch.Tensor:
    """``seq_lens[b] - (q_len - 1 - t)`` for every row ``b * q_len + t`` (int64)."""
    back = torch.arange(q_len - 1, -1, -1, device=seq_lens.device)
    return (seq_lens.long()[:, None] - back).reshape(-1)


def _attend(call, kv, keys, num_keys, unpack=None, sink_in_lse=False) -> None:
    """Softmax attention of every query row of ``call`` over the keys that ``keys`` selects.

    ``keys(r0, r1, k0, k1)`` returns ``(index, valid)`` for query rows ``r0:r1`` and key positions
    ``k0:k1``: ``index`` is a tuple of ``(r1 - r0, k1 - k0)`` tensors indexing the leading dims of
    ``kv`` (a flat pool or pages), ``valid`` a mask; invalid entries are replaced before the gather.
    ``unpack`` turns gathered rows into float32 K rows (default: a cast). ``sink_in_lse`` selects
    the packed form's LSE: sinks included, ``-inf`` for a row with no key.
    """
    query, out, lse, sinks = call.query, call.out, call.lse3, call.sinks
    bmm1_scale, bmm2_scale = call.bmm1_scale, call.bmm2_scale
    batch, q_len, heads, dim = query.shape
    rows = batch * q_len
    v_dim = out.shape[-1]
    q_rows = query.reshape(rows, heads, dim)
    key_chunk = max(1, min(num_keys, _KEYS_PER_CHUNK))
    row_chunk = max(1, _CHUNK_BYTES // (4 * key_chunk * (dim + 2 * heads)))
    safe_kv = kv if kv.shape[0] else kv.new_zeros((1, *kv.shape[1:]))
    for r0 in range(0, rows, row_chunk):
        r1 = min(rows, r0 + row_chunk)
        q = q_rows[r0:r1].float()
        best = q.new_full((r1 - r0, heads), -math.inf)  # float32, like q, whatever the default dtype
        total = q.new_zeros((r1 - r0, heads))
        acc = q.new_zeros((r1 - r0, heads, v_dim))
        for k0 in range(0, num_keys, key_chunk):
            k1 = min(num_keys, k0 + key_chunk)
            index, valid = keys(r0, r1, k0, k1)
            # Zero the stand-in rows too: 0 * NaN from uninitialised cache memory would leak.
            k = safe_kv[tuple(torch.where(valid, i, 0) for i in index)]
            k = (k.float() if unpack is None else unpack(k)).masked_fill(~valid[..., None], 0.0)
            scores = torch.einsum("rhd,rkd->rhk", q, k) * bmm1_scale
            scores = scores.masked_fill(~valid[:, None, :], -math.inf)
            new_best = torch.maximum(best, scores.amax(-1))
            shift = torch.where(new_best == -math.inf, 0.0, new_best)
            decay = torch.where(best == -math.inf, 0.0, torch.exp(best - shift))
            weights = torch.exp(scores - shift[..., None])
            total = total * decay + weights.sum(-1)
            acc = acc * decay[..., None] + torch.einsum("rhk,rkv->rhv", weights, k[..., :v_dim])
            best = new_best
        empty = total == 0
        lse_nat = torch.where(empty, math.inf, torch.where(empty, 0.0, best) + torch.log(total))
        result = acc / torch.where(empty, 1.0, total)[..., None]
        if sinks is not None:
            # Each sink adds exp(sink) to the denominator only: out *= sigmoid(lse - sink).
            gate = torch.sigmoid(torch.where(empty, -math.inf, lse_nat) - sinks.float())
            result = result * gate[..., None]
        result = result * bmm2_scale
        if sink_in_lse:  # log(sum_j exp(s_j) + exp(sink)); log(0) = -inf for a row with no key
            lse_nat = torch.where(empty, -math.inf, lse_nat)
            if sinks is not None:
                lse_nat = torch.logaddexp(lse_nat, sinks.float())
        # Rows r0:r1 as (request, token) pairs: works for any strides of `out` and `lse`.
        row = torch.arange(r0, r1, device=q.device)
        out[row // q_len, row % q_len] = result.to(out.dtype)
        if lse is not None:
            lse[row // q_len, row % q_len] = lse_nat * LOG2E
