"""The packed 656-byte FP8 cache on the NVIDIA path (the decode kernel's ``PACKED`` mode) at real
sizes: top-k 2048, up to 128 heads, a pool of 40000 rows.

Rows are built from float64 values (e4m3 codes, float32 scales, bf16 RoPE values), so the oracle
attends over those values, never over a decode of the bytes. The kernel rounds each dequantized K
value to bf16 once (exact for power-of-two scales), so the oracle takes K rounded the same way.
Outputs are poisoned with NaN and every element is checked: output within 2e-2 of ``max |ref|``
(bf16 probabilities and output), LSE (base 2, sinks included, -inf when empty) within 1e-4
relative. The graph test captures with ``out``/``lse``/plan given, asserts that capture
allocated nothing (so no dequantized copy of the cache exists), and replays on new values.
``test_packed_bounds`` is the case to run under ``compute-sanitizer --tool memcheck``.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_mla_cuda import WORKSPACE_BYTES, capture, sparse_call

from flashinfer.mla._args import Decode

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

E4M3 = torch.float8_e4m3fn
INT32_MAX = 2**31 - 1
TOPK = 2048


def packed_pool(slots, pow2=True, seed=0):
    """``(rows [slots, 656] uint8, keys [slots, 576] float64)`` on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    codes = (torch.randn(slots, 512, device="cuda", generator=gen) * 60).clamp(-448, 448).to(E4M3)
    if pow2:
        exponents = torch.randint(-10, -5, (slots, 4), device="cuda", generator=gen)
        scales = torch.pow(2.0, exponents.float())
    else:
        scales = torch.rand(slots, 4, device="cuda", generator=gen) * 0.01 + 1e-3
    rope = (torch.randn(slots, 64, device="cuda", generator=gen) * 0.5).bfloat16()
    rows = torch.cat((codes.view(torch.uint8), scales.view(torch.uint8), rope.view(torch.uint8)), -1)
    keys = torch.cat((codes.double() * scales.double().repeat_interleave(128, -1), rope.double()), -1)
    return rows, keys


def packed_inputs(batch, q_len, heads, slots=40000, pow2=True, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    rows, keys = packed_pool(slots, pow2, seed)
    query = (torch.randn(batch, q_len, heads, 576, device="cuda", generator=gen) * 0.5).bfloat16()
    indices = torch.randint(0, slots, (batch, q_len, TOPK), device="cuda", generator=gen, dtype=torch.int32)
    indices[0, -1, 10] = -1
    indices[0, 0, 20] = INT32_MAX
    indices[-1, -1, 30] = slots
    indices[-1, 0, 40] = -(2**31)
    tokens = batch * q_len
    lengths = torch.randint(1, TOPK + 200, (tokens,), device="cuda", generator=gen, dtype=torch.int32)
    lengths[-1] = 0  # the last token attends nothing
    if tokens > 1:
        lengths[0] = 5
    return query, rows, keys, indices, lengths


def oracle(query, keys, indices, lengths, bmm1, sinks):
    """float64 ``(out, lse2)`` with K rounded to bf16 as the kernel does; sinks in the LSE."""
    keys = keys.bfloat16().double()
    batch, q_len, heads, _ = query.shape
    out = torch.zeros(batch, q_len, heads, 512, dtype=torch.float64, device="cuda")
    lse = torch.empty(batch, q_len, heads, dtype=torch.float64, device="cuda")
    sink_mass = (
        torch.zeros(heads, dtype=torch.float64, device="cuda") if sinks is None else sinks.double().exp()
    )
    for b in range(batch):
        for t in range(q_len):
            n = TOPK if lengths is None else max(0, min(TOPK, int(lengths[b * q_len + t])))
            ids = indices[b, t, :n].long()
            ids = ids[(ids >= 0) & (ids < keys.shape[0])]
            total = sink_mass.clone()
            if ids.numel():
                k = keys[ids]
                s = bmm1 * query[b, t].double() @ k.T
                shift = s.max(-1, keepdim=True).values
                weights = (s - shift).exp()
                total = total * (-shift[:, 0]).exp() + weights.sum(-1)
                out[b, t] = weights @ k[:, :512] / total[:, None]
                lse[b, t] = (total.log() + shift[:, 0]) / math.log(2.0)
            else:
                lse[b, t] = total.log() / math.log(2.0)
    return out, lse


def assert_close(out, lse, ref_out, ref_lse):
    assert not out.isnan().any(), "an output element was not written"
    scale = max(ref_out.abs().max().item(), 1e-3)
    assert (out.double() - ref_out).abs().max().item() <= 2e-2 * scale
    if lse is not None:
        empty = ref_lse.isneginf()
        assert torch.equal(lse.isneginf(), empty), "empty rows must have lse -inf"
        err = (lse.double()[~empty] - ref_lse[~empty]).abs().max().item()
        assert err <= 1e-4 * max(1.0, ref_lse[~empty].abs().max().item())


def poisoned(batch, q_len, heads):
    out = torch.full((batch, q_len, heads, 512), math.nan, dtype=torch.bfloat16, device="cuda")
    lse = torch.full((batch, q_len, heads), math.nan, dtype=torch.float32, device="cuda")
    return out, lse


def cuda_module():
    from flashinfer.mla import _cuda

    return _cuda


@pytest.mark.parametrize(
    ("batch", "q_len", "heads", "lengths", "sinks", "pow2"),
    [(4, 2, 128, True, True, True), (1, 1, 128, False, False, True), (3, 1, 17, True, False, False),
     (64, 1, 64, True, False, True), (8, 2, 16, False, True, False), (2, 1, 40, True, True, True)],
)  # fmt: skip
def test_packed_decode(seed, batch, q_len, heads, lengths, sinks, pow2):
    cuda = cuda_module()
    query, rows, keys, indices, token_lengths = packed_inputs(batch, q_len, heads, pow2=pow2, seed=seed)
    token_lengths = token_lengths if lengths else None
    sink_values = torch.randn(heads, device="cuda") if sinks else None
    out, lse = poisoned(batch, q_len, heads)
    workspace = torch.full((WORKSPACE_BYTES,), 0xFF, dtype=torch.uint8, device="cuda")
    plan = cuda.decode_plan(batch, q_len, heads, TOPK, query.device)
    cuda.packed_sparse_decode(
        sparse_call(query, rows, indices, token_lengths, 0.07, 1.0, sink_values, out, lse, plan, workspace)
    )
    assert_close(out, lse, *oracle(query, keys, indices, token_lengths, 0.07, sink_values))


def test_packed_public_api_vllm_sm120_call(seed):
    """vLLM's SM120 call: bf16 [T, 1, H, 576], the fp8_ds_mla cache as uint8 [pages, 1, 64, 656],
    seq_lens None, out and a [T, 1, H] LSE given, backend "auto"."""
    import flashinfer.decode as decode

    tokens, heads = 16, 128
    query, rows, keys, indices, _ = packed_inputs(tokens, 1, heads, slots=625 * 64, seed=seed)
    out, lse = poisoned(tokens, 1, heads)
    result = decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=rows.view(-1, 1, 64, 656), workspace_buffer=torch.zeros(WORKSPACE_BYTES,
        dtype=torch.int8, device="cuda"), qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64,
        block_tables=indices, seq_lens=None, max_seq_len=TOPK, out=out, bmm1_scale=576**-0.5, bmm2_scale=1.0,
        sparse_mla_top_k=TOPK, kv_scale_format="pow2_fp32", lse=lse, return_lse=True,
    )  # fmt: skip
    assert result[0] is out and result[1] is lse
    assert_close(out, lse, *oracle(query, keys, indices, None, 576**-0.5, None))


def test_packed_bounds(seed):
    """Every invalid entry kind, small sizes: the case to run under compute-sanitizer."""
    cuda = cuda_module()
    query, rows, keys, indices, lengths = packed_inputs(4, 2, 16, slots=300, seed=seed)
    indices[1, :, ::3] = INT32_MAX
    indices[2, :, ::5] = -(2**31)
    indices[3, :, 1::2] = 300
    out, lse = poisoned(4, 2, 16)
    workspace = torch.empty(1 << 22, dtype=torch.uint8, device="cuda")
    cuda.packed_sparse_decode(
        sparse_call(query, rows, indices, lengths, 0.1, 1.0, None, out, lse, None, workspace)
    )
    assert_close(out, lse, *oracle(query, keys, indices, lengths, 0.1, None))

    # FlashMLA's pages: 64 rows, one padding row of all-ones bytes (NaN codes and scales), the
    # allocation ending at the last page's last row
    pages = 4
    storage = torch.full((pages * 65 - 1, 656), 0xFF, dtype=torch.uint8, device="cuda")
    padded = storage.as_strided((pages, 64, 656), (65 * 656, 656, 1))
    padded.copy_(rows[: pages * 64].view(pages, 64, 656))
    out, lse = poisoned(4, 2, 16)
    cuda.packed_sparse_decode(
        Decode(query, padded, indices, lengths, 0.1, 1.0, None, out, lse, None, workspace)
    )
    assert_close(out, lse, *oracle(query, keys[: pages * 64], indices, lengths, 0.1, None))
    torch.cuda.synchronize()


def test_packed_graph_capture(seed):
    cuda = cuda_module()
    batch, q_len, heads = 8, 2, 128
    query, rows, keys, indices, lengths = packed_inputs(batch, q_len, heads, seed=seed)
    out, lse = poisoned(batch, q_len, heads)
    sinks = torch.randn(heads, device="cuda")
    plan = cuda.decode_plan(batch, q_len, heads, TOPK, query.device)
    assert plan.portable.num_splits > 1, "the graph must cover the split + combine path"
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    graph, allocated = capture(
        lambda: cuda.packed_sparse_decode(
            sparse_call(query, rows, indices, lengths, 0.05, 1.0, sinks, out, lse, plan, workspace)
        )
    )
    assert allocated == 0

    q2, rows2, keys2, idx2, lengths2 = packed_inputs(batch, q_len, heads, seed=seed + 1)
    query.copy_(q2)
    rows.copy_(rows2)
    indices.copy_(idx2)
    lengths.copy_(lengths2)
    out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, lse, *oracle(query, keys2, indices, lengths, 0.05, sinks))
