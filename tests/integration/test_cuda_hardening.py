"""CUDA-only hardening: calls from several threads on their own streams, and 10,000 calls
leaving the CUDA allocator's bytes flat. Skipped on machines without a CUDA device."""

from __future__ import annotations

import threading
import traceback

import oracles
import pytest
import torch
from optable import CUDA_SLACK

import flashinfer
from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
from flashinfer.gemm import gemm_fp8_nt_groupwise
from flashinfer.rope import mla_rope_quantize_fp8

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
E4M3 = torch.float8_e4m3fn


def _cuda_calls():
    gen = torch.Generator().manual_seed(1)
    dev = "cuda"
    A = oracles.fp8((4, 64, 256), scale=2.0, generator=gen).to(dev)
    B = oracles.fp8((4, 128, 256), scale=2.0, generator=gen).to(dev).transpose(-2, -1)
    s = torch.ones((), device=dev)
    out = torch.empty(4, 64, 128, dtype=torch.bfloat16, device=dev)
    a, b = (
        oracles.fp8((64, 256), scale=2.0, generator=gen).to(dev),
        oracles.fp8((256, 256), scale=2.0, generator=gen).to(dev),
    )
    a_s, b_s = torch.ones(64, 2, device=dev), torch.ones(2, 2, device=dev)
    g_out = torch.empty(64, 256, dtype=torch.bfloat16, device=dev)
    q_rope, q_nope = (
        torch.randn(8, 16, 64, device=dev).bfloat16(),
        torch.randn(8, 16, 512, device=dev).bfloat16(),
    )
    k_rope, k_nope = torch.randn(8, 64, device=dev).bfloat16(), torch.randn(8, 512, device=dev).bfloat16()
    cache, pos = oracles.cos_sin_cache(64, 64).to(dev), torch.arange(8, device=dev)
    q_out = torch.empty(8, 16, 576, dtype=E4M3, device=dev)
    k_out = torch.empty(8, 576, dtype=E4M3, device=dev)
    query = torch.randn(4, 1, 16, 576, device=dev).to(E4M3)
    kv = torch.randn(64, 64, 576, device=dev).to(E4M3)
    idx = torch.randint(-1, 4096, (4, 1, 256), dtype=torch.int32, device=dev)
    seq_lens = torch.full((4,), 256, dtype=torch.int32, device=dev)
    ws = torch.empty(16 << 20, dtype=torch.uint8, device=dev)
    meta = get_batch_decode_metadata_mla(query, seq_lens, 256)
    d_out = torch.empty(4, 1, 16, 512, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(4, 16, device=dev)
    return {
        "bmm_fp8": lambda: flashinfer.bmm_fp8(A, B, s, s, torch.bfloat16, out),
        "gemm_fp8_nt_groupwise": lambda: gemm_fp8_nt_groupwise(a, b, a_s, b_s, "K", out=g_out),
        "mla_rope_quantize_fp8": lambda: mla_rope_quantize_fp8(
            q_rope, k_rope, q_nope, k_nope, cache, pos, False, None, 1.0, 1.0,
            q_out[..., 512:], k_out[:, 512:], q_out[..., :512], k_out[:, :512],
        ),
        "trtllm_batch_decode_with_kv_cache_mla": lambda: trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv, workspace_buffer=ws, qk_nope_head_dim=128, kv_lora_rank=512,
            qk_rope_head_dim=64, block_tables=idx, seq_lens=seq_lens, max_seq_len=256, sparse_mla_top_k=256,
            out=d_out, lse=lse, return_lse=True, bmm1_scale=0.05, metadata=meta,
        ),
    }  # fmt: skip


@pytest.mark.parametrize(
    "op",
    ["bmm_fp8", "gemm_fp8_nt_groupwise", "mla_rope_quantize_fp8", "trtllm_batch_decode_with_kv_cache_mla"],
)
def test_cuda_allocated_bytes_stay_flat(op):
    call = _cuda_calls()[op]
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(10_000):
        call()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


def test_threads_on_their_own_streams(seed):
    errors = []

    def work(i):
        try:
            gen = torch.Generator().manual_seed(seed + i)
            A = oracles.fp8((2, 96, 256), scale=2.0, generator=gen)
            B = oracles.fp8((2, 80, 256), scale=2.0, generator=gen).transpose(-2, -1)
            sa, sb = oracles.pow2((), high=3, generator=gen), oracles.pow2((), high=3, generator=gen)
            expected = oracles.oracle_bmm(A, B, sa, sb)
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                Ad, Bd, sad, sbd = (x.cuda(non_blocking=False) for x in (A, B, sa, sb))
                for _ in range(20):
                    out = flashinfer.bmm_fp8(Ad, Bd, sad, sbd, torch.bfloat16)
            stream.synchronize()
            # FP8 tensor cores accumulate with fewer bits than fp32 over long k
            oracles.assert_matches(out.cpu(), *expected, slack=CUDA_SLACK["bmm_fp8"])
        except BaseException as exc:  # reported below with the others, traceback included
            errors.append("".join(traceback.format_exception(exc)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(errors)
