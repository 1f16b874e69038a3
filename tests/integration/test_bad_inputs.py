"""Every public function, fed bad input: the documented exception, a message naming the
argument, and no caller buffer written before validation passes.

One table row per case: the API, the keyword to spoil and its bad value, the exception type
(upstream's where upstream defines one) and a pattern the message must contain. Tensors on
"different devices" use PyTorch's ``meta`` device, which exists on every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
import torch

import flashinfer
from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
from flashinfer.gemm import (
    batch_deepgemm_fp8_nt_groupwise,
    gemm_fp8_nt_groupwise,
    group_deepgemm_fp8_nt_groupwise,
)
from flashinfer.rope import mla_rope_quantize_fp8, rope_quantize_fp8
from flashinfer.utils import BackendSupportedError

E4M3, E5M2, BF16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16
META = torch.device("meta")


def _fp8(*shape, dtype=E4M3):
    return torch.randn(shape).to(dtype)


def bmm_bf16_args():
    return dict(A=torch.randn(2, 4, 8).to(BF16), B=torch.randn(2, 3, 8).to(BF16).transpose(-2, -1),
                out=torch.full((2, 4, 3), 7.0, dtype=BF16))  # fmt: skip


def bmm_fp8_args():
    return dict(A=_fp8(2, 4, 32), B=_fp8(2, 3, 32).transpose(-2, -1), A_scale=torch.ones(()),
                B_scale=torch.ones(1), dtype=BF16, out=torch.full((2, 4, 3), 7.0, dtype=BF16))  # fmt: skip


def groupwise_args():
    return dict(a=_fp8(4, 256), b=_fp8(3, 256), a_scale=torch.ones(4, 2), b_scale=torch.ones(1, 2),
                scale_major_mode="K", out=torch.full((4, 3), 7.0, dtype=BF16))  # fmt: skip


def grouped_args():
    return dict(a=_fp8(4, 128), b=_fp8(2, 3, 128), a_scale=torch.ones(4, 1), b_scale=torch.ones(2, 1, 1),
                m_indices=torch.tensor([0, 0, 1, 1], dtype=torch.int32),
                out=torch.full((4, 3), 7.0, dtype=BF16))  # fmt: skip


def masked_args():
    return dict(a=_fp8(2, 4, 128), b=_fp8(2, 3, 128), a_scale=torch.ones(2, 4, 1), b_scale=torch.ones(2, 1, 1),
                masked_m=torch.tensor([2, 4], dtype=torch.int32), expected_m=3,
                out=torch.full((2, 4, 3), 7.0, dtype=BF16))  # fmt: skip


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


@dataclass
class Case:
    api: Any
    make: Any
    arg: str
    value: Any
    exc: Any
    pattern: str
    extra: dict | None = None

    @property
    def id(self) -> str:
        return f"{self.api.__name__}-{self.arg}-{self.pattern[:24]}"


CASES = [
    # bmm_bf16
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "A", _fp8(2, 4, 8), ValueError, "A"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "A", torch.randn(4, 8).to(BF16), ValueError, "A"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "B", torch.randn(2, 9, 3).to(BF16), ValueError, "B"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "B", torch.randn(3, 8, 3).to(BF16), ValueError, "B"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "B", torch.randn(2, 8, 3).half(), ValueError, "B"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "B", torch.empty(2, 8, 3, dtype=BF16, device=META), ValueError, "B"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "out", torch.empty(2, 4, 4, dtype=BF16), ValueError, "out|Output"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "out", torch.empty(2, 4, 3, dtype=torch.float32), ValueError, "out|Output"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "out", torch.empty(2, 4, 3, dtype=BF16, device=META), ValueError, "out|Output"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "out_dtype", E4M3, ValueError, "dtype", {"out": None}),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "backend", "cuda-magic", ValueError, "backend"),
    Case(flashinfer.bmm_bf16, bmm_bf16_args, "backend", "tgv", ValueError, "tgv|bfloat16",
         {"out_dtype": torch.float16, "out": torch.full((2, 4, 3), 7.0, dtype=torch.float16)}),
    # bmm_fp8
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "A", torch.randn(2, 4, 32).to(BF16), ValueError, "A"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "B", _fp8(2, 33, 3), ValueError, "B"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "dtype", torch.float32, ValueError, "dtype|output dtype"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "A_scale", torch.ones(2), ValueError, "A_scale"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "A_scale", torch.ones((), device=META), ValueError, "A_scale"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "B_scale", torch.ones(1, dtype=torch.float16), ValueError, "B_scale"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "A", _fp8(2, 4, 32, dtype=E5M2), ValueError, "e5m2", {"backend": "cutlass"}),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "out", torch.empty(2, 5, 3, dtype=BF16), (ValueError, RuntimeError), "out"),
    Case(flashinfer.bmm_fp8, bmm_fp8_args, "backend", "cudnn2", ValueError, "backend"),
    # gemm_fp8_nt_groupwise
    Case(gemm_fp8_nt_groupwise, groupwise_args, "a", _fp8(1, 4, 256), ValueError, "a|Shape mismatch"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "b", _fp8(3, 128), ValueError, "b|Shape mismatch"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "a", torch.randn(4, 256).to(BF16), ValueError, "a"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "scale_major_mode", None, ValueError, "scale_major_mode"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "a_scale", torch.ones(4, 3), ValueError, "a_scale"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "b_scale", torch.ones(2, 2), ValueError, "b_scale"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "out_dtype", torch.float32, ValueError, "dtype", {"out": None}),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "backend", "trtllm", ValueError, "256",
         {"a": _fp8(4, 128), "b": _fp8(3, 128), "a_scale": torch.ones(1, 4), "b_scale": torch.ones(1, 1)}),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "backend", "cutile", ValueError, "K", {"scale_major_mode": "MN",
         "a_scale": torch.ones(2, 4), "b_scale": torch.ones(2, 1)}),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "backend", "mubin", BackendSupportedError, "output_scale"),
    Case(gemm_fp8_nt_groupwise, groupwise_args, "backend", "nvidia", ValueError, "backend"),
    # group_deepgemm_fp8_nt_groupwise
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "a", _fp8(4, 128, dtype=E5M2), ValueError, "a"),
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "m_indices", torch.zeros(4, dtype=torch.int64), ValueError, "m_indices"),
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "m_indices", torch.zeros(8, dtype=torch.int32)[::2], ValueError, "m_indices"),
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "m_indices", torch.zeros(5, dtype=torch.int32), ValueError, "m_indices|Shape"),
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "out", torch.empty(4, 3, dtype=torch.float16), ValueError, "out|d must"),
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "b_scale", torch.ones(2, 2, 1), (ValueError, AssertionError), "b_scale"),
    Case(group_deepgemm_fp8_nt_groupwise, grouped_args, "a", _fp8(128, 4).t(), ValueError, "a|major"),
    # batch_deepgemm_fp8_nt_groupwise
    Case(batch_deepgemm_fp8_nt_groupwise, masked_args, "expected_m", 0, ValueError, "expected_m"),
    Case(batch_deepgemm_fp8_nt_groupwise, masked_args, "masked_m", torch.tensor([1, 2, 3], dtype=torch.int32), ValueError, "masked_m|num_groups"),
    Case(batch_deepgemm_fp8_nt_groupwise, masked_args, "masked_m", torch.tensor([1, 2], dtype=torch.int64), ValueError, "masked_m"),
    Case(batch_deepgemm_fp8_nt_groupwise, masked_args, "b", _fp8(2, 128, 3).transpose(-2, -1), ValueError, "b|major"),
    Case(batch_deepgemm_fp8_nt_groupwise, masked_args, "out", torch.empty(2, 4, 3, dtype=BF16, device=META), ValueError, "out"),
    # rope_quantize_fp8 / mla_rope_quantize_fp8
    Case(rope_quantize_fp8, rope_args, "cos_sin_cache", torch.randn(16, 64).half(), ValueError, "cos_sin_cache"),
    Case(rope_quantize_fp8, rope_args, "q_rope", torch.randn(3, 2, 64), RuntimeError, "q_rope|dtype"),
    Case(rope_quantize_fp8, rope_args, "k_rope", torch.randn(4, 64).to(BF16), RuntimeError, "k_rope|nnz"),
    Case(rope_quantize_fp8, rope_args, "q_nope", torch.randn(3, 3, 512).to(BF16), RuntimeError, "q_nope|head"),
    Case(rope_quantize_fp8, rope_args, "q_rope", torch.randn(3, 64, 2).to(BF16).transpose(1, 2), RuntimeError, "q_rope"),
    Case(rope_quantize_fp8, rope_args, "k_nope_out", torch.empty(3, 512, dtype=BF16), RuntimeError, "k_nope_out|dtype"),
    Case(rope_quantize_fp8, rope_args, "pos_ids", torch.arange(3).float(), (ValueError, RuntimeError, TypeError), "pos_ids"),
    Case(rope_quantize_fp8, rope_args, "pos_ids", torch.arange(3, device=META), (ValueError, RuntimeError), "pos_ids"),
    Case(mla_rope_quantize_fp8, rope_args, "quant_scale_q", math.nan, ValueError, "quant_scale_q"),
    Case(mla_rope_quantize_fp8, rope_args, "quant_scale_kv", math.inf, ValueError, "quant_scale_kv"),
    # trtllm_batch_decode_with_kv_cache_mla
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "seq_lens", None, ValueError, "seq_lens"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "block_tables", torch.zeros(2, 64, dtype=torch.int32), ValueError, "page_table|block_tables"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "block_tables", torch.zeros(2, 1, 64, dtype=torch.int64), (ValueError, TypeError), "block_tables"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "bmm1_scale", torch.ones(1, dtype=torch.float16), TypeError, "bmm1_scale"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "bmm2_scale", math.nan, ValueError, "bmm2_scale"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "kv_lora_rank", 128, ValueError, "MLA dimensions|kv_lora_rank"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "query", torch.randn(2, 1, 4, 512).to(E4M3), ValueError, "head dim|query"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "query", torch.randn(2, 1, 4, 576).to(BF16), ValueError, "query|kv_cache|dtype"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "query", torch.empty(2, 1, 4, 576, dtype=E4M3, device=META), ValueError, "device|query|kv_cache"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "out", torch.empty(2, 1, 4, 256, dtype=BF16), ValueError, "out"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "out", torch.empty(2, 1, 4, 512, dtype=torch.float16), ValueError, "out"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "lse", torch.empty(2, 5), ValueError, "lse"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "lse", torch.empty(2, 4, dtype=BF16), ValueError, "lse"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "sparse_mla_top_k", 62, RuntimeError, "multiple of 4|sparse_mla_top_k",
         {"block_tables": torch.zeros(2, 1, 62, dtype=torch.int32)}),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "backend", "flash", ValueError, "Backend flash not supported"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "skip_softmax_threshold_scale_factor", 0.5, ValueError, "skip_softmax"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "multi_ctas_kv_counter_buffer", torch.zeros(8, dtype=torch.uint8), ValueError, "too small"),
    Case(trtllm_batch_decode_with_kv_cache_mla, decode_args, "metadata", object(), TypeError, "metadata"),
    Case(trtllm_batch_decode_with_kv_cache_mla, lambda: decode_args(sparse=False), "block_tables", torch.zeros(2, 1, 2, dtype=torch.int32), ValueError, "block_tables"),
    # the same, packed 656-byte cache
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "bmm2_scale", 0.5, ValueError, "bmm2_scale"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "bmm2_scale", torch.ones(()), ValueError, "bmm2_scale to be a float"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "bmm1_scale", torch.full((), 0.1), ValueError, "bmm1_scale to be a float"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "bmm1_scale", float("nan"), ValueError, "finite"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "query", torch.randn(2, 1, 4, 576).to(E4M3), ValueError, "BF16 query"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "query", torch.randn(2, 4, 576).to(BF16), ValueError, "query.ndim == 4"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "query", torch.empty(2, 1, 4, 576, dtype=BF16, device=META), ValueError, "device|query|kv_cache"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "kv_cache", torch.zeros(8, 32, 640, dtype=torch.uint8), ValueError, "656"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "kv_cache", torch.zeros(8, 2, 32, 656, dtype=torch.uint8), ValueError, "kv_cache shape"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "block_tables", torch.zeros(2, 64, dtype=torch.int32), ValueError, "block_tables shape"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "block_tables", torch.zeros(2, 1, 64, dtype=torch.int64), ValueError, "block_tables must have dtype"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "seq_lens", torch.zeros(2, 2, dtype=torch.int32), ValueError, "seq_lens"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "seq_lens", torch.zeros(2, 1), ValueError, "seq_lens must have dtype"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "kv_lora_rank", 256, ValueError, "kv_lora_rank=512"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "sparse_mla_top_k", 0, ValueError, "sparse_mla_top_k > 0"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "kv_scale_format", "fp8", ValueError, "kv_scale_format"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "out", torch.empty(2, 1, 4, 512, dtype=torch.float16), ValueError, "out"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "lse", torch.empty(2, 5), ValueError, "lse"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "sinks", torch.zeros(4, dtype=torch.float16), ValueError, "sinks"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "uses_shared_paged_kv_idx", False, ValueError, "uses_shared_paged_kv_idx"),
    Case(trtllm_batch_decode_with_kv_cache_mla, packed_decode_args, "backend", "fa2", ValueError, "Backend fa2 not supported"),
]  # fmt: skip


def _snapshot(args: dict) -> dict:
    return {k: v.clone() for k, v in args.items() if isinstance(v, torch.Tensor) and v.device.type != "meta"}


def _unchanged(before: dict, args: dict) -> None:
    for name, saved in before.items():
        current = args[name]
        if current.dtype.is_floating_point:  # buffers may hold NaN (torch.empty): compare with NaN == NaN
            same = torch.equal(current.float().nan_to_num(123.0), saved.float().nan_to_num(123.0))
        else:
            same = torch.equal(current, saved)
        assert same, f"`{name}` was written before validation failed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_rejected_before_any_write(case):
    args = case.make()
    args.update(case.extra or {})
    args[case.arg] = case.value
    before = _snapshot(args)
    with pytest.raises(case.exc, match=case.pattern):
        case.api(**args)
    _unchanged(before, args)


def test_mismatched_metadata_is_rejected():
    args = decode_args()
    other_query = torch.randn(3, 1, 4, 576).to(E4M3)
    args["metadata"] = get_batch_decode_metadata_mla(other_query, torch.full((3,), 64, dtype=torch.int32), 64)
    before = _snapshot(args)
    with pytest.raises(ValueError, match="get_batch_decode_metadata_mla"):
        trtllm_batch_decode_with_kv_cache_mla(**args)
    _unchanged(before, args)


@pytest.mark.parametrize("make", [bmm_bf16_args, bmm_fp8_args, groupwise_args, grouped_args, masked_args])
def test_gemm_out_overlapping_an_input_is_rejected(make):
    api = {bmm_bf16_args: flashinfer.bmm_bf16, bmm_fp8_args: flashinfer.bmm_fp8, groupwise_args: gemm_fp8_nt_groupwise,
           grouped_args: group_deepgemm_fp8_nt_groupwise, masked_args: batch_deepgemm_fp8_nt_groupwise}[make]  # fmt: skip
    args = make()
    first = next(k for k, v in args.items() if isinstance(v, torch.Tensor))
    big = torch.zeros(
        args[first].numel() * args[first].element_size() + args["out"].numel() * 4, dtype=torch.uint8
    )
    args[first] = (
        big[: args[first].numel() * args[first].element_size()]
        .view(args[first].dtype)
        .view(args[first].shape)
    )
    args["out"] = big[: args["out"].numel() * 2].view(BF16).view(args["out"].shape)
    with pytest.raises(ValueError, match="overlap"):
        api(**args)


def test_decode_out_overlapping_query_is_rejected():
    args = decode_args()
    args["query"] = args["query"].to(BF16).to(E4M3)
    storage = torch.zeros(args["query"].numel() * 2, dtype=torch.uint8)
    args["query"] = storage[: args["query"].numel()].view(E4M3).view(args["query"].shape)
    args["out"] = storage[: args["out"].numel() * 2].view(BF16).view(args["out"].shape)
    with pytest.raises(ValueError, match="overlap"):
        trtllm_batch_decode_with_kv_cache_mla(**args)


def test_zero_size_problems_return_without_error():
    empty = flashinfer.bmm_fp8(
        _fp8(2, 0, 32), _fp8(2, 3, 32).transpose(-2, -1), torch.ones(()), torch.ones(()), BF16
    )
    assert empty.shape == (2, 0, 3)
    zero_k = flashinfer.bmm_bf16(torch.randn(1, 2, 0).to(BF16), torch.randn(1, 0, 3).to(BF16))
    assert torch.equal(zero_k, torch.zeros(1, 2, 3, dtype=BF16))
    args = rope_args()
    for name in (
        "q_rope",
        "k_rope",
        "q_nope",
        "k_nope",
        "q_rope_out",
        "k_rope_out",
        "q_nope_out",
        "k_nope_out",
    ):
        args[name] = args[name][:0]
    args["pos_ids"] = args["pos_ids"][:0]
    assert all(o.shape[0] == 0 for o in rope_quantize_fp8(**args))


def test_negative_seq_lens_give_empty_rows():
    """seq_lens values are not read on the host (no sync): a negative length is an empty row."""
    args = decode_args()
    args["seq_lens"] = torch.tensor([-5, 64], dtype=torch.int32)
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**args)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isinf(lse[0]).all() and (lse[0] > 0).all()
    assert torch.isfinite(out[1].float()).all()


def test_packed_base_arguments_are_valid():
    """The packed rows above spoil one argument of a call that works."""
    args = packed_decode_args()
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**args)
    assert torch.isfinite(out.float()).all() and torch.isfinite(lse).all()
