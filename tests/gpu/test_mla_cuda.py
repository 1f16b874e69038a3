"""The NVIDIA MLA path (``flashinfer.mla._cuda`` and its Triton kernels) at real sizes.

Oracles are float64, computed here on the GPU. Outputs are poisoned with NaN before each call and
every element is checked. Tolerances: decode within 2e-2 of ``max |ref|`` (bf16 probabilities and
output), LSE within 1e-4 relative; RoPE within one FP8 rounding step. Graph tests capture with
``out``/``lse``/plan given, assert that capture allocated nothing, then replay on new values
copied into the captured buffers.

``test_bounds`` is the case to run under ``compute-sanitizer --tool memcheck``: negative, ``>= S``
and int32-max indices, invalid pages and garbage past the used table width.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from oracles import decode_oracle_rows as decode_oracle
from oracles import rotate

from flashinfer.mla._args import Decode, Rope

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

E4M3 = torch.float8_e4m3fn
INT32_MAX = 2**31 - 1
WORKSPACE_BYTES = 128 << 20


def fp8_supported() -> bool:
    return torch.cuda.get_device_capability() >= (8, 9)


def sparse_call(query, kv, indices, seq_lens, bmm1, bmm2, sinks, out, lse, plan, workspace):
    """The implementation's record for a flat ``(S, D)`` pool (one-token pages)."""
    return Decode(query, kv.unsqueeze(1), indices, seq_lens, bmm1, bmm2, sinks, out, lse, plan, workspace)


def dense_call(query, kv_pages, tables, seq_lens, bmm1, bmm2, sinks, out, lse, workspace):
    return Decode(query, kv_pages, tables, seq_lens, bmm1, bmm2, sinks, out, lse, None, workspace)


def cuda_module():
    from flashinfer.mla import _cuda

    return _cuda


# --------------------------------------------------------------------------------------- oracles


def sparse_rows(kv, indices):
    slots = kv.shape[0]

    def rows_of(b, t, n):
        ids = indices[b, t, :n].long()
        return kv[ids[(ids >= 0) & (ids < slots)]]

    return rows_of


def paged_rows(kv_pages, tables):
    num_pages, page_size, _ = kv_pages.shape

    def rows_of(b, t, n):
        pos = torch.arange(n, device=kv_pages.device)
        pages = tables[b, pos // page_size].long()
        ok = (pages >= 0) & (pages < num_pages)
        return kv_pages[pages[ok], (pos % page_size)[ok]]

    return rows_of


def assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol=1e-4):
    """``lse_rtol``: 1e-4 where Q K^T accumulates in float32; 3e-4 for FP8 operands, whose Hopper
    wgmma accumulates a 576-long FP8 product chain at the tensor core's reduced precision."""
    assert not out.isnan().any(), "an output element was not written"
    scale = max(ref_out.abs().max().item(), 1e-3)
    assert (out.double() - ref_out).abs().max().item() <= 2e-2 * scale
    if lse is not None:
        finite = ~ref_lse.isinf()
        assert torch.equal(lse.isinf(), ~finite), "empty rows must have lse +inf"
        err = (lse.double()[finite] - ref_lse[finite]).abs().max().item()
        assert err <= lse_rtol * max(1.0, ref_lse[finite].abs().max().item())


def lse_rtol(dtype) -> float:
    return 3e-4 if dtype == E4M3 else 1e-4


# ---------------------------------------------------------------------------------------- inputs
def sparse_inputs(batch, q_len, heads, dtype, topk=2048, slots=40000, dim=576, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    query = (torch.randn(batch, q_len, heads, dim, device="cuda", generator=gen) * 0.5).to(dtype)
    kv = (torch.randn(slots, dim, device="cuda", generator=gen) * 0.5).to(dtype)
    indices = torch.randint(0, slots, (batch, q_len, topk), device="cuda", generator=gen, dtype=torch.int32)
    indices[0, -1, 10] = -1
    indices[0, 0, 20] = INT32_MAX
    indices[-1, -1, 30] = slots
    indices[-1, 0, 40] = -(2**31)
    lens = [topk - 3, topk + 100, 7, 0][:batch]
    seq_lens = torch.tensor(lens + [topk] * (batch - len(lens)), dtype=torch.int32, device="cuda")
    return query, kv, indices, seq_lens


def poisoned_out(batch, q_len, heads, d_v=512):
    out = torch.full((batch, q_len, heads, d_v), math.nan, dtype=torch.bfloat16, device="cuda")
    lse = torch.full((batch, q_len, heads), math.nan, dtype=torch.float32, device="cuda")
    return out, lse


# ----------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("dtype", [E4M3, torch.bfloat16])
@pytest.mark.parametrize(("batch", "q_len", "heads"), [(4, 2, 128), (1, 1, 128), (3, 1, 17), (4, 2, 64)])
def test_sparse_decode(seed, dtype, batch, q_len, heads):
    if dtype == E4M3 and not fp8_supported():
        pytest.skip("FP8 decode runs the reference below sm_89")
    cuda = cuda_module()
    query, kv, indices, seq_lens = sparse_inputs(batch, q_len, heads, dtype, seed=seed)
    out, lse = poisoned_out(batch, q_len, heads)
    sinks = torch.randn(heads, device="cuda")
    bmm1 = torch.tensor(0.07, device="cuda")
    plan = cuda.decode_plan(batch, q_len, heads, 2048, query.device)
    workspace = torch.full((WORKSPACE_BYTES,), 0xFF, dtype=torch.uint8, device="cuda")
    cuda.sparse_decode(
        sparse_call(query, kv, indices, seq_lens, bmm1, 1.25, sinks, out, lse, plan, workspace)
    )
    ref_out, ref_lse = decode_oracle(query, sparse_rows(kv, indices), seq_lens, 2048, 512, 0.07, 1.25, sinks)
    assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))


def test_sparse_decode_dim_320_strided_out(seed):
    cuda = cuda_module()
    batch, q_len, heads = 2, 2, 32
    query, kv, indices, seq_lens = sparse_inputs(
        batch, q_len, heads, torch.bfloat16, topk=512, dim=320, seed=seed
    )
    big = torch.full((batch, q_len, heads, 2 * 256), math.nan, dtype=torch.bfloat16, device="cuda")
    out = big[..., 128:384]
    plan = cuda.decode_plan(batch, q_len, heads, 512, query.device)
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.int8, device="cuda")
    cuda.sparse_decode(sparse_call(query, kv, indices, seq_lens, 0.05, 1.0, None, out, None, plan, workspace))
    ref_out, _ = decode_oracle(query, sparse_rows(kv, indices), seq_lens, 512, 256, 0.05, 1.0, None)
    assert_decode_close(out, None, ref_out, None)
    assert big[..., :128].isnan().all() and big[..., 384:].isnan().all(), "wrote outside the view"


@pytest.mark.parametrize(("dtype", "page_size"), [(E4M3, 64), (torch.bfloat16, 32)])
def test_dense_decode(seed, dtype, page_size):
    if dtype == E4M3 and not fp8_supported():
        pytest.skip("FP8 decode runs the reference below sm_89")
    cuda = cuda_module()
    batch, q_len, heads, num_pages, width = 3, 2, 64, 400, 160
    gen = torch.Generator(device="cuda").manual_seed(seed)
    query = (torch.randn(batch, q_len, heads, 576, device="cuda", generator=gen) * 0.5).to(dtype)
    kv_pages = (torch.randn(num_pages, page_size, 576, device="cuda", generator=gen) * 0.5).to(dtype)
    tables = torch.randint(0, num_pages, (batch, width), device="cuda", generator=gen, dtype=torch.int32)
    seq_lens = torch.tensor([3000, 1, 20 * page_size], dtype=torch.int32, device="cuda")
    tables[0, 5] = -1
    tables[2, 3] = num_pages
    tables[2, 20:] = INT32_MAX  # past ceil(L / page_size): never read
    out, lse = poisoned_out(batch, q_len, heads)
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    cuda.dense_decode(dense_call(query, kv_pages, tables, seq_lens, 0.06, 1.0, None, out, lse, workspace))
    rows_of = paged_rows(kv_pages, tables)
    ref_out, ref_lse = decode_oracle(query, rows_of, seq_lens, width * page_size, 512, 0.06, 1.0, None)
    assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))


def test_bounds(seed):
    """Every invalid entry kind, small sizes: the case to run under compute-sanitizer."""
    cuda = cuda_module()
    dtype = E4M3 if fp8_supported() else torch.bfloat16
    query, kv, indices, seq_lens = sparse_inputs(4, 2, 16, dtype, topk=256, slots=300, seed=seed)
    indices[1, :, ::3] = INT32_MAX
    indices[2, :, ::5] = -(2**31)
    indices[3, :, 1::2] = 300
    out, lse = poisoned_out(4, 2, 16)
    workspace = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    plan = cuda.decode_plan(4, 2, 16, 256, query.device)
    cuda.sparse_decode(sparse_call(query, kv, indices, seq_lens, 0.1, 1.0, None, out, lse, plan, workspace))
    ref_out, ref_lse = decode_oracle(query, sparse_rows(kv, indices), seq_lens, 256, 512, 0.1, 1.0, None)
    assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))

    # pages 33 rows apart (FlashMLA's padded pages), padding NaN, the allocation ending at the
    # last page's last row: slots 288..299 and the invalid entries above must not be read
    pages = 9
    storage = torch.full((pages * 33 - 1, 576), math.nan, device="cuda").to(dtype)
    kv_padded = storage.as_strided((pages, 32, 576), (33 * 576, 576, 1))
    kv_padded.copy_(kv[: pages * 32].view(pages, 32, 576))
    out, lse = poisoned_out(4, 2, 16)
    cuda.sparse_decode(Decode(query, kv_padded, indices, seq_lens, 0.1, 1.0, None, out, lse, plan, workspace))
    flat = kv[: pages * 32]
    ref_out, ref_lse = decode_oracle(query, sparse_rows(flat, indices), seq_lens, 256, 512, 0.1, 1.0, None)
    assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))

    kv_pages = kv[:256].view(8, 32, 576)
    tables = torch.tensor(
        [[0, -1, 7, 8, INT32_MAX], [3, 2, -(2**31), 1, 0]], dtype=torch.int32, device="cuda"
    )
    seq_lens = torch.tensor([4 * 32 - 5, 5 * 32], dtype=torch.int32, device="cuda")
    out, lse = poisoned_out(2, 2, 16)
    cuda.dense_decode(dense_call(query[:2], kv_pages, tables, seq_lens, 0.1, 1.0, None, out, lse, workspace))
    ref_out, ref_lse = decode_oracle(
        query[:2], paged_rows(kv_pages, tables), seq_lens, 160, 512, 0.1, 1.0, None
    )
    assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))
    torch.cuda.synchronize()


def rope_inputs(tokens, heads=128, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q_nope = torch.randn(heads, tokens, 512, device="cuda", generator=gen).bfloat16().transpose(0, 1)
    q_rope = torch.randn(tokens, heads, 192, device="cuda", generator=gen).bfloat16()[..., 128:]
    latent = (torch.randn(tokens, 576, device="cuda", generator=gen) * 100).bfloat16()
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2, device="cuda").double() / 64))
    angles = torch.arange(4096, device="cuda").double()[:, None] * inv_freq
    cache = torch.cat((angles.cos(), angles.sin()), -1).float()
    pos = torch.randint(0, 4096, (tokens,), device="cuda", generator=gen)
    return q_nope, q_rope, latent, cache, pos


def rope_oracle(x, cache, pos, scale):
    """Interleaved rotation of ``x (..., 64)`` in float64, saturated to e4m3's range."""
    return (rotate(x, cache, pos, False) * scale).clamp(-448, 448)


def assert_e4m3_close(out, ref):
    ref = ref.clamp(-448, 448)
    err = (out.double() - ref).abs()
    assert (err <= ref.abs() * 2**-3 + 2**-6).all(), f"max error {err.max().item():.3g}"


def call_rope(q_nope, q_rope, latent, cache, pos, q_out, k_out):
    cuda_module().rope_quantize(Rope(
        q_rope, latent[:, None, 512:], q_nope, latent[:, None, :512], cache, pos, False, 1.0, 0.5,
        q_out[..., 512:], k_out[:, None, 512:], q_out[..., :512], k_out[:, None, :512],
    ))  # fmt: skip


def test_rope_real_size(seed):
    tokens = 4096
    q_nope, q_rope, latent, cache, pos = rope_inputs(tokens, seed=seed)
    q_out = torch.full((tokens, 128, 576), 0x7F, dtype=torch.uint8, device="cuda").view(E4M3)
    k_out = torch.full((tokens, 576), 0x7F, dtype=torch.uint8, device="cuda").view(E4M3)
    call_rope(q_nope, q_rope, latent, cache, pos, q_out, k_out)
    assert_e4m3_close(q_out[..., 512:], rope_oracle(q_rope, cache, pos, 1.0))
    assert_e4m3_close(q_out[..., :512], q_nope.double())
    assert_e4m3_close(k_out[:, 512:], rope_oracle(latent[:, 512:], cache, pos, 0.5))
    assert_e4m3_close(k_out[:, :512], latent[:, :512].double() * 0.5)  # saturates: |x| up to ~500


def test_repeat_launches_take_the_cached_kernel(seed):
    """Calls after the first launch through FastLaunch's cached kernel (raw pointers, new floats);
    an output of another pointer alignment compiles its own variant and is still exact."""
    from flashinfer.mla.kernels import rope_quantize as rope_kernels

    tokens = 3
    q_nope, q_rope, latent, cache, pos = rope_inputs(tokens, seed=seed)
    rope_kernels._ROPE_QUANTIZE._compiled.clear()
    numel = tokens * 128 * 576
    for offset in (0, 0, 8, 8, 0):  # bytes into the buffer: 16-byte aligned, then only 8
        buf = torch.full((numel + 16,), 0x7F, dtype=torch.uint8, device="cuda")
        q_out = buf[offset : offset + numel].view(E4M3).view(tokens, 128, 576)
        k_out = torch.full((tokens, 576), 0x7F, dtype=torch.uint8, device="cuda").view(E4M3)
        call_rope(q_nope, q_rope, latent, cache, pos, q_out, k_out)
        assert_e4m3_close(q_out[..., 512:], rope_oracle(q_rope, cache, pos, 1.0))
        assert_e4m3_close(q_out[..., :512], q_nope.double())
        assert_e4m3_close(k_out[:, 512:], rope_oracle(latent[:, 512:], cache, pos, 0.5))
    if rope_kernels._ROPE_QUANTIZE.enabled:
        assert len(rope_kernels._ROPE_QUANTIZE._compiled) == 2

    cuda = cuda_module()
    dtype = E4M3 if fp8_supported() else torch.bfloat16
    query, kv, indices, seq_lens = sparse_inputs(2, 1, 128, dtype, seed=seed)
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for bmm1, bmm2 in ((0.05, 1.0), (0.08, 0.5), (0.02, 2.0)):  # floats are not part of the key
        out, lse = poisoned_out(2, 1, 128)
        cuda.sparse_decode(
            sparse_call(query, kv, indices, seq_lens, bmm1, bmm2, None, out, lse, None, workspace)
        )
        ref_out, ref_lse = decode_oracle(
            query, sparse_rows(kv, indices), seq_lens, 2048, 512, bmm1, bmm2, None
        )
        assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))
    plan = cuda.decode_plan(2, 1, 128, 2048, query.device)
    call = sparse_call(query, kv, indices, seq_lens, 0.05, 1.0, None, out, lse, plan, workspace)
    decode_kernels, _, _ = cuda._decode_kernel(call, paged=False)
    if decode_kernels._DECODE.enabled:
        assert len(decode_kernels._DECODE._compiled) >= 1


def _captured_bytes(fn):
    graph = torch.cuda.CUDAGraph()
    before = torch.cuda.memory_allocated()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph, torch.cuda.memory_allocated() - before


def capture(fn):
    """Capture ``fn`` in a CUDA graph after a warm-up; return the graph and the bytes ``fn`` allocated.

    Capturing allocates torch's graph-safe RNG state (1024 bytes) while any graph holds it, so an
    empty graph is captured first and kept alive with the returned one: what the second capture
    allocates is ``fn``'s own.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The CUDA Graph is empty")  # empty on purpose
        holder, _ = _captured_bytes(lambda: None)
    graph, used = _captured_bytes(fn)
    graph.rng_state_holder = holder
    return graph, used


def test_graph_capture_rope_and_decode(seed):
    cuda = cuda_module()
    dtype = E4M3 if fp8_supported() else torch.bfloat16
    tokens = 64
    rope_args = rope_inputs(tokens, seed=seed)
    q_out = torch.empty(tokens, 128, 576, dtype=E4M3, device="cuda")
    k_out = torch.empty(tokens, 576, dtype=E4M3, device="cuda")
    rope_graph, rope_bytes = capture(lambda: call_rope(*rope_args, q_out, k_out))
    assert rope_bytes == 0

    batch, q_len, heads = 8, 2, 128
    query, kv, indices, seq_lens = sparse_inputs(batch, q_len, heads, dtype, seed=seed)
    out, lse = poisoned_out(batch, q_len, heads)
    plan = cuda.decode_plan(batch, q_len, heads, 2048, query.device)
    assert plan.portable.num_splits > 1, "the graph must cover the split + combine path"
    assert plan.gluon is None or plan.gluon.num_splits > 1
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    bmm1 = torch.tensor(0.05, device="cuda")
    decode_graph, decode_bytes = capture(
        lambda: cuda.sparse_decode(
            sparse_call(query, kv, indices, seq_lens, bmm1, 1.0, None, out, lse, plan, workspace)
        )
    )
    assert decode_bytes == 0

    # new values in the same buffers, then replay
    fresh = rope_inputs(tokens, seed=seed + 1)
    for buf, new in zip(rope_args, fresh):
        buf.copy_(new)
    q2, kv2, idx2, _ = sparse_inputs(batch, q_len, heads, dtype, seed=seed + 1)
    query.copy_(q2)
    kv.copy_(kv2)
    indices.copy_(idx2)
    seq_lens.copy_(torch.tensor([2048, 5, 0, 3000, 1, 2047, 2048, 100], dtype=torch.int32))
    bmm1.fill_(0.08)
    out.fill_(math.nan)
    q_out.view(torch.uint8).fill_(0x7F)
    rope_graph.replay()
    decode_graph.replay()
    torch.cuda.synchronize()
    q_nope, q_rope, latent, cache, pos = rope_args
    assert_e4m3_close(q_out[..., 512:], rope_oracle(q_rope, cache, pos, 1.0))
    assert_e4m3_close(q_out[..., :512], q_nope.double())
    ref_out, ref_lse = decode_oracle(query, sparse_rows(kv, indices), seq_lens, 2048, 512, 0.08, 1.0, None)
    assert_decode_close(out, lse, ref_out, ref_lse, lse_rtol(dtype))


# ------------------------------------------------------------------------------------ public API
def test_public_sparse_and_dense_decode(seed):
    import flashinfer.decode as decode

    dtype = E4M3 if fp8_supported() else torch.bfloat16
    batch, q_len, heads, page_size = 4, 2, 128, 64
    query, kv, indices, seq_lens = sparse_inputs(batch, q_len, heads, dtype, slots=640 * page_size, seed=seed)
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.int8, device="cuda")
    out, lse = decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv.view(-1, 1, page_size, 576), workspace_buffer=workspace,
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices,
        seq_lens=seq_lens, max_seq_len=2048, sparse_mla_top_k=2048, bmm1_scale=0.07, bmm2_scale=1.0,
        return_lse=True,
    )  # fmt: skip
    ref_out, ref_lse = decode_oracle(query, sparse_rows(kv, indices), seq_lens, 2048, 512, 0.07, 1.0, None)
    assert_decode_close(out, lse.view(batch, q_len, heads), ref_out, ref_lse, lse_rtol(dtype))

    kv_pages = kv.view(-1, page_size, 576)
    tables = torch.randperm(kv_pages.shape[0], device="cuda")[: batch * 64].view(batch, 64).int()
    lens = torch.tensor([4000, 17, 64, 2500], dtype=torch.int32, device="cuda")
    out = decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query, kv_cache=kv_pages.unsqueeze(1), workspace_buffer=workspace, qk_nope_head_dim=128,
        kv_lora_rank=512, qk_rope_head_dim=64, block_tables=tables, seq_lens=lens, max_seq_len=163840,
        bmm1_scale=0.07,
    )  # fmt: skip
    ref_out, _ = decode_oracle(
        query, paged_rows(kv_pages, tables), lens, 64 * page_size, 512, 0.07, 1.0, None
    )
    assert_decode_close(out, None, ref_out, None)


def test_public_mla_rope_quantize(seed):
    import flashinfer.rope as rope

    tokens = 200
    q_nope, q_rope, latent, cache, pos = rope_inputs(tokens, seed=seed)
    q_out = torch.empty(tokens, 128, 576, dtype=E4M3, device="cuda")
    k_rope_out = torch.empty(tokens, 64, dtype=E4M3, device="cuda")
    k_nope_out = torch.empty(tokens, 512, dtype=E4M3, device="cuda")
    result = rope.mla_rope_quantize_fp8(
        q_rope=q_rope, k_rope=latent[:, 512:], q_nope=q_nope, k_nope=latent[:, :512], cos_sin_cache=cache,
        pos_ids=pos, is_neox=False, quantize_dtype=E4M3, q_rope_out=q_out[..., 512:], k_rope_out=k_rope_out,
        q_nope_out=q_out[..., :512], k_nope_out=k_nope_out, quant_scale_q=1.0, quant_scale_kv=1.0,
    )  # fmt: skip
    assert result[1] is k_rope_out and result[3] is k_nope_out
    assert_e4m3_close(q_out[..., 512:], rope_oracle(q_rope, cache, pos, 1.0))
    assert_e4m3_close(k_rope_out, rope_oracle(latent[:, 512:], cache, pos, 1.0))
    assert_e4m3_close(k_nope_out, latent[:, :512].double())
