"""Calls from several Python threads at once give the same answers as calls made alone."""

from __future__ import annotations

import threading

import oracles
import torch

import flashinfer
from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla

THREADS = 4


def _run_threads(work):
    errors: list[BaseException] = []

    def body(i):
        try:
            work(i)
        except BaseException as exc:  # surfaced below, with the thread's index
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_bmm_fp8_from_threads(seed):
    def work(i):
        gen = torch.Generator().manual_seed(seed + i)
        A = oracles.fp8((2, 33, 64), scale=2.0, generator=gen)
        B = oracles.fp8((2, 48, 64), scale=2.0, generator=gen).transpose(-2, -1)
        sa, sb = oracles.pow2((), high=3, generator=gen), oracles.pow2((1,), high=3, generator=gen)
        for _ in range(20):
            out = flashinfer.bmm_fp8(A, B, sa, sb, torch.bfloat16)
            oracles.assert_matches(out, *oracles.oracle_bmm(A, B, sa, sb))

    _run_threads(work)


def test_sparse_decode_sharing_one_metadata_across_threads(seed):
    """One metadata object used by overlapping calls: the plan holds no scratch, so it is safe."""
    B, q_len, H, topk, S = 2, 1, 4, 64, 300
    query0 = torch.randn(B, q_len, H, 576).to(torch.bfloat16)
    seq_lens = torch.full((B,), topk, dtype=torch.int32)
    metadata = get_batch_decode_metadata_mla(query0, seq_lens, topk)

    def work(i):
        gen = torch.Generator().manual_seed(seed + i)
        query = torch.randn((B, q_len, H, 576), generator=gen).to(torch.bfloat16)
        kv = torch.randn((S // 4, 4, 576), generator=gen).to(torch.bfloat16)
        indices = torch.randint(-1, S, (B, q_len, topk), generator=gen, dtype=torch.int32)
        for _ in range(5):
            out = trtllm_batch_decode_with_kv_cache_mla(
                query=query, kv_cache=kv, workspace_buffer=torch.empty(1 << 20, dtype=torch.int8),
                qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices,
                seq_lens=seq_lens, max_seq_len=topk, sparse_mla_top_k=topk, bmm1_scale=0.07,
                metadata=metadata,
            )  # fmt: skip
            ref, _ = oracles.sparse_decode_oracle(query, kv.view(-1, 576), indices, seq_lens, 0.07, 1.0)
            torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)

    _run_threads(work)
