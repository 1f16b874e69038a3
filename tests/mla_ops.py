"""The op table of RoPE + FP8 quantize and MLA decode (schema: ``tests/optable.py``; oracles
and tolerances: ``tests/oracles.py``).

Per op: sample inputs built as the callers build them (fused-buffer slices for RoPE; physical
slots with -1 padding, out-of-range and negative entries for decode; every cache form: FP8,
16-bit, dense pages, the packed 656-byte rows), error inputs with the expected exception and
message (the detailed rules, then one spoiled argument of a valid call per row).
"""

from __future__ import annotations

import math

import torch
from optable import Entry, ErrorInput, OpInfo, Sample
from oracles import (
    BF16,
    E4M3,
    E5M2,
    INT32_MAX,
    PACKED_ROW_BYTES,
    assert_decode_close,
    assert_fp8_close,
    cos_sin_cache,
    decode_oracle,
    dense_candidates,
    packed_oracle,
    packed_pool,
    physical_slots,
    quantized,
    rope_oracle,
    sparse_candidates,
)

import flashinfer.decode
import flashinfer.rope


def lazy(builder):
    """Make ``builder(name, **config)`` return an :class:`optable.Entry` instead of building now."""

    def make(name, **config):
        return Entry(name, lambda: builder(name, **config))

    return make


def _sample(name, kwargs, oracle, outputs=()) -> Sample:
    return Sample(name, (), kwargs, oracle, outputs)


def _error(name, make_kwargs, exc, match) -> ErrorInput:
    return ErrorInput(name, lambda: ((), make_kwargs()), exc, match)


# ----------------------------------------------------------------------------------------- RoPE
def rope_kwargs(nnz, q_heads, k_heads, rope_dim, nope_dim, in_dtype=torch.bfloat16, out_dtype=E4M3,
                is_neox=False, scale_q=1.0, scale_kv=1.0, fused_outputs=True, k_2d=False, pos_dtype=torch.int64,
                cache_dtype=torch.float32, max_pos=4096):  # fmt: skip
    """Upstream's setup: inputs and outputs are slices of fused ``[..., rope + nope]`` tensors."""
    width = rope_dim + nope_dim
    q = (torch.randn(nnz, q_heads, width) * 2).to(in_dtype)
    k = (torch.randn(nnz, width) if k_2d else torch.randn(nnz, k_heads, width)).mul(2).to(in_dtype)
    pos = torch.randint(0, max_pos, (nnz,), dtype=pos_dtype)
    kwargs = dict(q_rope=q[..., :rope_dim], k_rope=k[..., :rope_dim], q_nope=q[..., rope_dim:],
                  k_nope=k[..., rope_dim:], cos_sin_cache=cos_sin_cache(max_pos, rope_dim).to(cache_dtype),
                  pos_ids=pos, is_neox=is_neox, quantize_dtype=out_dtype, quant_scale_q=scale_q,
                  quant_scale_kv=scale_kv)  # fmt: skip
    outputs = ()
    if fused_outputs:
        q_out = torch.empty(nnz, q_heads, width, dtype=out_dtype)
        k_out = torch.empty(k.shape, dtype=out_dtype)
        kwargs.update(q_rope_out=q_out[..., :rope_dim], k_rope_out=k_out[..., :rope_dim],
                      q_nope_out=q_out[..., rope_dim:], k_nope_out=k_out[..., rope_dim:])  # fmt: skip
        outputs = ("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out")
    return kwargs, outputs


@lazy
def rope_sample(name, **config) -> Sample:
    kwargs, outputs = rope_kwargs(**config)

    def oracle():
        args = [kwargs[k] for k in ("q_rope", "k_rope", "q_nope", "k_nope", "cos_sin_cache", "pos_ids")]
        return rope_oracle(*args, kwargs["is_neox"], kwargs["quant_scale_q"], kwargs["quant_scale_kv"],
                           kwargs["quantize_dtype"])  # fmt: skip

    return _sample(name, kwargs, oracle, outputs)


def rope_samples() -> list:
    return [
        rope_sample(
            "mla_deepseek_interleaved", nnz=5, q_heads=16, k_heads=1, rope_dim=64, nope_dim=512, k_2d=True
        ),
        rope_sample(
            "mla_neox_scaled",
            nnz=3,
            q_heads=4,
            k_heads=1,
            rope_dim=64,
            nope_dim=512,
            k_2d=True,
            is_neox=True,
            scale_q=0.625,
            scale_kv=1.75,
        ),  # fmt: skip
        rope_sample("mla_128_heads", nnz=2, q_heads=128, k_heads=1, rope_dim=64, nope_dim=512, k_2d=True),
        rope_sample(
            "gqa_fp16_e5m2",
            nnz=7,
            q_heads=8,
            k_heads=2,
            rope_dim=64,
            nope_dim=64,
            in_dtype=torch.float16,
            out_dtype=E5M2,
        ),  # fmt: skip
        rope_sample(
            "mha_nope0_int32_pos", nnz=4, q_heads=4, k_heads=4, rope_dim=32, nope_dim=0, pos_dtype=torch.int32
        ),
        rope_sample(
            "mla_bf16_cache",
            nnz=6,
            q_heads=2,
            k_heads=1,
            rope_dim=64,
            nope_dim=512,
            k_2d=True,
            cache_dtype=torch.bfloat16,
        ),  # fmt: skip
        rope_sample(
            "saturating",
            nnz=3,
            q_heads=2,
            k_heads=1,
            rope_dim=64,
            nope_dim=512,
            k_2d=True,
            scale_q=300.0,
            scale_kv=50000.0,
        ),  # fmt: skip
        rope_sample(
            "allocated_outputs",
            nnz=3,
            q_heads=4,
            k_heads=1,
            rope_dim=64,
            nope_dim=512,
            k_2d=True,
            fused_outputs=False,
        ),  # fmt: skip
    ]


def rope_compare(result, call, slack=0.0, tensor_cores=False) -> None:
    for name, actual, want in zip(
        ("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"), result, call.oracle()
    ):
        assert actual.shape == want.shape, (name, actual.shape, want.shape)
        assert_fp8_close(actual.cpu(), want, name, tensor_cores)


def rope_errors() -> list:
    def base(**changes):
        return lambda: {
            **rope_kwargs(nnz=3, q_heads=2, k_heads=1, rope_dim=64, nope_dim=512, k_2d=True)[0],
            **changes,
        }

    q = torch.randn(3, 2, 576, dtype=torch.bfloat16)
    return [
        _error("fp16_cache", base(cos_sin_cache=cos_sin_cache(64, 64).half()), ValueError, "cos_sin_cache should be float32"),
        _error("fp32_inputs", base(q_rope=q[..., :64].float()), RuntimeError, "float16 or bfloat16"),
        _error("int8_output", base(quantize_dtype=torch.int8), RuntimeError, "float8_e4m3fn or float8_e5m2"),
        _error("mixed_output_dtypes", base(q_rope_out=torch.empty(3, 2, 64, dtype=E5M2)), RuntimeError, "q_rope_out"),
        _error("nnz_mismatch", base(q_nope=q[:2, :, 64:]), RuntimeError, "q_nope"),
        _error("head_mismatch", base(q_nope=torch.randn(3, 3, 512, dtype=torch.bfloat16)), RuntimeError, "q_nope"),
        _error("q_2d", base(q_rope=q[:, 0, :64]), RuntimeError, "q_rope"),
        _error("k_mixed_rank", base(k_nope=torch.randn(3, 1, 512, dtype=torch.bfloat16)), RuntimeError, "k_rope and k_nope"),
        _error("last_dim_strided", base(q_nope=q[..., 64::1].transpose(0, 2).contiguous().transpose(0, 2)), RuntimeError, "last dimension is contiguous"),
        _error("cache_row_length", base(cos_sin_cache=cos_sin_cache(64, 128)), RuntimeError, "cos_sin_cache"),
        _error("rope_nope_swapped", base(q_rope=q[..., 64:], q_nope=q[..., :64], k_rope=q[:, 0, 64:], k_nope=q[:, 0, :64]),
               RuntimeError, "rope and nope parts swapped.*for `q_rope`"),
        _error("float_pos_ids", base(pos_ids=torch.zeros(3)), RuntimeError, "pos_ids"),
        _error("output_shape", base(k_nope_out=torch.empty(3, 256, dtype=E4M3)), RuntimeError, "k_nope_out"),
        _error("nan_scale", base(quant_scale_q=math.nan), ValueError, "quant_scale_q"),
        _error("tensor_scale", base(quant_scale_kv=torch.tensor(2.0)), TypeError, "quant_scale_kv"),
    ]  # fmt: skip


# --------------------------------------------------------------------------------------- decode
def workspace() -> torch.Tensor:
    return torch.empty(1 << 12, dtype=torch.uint8)


@lazy
def sparse_sample(name, batch=2, q_len=1, heads=4, topk=64, page_size=32, dtype=E4M3, cache_4d=True,
                  seq="full", bmm1=0.08, bmm2=1.0, sinks=False, lse="none", out="none", pad_rows=0) -> Sample:  # fmt: skip
    """A sparse decode call: physical slots, -1 padding, out-of-range and negative entries.
    ``pad_rows``: pages that many rows apart beyond ``page_size`` (FlashMLA's padded pages), the
    padding rows NaN."""
    if seq == "full":  # sglang / vLLM MTP: full KV lengths, may exceed topk
        seq_lens = torch.randint(topk, topk + 40, (batch,), dtype=torch.int32)
        seq_lens[0] = topk  # the per-token limit then drops list entries for earlier tokens
    else:  # vLLM: per-row valid counts <= topk, including an empty row
        seq_lens = torch.randint(1, topk + 1, (batch,), dtype=torch.int32)
        seq_lens[-1] = 0
    pages_per_request = -(-(int(seq_lens.max()) + 1) // page_size)
    num_pages = batch * pages_per_request + 1
    kv = quantized((num_pages, page_size, 576), dtype)
    cache = padded_pages(kv, pad_rows)
    indices = physical_slots(batch, q_len, topk, seq_lens, page_size, num_pages)
    slots = num_pages * page_size
    # Invalid entries inside the considered prefix: negative, past the pool, int32 max.
    indices[0, -1, 1] = -7
    indices[-1, 0, 2] = slots + 5
    indices[0, 0, 0] = INT32_MAX
    query = quantized((batch, q_len, heads, 576), dtype)
    kwargs = dict(query=query, kv_cache=cache.unsqueeze(1) if cache_4d else cache, workspace_buffer=workspace(),
                  qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices,
                  seq_lens=seq_lens, max_seq_len=topk, sparse_mla_top_k=topk, bmm1_scale=bmm1,
                  bmm2_scale=bmm2)  # fmt: skip
    sink_values = torch.randn(heads) if sinks else None
    if sinks:
        kwargs["sinks"] = sink_values
    return _with_outputs(name, kwargs, lse, out, lambda: decode_oracle(
        query, kv.reshape(-1, 576), sparse_candidates(indices, seq_lens, slots),
        _value(bmm1), _value(bmm2), sink_values, 512))  # fmt: skip


def padded_pages(pages: torch.Tensor, pad_rows: int) -> torch.Tensor:
    """``pages [P, page_size, D]`` as a view of a ``[P, page_size + pad_rows, D]`` buffer whose
    padding rows are NaN (all bits set: NaN in e4m3, bf16 and as packed codes and scales)."""
    if not pad_rows:
        return pages
    num_pages, page_size, width = pages.shape
    row_bytes = width * pages.element_size()
    buffer = torch.full((num_pages, page_size + pad_rows, row_bytes), 0xFF, dtype=torch.uint8).view(
        pages.dtype
    )
    buffer[:, :page_size] = pages
    return buffer[:, :page_size]


@lazy
def dense_sample(name, batch=2, q_len=1, heads=4, page_size=32, dtype=torch.bfloat16, cache_4d=True,
                 bmm1=0.08, bmm2=1.0, width_pages=None, lse="none", out="none", sinks=False, lengths=None) -> Sample:  # fmt: skip
    """A dense decode call: random page map, -1 padding past each request's pages (``lengths``:
    the KV lengths, else random ones of up to 3 pages)."""
    if lengths is None:
        seq_lens = torch.randint(q_len, 3 * page_size, (batch,), dtype=torch.int32)
    else:
        seq_lens = torch.tensor(lengths, dtype=torch.int32)
    pages_needed = [-(-int(s) // page_size) for s in seq_lens]
    num_pages = sum(pages_needed) + 2
    width = width_pages or max(pages_needed) + 1
    perm = torch.randperm(num_pages)
    tables = torch.full((batch, width), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(pages_needed):
        tables[b, :n] = perm[start : start + n].int()
        start += n
    kv = quantized((num_pages, page_size, 576), dtype)
    query = quantized((batch, q_len, heads, 576), dtype)
    kwargs = dict(query=query, kv_cache=kv.unsqueeze(1) if cache_4d else kv, workspace_buffer=workspace(),
                  qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=tables,
                  seq_lens=seq_lens, max_seq_len=163840, bmm1_scale=bmm1, bmm2_scale=bmm2)  # fmt: skip
    sink_values = torch.randn(heads) if sinks else None
    if sinks:
        kwargs["sinks"] = [sink_values]
    return _with_outputs(name, kwargs, lse, out, lambda: decode_oracle(
        query, kv.reshape(-1, 576), dense_candidates(tables, seq_lens, q_len, page_size, num_pages),
        _value(bmm1), _value(bmm2), sink_values, 512))  # fmt: skip


def _value(scale) -> float:
    return float(scale) if isinstance(scale, torch.Tensor) else scale


def _with_outputs(name, kwargs, lse, out, oracle) -> Sample:
    batch, q_len, heads, _ = kwargs["query"].shape
    outputs = ()
    if out == "contiguous":
        kwargs["out"] = torch.empty(batch, q_len, heads, 512, dtype=torch.bfloat16)
    elif out == "strided":  # heads interleaved with another buffer: only the last dim is contiguous
        kwargs["out"] = torch.empty(batch, q_len, heads, 2, 512, dtype=torch.bfloat16)[..., 1, :]
    if out != "none":
        outputs += ("out",)
    if lse == "return":
        kwargs["return_lse"] = True
    elif lse in ("2d", "3d", "strided"):
        shape = {"2d": (batch * q_len, heads), "3d": (batch, q_len, heads)}.get(lse)
        kwargs["lse"] = torch.empty(shape) if shape else torch.empty(batch * q_len, heads, 3)[..., 0]
        kwargs["return_lse"] = True
        outputs += ("lse",)
    return _sample(name, kwargs, oracle, outputs)


def decode_samples() -> list:
    return [
        sparse_sample("fp8_q1"),
        sparse_sample("fp8_mtp_q3_counts", q_len=3, seq="counts", lse="return"),
        sparse_sample("fp8_mtp_q2_full", q_len=2, lse="3d", out="contiguous"),
        sparse_sample("bf16_q2", q_len=2, dtype=torch.bfloat16, lse="2d"),
        sparse_sample("fp8_topk68_page64_3d", topk=68, page_size=64, cache_4d=False, lse="return"),
        sparse_sample("fp8_pages_padded_by_a_row", page_size=64, pad_rows=1, lse="return", q_len=2),
        sparse_sample("bf16_pages_padded_3d", dtype=torch.bfloat16, pad_rows=3, cache_4d=False),
        sparse_sample("fp8_heads3_strided_out", heads=3, out="strided", lse="strided"),
        sparse_sample("fp8_sinks_bmm2", heads=16, bmm2=0.75, sinks=True, lse="return"),
        sparse_sample("fp8_tensor_scales", bmm1=torch.tensor([0.08]), bmm2=torch.tensor(1.5), lse="return"),
        sparse_sample("fp8_tensor_bmm2", bmm2=torch.tensor([0.5]), sinks=True, q_len=2),
        sparse_sample("fp8_heads80_padded", heads=80, q_len=2, lse="return", batch=1),
        sparse_sample("fp8_heads128_topk128", heads=128, topk=128, batch=1, lse="return"),
        sparse_sample("bf16_topk256_counts", topk=256, dtype=torch.bfloat16, seq="counts", batch=3),
        sparse_sample("fp16_q2_lse", q_len=2, dtype=torch.float16, lse="return"),
        dense_sample("dense_bf16_q1", lse="return"),
        dense_sample("dense_fp16_q1", dtype=torch.float16),
        dense_sample("dense_fp8_q2_page64", q_len=2, page_size=64, dtype=E4M3, cache_4d=False, out="strided"),
        dense_sample("dense_sinks_lse3d", heads=3, sinks=True, lse="3d", width_pages=64),
    ]


def rope_real_samples() -> list:
    """A prefill chunk of DeepSeek's MLA: 512 tokens, 128 heads."""
    return [rope_sample("real_512_tokens_128_heads", nnz=512, q_heads=128, k_heads=1, rope_dim=64, nope_dim=512,
                        k_2d=True, scale_kv=0.5)]  # fmt: skip


def decode_real_samples() -> list:
    """DeepSeek-V3.2's sparse decode (top-k 2048, up to 128 heads, MTP) and dense decode over
    thousands of positions."""
    return [
        sparse_sample("real_fp8_b4_q2_h128_topk2048", batch=4, q_len=2, heads=128, topk=2048, lse="return"),
        sparse_sample("real_bf16_b1_q1_h128_topk2048_sinks", batch=1, heads=128, topk=2048, dtype=torch.bfloat16,
                      sinks=True, lse="3d", out="contiguous"),
        sparse_sample("real_fp8_b3_q1_h17_topk2048_counts", batch=3, heads=17, topk=2048, seq="counts", lse="return"),
        sparse_sample("real_bf16_b4_q2_h64_topk2048_page64", batch=4, q_len=2, heads=64, topk=2048, page_size=64,
                      dtype=torch.bfloat16, lse="return"),
        dense_sample("real_dense_fp8_q2_page64", batch=3, q_len=2, heads=64, page_size=64, dtype=E4M3,
                     lengths=[3000, 1, 1280], lse="return"),
        dense_sample("real_dense_bf16_h128", batch=4, heads=128, lengths=[4000, 17, 64, 2500], lse="return"),
    ]  # fmt: skip


def decode_compare(result, call, slack=0.0, tensor_cores=False) -> None:
    """Caller buffers are checked as returned by the runner; allocated ones are FlashInfer's."""
    out, lse = result if isinstance(result, tuple) else (result, None)
    expected_out, expected_lse = call.oracle()
    if "out" not in call.outputs:
        assert out.is_contiguous() and out.dtype == BF16
    if lse is not None:
        if "lse" not in call.outputs:  # allocated: FlashInfer's default [batch * q_len, heads]
            batch, q_len, heads = expected_lse.shape
            assert lse.shape == (batch * q_len, heads) and lse.is_contiguous()
        lse = lse.cpu().reshape(expected_lse.shape)
    out = out.cpu().reshape(expected_out.shape)
    assert_decode_close(out, lse, expected_out, expected_lse, call.name, tensor_cores)


def decode_errors() -> list:
    def base(**changes):
        return lambda: {**sparse_sample("base").build().kwargs, **changes}

    def dense(**changes):
        return lambda: {**dense_sample("base").build().kwargs, **changes}

    q = quantized((2, 1, 4, 576), E4M3)
    return [
        _error("unknown_backend", base(backend="fa3"), ValueError, "Backend fa3 not supported"),
        _error("dims", base(kv_lora_rank=384), ValueError, "Unsupported MLA dimensions"),
        _error("head_dim", base(query=quantized((2, 1, 4, 512), E4M3)), ValueError, "Expected head dim 576"),
        _error("index_shape", base(block_tables=torch.zeros(2, 64, dtype=torch.int32)), ValueError, r"Expected page_table.shape == \(2, 1, 64\)"),
        _error("seq_lens_none", base(seq_lens=None), ValueError, "seq_lens is required"),
        _error("skip_softmax_sparse", base(skip_softmax_threshold_scale_factor=0.5), ValueError, "skip_softmax is not supported for sparse MLA"),
        _error("bmm1_tensor_bf16", base(bmm1_scale=torch.tensor([1.0], dtype=torch.bfloat16)), TypeError, "bmm1_scale tensor must have dtype torch.float32"),
        _error("bmm1_inf", base(bmm1_scale=math.inf), ValueError, "bmm1_scale"),
        _error("bmm2_tensor_fp64", base(bmm2_scale=torch.tensor(1.0, dtype=torch.float64)), TypeError, "bmm2_scale tensor must have dtype torch.float32"),
        _error("topk_not_multiple_of_4", base(sparse_mla_top_k=62, block_tables=torch.zeros(2, 1, 62, dtype=torch.int32)), RuntimeError, "SparseMlaTopK must be a multiple of 4"),
        _error("mixed_dtypes", base(query=q.to(torch.float32).to(torch.bfloat16)), ValueError, "mixed query/cache dtypes"),
        _error("fp32_query", base(query=q.float(), kv_cache=torch.zeros(3, 1, 32, 576, dtype=torch.float32)), ValueError, "query"),
        _error("out_shape", base(out=torch.empty(2, 1, 4, 256, dtype=torch.bfloat16)), ValueError, "Invalid shape/dtype/device of out"),
        _error("out_dtype", base(out=torch.empty(2, 1, 4, 512)), ValueError, "Invalid shape/dtype/device of out"),
        _error("lse_shape", base(lse=torch.empty(4, 4)), ValueError, "lse"),
        _error("sinks_shape", base(sinks=torch.zeros(5)), ValueError, "sinks"),
        _error("counter_not_contiguous", base(multi_ctas_kv_counter_buffer=torch.zeros(4096, 2, dtype=torch.uint8)[:, 0]), ValueError, "must be contiguous"),
        _error("counter_misaligned", base(multi_ctas_kv_counter_buffer=torch.zeros(4097, dtype=torch.uint8)[1:]), ValueError, "16-byte aligned"),
        _error("counter_too_small", base(multi_ctas_kv_counter_buffer=torch.zeros(8, dtype=torch.uint8)), ValueError, "is too small"),
        _error("max_q_len_without_cum", base(max_q_len=2), ValueError, "max_q_len"),
        _error("dcp_options_without_dcp", base(cp_world=2), ValueError, "enable_dcp=True"),
        _error("dcp_not_bool", base(enable_dcp=1), ValueError, "enable_dcp"),
        _error("dcp_enabled", base(enable_dcp=True, cp_world=2, return_lse=True), NotImplementedError, "enable_dcp=True"),
        _error("top_k_lens_without_native", base(sparse_mla_top_k_lens=torch.zeros(2, dtype=torch.int32)), ValueError, "native"),
        _error("native_without_top_k_lens", base(qk_rope_head_dim=0), ValueError, "sparse_mla_top_k_lens"),
        _error("metadata_wrong_type", base(metadata=object()), TypeError, "DecodeMetadata"),
        _error("int64_seq_lens", base(seq_lens=torch.tensor([64, 64])), ValueError, "seq_lens"),
        _error("page_stride_not_rows", base(kv_cache=quantized((3 * 32 * 576 + 64,), E4M3).as_strided((3, 32, 576), (32 * 576 + 16, 576, 1))), ValueError, "whole number of rows"),
        _error("separate_kv_tables", dense(uses_shared_paged_kv_idx=False), NotImplementedError, "uses_shared_paged_kv_idx"),
        _error("dense_table_rows", dense(block_tables=torch.zeros(3, 4, dtype=torch.int32)), ValueError, "block_tables"),
    ]  # fmt: skip


# ------------------------------------------------------------------------- the packed 656-byte cache
def packed_kwargs(batch=2, q_len=1, heads=4, topk=64, page_size=32, pages=None, cache_4d=True, lengths="tokens",
                  pow2=True, bmm1=0.08, sinks=False, pad_rows=0):  # fmt: skip
    """A decode call on a packed cache with invalid entries inside the considered prefixes, and
    the ``(keys, lengths, sinks)`` its oracle needs. ``pad_rows``: as in :func:`sparse_sample`."""
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
    cache = padded_pages(rows.view(pages, page_size, PACKED_ROW_BYTES), pad_rows)
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


def packed_samples() -> list:
    @lazy
    def sample(name, lse="none", out="none", **config) -> Sample:
        kwargs, oracle = packed_kwargs(**config)
        kwargs["backend"] = config.get("backend", "sparse")
        return _with_outputs(name, kwargs, lse, out, oracle)

    return [
        sample("packed_q1_token_lengths", lse="return"),
        sample("packed_flashmla_pages_padded_by_a_row", page_size=64, pad_rows=1, lse="return", q_len=2),
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


def packed_real_samples() -> list:
    """The packed cache at DeepSeek-V3.2's size: top-k 2048 over a pool of 40000 rows (625 pages
    of 64), up to 128 heads."""

    @lazy
    def sample(name, lse="return", out="none", **config) -> Sample:
        kwargs, oracle = packed_kwargs(topk=2048, page_size=64, pages=625, **config)
        return _with_outputs(name, kwargs, lse, out, oracle)

    return [
        sample("real_packed_b4_q2_h128_sinks", batch=4, q_len=2, heads=128, sinks=True),
        sample("real_packed_b1_q1_h128_no_lengths", batch=1, heads=128, lengths=None),
        sample("real_packed_b3_h17_arbitrary_scales", batch=3, heads=17, pow2=False),
        sample("real_packed_b64_h64", batch=64, heads=64),
        # vLLM's SM120 call: no lengths, out and a [T, 1, H] LSE given
        sample("real_packed_vllm_t16_h128", batch=16, heads=128, lengths=None, lse="3d", out="contiguous",
               bmm1=576**-0.5),
    ]  # fmt: skip


def packed_errors() -> list:
    def base(**changes):
        return lambda: {**packed_kwargs()[0], **changes}

    q = (torch.randn(2, 1, 4, 576) * 0.5).bfloat16()
    return [
        _error("bmm2_not_one", base(bmm2_scale=0.5), ValueError, "does not support bmm2_scale"),
        _error("bmm2_tensor", base(bmm2_scale=torch.tensor(1.0)), ValueError, "expects bmm2_scale to be a float"),
        _error("bmm1_tensor", base(bmm1_scale=torch.tensor(0.1)), ValueError, "expects bmm1_scale to be a float"),
        _error("bmm1_tensor_bf16", base(bmm1_scale=torch.tensor(0.1).bfloat16()), TypeError, "bmm1_scale tensor must have dtype torch.float32"),
        _error("fp8_query", base(query=q.to(E4M3)), ValueError, "expects BF16 query"),
        _error("query_3d", base(query=q[:, 0]), ValueError, r"Expected query.ndim == 4, got 3"),
        _error("query_width", base(query=q[..., :512]), ValueError, "query head dim 576"),
        _error("dims", base(kv_lora_rank=256), ValueError, "expects kv_lora_rank=512"),
        _error("topk_zero", base(sparse_mla_top_k=0), ValueError, "requires sparse_mla_top_k > 0"),
        _error("index_shape", base(block_tables=torch.zeros(2, 64, dtype=torch.int32)), ValueError, r"expects sparse block_tables shape \(2, 1, 64\)"),
        _error("index_dtype", base(block_tables=torch.zeros(2, 1, 64, dtype=torch.int64)), ValueError, "block_tables must have dtype torch.int32"),
        _error("cache_width", base(kv_cache=torch.zeros(4, 32, 576, dtype=torch.uint8)), ValueError, "last dim 656"),
        _error("cache_4d_heads", base(kv_cache=torch.zeros(4, 2, 32, 656, dtype=torch.uint8)), ValueError, "HND kv_cache shape"),
        _error("cache_2d", base(kv_cache=torch.zeros(128, 656, dtype=torch.uint8)), ValueError, r"Expected kv_cache.ndim == 3 or 4"),
        _error("cache_page_stride_not_rows", base(kv_cache=torch.zeros(5 * 32 * 656 + 64, dtype=torch.uint8).as_strided((5, 32, 656), (32 * 656 + 16, 656, 1))), ValueError, "whole number of rows"),
        _error("cache_rows_apart", base(kv_cache=torch.zeros(4, 32, 672, dtype=torch.uint8)[..., :656]), ValueError, "656-byte rows back to back"),
        _error("cache_misaligned", base(kv_cache=torch.zeros(128 * 656 + 8, dtype=torch.uint8)[8:].view(4, 32, 656)), ValueError, "16-byte boundary"),
        _error("seq_lens_dtype", base(seq_lens=torch.zeros(2, dtype=torch.int64)), ValueError, "seq_lens must have dtype torch.int32"),
        _error("seq_lens_shape", base(seq_lens=torch.zeros(3, dtype=torch.int32)), ValueError, r"must be shaped either \(2,\), \(2,\), or \(2, 1\)"),
        _error("skip_softmax", base(skip_softmax_threshold_scale_factor=0.5), ValueError, "skip_softmax is not supported for sparse MLA"),
        _error("separate_kv_index", base(uses_shared_paged_kv_idx=False), ValueError, "uses_shared_paged_kv_idx=True"),
        _error("scale_format", base(kv_scale_format="ue8m0"), ValueError, "kv_scale_format must be one of"),
        _error("too_many_heads", base(query=torch.zeros(2, 1, 129, 576, dtype=torch.bfloat16)), ValueError, "Expected num_heads <= 128"),
        _error("top_k_lens", base(sparse_mla_top_k_lens=torch.zeros(2, dtype=torch.int32)), ValueError, "sparse_mla_top_k_lens"),
        _error("cum_seq_lens_q", base(cum_seq_lens_q=torch.tensor([0, 1, 2], dtype=torch.int32)), ValueError, "cum_seq_lens_q"),
        _error("out_shape", base(out=torch.empty(2, 1, 4, 576, dtype=torch.bfloat16)), ValueError, "Invalid shape/dtype/device of out"),
        _error("lse_shape", base(lse=torch.empty(3, 4), return_lse=True), ValueError, "lse"),
        _error("sinks_shape", base(sinks=torch.zeros(3)), ValueError, "sinks"),
        _error("unknown_backend", base(backend="flashmla"), ValueError, "Backend flashmla not supported"),
        _error("dcp", base(enable_dcp=True, return_lse=True), NotImplementedError, "enable_dcp=True"),
        _error("metadata_wrong_type", base(metadata=object()), TypeError, "DecodeMetadata"),
        _error("query_not_contiguous", base(query=torch.zeros(2, 1, 4, 1152, dtype=torch.bfloat16)[..., :576]), ValueError, "contiguous"),
    ]  # fmt: skip


# ----------------------------------------------------------------------------- bad input, per argument

# A valid call each (caller buffers hold 7.0, never NaN, so a write shows), then one argument
# spoiled per row: the documented exception, a message naming the argument, nothing written
# before. Tensors on "another device" use PyTorch's ``meta`` device.
META = torch.device("meta")


def rope_args():
    nnz, heads = 3, 2
    q_out = torch.full((nnz, heads, 576), 7.0).to(E4M3)
    return dict(q_rope=torch.randn(nnz, heads, 64).to(BF16), k_rope=torch.randn(nnz, 64).to(BF16),
                q_nope=torch.randn(nnz, heads, 512).to(BF16), k_nope=torch.randn(nnz, 512).to(BF16),
                cos_sin_cache=torch.randn(16, 64), pos_ids=torch.arange(nnz), is_neox=False,
                q_rope_out=q_out[..., 512:], k_rope_out=torch.full((nnz, 64), 7.0).to(E4M3),
                q_nope_out=q_out[..., :512], k_nope_out=torch.full((nnz, 512), 7.0).to(E4M3))  # fmt: skip


def decode_args(sparse=True):
    B, H, topk = 2, 4, 64
    query = torch.randn(B, 1, H, 576).to(E4M3)
    args = dict(query=query, kv_cache=torch.randn(8, 32, 576).to(E4M3),
                workspace_buffer=torch.empty(1 << 16, dtype=torch.int8), qk_nope_head_dim=128,
                kv_lora_rank=512, qk_rope_head_dim=64,
                block_tables=torch.randint(0, 256, (B, 1, topk), dtype=torch.int32),
                seq_lens=torch.full((B,), topk, dtype=torch.int32), max_seq_len=topk, sparse_mla_top_k=topk,
                out=torch.full((B, 1, H, 512), 7.0, dtype=BF16), bmm1_scale=0.1,
                lse=torch.full((B, H), 7.0), return_lse=True)  # fmt: skip
    if not sparse:
        args.update(sparse_mla_top_k=0, block_tables=torch.tensor([[0, 1], [2, -1]], dtype=torch.int32))
    return args


def packed_decode_args():
    """The packed 656-byte cache form (upstream's ``sparse`` backend): bf16 query, uint8 rows."""
    B, H, topk = 2, 4, 64
    args = decode_args()
    args.update(query=torch.randn(B, 1, H, 576).to(BF16), kv_cache=torch.randint(0, 60, (8, 32, 656), dtype=torch.uint8),
                seq_lens=torch.full((B, 1), topk, dtype=torch.int32), backend="sparse")  # fmt: skip
    return args


def spoiled(make, arg, value, exc, match, extra=None, index=0) -> ErrorInput:
    """``make()``'s valid call with ``arg`` set to ``value`` (after ``extra``'s changes)."""
    return ErrorInput(f"bad-{arg}-{index}", lambda: ((), {**make(), **(extra or {}), arg: value}), exc, match)


def _numbered(rows) -> list:
    return [spoiled(*row, index=i) for i, row in enumerate(rows)]


def rope_bad_inputs():
    return _numbered([
        (rope_args, "cos_sin_cache", torch.randn(16, 64).half(), ValueError, "cos_sin_cache"),
        (rope_args, "q_rope", torch.randn(3, 2, 64), RuntimeError, "q_rope|dtype"),
        (rope_args, "k_rope", torch.randn(4, 64).to(BF16), RuntimeError, "k_rope|nnz"),
        (rope_args, "q_nope", torch.randn(3, 3, 512).to(BF16), RuntimeError, "q_nope|head"),
        (rope_args, "q_rope", torch.randn(3, 64, 2).to(BF16).transpose(1, 2), RuntimeError, "q_rope"),
        (rope_args, "k_nope_out", torch.empty(3, 512, dtype=BF16), RuntimeError, "k_nope_out|dtype"),
        (rope_args, "pos_ids", torch.arange(3).float(), (ValueError, RuntimeError, TypeError), "pos_ids"),
        (rope_args, "pos_ids", torch.arange(3, device=META), (ValueError, RuntimeError), "pos_ids"),
    ])  # fmt: skip


def mla_rope_bad_inputs():
    return _numbered([
        (rope_args, "quant_scale_q", math.nan, ValueError, "quant_scale_q"),
        (rope_args, "quant_scale_kv", math.inf, ValueError, "quant_scale_kv"),
    ])  # fmt: skip


def decode_bad_inputs():
    return _numbered([
        (decode_args, "block_tables", torch.zeros(2, 64, dtype=torch.int32), ValueError, "page_table|block_tables"),
        (decode_args, "block_tables", torch.zeros(2, 1, 64, dtype=torch.int64), (ValueError, TypeError), "block_tables"),
        (decode_args, "bmm1_scale", torch.ones(1, dtype=torch.float16), TypeError, "bmm1_scale"),
        (decode_args, "bmm2_scale", math.nan, ValueError, "bmm2_scale"),
        (decode_args, "kv_lora_rank", 128, ValueError, "MLA dimensions|kv_lora_rank"),
        (decode_args, "query", torch.randn(2, 1, 4, 512).to(E4M3), ValueError, "head dim|query"),
        (decode_args, "query", torch.randn(2, 1, 4, 576).to(BF16), ValueError, "query|kv_cache|dtype"),
        (decode_args, "query", torch.empty(2, 1, 4, 576, dtype=E4M3, device=META), ValueError, "device|query|kv_cache"),
        (decode_args, "out", torch.empty(2, 1, 4, 256, dtype=BF16), ValueError, "out"),
        (decode_args, "out", torch.empty(2, 1, 4, 512, dtype=torch.float16), ValueError, "out"),
        (decode_args, "lse", torch.empty(2, 5), ValueError, "lse"),
        (decode_args, "lse", torch.empty(2, 4, dtype=BF16), ValueError, "lse"),
        (decode_args, "sparse_mla_top_k", 62, RuntimeError, "multiple of 4|sparse_mla_top_k",
         {"block_tables": torch.zeros(2, 1, 62, dtype=torch.int32)}),
        (decode_args, "backend", "flash", ValueError, "Backend flash not supported"),
        (decode_args, "skip_softmax_threshold_scale_factor", 0.5, ValueError, "skip_softmax"),
        (decode_args, "multi_ctas_kv_counter_buffer", torch.zeros(8, dtype=torch.uint8), ValueError, "too small"),
        (decode_args, "metadata", object(), TypeError, "metadata"),
        (lambda: decode_args(sparse=False), "block_tables", torch.zeros(2, 1, 2, dtype=torch.int32), ValueError, "block_tables"),
    ])  # fmt: skip


def packed_bad_inputs():
    return _numbered([
        (packed_decode_args, "bmm2_scale", 0.5, ValueError, "bmm2_scale"),
        (packed_decode_args, "bmm2_scale", torch.ones(()), ValueError, "bmm2_scale to be a float"),
        (packed_decode_args, "bmm1_scale", torch.full((), 0.1), ValueError, "bmm1_scale to be a float"),
        (packed_decode_args, "bmm1_scale", float("nan"), ValueError, "finite"),
        (packed_decode_args, "query", torch.randn(2, 1, 4, 576).to(E4M3), ValueError, "BF16 query"),
        (packed_decode_args, "query", torch.randn(2, 4, 576).to(BF16), ValueError, "query.ndim == 4"),
        (packed_decode_args, "query", torch.empty(2, 1, 4, 576, dtype=BF16, device=META), ValueError, "device|query|kv_cache"),
        (packed_decode_args, "kv_cache", torch.zeros(8, 32, 640, dtype=torch.uint8), ValueError, "656"),
        (packed_decode_args, "kv_cache", torch.zeros(8, 2, 32, 656, dtype=torch.uint8), ValueError, "kv_cache shape"),
        (packed_decode_args, "block_tables", torch.zeros(2, 64, dtype=torch.int32), ValueError, "block_tables shape"),
        (packed_decode_args, "block_tables", torch.zeros(2, 1, 64, dtype=torch.int64), ValueError, "block_tables must have dtype"),
        (packed_decode_args, "seq_lens", torch.zeros(2, 2, dtype=torch.int32), ValueError, "seq_lens"),
        (packed_decode_args, "seq_lens", torch.zeros(2, 1), ValueError, "seq_lens must have dtype"),
        (packed_decode_args, "kv_lora_rank", 256, ValueError, "kv_lora_rank=512"),
        (packed_decode_args, "sparse_mla_top_k", 0, ValueError, "sparse_mla_top_k > 0"),
        (packed_decode_args, "kv_scale_format", "fp8", ValueError, "kv_scale_format"),
        (packed_decode_args, "out", torch.empty(2, 1, 4, 512, dtype=torch.float16), ValueError, "out"),
        (packed_decode_args, "lse", torch.empty(2, 5), ValueError, "lse"),
        (packed_decode_args, "sinks", torch.zeros(4, dtype=torch.float16), ValueError, "sinks"),
        (packed_decode_args, "uses_shared_paged_kv_idx", False, ValueError, "uses_shared_paged_kv_idx"),
        (packed_decode_args, "backend", "fa2", ValueError, "Backend fa2 not supported"),
    ])  # fmt: skip


def _all(*makers):
    return lambda: [row for make in makers for row in make()]


# The tensors every decode call requires (a None there gets an error row naming it).
DECODE_TENSORS = ("query", "kv_cache", "workspace_buffer", "block_tables")

OPS = [
    OpInfo(
        "rope_quantize_fp8",
        flashinfer.rope.rope_quantize_fp8,
        rope_samples,
        _all(rope_errors, rope_bad_inputs),
        rope_compare,
        cuda_samples=rope_real_samples,
        required=("q_rope", "k_rope", "cos_sin_cache", "pos_ids"),  # a None nope part is empty
        replayed=True,
    ),
    OpInfo(
        "mla_rope_quantize_fp8",
        flashinfer.rope.mla_rope_quantize_fp8,
        rope_samples,
        _all(rope_errors, mla_rope_bad_inputs),
        rope_compare,
        cuda_samples=rope_real_samples,
        required=("q_rope", "k_rope", "cos_sin_cache", "pos_ids"),  # a None nope part is empty
        replayed=True,
    ),
    OpInfo(
        "trtllm_batch_decode_with_kv_cache_mla",
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        decode_samples,
        _all(decode_errors, decode_bad_inputs),
        decode_compare,
        tiers=("gluon", "tl"),  # the Gluon decode kernel (flashinfer/mla/_cuda.py: use_gluon)
        cuda_samples=decode_real_samples,
        required=(*DECODE_TENSORS, "seq_lens"),
        none_exc=ValueError,
        replayed=True,
    ),
    OpInfo(
        "trtllm_batch_decode_with_kv_cache_mla[packed]",
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        packed_samples,
        _all(packed_errors, packed_bad_inputs),
        decode_compare,
        tiers=("gluon", "tl"),  # the Gluon kernel's packed mode (flashinfer/mla/_cuda.py)
        cuda_samples=packed_real_samples,
        required=DECODE_TENSORS,  # seq_lens=None: every column active
        none_exc=ValueError,
        replayed=True,
    ),
]
OPS_BY_NAME = {op.name: op for op in OPS}
