"""MLA decode: signature, metadata reuse and misuse, compact var-Q, native dims, edges, hypothesis.

Tolerances: BF16 output rtol 1e-2 / atol 2e-3, LSE rtol 1e-5 / atol 1e-4 against the float64
oracle (tests/oracles.py).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from mla_ops import dense_sample, sparse_sample
from oracles import (
    E4M3,
    assert_decode_close,
    decode_oracle,
    dense_candidates,
    quantized,
    sparse_candidates,
)

import flashinfer.rope
from flashinfer._core import dispatch
from flashinfer.decode import (
    DecodeMetadata,
    get_batch_decode_metadata_mla,
    trtllm_batch_decode_with_kv_cache_mla,
)

V0617_PARAMETERS = [
    ("query", inspect.Parameter.empty), ("kv_cache", inspect.Parameter.empty),
    ("workspace_buffer", inspect.Parameter.empty), ("qk_nope_head_dim", inspect.Parameter.empty),
    ("kv_lora_rank", inspect.Parameter.empty), ("qk_rope_head_dim", inspect.Parameter.empty),
    ("block_tables", inspect.Parameter.empty), ("seq_lens", inspect.Parameter.empty),
    ("max_seq_len", inspect.Parameter.empty), ("sparse_mla_top_k", 0), ("out", None), ("bmm1_scale", 1.0),
    ("bmm2_scale", 1.0), ("sinks", None), ("skip_softmax_threshold_scale_factor", None), ("enable_pdl", None),
    ("backend", "auto"), ("is_var_seq", True), ("uses_shared_paged_kv_idx", True), ("lse", None),
    ("return_lse", False), ("cute_dsl_impl", "auto"), ("kv_scale_format", "auto"), ("cum_seq_lens_q", None),
    ("max_q_len", None), ("multi_ctas_kv_counter_buffer", None), ("sparse_mla_top_k_lens", None),
    ("enable_dcp", False), ("cp_world", 1), ("cp_rank", 0), ("causal_seqlens_kv_global", None),
]  # fmt: skip


def test_signature_is_v0617_plus_head_keyword_plus_metadata():
    params = list(inspect.signature(trtllm_batch_decode_with_kv_cache_mla).parameters.values())
    assert [(p.name, p.default) for p in params[: len(V0617_PARAMETERS)]] == V0617_PARAMETERS
    assert [(p.name, p.default) for p in params[len(V0617_PARAMETERS) :]] == [
        ("use_fp16_softmax", None),
        ("metadata", None),
    ]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)


def _run(sample, **changes):
    return trtllm_batch_decode_with_kv_cache_mla(**{**sample.kwargs, **changes})


def test_every_backend_name_runs_the_same_implementation(seed):
    sample = sparse_sample("s", q_len=2, lse="return").build()
    results = [_run(sample, backend=b) for b in ("auto", "trtllm-gen", "cute-dsl", "xqa", "sparse")]
    for out, lse in results[1:]:
        assert torch.equal(out, results[0][0]) and torch.equal(lse, results[0][1])


def test_accepted_compatibility_keywords(seed):
    sample = sparse_sample("s").build()
    out = _run(sample, enable_pdl=True, is_var_seq=False, cute_dsl_impl="x", kv_scale_format="auto",
               use_fp16_softmax=True, enable_dcp=False, cp_world=1, cp_rank=0, causal_seqlens_kv_global=None,
               max_seq_len=1)  # fmt: skip
    assert_decode_close(out, None, sample.oracle()[0], None)  # max_seq_len never bounds the work


def test_lse_written_without_return_lse(seed):
    sample = sparse_sample("s", q_len=2).build()
    lse = torch.full((4, 4), float("nan"))
    out = _run(sample, lse=lse)
    assert isinstance(out, torch.Tensor)
    expected_out, expected_lse = sample.oracle()
    assert_decode_close(out, lse.view(2, 2, 4), expected_out, expected_lse)


def test_counter_buffer_and_workspace_untouched(seed):
    sample = sparse_sample("s").build()
    counter = torch.zeros(4096, dtype=torch.uint8)
    workspace = torch.randint(0, 255, (1024,), dtype=torch.uint8)
    before = workspace.clone()
    _run(sample, multi_ctas_kv_counter_buffer=counter, workspace_buffer=workspace)
    assert (counter == 0).all() and torch.equal(workspace, before)


def test_zero_batch_and_zero_heads():
    query = torch.zeros(0, 1, 4, 576, dtype=torch.bfloat16)
    out, lse = trtllm_batch_decode_with_kv_cache_mla(
        query, torch.zeros(2, 32, 576, dtype=torch.bfloat16), torch.zeros(8, dtype=torch.int8), 128, 512, 64,
        torch.zeros(0, 1, 64, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), 64, 64, return_lse=True,
    )  # fmt: skip
    assert out.shape == (0, 1, 4, 512) and lse.shape == (0, 4)


# ------------------------------------------------------------------------------------- metadata
def test_metadata_reused_across_layers_and_changing_seq_lens(seed):
    sample = sparse_sample("s", q_len=2, seq="counts", lse="return").build()
    kwargs = sample.kwargs
    metadata = get_batch_decode_metadata_mla(kwargs["query"], kwargs["seq_lens"], kwargs["sparse_mla_top_k"])
    assert isinstance(metadata, DecodeMetadata)
    assert (metadata.batch, metadata.q_len, metadata.heads, metadata.topk) == (2, 2, 4, 64)
    for step in range(3):  # the lengths grow between steps; the metadata stays exact
        seq_lens = (kwargs["seq_lens"] + 20 * step).to(torch.int32)
        out, lse = _run(sample, seq_lens=seq_lens, metadata=metadata)
        slots = kwargs["kv_cache"].shape[0] * kwargs["kv_cache"].shape[2]
        expected = decode_oracle(kwargs["query"], kwargs["kv_cache"].reshape(-1, 576),
                                 sparse_candidates(kwargs["block_tables"], seq_lens, slots), 0.08, 1.0, None, 512)  # fmt: skip
        assert_decode_close(out, lse.view(2, 2, 4), *expected)


@pytest.mark.parametrize(
    "field, query_shape, topk",
    [("batch", (3, 2, 4, 576), 64), ("q_len", (2, 1, 4, 576), 64), ("heads", (2, 2, 8, 576), 64), ("topk", (2, 2, 4, 576), 128)],
)  # fmt: skip
def test_metadata_mismatch_names_the_field(field, query_shape, topk, seed):
    sample = sparse_sample("s", q_len=2).build()
    lens = torch.zeros(query_shape[0], dtype=torch.int32)  # the other configuration's
    metadata = get_batch_decode_metadata_mla(torch.zeros(query_shape, dtype=E4M3), lens, topk)
    with pytest.raises(ValueError, match=rf"prepared for {field}=.*get_batch_decode_metadata_mla"):
        _run(sample, metadata=metadata)


def test_metadata_from_another_implementation_is_rejected(seed, monkeypatch):
    sample = sparse_sample("s").build()
    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "reference"))
    metadata = DecodeMetadata(2, 1, 4, 64, torch.device("cpu"), "mate", None)
    with pytest.raises(ValueError, match="kind='mate'"):
        _run(sample, metadata=metadata)


def test_metadata_rejects_foreign_objects_and_bad_arguments():
    q = torch.zeros(2, 1, 4, 576, dtype=E4M3)
    lens = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(TypeError, match="query"):
        get_batch_decode_metadata_mla("q", lens, 64)
    with pytest.raises(TypeError, match="for `query`, got None"):
        get_batch_decode_metadata_mla(None, lens, 64)
    with pytest.raises(TypeError, match="for `seq_lens`, got None"):
        get_batch_decode_metadata_mla(q, None, 64)
    with pytest.raises(ValueError, match="seq_lens"):
        get_batch_decode_metadata_mla(q, lens.long(), 64)
    with pytest.raises(ValueError, match="sparse_mla_top_k"):
        get_batch_decode_metadata_mla(q, lens, -4)
    with pytest.raises(RuntimeError, match="multiple of 4"):  # as the decode would say
        get_batch_decode_metadata_mla(q, lens, 6)
    with pytest.raises(ValueError, match=r"shape \(2,\).*`seq_lens`"):
        get_batch_decode_metadata_mla(q, lens[:1], 64)
    for per_token in (lens[:, None], lens):  # the packed form's per-token lengths, both shapes
        get_batch_decode_metadata_mla(q, per_token, 64)
    assert get_batch_decode_metadata_mla(q, lens, 0).plan is None  # dense: nothing to plan


def test_dense_metadata_is_checked_too(seed):
    sample = dense_sample("d").build()
    metadata = get_batch_decode_metadata_mla(sample.kwargs["query"], sample.kwargs["seq_lens"], 0)
    assert_decode_close(_run(sample, metadata=metadata), None, sample.oracle()[0], None)
    with pytest.raises(ValueError, match="topk"):
        _run(
            sample,
            metadata=get_batch_decode_metadata_mla(sample.kwargs["query"], sample.kwargs["seq_lens"], 64),
        )


# ------------------------------------------------------------------- compact var-Q, native dims
def _compact_case(sparse: bool, dtype=torch.bfloat16):
    heads, page_size, topk = 4, 32, 64
    q_lens = [2, 1, 3]
    cum = torch.tensor([0, 2, 3, 6], dtype=torch.int32)
    seq_lens = torch.tensor([70, 5, 64], dtype=torch.int32)
    num_pages = 12
    kv = quantized((num_pages, page_size, 576), dtype)
    query = quantized((6, heads, 576), dtype)
    if sparse:
        tables = torch.randint(-1, num_pages * page_size, (6, topk), dtype=torch.int32)
    else:
        tables = torch.stack([torch.randperm(num_pages)[:4] for _ in range(3)]).int()
    candidates = []
    for b, q_len in enumerate(q_lens):
        for t in range(q_len):
            row = int(cum[b]) + t
            length = torch.tensor([int(seq_lens[b]) - (q_len - 1 - t)], dtype=torch.int32)
            if sparse:
                candidates.append(
                    sparse_candidates(tables[row].view(1, 1, -1), length, num_pages * page_size)[0][0]
                )
            else:
                candidates.append(dense_candidates(tables[b : b + 1], length, 1, page_size, num_pages)[0][0])
    expected = decode_oracle(
        query.view(6, 1, heads, 576), kv.reshape(-1, 576), [[c] for c in candidates], 0.1, 1.0, None, 512
    )
    kwargs = dict(query=query, kv_cache=kv, workspace_buffer=torch.zeros(8, dtype=torch.int8), qk_nope_head_dim=128,
                  kv_lora_rank=512, qk_rope_head_dim=64, block_tables=tables, seq_lens=seq_lens, max_seq_len=70,
                  sparse_mla_top_k=topk if sparse else 0, bmm1_scale=0.1, cum_seq_lens_q=cum, max_q_len=3,
                  return_lse=True)  # fmt: skip
    return kwargs, expected


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_compact_var_q(sparse, seed):
    kwargs, (expected_out, expected_lse) = _compact_case(sparse)
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**kwargs)
    assert out.shape == (6, 4, 512) and lse.shape == (6, 4)
    assert_decode_close(out.unsqueeze(1), lse.unsqueeze(1), expected_out, expected_lse)


def test_native_nope_dims_with_top_k_lens(seed):
    tokens, q_len, heads, topk = 2, 2, 4, 64
    kv = quantized((4, 32, 512), torch.bfloat16)
    query = quantized((tokens, q_len, heads, 512), torch.bfloat16)
    indices = torch.randint(-1, 128, (tokens, q_len, topk), dtype=torch.int32)
    top_k_lens = torch.tensor([64, 10, 0, 33], dtype=torch.int32)
    out = trtllm_batch_decode_with_kv_cache_mla(
        query, kv, torch.zeros(8, dtype=torch.int8), 256, 512, 0, indices, torch.full((tokens,), 500, dtype=torch.int32),
        500, topk, bmm1_scale=0.1, sparse_mla_top_k_lens=top_k_lens,
    )  # fmt: skip
    candidates = [
        [
            [int(i) for i in indices[b, t, : int(top_k_lens[b * q_len + t])] if 0 <= i < 128]
            for t in range(q_len)
        ]
        for b in range(tokens)
    ]
    expected, _ = decode_oracle(query, kv.reshape(-1, 512), candidates, 0.1, 1.0, None, 512)
    assert_decode_close(out, None, expected, None)


# ----------------------------------------------------------------------------------- hypothesis
@given(
    batch=st.integers(1, 3),
    q_len=st.integers(1, 3),
    heads=st.sampled_from([1, 2, 5, 16]),
    topk=st.sampled_from([4, 8, 60, 64, 132]),
    page_size=st.sampled_from([1, 16, 64]),
    fp8=st.booleans(),
    full_lengths=st.booleans(),
    cache_4d=st.booleans(),
)
def test_hypothesis_sparse_shapes(batch, q_len, heads, topk, page_size, fp8, full_lengths, cache_4d):
    torch.manual_seed(batch * 1000 + q_len * 100 + heads * 10 + topk)
    dtype = E4M3 if fp8 else torch.bfloat16
    num_pages = max(1, 300 // page_size)
    slots = num_pages * page_size
    kv = quantized((num_pages, page_size, 576), dtype)
    query = quantized((batch, q_len, heads, 576), dtype)
    indices = torch.randint(-2, slots + 2, (batch, q_len, topk), dtype=torch.int32)
    high = topk + 30 if full_lengths else topk + 1
    seq_lens = torch.randint(0, high, (batch,), dtype=torch.int32)
    out, lse = trtllm_batch_decode_with_kv_cache_mla(
        query, kv.unsqueeze(1) if cache_4d else kv, torch.zeros(8, dtype=torch.int8), 128, 512, 64, indices,
        seq_lens, 1, topk, bmm1_scale=0.07, bmm2_scale=1.3, return_lse=True,
    )  # fmt: skip
    expected = decode_oracle(
        query, kv.reshape(-1, 576), sparse_candidates(indices, seq_lens, slots), 0.07, 1.3, None, 512
    )
    assert_decode_close(out, lse.view(batch, q_len, heads), *expected)


def test_docstring_examples_run_on_cpu():
    import doctest

    import flashinfer.mla._metadata
    import flashinfer.mla._rope

    for module in (flashinfer.mla._rope, flashinfer.mla._metadata):
        result = doctest.testmod(module)
        assert result.attempted and not result.failed, module.__name__


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_reference_online_softmax_across_chunks(kind, monkeypatch, seed):
    # Tiny chunks force many query-row and key chunks through the online softmax.
    from flashinfer.mla import _reference

    monkeypatch.setattr(_reference, "_KEYS_PER_CHUNK", 7)
    monkeypatch.setattr(_reference, "_CHUNK_BYTES", 1)
    if kind == "sparse":
        sample = sparse_sample("s", q_len=2, heads=3, sinks=True, lse="3d", seq="counts").build()
    else:
        sample = dense_sample("d", q_len=2, sinks=True, lse="3d", dtype=E4M3).build()
    out, lse = _run(sample)
    assert_decode_close(out, lse, *sample.oracle())


def test_module_surfaces():
    import flashinfer.decode
    import flashinfer.mla
    import flashinfer.rope

    assert flashinfer.rope.__all__ == ["mla_rope_quantize_fp8", "rope_quantize_fp8"]
    assert set(flashinfer.decode.__all__) == {
        "DecodeMetadata", "get_batch_decode_metadata_mla", "trtllm_batch_decode_with_kv_cache_mla"
    }  # fmt: skip
    for name in flashinfer.mla.__all__:
        assert hasattr(flashinfer.mla, name)
    dims = flashinfer.mla.deepseek_mla_dimensions
    assert (dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.v_head_dim, dims.kv_lora_rank) == (
        128,
        64,
        128,
        512,
    )
    assert flashinfer.mla.nope_mla_dimensions.qk_rope_head_dim == 0
    assert [d.num_heads for d in flashinfer.mla.supported_mla_layer_dimensions] == [128, 64, 32]


def test_dense_cache_with_padded_page_stride(seed):
    # Pages spaced further apart than page_size rows: fine for dense decode (no flat view needed).
    sample = dense_sample("d", page_size=32, cache_4d=False).build()
    kv = sample.kwargs["kv_cache"]
    padded = torch.full((kv.shape[0], 40, 576), float("nan"), dtype=kv.dtype)
    padded[:, :32] = kv
    out = _run(sample, kv_cache=padded[:, :32])
    assert_decode_close(out, None, sample.oracle()[0], None)


def _on_meta(x):
    if isinstance(x, torch.Tensor):
        return x.to("meta")
    return [_on_meta(v) for v in x] if isinstance(x, list) else x


@pytest.mark.parametrize("case", ["sparse", "dense", "compact_sparse", "compact_dense", "rope"])
def test_no_host_reads_of_device_values(case, seed):
    # Meta tensors have no values: any .item()/.cpu()/Python branch on data would raise, so a run
    # on "meta" proves the API layer and the reference are free of host syncs (graph-capturable).
    from mla_ops import rope_kwargs

    if case == "rope":
        kwargs, _ = rope_kwargs(4, 2, 1, 64, 512, k_2d=True)
        fn = flashinfer.rope.rope_quantize_fp8
    elif case.startswith("compact"):
        kwargs, _ = _compact_case(sparse=case == "compact_sparse")
        fn = trtllm_batch_decode_with_kv_cache_mla
    else:
        build = sparse_sample if case == "sparse" else dense_sample
        kwargs = build("s", q_len=2, sinks=True, lse="3d", bmm2=torch.tensor(0.5)).build().kwargs
        fn = trtllm_batch_decode_with_kv_cache_mla
    result = fn(**{k: _on_meta(v) for k, v in kwargs.items()})
    assert all(r.device.type == "meta" for r in (result if isinstance(result, tuple) else (result,)))
