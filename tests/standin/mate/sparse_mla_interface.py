"""STAND-IN for ``mate.sparse_mla_interface`` (MATE 0.2.6), for testing the adapter on CPU.

Not MATE, and nothing here says how MATE behaves on MUSA hardware. The three functions have
MATE 0.2.6's signatures (mate-api.md §5-7) and enforce its documented rules, so an adapter that
breaks one fails here:

- ``mla_rope_quantize_fp8``: BF16 inputs, 2-D K, NoPE 512 / RoPE 64, e4m3 output only, host
  float scales, last dims contiguous. Positions are not range-checked by MATE (it reads
  garbage); the stand-in raises instead so a test sees any out-of-range read.
- ``sparse_mla_fp8_decode``: FP8 e4m3 contiguous query/cache, int32 contiguous
  ``[B, q_len, topk]`` indices with ``topk % 64 == 0``, H > 64 only as a multiple of 64,
  float scales only, a contiguous BF16 ``out``. Per batch ``runtime_len = clamp(seq_lens[b], 0,
  topk)``, shared by all q tokens (no per-token causal limit), invalid entries (negative,
  ``>= slots``, position ``>= runtime_len``) masked, natural-log LSE, empty rows out 0 / LSE
  +inf, ``sinks`` ignored. FlashInfer v0.6.17-only keywords are not in the signature, so
  passing one raises TypeError, as MATE does.
- ``get_batch_decode_metadata_mla``: metadata through ``mate.flashmla._dispatch_mla_metadata``;
  the decode only visits the blocks it scheduled.

Math is float64 on the tensors' device; every call is recorded with its arguments as passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import flashmla
from ._recorder import record

NUM_MPS = 8
E4M3 = torch.float8_e4m3fn


@dataclass
class _DecodeMetadata:
    config: tuple
    max_num_splits: int
    num_scheduler_ctas: int
    scheduler_metadata: torch.Tensor
    num_splits: torch.Tensor


def mla_rope_quantize_fp8(
    q_rope,
    k_rope,
    q_nope,
    k_nope,
    cos_sin_cache,
    pos_ids,
    is_neox=True,
    quantize_dtype=None,
    quant_scale_q=1.0,
    quant_scale_kv=1.0,
    q_rope_out=None,
    k_rope_out=None,
    q_nope_out=None,
    k_nope_out=None,
    enable_pdl=False,
):
    record(
        "mla_rope_quantize_fp8", q_rope=q_rope, k_rope=k_rope, q_nope=q_nope, k_nope=k_nope,
        cos_sin_cache=cos_sin_cache, pos_ids=pos_ids, is_neox=is_neox, quantize_dtype=quantize_dtype,
        quant_scale_q=quant_scale_q, quant_scale_kv=quant_scale_kv, q_rope_out=q_rope_out,
        k_rope_out=k_rope_out, q_nope_out=q_nope_out, k_nope_out=k_nope_out,
    )  # fmt: skip
    for name, scale in (("quant_scale_q", quant_scale_q), ("quant_scale_kv", quant_scale_kv)):
        if isinstance(scale, torch.Tensor):
            raise TypeError(f"{name} must be a host scalar")
    if cos_sin_cache.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError("cos_sin_cache must be float32 or bfloat16")
    if pos_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError("pos_ids must be int32 or int64")
    outs = [q_rope_out, k_rope_out, q_nope_out, k_nope_out]
    if quantize_dtype is None:
        quantize_dtype = next((o.dtype for o in outs if o is not None), E4M3)
    if quantize_dtype != E4M3:
        raise ValueError("quantize_dtype must be torch.float8_e4m3fn")
    nnz, heads = q_rope.shape[0], q_rope.shape[1]
    expected = {"q_rope": (q_rope, (nnz, heads, 64)), "q_nope": (q_nope, (nnz, heads, 512)),
                "k_rope": (k_rope, (nnz, 64)), "k_nope": (k_nope, (nnz, 512))}  # fmt: skip
    for name, (x, shape) in expected.items():
        # TileLang argument binding (the error type is not specified by MATE).
        if tuple(x.shape) != shape or x.dtype != torch.bfloat16 or x.stride(-1) != 1:
            raise RuntimeError(f"stand-in: {name} must be bf16 {shape} with a contiguous last dim")
    if not (cos_sin_cache.is_contiguous() and pos_ids.is_contiguous() and cos_sin_cache.shape[1] == 64):
        raise RuntimeError("stand-in: cos_sin_cache [max_pos, 64] and pos_ids must be contiguous")
    inputs = [q_rope, k_rope, q_nope, k_nope]
    outs = [o if o is not None else torch.empty_like(x, dtype=E4M3) for o, x in zip(outs, inputs)]
    for o, x in zip(outs, inputs):
        if o.shape != x.shape or o.dtype != E4M3 or o.stride(-1) != 1:
            raise RuntimeError(
                "stand-in: outputs must be e4m3 with the input's shape and a contiguous last dim"
            )
    if nnz == 0:
        return tuple(outs)
    if bool(((pos_ids < 0) | (pos_ids >= cos_sin_cache.shape[0])).any()):
        raise AssertionError("stand-in: MATE would read cos_sin_cache out of bounds for these pos_ids")
    cache = cos_sin_cache.double()[pos_ids.long()]
    cos, sin = cache[:, :32], cache[:, 32:]

    def rotate(x, c, s):
        x = x.double()
        if is_neox:
            lo, hi = x[..., :32], x[..., 32:]
            return torch.cat((lo * c - hi * s, hi * c + lo * s), -1)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * c - odd * s, odd * c + even * s), -1).flatten(-2)

    def cast(x):
        return x.clamp(-448, 448).to(E4M3)

    outs[0].copy_(cast(rotate(q_rope, cos[:, None], sin[:, None]) * quant_scale_q))
    outs[1].copy_(cast(rotate(k_rope, cos, sin) * quant_scale_kv))
    outs[2].copy_(cast(q_nope.double() * quant_scale_q))
    outs[3].copy_(cast(k_nope.double() * quant_scale_kv))
    return tuple(outs)


def get_batch_decode_metadata_mla(query, seq_lens, sparse_mla_top_k):
    record("get_batch_decode_metadata_mla", query=query, seq_lens=seq_lens, sparse_mla_top_k=sparse_mla_top_k)
    if query.dim() != 4 or query.shape[-1] != 576 or query.shape[1] <= 0 or query.shape[2] <= 0:
        raise ValueError("query must be [B, q_len, H, 576]")
    if sparse_mla_top_k <= 0 or sparse_mla_top_k % 64:
        raise ValueError("sparse_mla_top_k must be a positive multiple of 64")
    batch, q_len, heads, _ = query.shape
    _check_seq_lens(seq_lens, batch, query.device)
    ctas = max(NUM_MPS // (q_len * max(heads // 64, 1)), 1)
    splits = 1 if ctas == 1 or sparse_mla_top_k <= 64 else min(-(-sparse_mla_top_k // 64), ctas, 64)
    scheduler = torch.empty((ctas, 8), dtype=torch.int32, device=query.device)
    num_splits = torch.empty((batch + 1,), dtype=torch.int32, device=query.device)
    flashmla._dispatch_mla_metadata(
        seq_lens, q_len * heads, 1, topk=sparse_mla_top_k, bs=batch, topk_length=seq_lens,
        tile_scheduler_metadata=scheduler, num_splits=num_splits,
    )  # fmt: skip
    return _DecodeMetadata((batch, q_len, heads, sparse_mla_top_k), splits, ctas, scheduler, num_splits)


def _check_seq_lens(seq_lens, batch, device):
    if not isinstance(seq_lens, torch.Tensor):
        raise TypeError("seq_lens must be a torch.Tensor")
    if seq_lens.dtype != torch.int32 or not seq_lens.is_contiguous():
        raise TypeError("seq_lens must be contiguous torch.int32")
    if tuple(seq_lens.shape) not in ((batch,), (batch, 1)):
        raise ValueError(f"seq_lens must have shape ({batch},) or ({batch}, 1)")
    if seq_lens.device != device:
        raise ValueError("seq_lens must be on the query's device")


def sparse_mla_fp8_decode(
    query,
    kv_cache,
    workspace_buffer,
    qk_nope_head_dim,
    kv_lora_rank,
    qk_rope_head_dim,
    block_tables,
    seq_lens,
    max_seq_len,
    sparse_mla_top_k=0,
    out=None,
    bmm1_scale=1.0,
    bmm2_scale=1.0,
    sinks=None,
    skip_softmax_threshold_scale_factor=None,
    enable_pdl=None,
    backend="auto",
    is_var_seq=True,
    uses_shared_paged_kv_idx=True,
    lse=None,
    return_lse=False,
    cute_dsl_impl="auto",
    kv_scale_format="auto",
    cum_seq_lens_q=None,
    max_q_len=None,
    multi_ctas_kv_counter_buffer=None,
    metadata=None,
):
    record(
        "sparse_mla_fp8_decode", query=query, kv_cache=kv_cache, workspace_buffer=workspace_buffer,
        kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim, block_tables=block_tables,
        seq_lens=seq_lens, max_seq_len=max_seq_len, sparse_mla_top_k=sparse_mla_top_k, out=out,
        bmm1_scale=bmm1_scale, bmm2_scale=bmm2_scale, sinks=sinks, backend=backend, lse=lse,
        return_lse=return_lse, metadata=metadata,
    )  # fmt: skip
    if sparse_mla_top_k <= 0:
        raise ValueError("sparse_mla_top_k must be > 0")
    if query.dtype != E4M3 or not query.is_contiguous():
        raise TypeError("query must be contiguous torch.float8_e4m3fn")
    if query.dim() != 4 or query.shape[-1] != 576:
        raise ValueError("query must be [B, q_len, H, 576]")
    if kv_cache.dtype != E4M3 or not kv_cache.is_contiguous():
        raise TypeError("kv_cache must be contiguous torch.float8_e4m3fn")
    if kv_cache.dim() not in (3, 4) or kv_cache.shape[-1] != 576:
        raise ValueError("kv_cache must be [pages, page_size, 576] or [pages, 1, page_size, 576]")
    batch, q_len, heads, _ = query.shape
    topk = sparse_mla_top_k
    if block_tables.dtype != torch.int32 or not block_tables.is_contiguous():
        raise TypeError("block_tables must be contiguous torch.int32")
    if tuple(block_tables.shape) != (batch, q_len, topk):
        raise ValueError(f"block_tables must be ({batch}, {q_len}, {topk})")
    _check_seq_lens(seq_lens, batch, query.device)
    if topk % 64:
        raise ValueError("sparse_mla_top_k must be a multiple of 64")
    if kv_lora_rank != 512 or qk_rope_head_dim != 64:
        raise ValueError("kv_lora_rank must be 512 and qk_rope_head_dim 64")
    for name, scale in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(scale, torch.Tensor):
            raise NotImplementedError(f"tensor {name} is not supported")
    if heads > 64 and heads % 64:
        raise AssertionError("num_heads > 64 must be a multiple of 64")
    if out is not None:
        if out.dtype != torch.bfloat16 or not out.is_contiguous():
            raise TypeError("out must be contiguous torch.bfloat16")
        if tuple(out.shape) != (batch, q_len, heads, 512):
            raise ValueError("out has the wrong shape")
    if lse is not None:
        if lse.dtype != torch.float32 or not lse.is_contiguous():
            raise TypeError("lse must be contiguous torch.float32")
        if tuple(lse.shape) not in ((batch * q_len, heads), (batch, q_len, heads)):
            raise ValueError("lse has the wrong shape")
    scheduled = torch.full((batch,), topk, dtype=torch.int64)
    if metadata is not None:
        if not isinstance(metadata, _DecodeMetadata):
            raise TypeError("metadata must come from get_batch_decode_metadata_mla")
        if metadata.config != (batch, q_len, heads, topk) or metadata.num_splits.device != query.device:
            raise ValueError("metadata does not match the decode configuration; prepare it again")
        scheduled = metadata.num_splits.long().cpu().diff() * flashmla.BLOCK

    kv = kv_cache.reshape(-1, 576).double()
    slots = kv.shape[0]
    runtime = seq_lens.reshape(batch).long().cpu().clamp(0, topk)
    limit = torch.minimum(runtime, scheduled)  # keys past the scheduled blocks are never visited
    idx = block_tables.long()
    position = torch.arange(topk, device=query.device)
    valid = (position < limit.to(query.device)[:, None, None]) & (idx >= 0) & (idx < slots)
    keys = kv[torch.where(valid, idx, 0)]  # [B, q_len, topk, 576]
    scores = torch.einsum("bthd,btkd->bthk", query.double(), keys) * bmm1_scale
    scores = scores.masked_fill(~valid[:, :, None, :], -math.inf)
    lse_nat = torch.logsumexp(scores, dim=-1)
    empty = ~valid.any(-1)[:, :, None].expand_as(lse_nat)
    probs = torch.where(empty[..., None], 0.0, torch.exp(scores - lse_nat[..., None]))
    result = torch.einsum("bthk,btkv->bthv", probs, keys[..., :512]) * bmm2_scale
    lse_nat = torch.where(empty, math.inf, lse_nat)
    if out is None:
        out = torch.empty((batch, q_len, heads, 512), dtype=torch.bfloat16, device=query.device)
    out.copy_(result)
    allocated_lse = lse is None
    if lse is None:
        lse = torch.empty((batch, q_len, heads), dtype=torch.float32, device=query.device)
    lse.copy_(lse_nat.reshape(lse.shape))
    if not return_lse:
        return out
    return out, (lse.view(batch * q_len, heads) if allocated_lse else lse)
