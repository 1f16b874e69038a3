"""The decode call patterns of real engines (callers.md D1-D5, M1-M3), keywords as they pass them.

Sizes are reduced for CPU (topk 256 instead of 2048, small workspaces, a few heads) but every
keyword, layout and convention is the caller's. Outputs are checked against the float64 oracle:
BF16 output rtol 1e-2 / atol 2e-3, LSE rtol 1e-5 / atol 1e-4.
"""

from __future__ import annotations

import pytest
import torch
from oracles import (
    E4M3,
    assert_decode_close,
    decode_oracle,
    dense_candidates,
    packed_oracle,
    packed_pool,
    physical_slots,
    quantized,
    sparse_candidates,
)

import flashinfer
import flashinfer.decode
from flashinfer.utils import get_device_sm_count, get_trtllm_gen_multi_ctas_kv_counter_bytes

TOPK = 256
SCALING = 192**-0.5 * 1.2  # DeepSeek-style softmax scale with a YaRN mscale


def _sparse_pool(tokens, q_len, heads, dtype, page_size, seq_lens):
    num_pages = tokens * (-(-(int(seq_lens.max()) + 1) // page_size)) + 1
    kv = quantized((num_pages, page_size, 576), dtype)
    indices = physical_slots(tokens, q_len, TOPK, seq_lens, page_size, num_pages)
    query = quantized((tokens, q_len, heads, 576), dtype)
    return query, kv, indices


def _expected_sparse(query, kv, indices, seq_lens, bmm1, bmm2=1.0):
    slots = kv.shape[0] * kv.shape[1]
    return decode_oracle(
        query, kv.reshape(-1, 576), sparse_candidates(indices, seq_lens, slots), bmm1, bmm2, None, 512
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, E4M3], ids=["D1_bf16", "D2_fp8"])
def test_d1_d2_sglang_dsa_decode(dtype, seed):
    tokens, heads = 4, 16
    seq_lens = torch.tensor([TOPK + 300, 40, TOPK, 700], dtype=torch.int32)  # full KV lengths
    q_all, kv, page_table_1 = _sparse_pool(tokens, 1, heads, dtype, 64, seq_lens)
    page_table_1 = page_table_1[:, 0]
    page_table_1[1, 10:20] = -1  # -1 inside the window
    page_table_1[3] = -1  # a padded token: the whole row is -1
    workspace = torch.empty(1 << 16, dtype=torch.uint8)  # torch.empty: never zeroed
    k_scale = 1.0 if dtype == torch.bfloat16 else 0.9
    out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=q_all.view(tokens, 1, heads, 576), kv_cache=kv.view(-1, 1, 64, 576), workspace_buffer=workspace,
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=page_table_1.unsqueeze(1),
        seq_lens=seq_lens, max_seq_len=163840, sparse_mla_top_k=TOPK, bmm1_scale=1.0 * k_scale * SCALING,
        backend="trtllm-gen", skip_softmax_threshold_scale_factor=None,
    ).squeeze(1)  # fmt: skip
    expected, _ = _expected_sparse(q_all, kv, page_table_1.unsqueeze(1), seq_lens, k_scale * SCALING)
    assert out.shape == (tokens, heads, 512)
    assert_decode_close(out, None, expected[:, 0], None)
    assert (out[3] == 0).all()


def test_d2_verify_lengths_clipped_to_topk(seed):
    tokens, heads = 3, 4
    seq_lens = torch.tensor([500, 30, 256], dtype=torch.int32).clamp(max=TOPK)  # min(expanded_len, topk)
    query, kv, indices = _sparse_pool(tokens, 1, heads, E4M3, 64, seq_lens)
    out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv.unsqueeze(1), workspace_buffer=torch.empty(64, dtype=torch.uint8),
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices, seq_lens=seq_lens,
        max_seq_len=TOPK, sparse_mla_top_k=TOPK, bmm1_scale=SCALING, backend="trtllm-gen",
    )  # fmt: skip
    assert_decode_close(out, None, _expected_sparse(query, kv, indices, seq_lens, SCALING)[0], None)


@pytest.mark.parametrize("compacted", [True, False])
@pytest.mark.parametrize("block_size", [32, 64])
def test_d3_vllm_sparse_valid_counts(compacted, block_size, seed):
    tokens, heads = 4, 8
    q = quantized((tokens, heads, 576), E4M3)
    num_blocks = 24
    cache = quantized((num_blocks, block_size, 576), E4M3)
    valid_counts = torch.tensor([TOPK, 17, 0, 100], dtype=torch.int32)
    indices = torch.full((tokens, TOPK), -1, dtype=torch.int32)
    for t, n in enumerate(valid_counts.tolist()):
        indices[t, :n] = torch.randperm(num_blocks * block_size)[:n].int()
        if not compacted:  # older vLLM: valid slots also after the counted prefix; they must be ignored
            indices[t, n:] = torch.randint(0, num_blocks * block_size, (TOPK - n,), dtype=torch.int32)
    q_scale, k_scale = 0.8, 1.25
    o, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=q.unsqueeze(1), kv_cache=cache.unsqueeze(1), workspace_buffer=torch.zeros(1 << 12, dtype=torch.uint8),
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices.unsqueeze(1),
        seq_lens=valid_counts, max_seq_len=TOPK, bmm1_scale=SCALING * q_scale * k_scale, bmm2_scale=1.0 * k_scale,
        sparse_mla_top_k=TOPK, return_lse=True,
    )  # fmt: skip
    expected_out, expected_lse = _expected_sparse(
        q.unsqueeze(1), cache, indices.unsqueeze(1), valid_counts, SCALING * q_scale * k_scale, k_scale
    )
    assert lse.shape == (tokens, heads)
    assert_decode_close(o.view(-1, heads, 512), lse, expected_out[:, 0], expected_lse[:, 0])
    assert (o[2] == 0).all() and torch.isinf(lse[2]).all() and (lse[2] > 0).all()  # empty row: 0, +inf


def test_d4_vllm_mtp_per_token_limit(seed):
    requests, q_len, heads = 2, 3, 4
    seq_lens = torch.tensor([TOPK, TOPK + 1], dtype=torch.int32)  # full lengths around topk
    query, kv, indices = _sparse_pool(requests, q_len, heads, E4M3, 64, seq_lens)
    out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv.unsqueeze(1), workspace_buffer=torch.zeros(64, dtype=torch.int8),
        qk_nope_head_dim=192, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices, seq_lens=seq_lens,
        max_seq_len=int(seq_lens.max()), bmm1_scale=0.9 * 1.1 * SCALING, bmm2_scale=0.7, sparse_mla_top_k=TOPK,
    )  # fmt: skip
    expected, _ = _expected_sparse(query, kv, indices, seq_lens, 0.9 * 1.1 * SCALING, 0.7)
    assert_decode_close(out, None, expected, None)
    # Token 0 of request 0 sees topk - 2 entries, so dropping the rule would change its output.
    cut = indices.clone()
    cut[0, 0, TOPK - 2 :] = -1
    assert torch.equal(
        out, flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv.unsqueeze(1), workspace_buffer=torch.zeros(64, dtype=torch.int8),
            qk_nope_head_dim=192, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=cut, seq_lens=seq_lens,
            max_seq_len=int(seq_lens.max()), bmm1_scale=0.9 * 1.1 * SCALING, bmm2_scale=0.7, sparse_mla_top_k=TOPK,
        ),
    )  # fmt: skip


def test_d5_vllm_sm120_packed_cache():
    """vLLM's SM120 backend: bf16 [T, 1, H, 576], the fp8_ds_mla cache viewed as uint8 and
    unsqueezed, seq_lens None, out and a [T, 1, H] LSE given, pow2 scales."""
    tokens, heads = 3, 4
    rows, keys = packed_pool(2 * 64)
    cache = rows.view(2, 64, 656).view(torch.float8_e4m3fn)  # vLLM keeps it as an fp8 tensor
    query = (torch.randn(tokens, heads, 576) * 0.5).bfloat16()
    indices = torch.randint(0, 128, (tokens, 1, TOPK), dtype=torch.int32)
    indices[1, 0, 100:] = -1
    out = torch.full((tokens, heads, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((tokens, heads), float("nan"))
    result = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query.unsqueeze(1), kv_cache=cache.view(torch.uint8).unsqueeze(1),
        workspace_buffer=torch.zeros(64, dtype=torch.int8), qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=indices, seq_lens=None, max_seq_len=TOPK, out=out.unsqueeze(1),
        bmm1_scale=SCALING, bmm2_scale=1.0, sparse_mla_top_k=TOPK, kv_scale_format="pow2_fp32",
        lse=lse.unsqueeze(1), return_lse=True,
    )  # fmt: skip
    assert result[0].data_ptr() == out.data_ptr() and result[1].data_ptr() == lse.data_ptr()
    expected_out, expected_lse = packed_oracle(query.unsqueeze(1), keys, indices, None, SCALING, None)
    assert_decode_close(out.unsqueeze(1), lse.unsqueeze(1), expected_out, expected_lse)


def _dense_call(bs, q_len, heads, page_size, dtype, seq_lens, width, bmm1=SCALING, bmm2=1.0):
    pages_needed = [-(-int(s) // page_size) for s in seq_lens]
    num_pages = sum(pages_needed) + 3
    perm = torch.randperm(num_pages).int()
    block_kv_indices = torch.full((bs, width), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(pages_needed):
        block_kv_indices[b, :n] = perm[start : start + n]
        start += n
    k_cache = quantized((num_pages * page_size, 576), dtype)
    q = quantized((bs * q_len, heads, 576), dtype)
    expected = decode_oracle(
        q.view(bs, q_len, heads, 576), k_cache,
        dense_candidates(block_kv_indices, seq_lens, q_len, page_size, num_pages), bmm1, bmm2, None, 512,
    )  # fmt: skip
    return q, k_cache, block_kv_indices, expected


@pytest.mark.parametrize("page_size", [32, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, E4M3], ids=["bf16", "fp8"])
@pytest.mark.parametrize("variant", ["older", "counter_buffer", "cute_dsl"])
def test_m1_sglang_trtllm_mla_decode(page_size, dtype, variant, seed):
    bs, heads = 3, 16
    seq_lens = torch.tensor([5, 2 * page_size + 1, 77], dtype=torch.int32)
    # Under graph capture the table width follows the model's whole context (here 2560 pages).
    q, k_cache, block_kv_indices, (expected, _) = _dense_call(
        bs, 1, heads, page_size, dtype, seq_lens, 163840 // 64
    )
    kwargs = dict(query=q.view(-1, heads, 576).unsqueeze(1), kv_cache=k_cache.view(-1, page_size, 576).unsqueeze(1),
                  workspace_buffer=torch.zeros(1 << 12, dtype=torch.int8), qk_nope_head_dim=128, kv_lora_rank=512,
                  qk_rope_head_dim=64, block_tables=block_kv_indices, seq_lens=seq_lens.to(torch.int32),
                  max_seq_len=163840, bmm1_scale=1.0 * SCALING)  # fmt: skip
    counter = None
    if variant != "older":
        kwargs["skip_softmax_threshold_scale_factor"] = None
    if variant == "counter_buffer":
        size = get_trtllm_gen_multi_ctas_kv_counter_bytes(bs, heads, get_device_sm_count(q.device))
        counter = torch.zeros(size, dtype=torch.uint8)
        kwargs["multi_ctas_kv_counter_buffer"] = counter
    if variant == "cute_dsl":
        kwargs["backend"] = "cute-dsl"
    out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)
    assert_decode_close(out.view(-1, heads * 512).view(bs, 1, heads, 512), None, expected, None)
    if counter is not None:
        assert (counter == 0).all()


def test_m2_sglang_target_verify(seed):
    bs, draft, heads, page_size = 2, 3, 4, 32
    seq_lens = torch.tensor([40, 70], dtype=torch.int32)
    q, k_cache, tables, (expected, _) = _dense_call(
        bs, draft, heads, page_size, torch.bfloat16, seq_lens + draft, 8
    )
    out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=q.view(bs, draft, heads, 576), kv_cache=k_cache.view(-1, page_size, 576).unsqueeze(1),
        workspace_buffer=torch.zeros(64, dtype=torch.int8), qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=tables, seq_lens=seq_lens + draft, max_seq_len=int(seq_lens.max()) + draft,
        bmm1_scale=SCALING,
    )  # fmt: skip
    assert_decode_close(out, None, expected, None)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_m3_vllm_flashinfer_mla(version, seed):
    num_decodes, heads, block_size = 3, 8, 32
    q_len = 2 if version == 2 else 1
    seq_lens = torch.tensor([33, 9, 64], dtype=torch.int32)
    q_scale, k_scale, v_scale = 1.0, 0.5, 0.75
    q, cache, tables, (expected, expected_lse) = _dense_call(
        num_decodes, q_len, heads, block_size, E4M3, seq_lens, 4, q_scale * k_scale * SCALING, v_scale
    )  # fmt: skip
    kwargs = dict(query=q.view(num_decodes, -1, heads, 576), kv_cache=cache.view(-1, block_size, 576).unsqueeze(1),
                  workspace_buffer=torch.zeros(1 << 12, dtype=torch.int8), qk_nope_head_dim=128, kv_lora_rank=512,
                  qk_rope_head_dim=64, block_tables=tables, seq_lens=seq_lens, max_seq_len=64,
                  bmm1_scale=q_scale * k_scale * SCALING, bmm2_scale=v_scale)  # fmt: skip
    if version >= 3:
        kwargs["return_lse"] = True
    if version == 4:
        size = get_trtllm_gen_multi_ctas_kv_counter_bytes(num_decodes, heads, get_device_sm_count(q.device))
        kwargs.update(backend="cute-dsl" if heads % 16 else "auto", enable_dcp=False, cp_world=1, cp_rank=0,
                      causal_seqlens_kv_global=None, multi_ctas_kv_counter_buffer=torch.zeros(size, dtype=torch.uint8))  # fmt: skip
    result = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)
    out, lse = result if version >= 3 else (result, None)
    if lse is not None:
        assert lse.shape == (num_decodes * q_len, heads)
        lse = lse.view(num_decodes, q_len, heads)
    assert_decode_close(
        out.view(-1, heads, 512).view(num_decodes, q_len, heads, 512), lse, expected, expected_lse
    )


def test_m3_fork_3d_out_for_single_token(seed):
    # One vLLM fork preallocates out as [B, H, 512] for q_len == 1; accepted and written in place.
    bs, heads, block_size = 2, 4, 64
    seq_lens = torch.tensor([70, 3], dtype=torch.int32)
    q, cache, tables, (expected, _) = _dense_call(bs, 1, heads, block_size, torch.bfloat16, seq_lens, 2)
    out = torch.full((bs, heads, 512), float("nan"), dtype=torch.bfloat16)
    result = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=q.unsqueeze(1), kv_cache=cache.view(-1, block_size, 576).unsqueeze(1),
        workspace_buffer=torch.zeros(64, dtype=torch.int8), qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=tables, seq_lens=seq_lens, max_seq_len=70, out=out, bmm1_scale=SCALING,
    )  # fmt: skip
    assert result is out
    assert_decode_close(out.unsqueeze(1), None, expected, None)


def test_e1_import_forms():
    from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
    from flashinfer.mla import trtllm_batch_decode_with_kv_cache_mla as from_mla
    from flashinfer.rope import mla_rope_quantize_fp8, rope_quantize_fp8

    assert from_mla is trtllm_batch_decode_with_kv_cache_mla
    assert flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla is from_mla
    for fn in (get_batch_decode_metadata_mla, mla_rope_quantize_fp8, rope_quantize_fp8):
        assert callable(fn)
    assert trtllm_batch_decode_with_kv_cache_mla.__name__ == "trtllm_batch_decode_with_kv_cache_mla"
