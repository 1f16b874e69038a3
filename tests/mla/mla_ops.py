"""The MLA op table (PyTorch's OpInfo idea): per op, how to call it, sample inputs with their
float64 oracle, how to compare, and error inputs with the expected exception and message.

Generic tests in ``test_mla_ops.py`` run every entry against every implementation available on
this machine (the reference, and the MATE adapter over the MATE stand-in).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import packed_cases
import torch
from mla_oracles import (
    E4M3,
    E5M2,
    INT32_MAX,
    assert_decode_close,
    assert_fp8_close,
    cos_sin_cache,
    decode_oracle,
    dense_candidates,
    physical_slots,
    quantized,
    rope_oracle,
    sparse_candidates,
)

import flashinfer.decode
import flashinfer.rope


@dataclass
class Sample:
    name: str
    kwargs: dict
    oracle: Callable[[], tuple]
    outputs: tuple = ()  # names of caller-given output buffers in kwargs


@dataclass
class ErrorInput:
    name: str
    make_kwargs: Callable[[], dict]
    exc: type
    match: str


@dataclass
class Lazy:
    """A table entry whose (random) data is drawn only when a test builds it."""

    name: str
    build: Callable


def lazy(builder):
    """Make ``builder(name, **config)`` return a :class:`Lazy` entry instead of building now."""

    def make(name, **config):
        return Lazy(name, lambda: builder(name, **config))

    return make


@dataclass
class OpInfo:
    name: str
    fn: Callable
    samples: Callable[[], list]
    compare: Callable
    errors: Callable[[], list] = field(default=lambda: [])


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

    return Sample(name, kwargs, oracle, outputs)


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


def rope_compare(result, expected, sample) -> None:
    for name, actual, want in zip(("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"), result, expected):
        assert actual.shape == want.shape, (name, actual.shape, want.shape)
        assert_fp8_close(actual, want, name)
    for name, actual in zip(("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"), result):
        if name in sample.outputs:
            assert actual is sample.kwargs[name], f"{name} is not the given buffer"


def rope_errors() -> list:
    def base(**changes):
        return lambda: {
            **rope_kwargs(nnz=3, q_heads=2, k_heads=1, rope_dim=64, nope_dim=512, k_2d=True)[0],
            **changes,
        }

    q = torch.randn(3, 2, 576, dtype=torch.bfloat16)
    return [
        ErrorInput("fp16_cache", base(cos_sin_cache=cos_sin_cache(64, 64).half()), ValueError, "cos_sin_cache should be float32"),
        ErrorInput("fp32_inputs", base(q_rope=q[..., :64].float()), RuntimeError, "float16 or bfloat16"),
        ErrorInput("int8_output", base(quantize_dtype=torch.int8), RuntimeError, "float8_e4m3fn or float8_e5m2"),
        ErrorInput("mixed_output_dtypes", base(q_rope_out=torch.empty(3, 2, 64, dtype=E5M2)), RuntimeError, "q_rope_out"),
        ErrorInput("nnz_mismatch", base(q_nope=q[:2, :, 64:]), RuntimeError, "q_nope"),
        ErrorInput("head_mismatch", base(q_nope=torch.randn(3, 3, 512, dtype=torch.bfloat16)), RuntimeError, "q_nope"),
        ErrorInput("q_2d", base(q_rope=q[:, 0, :64]), RuntimeError, "q_rope"),
        ErrorInput("k_mixed_rank", base(k_nope=torch.randn(3, 1, 512, dtype=torch.bfloat16)), RuntimeError, "k_rope and k_nope"),
        ErrorInput("last_dim_strided", base(q_nope=q[..., 64::1].transpose(0, 2).contiguous().transpose(0, 2)), RuntimeError, "last dimension is contiguous"),
        ErrorInput("cache_row_length", base(cos_sin_cache=cos_sin_cache(64, 128)), RuntimeError, "cos_sin_cache"),
        ErrorInput("float_pos_ids", base(pos_ids=torch.zeros(3)), RuntimeError, "pos_ids"),
        ErrorInput("output_shape", base(k_nope_out=torch.empty(3, 256, dtype=E4M3)), RuntimeError, "k_nope_out"),
        ErrorInput("nan_scale", base(quant_scale_q=math.nan), ValueError, "quant_scale_q"),
        ErrorInput("tensor_scale", base(quant_scale_kv=torch.tensor(2.0)), TypeError, "quant_scale_kv"),
    ]  # fmt: skip


# --------------------------------------------------------------------------------------- decode
def workspace() -> torch.Tensor:
    return torch.empty(1 << 12, dtype=torch.uint8)


@lazy
def sparse_sample(name, batch=2, q_len=1, heads=4, topk=64, page_size=32, dtype=E4M3, cache_4d=True,
                  seq="full", bmm1=0.08, bmm2=1.0, sinks=False, lse="none", out="none") -> Sample:  # fmt: skip
    """A sparse decode call: physical slots, -1 padding, out-of-range and negative entries."""
    if seq == "full":  # sglang / vLLM MTP: full KV lengths, may exceed topk
        seq_lens = torch.randint(topk, topk + 40, (batch,), dtype=torch.int32)
        seq_lens[0] = topk  # the per-token limit then drops list entries for earlier tokens
    else:  # vLLM: per-row valid counts <= topk, including an empty row
        seq_lens = torch.randint(1, topk + 1, (batch,), dtype=torch.int32)
        seq_lens[-1] = 0
    pages_per_request = -(-(int(seq_lens.max()) + 1) // page_size)
    num_pages = batch * pages_per_request + 1
    kv = quantized((num_pages, page_size, 576), dtype)
    indices = physical_slots(batch, q_len, topk, seq_lens, page_size, num_pages)
    slots = num_pages * page_size
    # Invalid entries inside the considered prefix: negative, past the pool, int32 max.
    indices[0, -1, 1] = -7
    indices[-1, 0, 2] = slots + 5
    indices[0, 0, 0] = INT32_MAX
    query = quantized((batch, q_len, heads, 576), dtype)
    kwargs = dict(query=query, kv_cache=kv.unsqueeze(1) if cache_4d else kv, workspace_buffer=workspace(),
                  qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices,
                  seq_lens=seq_lens, max_seq_len=topk, sparse_mla_top_k=topk, bmm1_scale=bmm1,
                  bmm2_scale=bmm2)  # fmt: skip
    sink_values = torch.randn(heads) if sinks else None
    if sinks:
        kwargs["sinks"] = sink_values
    return _with_outputs(name, kwargs, lse, out, lambda: decode_oracle(
        query, kv.reshape(-1, 576), sparse_candidates(indices, seq_lens, slots),
        _value(bmm1), _value(bmm2), sink_values, 512))  # fmt: skip


@lazy
def dense_sample(name, batch=2, q_len=1, heads=4, page_size=32, dtype=torch.bfloat16, cache_4d=True,
                 bmm1=0.08, bmm2=1.0, width_pages=None, lse="none", out="none", sinks=False) -> Sample:  # fmt: skip
    """A dense decode call: random page map, -1 padding past each request's pages."""
    seq_lens = torch.randint(q_len, 3 * page_size, (batch,), dtype=torch.int32)
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
    return Sample(name, kwargs, oracle, outputs)


def decode_samples() -> list:
    return [
        sparse_sample("fp8_q1"),
        sparse_sample("fp8_mtp_q3_counts", q_len=3, seq="counts", lse="return"),
        sparse_sample("fp8_mtp_q2_full", q_len=2, lse="3d", out="contiguous"),
        sparse_sample("bf16_q2", q_len=2, dtype=torch.bfloat16, lse="2d"),
        sparse_sample("fp8_topk68_page64_3d", topk=68, page_size=64, cache_4d=False, lse="return"),
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


def decode_compare(result, expected, sample) -> None:
    out, lse = result if isinstance(result, tuple) else (result, None)
    expected_out, expected_lse = expected
    if "out" in sample.outputs:
        assert out is sample.kwargs["out"], "out is not the given buffer"
    else:
        assert out.is_contiguous() and out.dtype == torch.bfloat16
    if lse is not None:
        if "lse" in sample.outputs:
            assert lse is sample.kwargs["lse"], "lse is not the given buffer"
        else:  # allocated: FlashInfer's default [batch * q_len, heads]
            batch, q_len, heads = expected_lse.shape
            assert lse.shape == (batch * q_len, heads) and lse.is_contiguous()
        lse = lse.reshape(expected_lse.shape)
    assert_decode_close(out.reshape(expected_out.shape), lse, expected_out, expected_lse, sample.name)


def decode_errors() -> list:
    def base(**changes):
        return lambda: {**sparse_sample("base").build().kwargs, **changes}

    def dense(**changes):
        return lambda: {**dense_sample("base").build().kwargs, **changes}

    q = quantized((2, 1, 4, 576), E4M3)
    return [
        ErrorInput("unknown_backend", base(backend="fa3"), ValueError, "Backend fa3 not supported"),
        ErrorInput("dims", base(kv_lora_rank=384), ValueError, "Unsupported MLA dimensions"),
        ErrorInput("head_dim", base(query=quantized((2, 1, 4, 512), E4M3)), ValueError, "Expected head dim 576"),
        ErrorInput("index_shape", base(block_tables=torch.zeros(2, 64, dtype=torch.int32)), ValueError, r"Expected page_table.shape == \(2, 1, 64\)"),
        ErrorInput("seq_lens_none", base(seq_lens=None), ValueError, "seq_lens is required"),
        ErrorInput("skip_softmax_sparse", base(skip_softmax_threshold_scale_factor=0.5), ValueError, "skip_softmax is not supported for sparse MLA"),
        ErrorInput("bmm1_tensor_bf16", base(bmm1_scale=torch.tensor([1.0], dtype=torch.bfloat16)), TypeError, "bmm1_scale tensor must have dtype torch.float32"),
        ErrorInput("bmm1_inf", base(bmm1_scale=math.inf), ValueError, "bmm1_scale"),
        ErrorInput("bmm2_tensor_fp64", base(bmm2_scale=torch.tensor(1.0, dtype=torch.float64)), TypeError, "bmm2_scale tensor must have dtype torch.float32"),
        ErrorInput("topk_not_multiple_of_4", base(sparse_mla_top_k=62, block_tables=torch.zeros(2, 1, 62, dtype=torch.int32)), RuntimeError, "SparseMlaTopK must be a multiple of 4"),
        ErrorInput("mixed_dtypes", base(query=q.to(torch.float32).to(torch.bfloat16)), ValueError, "mixed query/cache dtypes"),
        ErrorInput("fp32_query", base(query=q.float(), kv_cache=torch.zeros(3, 1, 32, 576, dtype=torch.float32)), ValueError, "query"),
        ErrorInput("out_shape", base(out=torch.empty(2, 1, 4, 256, dtype=torch.bfloat16)), ValueError, "Invalid shape/dtype/device of out"),
        ErrorInput("out_dtype", base(out=torch.empty(2, 1, 4, 512)), ValueError, "Invalid shape/dtype/device of out"),
        ErrorInput("lse_shape", base(lse=torch.empty(4, 4)), ValueError, "lse"),
        ErrorInput("sinks_shape", base(sinks=torch.zeros(5)), ValueError, "sinks"),
        ErrorInput("counter_not_contiguous", base(multi_ctas_kv_counter_buffer=torch.zeros(4096, 2, dtype=torch.uint8)[:, 0]), ValueError, "must be contiguous"),
        ErrorInput("counter_misaligned", base(multi_ctas_kv_counter_buffer=torch.zeros(4097, dtype=torch.uint8)[1:]), ValueError, "16-byte aligned"),
        ErrorInput("counter_too_small", base(multi_ctas_kv_counter_buffer=torch.zeros(8, dtype=torch.uint8)), ValueError, "is too small"),
        ErrorInput("max_q_len_without_cum", base(max_q_len=2), ValueError, "max_q_len"),
        ErrorInput("dcp_options_without_dcp", base(cp_world=2), ValueError, "enable_dcp=True"),
        ErrorInput("dcp_not_bool", base(enable_dcp=1), ValueError, "enable_dcp"),
        ErrorInput("dcp_enabled", base(enable_dcp=True, cp_world=2, return_lse=True), NotImplementedError, "enable_dcp=True"),
        ErrorInput("top_k_lens_without_native", base(sparse_mla_top_k_lens=torch.zeros(2, dtype=torch.int32)), ValueError, "native"),
        ErrorInput("native_without_top_k_lens", base(qk_rope_head_dim=0), ValueError, "sparse_mla_top_k_lens"),
        ErrorInput("metadata_wrong_type", base(metadata=object()), TypeError, "DecodeMetadata"),
        ErrorInput("int64_seq_lens", base(seq_lens=torch.tensor([64, 64])), ValueError, "seq_lens"),
        ErrorInput("non_viewable_cache", base(kv_cache=quantized((3, 40, 576), E4M3)[:, :32]), ValueError, "flat"),
        ErrorInput("separate_kv_tables", dense(uses_shared_paged_kv_idx=False), NotImplementedError, "uses_shared_paged_kv_idx"),
        ErrorInput("dense_table_rows", dense(block_tables=torch.zeros(3, 4, dtype=torch.int32)), ValueError, "block_tables"),
    ]  # fmt: skip


OPS = [
    OpInfo("rope_quantize_fp8", flashinfer.rope.rope_quantize_fp8, rope_samples, rope_compare, rope_errors),
    OpInfo(
        "mla_rope_quantize_fp8",
        flashinfer.rope.mla_rope_quantize_fp8,
        rope_samples,
        rope_compare,
        rope_errors,
    ),
    OpInfo(
        "trtllm_batch_decode_with_kv_cache_mla",
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        decode_samples,
        decode_compare,
        decode_errors,
    ),
    OpInfo(
        "trtllm_batch_decode_with_kv_cache_mla[packed]",
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        lambda: packed_cases.packed_samples(),
        decode_compare,
        lambda: packed_cases.packed_errors(),
    ),
]


def poison(tensor: torch.Tensor) -> None:
    """Fill a buffer with NaN (every element must be overwritten by the op)."""
    if tensor.dtype in (E4M3, E5M2):
        tensor.view(torch.uint8).fill_(0x7F)
    else:
        tensor.fill_(math.nan)
