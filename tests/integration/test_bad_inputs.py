"""Bad input the op table cannot state as one spoiled argument: mismatched metadata, outputs
overlapping inputs, zero-size and negative-length problems.

The per-argument rows (the documented exception, a message naming the argument, no caller
buffer written before validation passes) are error inputs of the op tables
(``tests/gemm_ops.py``, ``tests/mla_ops.py``), run by ``tests/{gemm,mla}/test_*ops.py``.
"""

from __future__ import annotations

import pytest
import torch
from gemm_ops import bmm_bf16_args, bmm_fp8_args, grouped_args, groupwise_args, masked_args
from mla_ops import decode_args, packed_decode_args, rope_args
from oracles import BF16, E4M3

import flashinfer
from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
from flashinfer.gemm import (
    batch_deepgemm_fp8_nt_groupwise,
    gemm_fp8_nt_groupwise,
    group_deepgemm_fp8_nt_groupwise,
)
from flashinfer.rope import rope_quantize_fp8


def _fp8(*shape, dtype=E4M3):
    return torch.randn(shape).to(dtype)


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
