"""The MATE adapter (flashinfer.mla._mate) against the MATE 0.2.6 stand-in (tests/standin/mate).

The stand-in enforces MATE's documented rules (FP8 only, contiguity, topk % 64, head rules,
float scales, per-batch length shared by all q tokens, natural-log LSE, ignored sinks) and
records every call, so these tests check how the adapter maps FlashInfer's contract onto MATE:
flattening for the per-token limit, padding, LSE base, sink correction, scale handling,
metadata, fallbacks, and that the caller's tensors reach MATE as views, never copies.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mla_ops import rope_kwargs, sparse_sample
from oracles import E4M3, E5M2, assert_decode_close, decode_oracle, quantized, sparse_candidates

from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
from flashinfer.rope import rope_quantize_fp8
from flashinfer.utils import LibraryError


def _calls(mate, name):
    return [args for called, args in mate.CALLS if called == name]


def test_sparse_decode_is_flattened_without_copies(mate_standin, seed):
    sample = sparse_sample(
        "s", batch=2, q_len=3, heads=16, topk=128, seq="full", out="contiguous", lse="2d"
    ).build()
    kwargs = sample.kwargs
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**kwargs)
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    rows = 6
    assert (
        call["query"].shape == (rows, 1, 16, 576) and call["query"].data_ptr() == kwargs["query"].data_ptr()
    )
    assert call["kv_cache"].data_ptr() == kwargs["kv_cache"].data_ptr() and call["kv_cache"].shape[-1] == 576
    assert call["block_tables"].shape == (rows, 1, 128)
    assert call["block_tables"].data_ptr() == kwargs["block_tables"].data_ptr()
    assert call["out"].data_ptr() == out.data_ptr() and call["lse"].data_ptr() == lse.data_ptr()
    back = torch.tensor([2, 1, 0], dtype=torch.int32)
    assert torch.equal(call["seq_lens"], (kwargs["seq_lens"][:, None] - back).reshape(rows))
    assert (call["kv_lora_rank"], call["qk_rope_head_dim"], call["sparse_mla_top_k"]) == (512, 64, 128)
    assert call["bmm1_scale"] == 0.08 and call["backend"] == "auto" and call["return_lse"]
    assert call["metadata"].config == (rows, 1, 16, 128)
    expected_out, expected_lse = sample.oracle()
    assert_decode_close(out, lse.view(2, 3, 16), expected_out, expected_lse)


def test_topk_padded_to_64_with_minus_one(mate_standin, seed):
    sample = sparse_sample("s", topk=68, q_len=2, lse="return").build()
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    assert call["sparse_mla_top_k"] == 128 and call["block_tables"].shape == (4, 1, 128)
    assert torch.equal(call["block_tables"][..., :68], sample.kwargs["block_tables"].view(4, 1, 68))
    assert (call["block_tables"][..., 68:] == -1).all()
    assert_decode_close(out, lse.view(2, 2, 4), *sample.oracle())


@pytest.mark.parametrize("heads", [80, 128])
def test_heads_padded_only_when_needed(mate_standin, heads, seed):
    sample = sparse_sample("s", heads=heads, batch=1, lse="return").build()
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    assert call["query"].shape[2] == 128
    assert (call["query"].data_ptr() == sample.kwargs["query"].data_ptr()) == (heads == 128)
    assert_decode_close(out, lse.view(1, 1, heads), *sample.oracle())


def test_lse_converted_to_base_2_and_empty_rows(mate_standin, seed):
    sample = sparse_sample("s", seq="counts", lse="3d").build()
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    expected_out, expected_lse = sample.oracle()
    assert_decode_close(out, lse, expected_out, expected_lse)
    assert torch.isinf(lse[-1]).all() and (lse[-1] > 0).all() and (out[-1] == 0).all()


def test_sinks_corrected_after_the_kernel(mate_standin, seed):
    sample = sparse_sample("s", heads=8, sinks=True, q_len=2).build()
    out = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    assert (
        call["sinks"] is None and call["return_lse"] and call["lse"] is not None
    )  # LSE requested for the gate
    assert_decode_close(out, None, sample.oracle()[0], None)


def test_scratch_buffers_are_float32_whatever_the_default_dtype(mate_standin, seed):
    sample = sparse_sample("s", heads=8, sinks=True).build()  # padded heads: scratch LSE and sinks
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    finally:
        torch.set_default_dtype(default)
    assert_decode_close(out, None, sample.oracle()[0], None)


@pytest.mark.parametrize("shape", [(1,), (), (1, 1, 1, 1)], ids=["1", "0-d", "rank4"])
def test_tensor_bmm2_applied_after_the_kernel(mate_standin, shape, seed):
    sample = sparse_sample("s", bmm2=torch.full(shape, 0.5)).build()
    out = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    assert call["bmm2_scale"] == 1.0
    assert_decode_close(out, None, sample.oracle()[0], None)


@pytest.mark.parametrize(
    "case", ["tensor_bmm1", "bf16", "dense"], ids=["tensor_bmm1_no_item", "bf16_query", "dense_mode"]
)
def test_reference_on_the_device_when_mate_cannot(mate_standin, case, seed):
    from mla_ops import dense_sample

    if case == "dense":
        sample = dense_sample("d", dtype=E4M3).build()
    else:
        sample = sparse_sample("s", dtype=torch.bfloat16 if case == "bf16" else E4M3,
                               bmm1=torch.tensor([0.08]) if case == "tensor_bmm1" else 0.08).build()  # fmt: skip
    out = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    assert not _calls(mate_standin, "sparse_mla_fp8_decode")
    assert_decode_close(out, None, sample.oracle()[0], None)


def test_strided_out_goes_through_a_scratch(mate_standin, seed):
    sample = sparse_sample("s", out="strided", lse="strided").build()
    out, lse = trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    assert out is sample.kwargs["out"] and lse is sample.kwargs["lse"]
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    assert call["out"].is_contiguous() and call["out"].data_ptr() != out.data_ptr()
    assert_decode_close(out, lse.view(2, 1, 4), *sample.oracle())


def test_v0617_keywords_are_never_forwarded(mate_standin, seed):
    sample = sparse_sample("s").build()
    out = trtllm_batch_decode_with_kv_cache_mla(
        **sample.kwargs, enable_dcp=False, cp_world=1, cp_rank=0, causal_seqlens_kv_global=None,
        sparse_mla_top_k_lens=None, use_fp16_softmax=False, backend="trtllm-gen",
    )  # fmt: skip
    (call,) = _calls(mate_standin, "sparse_mla_fp8_decode")
    assert call["backend"] == "auto"
    assert_decode_close(out, None, sample.oracle()[0], None)


def test_metadata_is_full_topk_and_survives_growing_lengths(mate_standin, seed):
    sample = sparse_sample("s", q_len=2, topk=128, seq="counts", lse="return").build()
    kwargs = sample.kwargs
    short = torch.ones_like(kwargs["seq_lens"])
    metadata = get_batch_decode_metadata_mla(kwargs["query"], short, 128)
    (built,) = _calls(mate_standin, "get_batch_decode_metadata_mla")
    assert built["query"].shape == (4, 1, 4, 576) and (built["seq_lens"] == 128).all()
    (dispatched,) = _calls(mate_standin, "_dispatch_mla_metadata")
    assert dispatched["bs"] == 4
    mate_standin.reset()
    for grow in (0, 40, 100):  # lengths far beyond those the metadata was "prepared" with
        seq_lens = (kwargs["seq_lens"] + grow).to(torch.int32)
        out, lse = trtllm_batch_decode_with_kv_cache_mla(
            **{**kwargs, "seq_lens": seq_lens}, metadata=metadata
        )
        slots = kwargs["kv_cache"].shape[0] * kwargs["kv_cache"].shape[2]
        expected = decode_oracle(kwargs["query"], kwargs["kv_cache"].reshape(-1, 576),
                                 sparse_candidates(kwargs["block_tables"], seq_lens, slots), 0.08, 1.0, None, 512)  # fmt: skip
        assert_decode_close(out, lse.view(2, 2, 4), *expected)
    assert not _calls(mate_standin, "get_batch_decode_metadata_mla")  # reused, never rebuilt
    assert all(c["metadata"] is metadata.plan for c in _calls(mate_standin, "sparse_mla_fp8_decode"))


def test_stale_short_schedule_would_be_wrong(mate_standin, seed):
    # The hazard the full-top-k plan avoids: MATE metadata from short lengths skips keys.
    import mate.sparse_mla_interface as interface

    sample = sparse_sample("s", topk=128, seq="full").build()
    kwargs = sample.kwargs
    flat_query = kwargs["query"].view(2, 1, 4, 576)
    stale = interface.get_batch_decode_metadata_mla(flat_query, torch.ones(2, dtype=torch.int32), 128)
    out = interface.sparse_mla_fp8_decode(
        flat_query, kwargs["kv_cache"], None, 128, 512, 64, kwargs["block_tables"], kwargs["seq_lens"], 128,
        sparse_mla_top_k=128, bmm1_scale=0.08, metadata=stale,
    )  # fmt: skip
    assert not torch.allclose(out.double(), sample.oracle()[0], rtol=1e-2, atol=2e-3)


def test_mate_without_the_functions_uses_the_reference(mate_standin, monkeypatch, seed):
    import mate.sparse_mla_interface as interface

    from flashinfer._core import mate as mate_loader

    for name in ("sparse_mla_fp8_decode", "get_batch_decode_metadata_mla", "mla_rope_quantize_fp8"):
        monkeypatch.delattr(interface, name)
    mate_loader.reset_cache()
    sample = sparse_sample("s").build()
    assert_decode_close(
        trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs), None, sample.oracle()[0], None
    )
    kwargs, _ = rope_kwargs(3, 2, 1, 64, 512, k_2d=True)
    rope_quantize_fp8(**kwargs)
    assert not mate_standin.CALLS


@pytest.mark.parametrize("fixture", ["no_mate", "unrelated_mate"])
def test_missing_or_unrelated_mate_raises_library_error(fixture, request, seed):
    request.getfixturevalue(fixture)
    sample = sparse_sample("s").build()
    with pytest.raises(LibraryError, match="MATE"):
        trtllm_batch_decode_with_kv_cache_mla(**sample.kwargs)
    kwargs, _ = rope_kwargs(3, 2, 1, 64, 512, k_2d=True)
    with pytest.raises(LibraryError, match="MATE"):
        rope_quantize_fp8(**kwargs)


# ------------------------------------------------------------------------------------------ RoPE
def test_rope_calls_mate_with_views(mate_standin, seed):
    kwargs, outputs = rope_kwargs(5, 16, 1, 64, 512, k_2d=True, scale_q=0.625, scale_kv=1.75)
    result = rope_quantize_fp8(**kwargs)
    (call,) = _calls(mate_standin, "mla_rope_quantize_fp8")
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
        assert call[name].data_ptr() == kwargs[name].data_ptr(), name
        assert call[name].stride() == kwargs[name].stride(), name
    assert call["quant_scale_q"] == 0.625 and call["quant_scale_kv"] == 1.75
    assert all(r is kwargs[o] for r, o in zip(result, outputs))


@pytest.mark.parametrize(
    "config",
    [dict(in_dtype=torch.float16), dict(out_dtype=E5M2), dict(k_heads=2, k_2d=False), dict(nope_dim=128)],
    ids=["fp16", "e5m2", "gqa_k", "nope128"],
)
def test_rope_outside_mates_kernel_uses_the_reference(mate_standin, config, seed):
    base = dict(nnz=4, q_heads=4, k_heads=1, rope_dim=64, nope_dim=512, k_2d=True)
    kwargs, _ = rope_kwargs(**{**base, **config})
    rope_quantize_fp8(**kwargs)
    assert not _calls(mate_standin, "mla_rope_quantize_fp8")


def test_rope_3d_single_head_k_goes_to_mate(mate_standin, seed):
    kwargs, _ = rope_kwargs(4, 4, 1, 64, 512, k_2d=False)
    rope_quantize_fp8(**kwargs)
    (call,) = _calls(mate_standin, "mla_rope_quantize_fp8")
    assert call["k_rope"].shape == (4, 64)


def test_rope_positions_clamped_for_mate_and_marked_nan(mate_standin, seed):
    kwargs, _ = rope_kwargs(4, 2, 1, 64, 512, k_2d=True, max_pos=16)
    kwargs["pos_ids"] = torch.tensor([3, 16, -2, 15])
    result = rope_quantize_fp8(**kwargs)
    (call,) = _calls(mate_standin, "mla_rope_quantize_fp8")
    assert call["pos_ids"].tolist() == [3, 15, 0, 15]
    for rope_out in result[:2]:
        assert rope_out.float().isnan().flatten(1).all(1).tolist() == [False, True, True, False]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.integers(1, 3),
    q_len=st.integers(1, 3),
    heads=st.sampled_from([1, 3, 16, 64, 72]),
    topk=st.sampled_from([4, 64, 100, 128]),
    sinks=st.booleans(),
    seq_full=st.booleans(),
)
def test_hypothesis_adapter_shapes(mate_standin, batch, q_len, heads, topk, sinks, seq_full):
    torch.manual_seed(batch + 10 * q_len + 100 * heads + topk)
    slots = 256
    kv = quantized((slots // 64, 64, 576), E4M3)
    query = quantized((batch, q_len, heads, 576), E4M3)
    indices = torch.randint(-3, slots + 3, (batch, q_len, topk), dtype=torch.int32)
    seq_lens = torch.randint(0, topk + (40 if seq_full else 1), (batch,), dtype=torch.int32)
    sink_values = torch.randn(heads) if sinks else None
    out, lse = trtllm_batch_decode_with_kv_cache_mla(
        query, kv, torch.zeros(8, dtype=torch.int8), 128, 512, 64, indices, seq_lens, topk, topk,
        bmm1_scale=1 / math.sqrt(192), bmm2_scale=0.9, sinks=sink_values, return_lse=True,
    )  # fmt: skip
    expected = decode_oracle(query, kv.reshape(-1, 576), sparse_candidates(indices, seq_lens, slots),
                             1 / math.sqrt(192), 0.9, sink_values, 512)  # fmt: skip
    assert_decode_close(out, lse.view(batch, q_len, heads), *expected)
