"""The unpacked cache form of ``trtllm_batch_decode_with_kv_cache_mla``: rows of the query's dtype.

A cache of ``kv_lora_rank + qk_rope_head_dim``-wide rows (576 for DeepSeek) in the query's
dtype (bf16, fp16 or e4m3), read sparse (``sparse_mla_top_k > 0``: per-token slot lists) or
dense (page tables). :func:`check` states this form's rules in FlashInfer's order (the option
rules, then the tensor rules of ``_checks``), allocates the outputs and returns the
:class:`~._args.Decode` record the implementation runs. Nothing is written before every rule has
passed.
"""

from __future__ import annotations

import torch

from .._core.checks import describe, fail, require_tensors
from . import _checks
from ._args import Decode
from ._metadata import check_metadata

__all__ = ["check"]

_INT32 = torch.int32
_DEEPSEEK = (512, 64)  # (kv_lora_rank, qk_rope_head_dim) of the serving calls
_OPTIONAL_TENSORS = (
    "seq_lens",
    "out",
    "lse",
    "multi_ctas_kv_counter_buffer",
    "cum_seq_lens_q",
    "sparse_mla_top_k_lens",
)
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
    """Validate a call on the unpacked cache and make its record. The parameters are the public
    function's, same names, in its order, the same as :func:`._packed_decode.check`'s
    (``tests/mla/test_decode_options.py``); ``kv_scale_format`` is the packed cache's option and
    is not read here.

    Returns
    -------
    tuple
        ``(call, result)``: the :class:`~._args.Decode` record (None for an empty problem: there
        is nothing to compute) and what the public function returns (``out``, or ``(out, lse)``
        with ``return_lse``).
    """
    rope_dim, workspace = qk_rope_head_dim, workspace_buffer
    topk, topk_lens = sparse_mla_top_k, sparse_mla_top_k_lens
    # the DeepSeek calls (sparse or dense) pass these rules: the helper states them for the others
    unusual = (kv_lora_rank, rope_dim) != _DEEPSEEK or topk_lens is not None
    if unusual or type(topk) is not int or topk < 0 or topk % 4:
        _check_options(kv_lora_rank, rope_dim, topk, topk_lens)
    sparse = topk > 0
    if sparse and skip_softmax_threshold_scale_factor is not None:
        raise ValueError("skip_softmax is not supported for sparse MLA")
    if not uses_shared_paged_kv_idx:
        raise NotImplementedError(
            "uses_shared_paged_kv_idx=False (separate K and V page tables) is not served by this build; "
            "MLA reads K and V from the same cache rows, pass one shared page table"
        )
    # ---- tensors
    compact = cum_seq_lens_q is not None
    try:
        q_shape = query.shape
        _checks.check_query_and_cache(query, q_shape, kv_cache, kv_lora_rank, rope_dim, compact, sparse)
        device = query.device
        bmm1 = _checks.check_decode_scale(bmm1_scale, "bmm1_scale", device)
        bmm2 = _checks.check_decode_scale(bmm2_scale, "bmm2_scale", device)
        if seq_lens is None:
            expected = "an int32 [batch] tensor (seq_lens is required by every backend)"
            fail(ValueError, "seq_lens", expected, "None")
        _checks.check_workspace(workspace, device)
        if compact:
            rows, heads = q_shape[0], q_shape[1]
            q_len, batch = 1, seq_lens.shape[0]
            out_shape = (rows, heads, kv_lora_rank)
        else:
            batch, q_len, heads = q_shape[0], q_shape[1], q_shape[2]
            rows = batch
            out_shape = (batch, q_len, heads, kv_lora_rank)
        _checks.check_int32(seq_lens, "seq_lens", (batch,), device)
        if sparse:
            _checks.check_sparse_indices(block_tables, (*q_shape[:-2], topk), device)
        else:
            _checks.check_dense_tables(block_tables, batch, device)
        if multi_ctas_kv_counter_buffer is not None:
            _checks.check_counter_buffer(multi_ctas_kv_counter_buffer, batch, heads, device)
        if sinks is not None:
            sinks = _checks.check_sinks(sinks, heads, device)
        if compact:
            _checks.check_int32(cum_seq_lens_q, "cum_seq_lens_q", (batch + 1,), device)
            if batch == 0 and rows:
                fail(ValueError, "seq_lens", "at least one request for a non-empty compact query", seq_lens)
        if topk_lens is not None:
            _checks.check_int32(topk_lens, "sparse_mla_top_k_lens", (rows * q_len,), device)
        if metadata is not None:
            check_metadata(metadata, rows, q_len, heads, topk, device)
        if out is not None:
            out4 = _checks.check_decode_out(
                out, out_shape, query, kv_cache, accept_3d=q_len == 1 and not compact
            )
        if lse is not None:
            _checks.check_lse(lse, rows * q_len, q_len, heads, device)
    except AttributeError:  # a non-tensor where a tensor belongs: name it (the error path only)
        given = locals()
        require_tensors(ValueError, **{name: given[name] for name in _TENSORS}, optional=_OPTIONAL_TENSORS)
        raise

    # ---- outputs (allocated contiguous; views only where the rank changes: each costs host time)
    if out is None:  # sizes as arguments (docs/internals.md, host time)
        out = out4 = torch.empty(*out_shape, dtype=torch.bfloat16, device=device)
    if compact:
        out4 = out4.view(rows, q_len, heads, kv_lora_rank)
    if lse is None and return_lse:
        lse = torch.empty(rows * q_len, heads, dtype=torch.float32, device=device)
    result = (out, lse) if return_lse else out
    if rows * q_len * heads == 0:
        return None, result

    # ---- the record (per-row lengths: the call flattened to one query token per row)
    query4, lse4, row_lens = query, lse, None
    if compact or topk_lens is not None:
        query4, out4, lse4, row_lens, row_request = _per_row(
            query, out4, lse, seq_lens, cum_seq_lens_q, topk_lens, rows, q_len, heads
        )
    seq = seq_lens if row_lens is None else row_lens
    if not sparse:
        tables = block_tables if row_lens is None else block_tables[row_request]
        return Decode._make(
            (query4, kv_cache, tables, seq, bmm1, bmm2, sinks, out4, lse4, None, workspace)
        ), result
    b, t = query4.shape[:2]
    as_given = (b, t) == (rows, q_len) and not compact  # block_tables is (b, t, topk) already
    indices = block_tables if as_given else block_tables.view(b, t, topk)
    # metadata planned the shape the caller sees; a call flattened to one token per row is
    # planned by the implementation
    plan = metadata.plan if metadata is not None and (b, t) == (rows, q_len) else None
    return Decode._make(
        (query4, kv_cache, indices, seq, bmm1, bmm2, sinks, out4, lse4, plan, workspace)
    ), result


def _check_options(kv_lora_rank, rope_dim, topk, topk_lens) -> None:
    """The MLA-dimension and top-k rules of this form, in FlashInfer's order (the caller skips it
    for the DeepSeek dimensions with a valid top-k and no per-token lengths, which pass them)."""
    if (kv_lora_rank, rope_dim) not in _checks.MLA_DIMS:
        raise ValueError(
            f"Unsupported MLA dimensions: kv_lora_rank={kv_lora_rank}, qk_rope_head_dim={rope_dim}; "
            f"expected one of {list(_checks.MLA_DIMS)}"
        )
    if not isinstance(topk, int) or topk < 0:
        fail(ValueError, "sparse_mla_top_k", "a non-negative int (0: dense decode)", describe(topk))
    sparse, native = topk > 0, rope_dim == 0
    if native and (not sparse or topk_lens is None):
        raise ValueError(
            "the native (512, 0) MLA dimensions need sparse_mla_top_k > 0 and sparse_mla_top_k_lens"
        )
    if topk_lens is not None and not native:
        raise ValueError("sparse_mla_top_k_lens is only supported with the native (512, 0) MLA dimensions")
    if sparse and topk % 4:
        _checks.reject_topk(topk)


def _per_row(query, out4, lse, seq_lens, cum_seq_lens_q, topk_lens, rows: int, q_len: int, heads: int):
    """A compact query's 4-D view and its per-token lengths and request ids (:func:`_compact_rows`),
    or the native form's per-token ``topk_lens``; with ``q_len > 1``, query, out and LSE as one
    token per row (:func:`_one_token_per_row`). Returns ``(query4, out4, lse4, row_lens,
    row_request)`` (``row_request`` None unless compact)."""
    query4, lse4, row_request = query, lse, None
    if cum_seq_lens_q is not None:
        query4 = query.view(rows, q_len, heads, query.shape[-1])
        row_lens, row_request = _compact_rows(seq_lens, cum_seq_lens_q, rows)
    if topk_lens is not None:
        row_lens = topk_lens
    if q_len > 1:
        lse3 = None if lse is None or lse.dim() == 3 else lse.unflatten(0, (rows, q_len))
        query4, out4, lse4 = _one_token_per_row(query4, out4, lse if lse3 is None else lse3)
    return query4, out4, lse4, row_lens, row_request


def _compact_rows(seq_lens: torch.Tensor, cum_seq_lens_q: torch.Tensor, total_q: int):
    """Per-token lengths and request ids of a compact query, computed on the device.

    Token i of request b (``cum[b] <= i < cum[b+1]``) gets ``seq_lens[b] - (cum[b+1] - 1 - i)``,
    the bottom-right causal limit of its own request; tokens outside ``[cum[0], cum[-1])`` get 0.
    """
    token = torch.arange(total_q, device=seq_lens.device, dtype=_INT32)
    request = torch.searchsorted(cum_seq_lens_q[1:], token, right=True)
    inside = (token >= cum_seq_lens_q[0]) & (token < cum_seq_lens_q[-1])
    request = request.clamp(max=seq_lens.shape[0] - 1)
    lens = seq_lens[request] - (cum_seq_lens_q[1:][request] - 1 - token)
    return torch.where(inside, lens, 0).to(_INT32), request


def _one_token_per_row(query4, out4, lse3):
    """``[B, q_len, ...]`` as ``[B * q_len, 1, ...]`` views (per-token lengths need that form)."""
    try:
        return (
            query4.flatten(0, 1).unsqueeze(1),
            out4.view(-1, 1, *out4.shape[2:]),
            None if lse3 is None else lse3.view(-1, 1, lse3.shape[-1]),
        )
    except RuntimeError:
        fail(
            ValueError,
            "out and lse",
            "buffers whose [batch, q_len] dimensions can be merged into one",
            "strided buffers",
        )
