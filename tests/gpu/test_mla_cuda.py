"""What the MLA op table (``tests/mla_ops.py``, run on the GPU by ``test_optable_cuda.py``)
cannot state: the sanitizer cases (every invalid index kind, padded pages whose allocation ends at
the last row; run ``test_bounds`` and ``test_packed_bounds`` under ``compute-sanitizer --tool
memcheck``), CUDA graph capture that allocates nothing (per kernel tier) replayed on new values,
repeat launches through the cached kernel, and the 320-wide decode the public API does not take.

Oracles are the float64 ones of ``tests/oracles.py``; outputs are poisoned with NaN before each
call and every element is checked by the tensor-core rules (``oracles.assert_decode_close``,
``oracles.assert_fp8_close`` with ``tensor_cores=True``).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from optable import use_tier
from oracles import assert_decode_close, assert_fp8_close, packed_oracle, packed_pool, rope_oracle
from oracles import decode_oracle_rows as decode_oracle

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


def check_decode(out, lse, expected):
    """Every element written, by the tensor-core rule of ``oracles.assert_decode_close``."""
    ref_out, ref_lse = expected
    assert_decode_close(
        out.cpu(), None if lse is None else lse.cpu(), ref_out.cpu(), None if lse is None else ref_lse.cpu(),
        tensor_cores=True,
    )  # fmt: skip


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


@pytest.fixture(params=["gluon", "tl"])
def tier(request, monkeypatch):
    """The decode kernel tier (``FLASHINFER_KERNEL_TIER``; Gluon only where it runs)."""
    use_tier(f"cuda-{request.param}", monkeypatch)
    return request.param


# ----------------------------------------------------------------------------- sanitizer cases


def test_bounds(seed, tier):
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
    check_decode(out, lse, decode_oracle(query, sparse_rows(kv, indices), seq_lens, 256, 512, 0.1, 1.0, None))

    # pages 33 rows apart (FlashMLA's padded pages), padding NaN, the allocation ending at the
    # last page's last row: slots 288..299 and the invalid entries above must not be read
    pages = 9
    storage = torch.full((pages * 33 - 1, 576), math.nan, device="cuda").to(dtype)
    kv_padded = storage.as_strided((pages, 32, 576), (33 * 576, 576, 1))
    kv_padded.copy_(kv[: pages * 32].view(pages, 32, 576))
    out, lse = poisoned_out(4, 2, 16)
    cuda.sparse_decode(Decode(query, kv_padded, indices, seq_lens, 0.1, 1.0, None, out, lse, plan, workspace))
    flat = kv[: pages * 32]
    check_decode(
        out, lse, decode_oracle(query, sparse_rows(flat, indices), seq_lens, 256, 512, 0.1, 1.0, None)
    )

    kv_pages = kv[:256].view(8, 32, 576)
    tables = torch.tensor(
        [[0, -1, 7, 8, INT32_MAX], [3, 2, -(2**31), 1, 0]], dtype=torch.int32, device="cuda"
    )
    seq_lens = torch.tensor([4 * 32 - 5, 5 * 32], dtype=torch.int32, device="cuda")
    out, lse = poisoned_out(2, 2, 16)
    cuda.dense_decode(dense_call(query[:2], kv_pages, tables, seq_lens, 0.1, 1.0, None, out, lse, workspace))
    expected = decode_oracle(query[:2], paged_rows(kv_pages, tables), seq_lens, 160, 512, 0.1, 1.0, None)
    check_decode(out, lse, expected)
    torch.cuda.synchronize()


def packed_inputs(batch, q_len, heads, slots, topk=2048):
    """A packed 656-byte pool on the GPU with its float64 keys (CPU), a query, indices with every
    invalid kind, per-token lengths (one short, the last empty)."""
    rows, keys = packed_pool(slots)
    query = (torch.randn(batch, q_len, heads, 576, device="cuda") * 0.5).bfloat16()
    indices = torch.randint(0, slots, (batch, q_len, topk), device="cuda", dtype=torch.int32)
    indices[0, -1, 10] = -1
    indices[0, 0, 20] = INT32_MAX
    indices[-1, -1, 30] = slots
    indices[-1, 0, 40] = -(2**31)
    lengths = torch.randint(1, topk + 200, (batch * q_len,), device="cuda", dtype=torch.int32)
    lengths[0], lengths[-1] = 5, 0
    return query, rows.cuda(), keys, indices, lengths


def packed_expected(query, keys, indices, lengths, bmm1, sinks):
    return packed_oracle(
        query.cpu(), keys, indices.cpu(), lengths.cpu(), bmm1, None if sinks is None else sinks.cpu()
    )


def test_packed_bounds(seed, tier):
    """Every invalid entry kind on the packed cache, small sizes: the case to run under
    compute-sanitizer."""
    cuda = cuda_module()
    query, rows, keys, indices, lengths = packed_inputs(4, 2, 16, slots=300)
    indices[1, :, ::3] = INT32_MAX
    indices[2, :, ::5] = -(2**31)
    indices[3, :, 1::2] = 300
    out, lse = poisoned_out(4, 2, 16)
    workspace = torch.empty(1 << 22, dtype=torch.uint8, device="cuda")
    cuda.packed_sparse_decode(
        sparse_call(query, rows, indices, lengths, 0.1, 1.0, None, out, lse, None, workspace)
    )
    check_decode(out, lse, packed_expected(query, keys, indices, lengths, 0.1, None))

    # FlashMLA's pages: 64 rows, one padding row of all-ones bytes (NaN codes and scales), the
    # allocation ending at the last page's last row
    pages = 4
    storage = torch.full((pages * 65 - 1, 656), 0xFF, dtype=torch.uint8, device="cuda")
    padded = storage.as_strided((pages, 64, 656), (65 * 656, 656, 1))
    padded.copy_(rows[: pages * 64].view(pages, 64, 656))
    out, lse = poisoned_out(4, 2, 16)
    cuda.packed_sparse_decode(
        Decode(query, padded, indices, lengths, 0.1, 1.0, None, out, lse, None, workspace)
    )
    check_decode(out, lse, packed_expected(query, keys[: pages * 64], indices, lengths, 0.1, None))
    torch.cuda.synchronize()


# ----------------------------------------------------------------------------- launches


def test_sparse_decode_dim_320_strided_out(seed):
    """A 320-wide head (256 values), which the public API does not take: the portable kernel's
    width parameters, into a strided view whose neighbours must stay untouched."""
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
    check_decode(
        out, None, decode_oracle(query, sparse_rows(kv, indices), seq_lens, 512, 256, 0.05, 1.0, None)
    )
    assert big[..., :128].isnan().all() and big[..., 384:].isnan().all(), "wrote outside the view"


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


def call_rope(q_nope, q_rope, latent, cache, pos, q_out, k_out):
    cuda_module().rope_quantize(Rope(
        q_rope, latent[:, None, 512:], q_nope, latent[:, None, :512], cache, pos, False, 1.0, 0.5,
        q_out[..., 512:], k_out[:, None, 512:], q_out[..., :512], k_out[:, None, :512],
    ))  # fmt: skip


def check_rope(q_nope, q_rope, latent, cache, pos, q_out, k_out):
    """The four outputs against ``oracles.rope_oracle`` (scales 1.0 for q, 0.5 for the latent)."""
    q_rope_ref, _, q_nope_ref, _ = rope_oracle(
        q_rope, q_rope, q_nope, None, cache, pos, False, 1.0, 1.0, E4M3
    )
    _, k_rope_ref, _, k_nope_ref = rope_oracle(
        latent[:, 512:], latent[:, 512:], None, latent[:, :512], cache, pos, False, 0.5, 0.5, E4M3
    )
    for name, got, want in (("q_rope_out", q_out[..., 512:], q_rope_ref), ("q_nope_out", q_out[..., :512], q_nope_ref),
                            ("k_rope_out", k_out[:, 512:], k_rope_ref), ("k_nope_out", k_out[:, :512], k_nope_ref)):  # fmt: skip
        assert_fp8_close(got.cpu(), want.cpu(), name, tensor_cores=True)


def test_repeat_launches_take_the_cached_kernel(seed, tier):
    """Calls after the first launch through FastLaunch's cached kernel (raw pointers, new floats);
    an output of another pointer alignment compiles its own variant and is still exact."""
    from flashinfer.mla.kernels import rope_quantize as rope_kernels

    tokens = 3
    rope_args = rope_inputs(tokens, seed=seed)
    rope_kernels._ROPE_QUANTIZE._compiled.clear()
    numel = tokens * 128 * 576
    for offset in (0, 0, 8, 8, 0):  # bytes into the buffer: 16-byte aligned, then only 8
        buf = torch.full((numel + 16,), 0x7F, dtype=torch.uint8, device="cuda")
        q_out = buf[offset : offset + numel].view(E4M3).view(tokens, 128, 576)
        k_out = torch.full((tokens, 576), 0x7F, dtype=torch.uint8, device="cuda").view(E4M3)
        call_rope(*rope_args, q_out, k_out)
        check_rope(*rope_args, q_out, k_out)
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
        expected = decode_oracle(query, sparse_rows(kv, indices), seq_lens, 2048, 512, bmm1, bmm2, None)
        check_decode(out, lse, expected)
    plan = cuda.decode_plan(2, 1, 128, 2048, query.device)
    call = sparse_call(query, kv, indices, seq_lens, 0.05, 1.0, None, out, lse, plan, workspace)
    decode_kernels, _, _ = cuda._decode_kernel(call, paged=False)
    if decode_kernels._DECODE.enabled:
        assert len(decode_kernels._DECODE._compiled) >= 1


# ----------------------------------------------------------------------------- graphs and memory


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


def test_graph_capture_rope_and_decode(seed, tier):
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
    k_out.view(torch.uint8).fill_(0x7F)
    rope_graph.replay()
    decode_graph.replay()
    torch.cuda.synchronize()
    check_rope(*rope_args, q_out, k_out)
    check_decode(
        out, lse, decode_oracle(query, sparse_rows(kv, indices), seq_lens, 2048, 512, 0.08, 1.0, None)
    )


def test_packed_graph_capture(seed, tier):
    """The packed cache captured with ``out``/``lse``/plan given allocates nothing (so no
    dequantized copy of the cache exists), and replays on new values."""
    cuda = cuda_module()
    batch, q_len, heads = 8, 2, 128
    query, rows, keys, indices, lengths = packed_inputs(batch, q_len, heads, slots=40000)
    out, lse = poisoned_out(batch, q_len, heads)
    sinks = torch.randn(heads, device="cuda")
    plan = cuda.decode_plan(batch, q_len, heads, 2048, query.device)
    assert plan.portable.num_splits > 1, "the graph must cover the split + combine path"
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    graph, allocated = capture(
        lambda: cuda.packed_sparse_decode(
            sparse_call(query, rows, indices, lengths, 0.05, 1.0, sinks, out, lse, plan, workspace)
        )
    )
    assert allocated == 0

    q2, rows2, keys2, idx2, lengths2 = packed_inputs(batch, q_len, heads, slots=40000)
    query.copy_(q2)
    rows.copy_(rows2)
    indices.copy_(idx2)
    lengths.copy_(lengths2)
    out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    check_decode(out, lse, packed_expected(query, keys2, indices, lengths, 0.05, sinks))
