"""10,000 calls of each op leave the process's resident memory flat (CPU, tiny tensors)."""

from __future__ import annotations

import gc

import oracles
import pytest
import torch

import flashinfer
from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
from flashinfer.gemm import (
    batch_deepgemm_fp8_nt_groupwise,
    gemm_fp8_nt_groupwise,
    group_deepgemm_fp8_nt_groupwise,
)
from flashinfer.rope import mla_rope_quantize_fp8

CALLS = 10_000
WARMUP = 500
# Allocator pools and Python's free lists settle during the warm-up; a leak of even 100 bytes
# per call would add about 1 MB over the counted calls.
TOLERANCE_BYTES = 1 << 20


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _make_calls():
    gen = torch.Generator().manual_seed(0)
    e4m3 = torch.float8_e4m3fn
    A = oracles.fp8((1, 8, 128), scale=2.0, generator=gen)
    B = oracles.fp8((1, 16, 128), scale=2.0, generator=gen).transpose(-2, -1)
    s = torch.ones(())
    out_fp8 = torch.empty(1, 8, 16, dtype=torch.bfloat16)
    A16 = torch.randn(1, 8, 32).bfloat16()
    B16 = torch.randn(1, 32, 16).bfloat16()
    a, b = oracles.fp8((8, 128), scale=2.0, generator=gen), oracles.fp8((128, 128), scale=2.0, generator=gen)
    a_s, b_s = torch.ones(8, 1), torch.ones(1, 1)
    m_idx = torch.zeros(8, dtype=torch.int32)
    a3, b3 = (
        oracles.fp8((1, 8, 128), scale=2.0, generator=gen),
        oracles.fp8((1, 128, 128), scale=2.0, generator=gen),
    )
    masked = torch.tensor([5], dtype=torch.int32)
    q_rope, q_nope = torch.randn(4, 2, 64).bfloat16(), torch.randn(4, 2, 512).bfloat16()
    k_rope, k_nope = torch.randn(4, 64).bfloat16(), torch.randn(4, 512).bfloat16()
    cache, pos = oracles.cos_sin_cache(16, 64), torch.arange(4)
    q_out = torch.empty(4, 2, 576, dtype=e4m3)
    k_rope_out, k_nope_out = torch.empty(4, 64, dtype=e4m3), torch.empty(4, 512, dtype=e4m3)
    query = torch.randn(1, 1, 2, 576).to(e4m3)
    kv = torch.randn(8, 4, 576).to(e4m3)
    idx = torch.randint(-1, 32, (1, 1, 64), dtype=torch.int32)
    seq_lens = torch.tensor([64], dtype=torch.int32)
    ws = torch.empty(1 << 16, dtype=torch.int8)
    meta = get_batch_decode_metadata_mla(query, seq_lens, 64)
    out_dec = torch.empty(1, 1, 2, 512, dtype=torch.bfloat16)
    lse = torch.empty(1, 2)
    return {
        "bmm_bf16": lambda: flashinfer.bmm_bf16(A16, B16),
        "bmm_fp8": lambda: flashinfer.bmm_fp8(A, B, s, s, torch.bfloat16, out_fp8),
        "gemm_fp8_nt_groupwise": lambda: gemm_fp8_nt_groupwise(a, b, a_s, b_s, "K"),
        "group_deepgemm_fp8_nt_groupwise": lambda: group_deepgemm_fp8_nt_groupwise(a, b[None], a_s, b_s[None], m_idx),
        "batch_deepgemm_fp8_nt_groupwise": lambda: batch_deepgemm_fp8_nt_groupwise(a3, b3, a_s[None], b_s[None], masked, 5),
        "mla_rope_quantize_fp8": lambda: mla_rope_quantize_fp8(
            q_rope, k_rope, q_nope, k_nope, cache, pos, False, None, 0.5, 2.0,
            q_out[..., 512:], k_rope_out, q_out[..., :512], k_nope_out,
        ),
        "trtllm_batch_decode_with_kv_cache_mla": lambda: trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv, workspace_buffer=ws, qk_nope_head_dim=128, kv_lora_rank=512,
            qk_rope_head_dim=64, block_tables=idx, seq_lens=seq_lens, max_seq_len=64, sparse_mla_top_k=64,
            out=out_dec, lse=lse, return_lse=True, bmm1_scale=0.1, metadata=meta,
        ),
    }  # fmt: skip


@pytest.mark.parametrize("op", list(_make_calls()))
def test_calls_leave_rss_flat(op):
    call = _make_calls()[op]
    for _ in range(WARMUP):
        call()
    gc.collect()
    before = _rss_bytes()
    for _ in range(CALLS):
        call()
    gc.collect()
    grown = _rss_bytes() - before
    assert grown < TOLERANCE_BYTES, f"{op}: resident memory grew by {grown} bytes over {CALLS} calls"
