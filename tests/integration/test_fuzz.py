"""Hypothesis fuzzing of every API against float64 oracles.

Time-bounded in CI by the ``ci`` profile (tests/conftest.py); run longer on demand with
``HYPOTHESIS_PROFILE=long python -m pytest tests/integration/test_fuzz.py``.
"""

from __future__ import annotations

import math

import oracles
import torch
from hypothesis import given
from hypothesis import strategies as st

import flashinfer
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
from flashinfer.gemm import gemm_fp8_nt_groupwise
from flashinfer.rope import rope_quantize_fp8

seeds = st.integers(0, 2**31 - 1)


@given(
    b=st.integers(1, 3), m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 160),
    col_major_b=st.booleans(), strided_out=st.booleans(), scale_shape=st.sampled_from([(), (1,)]),
    out_dtype=st.sampled_from([torch.bfloat16, torch.float16]), seed=seeds,
)  # fmt: skip
def test_bmm_fp8_fuzz(b, m, n, k, col_major_b, strided_out, scale_shape, out_dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    A = oracles.fp8((b, m, k), scale=2.0, generator=gen)
    B = (
        oracles.fp8((b, n, k), scale=2.0, generator=gen).transpose(-2, -1)
        if col_major_b
        else oracles.fp8((b, k, n), scale=2.0, generator=gen)
    )
    sa, sb = (
        oracles.pow2(scale_shape, high=3, generator=gen),
        oracles.pow2(scale_shape, high=3, generator=gen),
    )
    out = torch.full((b, m, 2 * n), math.nan, dtype=out_dtype)[..., ::2] if strided_out else None
    result = flashinfer.bmm_fp8(A, B, sa, sb, out_dtype, out)
    if out is not None:
        assert result is out
    oracles.assert_matches(result, *oracles.oracle_bmm(A, B, sa, sb))


@given(
    m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 400),
    mode=st.sampled_from(["K", "MN"]), seed=seeds,
)  # fmt: skip
def test_gemm_fp8_nt_groupwise_fuzz(m, n, k, mode, seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = oracles.fp8((m, k), scale=2.0, generator=gen), oracles.fp8((n, k), scale=2.0, generator=gen)
    kb = -(-k // 128)
    a_scale, b_scale = (
        oracles.pow2((m, kb), high=3, generator=gen),
        oracles.pow2((-(-n // 128), kb), high=3, generator=gen),
    )
    expected = oracles.oracle_groupwise(a, b, a_scale, b_scale, 1, 128, 128)
    if mode == "MN":
        a_scale, b_scale = a_scale.t().contiguous(), b_scale.t().contiguous()
    out = gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, mode)
    oracles.assert_matches(out, *expected)


@given(
    nnz=st.integers(1, 20), heads=st.integers(1, 5), k_heads=st.sampled_from([0, 1, 2]),
    rope_dim=st.sampled_from([32, 64]), nope_dim=st.sampled_from([0, 16, 128]),
    is_neox=st.booleans(), out_dtype=st.sampled_from([torch.float8_e4m3fn, torch.float8_e5m2]),
    scale_q=st.sampled_from([0.5, 1.0, 3.0]), seed=seeds,
)  # fmt: skip
def test_rope_quantize_fp8_fuzz(nnz, heads, k_heads, rope_dim, nope_dim, is_neox, out_dtype, scale_q, seed):
    gen = torch.Generator().manual_seed(seed)
    q_rope = torch.randn((nnz, heads, rope_dim), generator=gen).bfloat16()
    q_nope = torch.randn((nnz, heads, nope_dim), generator=gen).bfloat16()
    k_shape = (nnz,) if k_heads == 0 else (nnz, k_heads)
    k_rope = torch.randn((*k_shape, rope_dim), generator=gen).bfloat16()
    k_nope = torch.randn((*k_shape, nope_dim), generator=gen).bfloat16()
    cache = oracles.cos_sin_cache(64, rope_dim)
    pos = torch.randint(0, 64, (nnz,), generator=gen)
    outs = rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cache, pos, is_neox, out_dtype, scale_q, 2.0)
    expected = oracles.rope_oracle(
        q_rope, k_rope, q_nope, k_nope, cache, pos, is_neox, scale_q, 2.0, out_dtype
    )
    for name, got, want in zip(("q_rope", "k_rope", "q_nope", "k_nope"), outs, expected):
        oracles.assert_fp8_close(got, want, name)


@given(
    batch=st.integers(1, 3), q_len=st.integers(1, 3), heads=st.sampled_from([1, 3, 8]),
    topk=st.sampled_from([4, 16, 64]), slots=st.integers(1, 200), extra=st.integers(-3, 80),
    fp8_inputs=st.booleans(), seed=seeds,
)  # fmt: skip
def test_sparse_decode_fuzz(batch, q_len, heads, topk, slots, extra, fp8_inputs, seed):
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float8_e4m3fn if fp8_inputs else torch.bfloat16
    query = torch.randn((batch, q_len, heads, 576), generator=gen).to(dtype)
    kv = torch.randn((slots, 1, 576), generator=gen).to(dtype)
    indices = torch.randint(-2, slots + 3, (batch, q_len, topk), generator=gen, dtype=torch.int32)
    seq_lens = torch.randint(0, topk + 1, (batch,), generator=gen, dtype=torch.int32) + extra
    seq_lens = seq_lens.clamp(min=0).to(torch.int32)
    out, lse = trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv, workspace_buffer=torch.empty(1 << 16, dtype=torch.uint8),
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices,
        seq_lens=seq_lens, max_seq_len=topk, sparse_mla_top_k=topk, bmm1_scale=0.05, bmm2_scale=1.5,
        return_lse=True,
    )  # fmt: skip
    ref_out, ref_lse = oracles.sparse_decode_oracle(query, kv.view(-1, 576), indices, seq_lens, 0.05, 1.5)
    torch.testing.assert_close(out.double(), ref_out, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.view(batch, q_len, heads).double(), ref_lse, rtol=1e-3, atol=1e-3)
