"""The packed 656-byte FP8 cache (upstream's ``sparse`` backend form): input builders, a float64
oracle, and the op-table entries (samples and error inputs) for ``test_mla_ops.py``.

Rows are built from float64 values: e4m3 latent codes, float32 scales (one per 128 codes), bf16
RoPE values. The oracle attends over those values (``codes * scale``, RoPE), never over a decode
of the bytes, so the layout itself is under test. Written from upstream's rules: token ``i`` of
the flattened ``[batch * q_len]`` query considers index positions ``< seq_lens[i]`` (all when
``seq_lens`` is None), ignores entries outside the pool, and its LSE (base 2) includes the sinks'
mass, ``-inf`` when there is nothing (the sink alone with sinks).
"""

from __future__ import annotations

import torch
from mla_oracles import E4M3, INT32_MAX, LOG2E

ROW_BYTES = 656


def packed_pool(slots: int, pow2: bool = True):
    """``(rows [slots, 656] uint8, keys [slots, 576] float64)`` of random codes, scales and RoPE."""
    codes = torch.randn(slots, 512).mul(60).clamp(-448, 448).to(E4M3)
    if pow2:  # DeepSeek-V3.2's power-of-two scales (kv_scale_format "pow2_fp32")
        scales = torch.pow(2.0, torch.randint(-10, -5, (slots, 4)).float())
    else:  # GLM's arbitrary scales ("arbitrary_fp32")
        scales = torch.rand(slots, 4) * 0.01 + 1e-3
    rope = (torch.randn(slots, 64) * 0.5).bfloat16()
    return pack(codes, scales, rope), keys_of(codes, scales, rope)


def pack(codes, scales, rope) -> torch.Tensor:
    """The 656-byte rows: 512 e4m3 codes, 4 float32 scales, 64 bf16 values."""
    parts = (
        codes.view(torch.uint8),
        scales.float().contiguous().view(torch.uint8),
        rope.contiguous().view(torch.uint8),
    )
    return torch.cat(parts, dim=-1)


def keys_of(codes, scales, rope) -> torch.Tensor:
    """The float64 K rows the packed rows stand for."""
    return torch.cat((codes.double() * scales.double().repeat_interleave(128, -1), rope.double()), -1)


def packed_oracle(query, keys, indices, lengths, bmm1, sinks):
    """float64 ``out [B, q_len, H, 512]`` and base-2 ``lse [B, q_len, H]`` (sinks included)."""
    batch, q_len, heads, _ = query.shape
    topk = indices.shape[-1]
    out = torch.zeros(batch, q_len, heads, 512, dtype=torch.float64)
    lse = torch.empty(batch, q_len, heads, dtype=torch.float64)
    sink_mass = torch.zeros(heads, dtype=torch.float64) if sinks is None else sinks.double().exp()
    for b in range(batch):
        for t in range(q_len):
            n = topk if lengths is None else max(0, min(topk, int(lengths.reshape(-1)[b * q_len + t])))
            ids = [i for i in indices[b, t, :n].tolist() if 0 <= i < keys.shape[0]]
            total = sink_mass.clone()
            if ids:
                k = keys[ids]
                weights = (bmm1 * query[b, t].double() @ k.T).exp()  # [H, n]
                total += weights.sum(-1)
                out[b, t] = weights @ k[:, :512] / total[:, None]
            lse[b, t] = total.log() * LOG2E
    return out, lse


def packed_kwargs(batch=2, q_len=1, heads=4, topk=64, page_size=32, pages=None, cache_4d=True, lengths="tokens",
                  pow2=True, bmm1=0.08, sinks=False):  # fmt: skip
    """A decode call on a packed cache with invalid entries inside the considered prefixes, and
    the ``(keys, lengths, sinks)`` its oracle needs."""
    pages = pages or batch * q_len * 2 + 1
    slots = pages * page_size
    rows, keys = packed_pool(slots, pow2)
    indices = torch.randint(0, slots, (batch, q_len, topk), dtype=torch.int32)
    indices[0, -1, 1] = -7
    indices[-1, 0, 2] = slots + 5
    indices[0, 0, 0] = INT32_MAX
    tokens = batch * q_len
    if lengths == "tokens":  # vLLM SM120: one active top-k length per token; the last token has none
        seq_lens = torch.randint(1, topk + 1, (tokens,), dtype=torch.int32)
        seq_lens[0] = topk + 30  # longer than the list: capped
        seq_lens[-1] = 0
    elif lengths == "2d":
        seq_lens = torch.randint(1, topk + 1, (batch, q_len), dtype=torch.int32)
    elif lengths == "batch":  # [batch] KV lengths: ignored when q_len > 1, lengths when q_len == 1
        seq_lens = torch.randint(1, topk + 1, (batch,), dtype=torch.int32)
    else:
        seq_lens = None
    query = (torch.randn(batch, q_len, heads, 576) * 0.5).bfloat16()
    cache = rows.view(pages, page_size, ROW_BYTES)
    kwargs = dict(query=query, kv_cache=cache.unsqueeze(1) if cache_4d else cache,
                  workspace_buffer=torch.empty(1 << 12, dtype=torch.uint8), qk_nope_head_dim=128, kv_lora_rank=512,
                  qk_rope_head_dim=64, block_tables=indices, seq_lens=seq_lens, max_seq_len=topk,
                  sparse_mla_top_k=topk, bmm1_scale=bmm1, bmm2_scale=1.0, backend="sparse",
                  kv_scale_format="pow2_fp32" if pow2 else "arbitrary_fp32")  # fmt: skip
    sink_values = torch.randn(heads) if sinks else None
    if sinks:
        kwargs["sinks"] = sink_values
    oracle_lengths = None if lengths is None or (lengths == "batch" and q_len > 1) else seq_lens
    return kwargs, lambda: packed_oracle(query, keys, indices, oracle_lengths, bmm1, sink_values)


# ------------------------------------------------------------------------------------ op table
def packed_samples() -> list:
    from mla_ops import Sample, _with_outputs, lazy

    @lazy
    def sample(name, lse="none", out="none", **config) -> Sample:
        kwargs, oracle = packed_kwargs(**config)
        kwargs["backend"] = config.get("backend", "sparse")
        return _with_outputs(name, kwargs, lse, out, oracle)

    return [
        sample("packed_q1_token_lengths", lse="return"),
        sample("packed_mtp_q2_2d_lengths_sinks", q_len=2, lengths="2d", sinks=True, heads=16, lse="3d"),
        sample(
            "packed_q2_no_lengths_arbitrary_scales_3d_cache",
            q_len=2,
            lengths=None,
            pow2=False,
            cache_4d=False,
            lse="2d",
            out="contiguous",
        ),  # fmt: skip
        sample(
            "packed_q3_batch_lengths_ignored_strided",
            q_len=3,
            lengths="batch",
            heads=3,
            out="strided",
            lse="strided",
        ),  # fmt: skip
        sample(
            "packed_q1_batch_lengths_used_topk68_heads80",
            lengths="batch",
            topk=68,
            heads=80,
            batch=1,
            lse="return",
            page_size=64,
        ),  # fmt: skip
        sample("packed_sinks_empty_token", sinks=True, heads=8, lse="return"),
    ]


def packed_errors() -> list:
    from mla_ops import ErrorInput

    def base(**changes):
        return lambda: {**packed_kwargs()[0], **changes}

    q = (torch.randn(2, 1, 4, 576) * 0.5).bfloat16()
    return [
        ErrorInput("bmm2_not_one", base(bmm2_scale=0.5), ValueError, "does not support bmm2_scale"),
        ErrorInput("bmm2_tensor", base(bmm2_scale=torch.tensor(1.0)), ValueError, "expects bmm2_scale to be a float"),
        ErrorInput("bmm1_tensor", base(bmm1_scale=torch.tensor(0.1)), ValueError, "expects bmm1_scale to be a float"),
        ErrorInput("bmm1_tensor_bf16", base(bmm1_scale=torch.tensor(0.1).bfloat16()), TypeError, "bmm1_scale tensor must have dtype torch.float32"),
        ErrorInput("fp8_query", base(query=q.to(E4M3)), ValueError, "expects BF16 query"),
        ErrorInput("query_3d", base(query=q[:, 0]), ValueError, r"Expected query.ndim == 4, got 3"),
        ErrorInput("query_width", base(query=q[..., :512]), ValueError, "query head dim 576"),
        ErrorInput("dims", base(kv_lora_rank=256), ValueError, "expects kv_lora_rank=512"),
        ErrorInput("topk_zero", base(sparse_mla_top_k=0), ValueError, "requires sparse_mla_top_k > 0"),
        ErrorInput("index_shape", base(block_tables=torch.zeros(2, 64, dtype=torch.int32)), ValueError, r"expects sparse block_tables shape \(2, 1, 64\)"),
        ErrorInput("index_dtype", base(block_tables=torch.zeros(2, 1, 64, dtype=torch.int64)), ValueError, "block_tables must have dtype torch.int32"),
        ErrorInput("cache_width", base(kv_cache=torch.zeros(4, 32, 576, dtype=torch.uint8)), ValueError, "last dim 656"),
        ErrorInput("cache_4d_heads", base(kv_cache=torch.zeros(4, 2, 32, 656, dtype=torch.uint8)), ValueError, "HND kv_cache shape"),
        ErrorInput("cache_2d", base(kv_cache=torch.zeros(128, 656, dtype=torch.uint8)), ValueError, r"Expected kv_cache.ndim == 3 or 4"),
        ErrorInput("cache_padded_pages", base(kv_cache=torch.zeros(5, 33, 656, dtype=torch.uint8)[:, :32]), ValueError, "656-byte rows back to back"),
        ErrorInput("cache_misaligned", base(kv_cache=torch.zeros(128 * 656 + 8, dtype=torch.uint8)[8:].view(4, 32, 656)), ValueError, "16-byte boundary"),
        ErrorInput("seq_lens_dtype", base(seq_lens=torch.zeros(2, dtype=torch.int64)), ValueError, "seq_lens must have dtype torch.int32"),
        ErrorInput("seq_lens_shape", base(seq_lens=torch.zeros(3, dtype=torch.int32)), ValueError, r"must be shaped either \(2,\), \(2,\), or \(2, 1\)"),
        ErrorInput("skip_softmax", base(skip_softmax_threshold_scale_factor=0.5), ValueError, "skip_softmax is not supported for sparse MLA"),
        ErrorInput("separate_kv_index", base(uses_shared_paged_kv_idx=False), ValueError, "uses_shared_paged_kv_idx=True"),
        ErrorInput("scale_format", base(kv_scale_format="ue8m0"), ValueError, "kv_scale_format must be one of"),
        ErrorInput("too_many_heads", base(query=torch.zeros(2, 1, 129, 576, dtype=torch.bfloat16)), ValueError, "Expected num_heads <= 128"),
        ErrorInput("top_k_lens", base(sparse_mla_top_k_lens=torch.zeros(2, dtype=torch.int32)), ValueError, "sparse_mla_top_k_lens"),
        ErrorInput("cum_seq_lens_q", base(cum_seq_lens_q=torch.tensor([0, 1, 2], dtype=torch.int32)), ValueError, "cum_seq_lens_q"),
        ErrorInput("out_shape", base(out=torch.empty(2, 1, 4, 576, dtype=torch.bfloat16)), ValueError, "Invalid shape/dtype/device of out"),
        ErrorInput("lse_shape", base(lse=torch.empty(3, 4), return_lse=True), ValueError, "lse"),
        ErrorInput("sinks_shape", base(sinks=torch.zeros(3)), ValueError, "sinks"),
        ErrorInput("unknown_backend", base(backend="flashmla"), ValueError, "Backend flashmla not supported"),
        ErrorInput("dcp", base(enable_dcp=True, return_lse=True), NotImplementedError, "enable_dcp=True"),
        ErrorInput("metadata_wrong_type", base(metadata=object()), TypeError, "DecodeMetadata"),
        ErrorInput("query_not_contiguous", base(query=torch.zeros(2, 1, 4, 1152, dtype=torch.bfloat16)[..., :576]), ValueError, "contiguous"),
    ]  # fmt: skip
