"""The MATE adapter against the float64 stand-in: argument mapping, zero copy, MATE detection.

The stand-in (tests/standin/mate) has MATE 0.2.6's signatures and argument rules; nothing here
says how MATE behaves on MUSA hardware. "Zero copy" is checked by comparing the storage and data
pointers of what MATE received with the caller's tensors.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from oracles import (
    BF16,
    E4M3,
    FP16,
    FP32,
    assert_matches,
    fp8,
    oracle_bmm,
    oracle_groupwise,
    poisoned,
    pow2,
)

import flashinfer.gemm as G
from flashinfer.utils import LibraryError


def same_memory(x, y):
    return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr() and x.data_ptr() == y.data_ptr()


def only_call(mate, name):
    calls = [args for called, args in mate.CALLS if called == name]
    assert len(calls) == 1, [c for c, _ in mate.CALLS]
    return calls[0]


# ----------------------------------------------------------------------------- bmm_bf16


@pytest.mark.parametrize("layout", ["col", "row"])
def test_bmm_bf16_maps_b_layout_to_trans_b_without_copies(mate_standin, seed, layout):
    A = torch.randn(2, 5, 64).to(BF16)
    W = torch.randn(2, 12, 64).to(BF16)
    B = W.transpose(-2, -1) if layout == "col" else torch.randn(2, 64, 12).to(BF16)
    out = poisoned(2, 5, 12, dtype=BF16)
    G.bmm_bf16(A, B, out=out, backend="cudnn")
    call = only_call(mate_standin, "gemm.bmm")
    assert call["a"] is A and call["out"] is out
    assert call["trans_b"] is (layout == "col")
    assert same_memory(call["b"], W if layout == "col" else B)
    assert call["backend"] == "auto" and call["out_dtype"] == BF16
    assert call["scale_a"] is None and call["recipe_a"] is None
    assert_matches(out, *oracle_bmm(A, B))


def test_bmm_bf16_fp16_output_from_bf16_goes_through_an_fp32_scratch(mate_standin, seed):
    A, B = torch.randn(1, 4, 32).to(BF16), torch.randn(1, 8, 32).to(BF16).transpose(-2, -1)
    out = poisoned(1, 4, 8, dtype=FP16)
    G.bmm_bf16(A, B, out=out, out_dtype=FP16)
    call = only_call(mate_standin, "gemm.bmm")
    assert call["out"] is not out and call["out"].dtype == FP32 and call["out_dtype"] == FP32
    assert_matches(out, *oracle_bmm(A, B))


def test_strided_out_goes_through_a_scratch(mate_standin, seed):
    A, B = fp8(2, 4, 64), fp8(2, 8, 64).transpose(-2, -1)
    base = torch.full((2, 4, 16), float("nan"), dtype=BF16)
    out = base[..., ::2]
    s = pow2(1)
    assert G.bmm_fp8(A, B, s, s, BF16, out) is out
    call = only_call(mate_standin, "gemm.bmm")
    assert call["out"] is not out and call["out"].is_contiguous()
    assert_matches(out, *oracle_bmm(A, B, s, s))
    assert base[..., 1::2].isnan().all()


# ----------------------------------------------------------------------------- bmm_fp8


@pytest.mark.parametrize("scale_shape", [(), (1,)])
def test_bmm_fp8_per_tensor_scales_are_0_dim_views(mate_standin, seed, scale_shape):
    A, W = fp8(3, 7, 64), fp8(3, 9, 64, dtype=torch.float8_e5m2)
    B = W.transpose(-2, -1)
    sa, sb = pow2(1).reshape(scale_shape), pow2(1).reshape(scale_shape)
    out = poisoned(3, 7, 9, dtype=FP16)
    G.bmm_fp8(A, B, sa, sb, FP16, out, "cublas")
    call = only_call(mate_standin, "gemm.bmm")
    assert call["scale_a"].dim() == 0 and same_memory(call["scale_a"], sa)
    assert call["scale_b"].dim() == 0 and same_memory(call["scale_b"], sb)
    assert call["recipe_a"] == (-1, -1) and call["recipe_b"] == (-1, -1)
    assert call["a"] is A and same_memory(call["b"], W) and call["trans_b"] is True
    assert call["out"] is out and call["out_dtype"] == FP16 and call["backend"] == "auto"
    assert_matches(out, *oracle_bmm(A, B, sa.reshape(()), sb.reshape(())))


@pytest.mark.parametrize("layout", ["col", "row"])
def test_bmm_fp8_channel_scales(mate_standin, seed, layout):
    A = fp8(2, 6, 64)
    B = fp8(2, 10, 64).transpose(-2, -1) if layout == "col" else fp8(2, 64, 10)
    sa, sb = pow2(2, 1, 6), pow2(2, 10, 1)  # (b, 1, m) and (b, n, 1)
    out = poisoned(2, 6, 10, dtype=BF16)
    G.bmm_fp8(A, B, sa, sb, BF16, out)
    call = only_call(mate_standin, "gemm.bmm")
    assert call["recipe_a"] == (1, -1) and call["recipe_b"] == (1, -1)
    assert call["scale_a"].shape == (2, 6, 1) and same_memory(call["scale_a"], sa)
    assert call["scale_b"].shape == (2, 10, 1) and same_memory(call["scale_b"], sb)
    assert call["fixed_scale_layout"] is (None if layout == "col" else True)
    assert_matches(out, *oracle_bmm(A, B, sa.transpose(1, 2), sb.transpose(1, 2)))


def test_bmm_fp8_scalar_a_with_channel_b_expands_a(mate_standin, seed):
    """MATE has no tensor/channel recipe: the scalar A scale becomes a (b, m, 1) tensor."""
    A, B = fp8(2, 6, 64), fp8(2, 10, 64).transpose(-2, -1)
    sa, sb = pow2(1), pow2(2, 1, 10)
    out = G.bmm_fp8(A, B, sa, sb, BF16)
    call = only_call(mate_standin, "gemm.bmm")
    assert call["recipe_a"] == (1, -1) and call["scale_a"].shape == (2, 6, 1)
    assert_matches(out, *oracle_bmm(A, B, sa.reshape(()), sb))


# ----------------------------------------------------------------------------- groupwise


@pytest.mark.parametrize("mode", ["K", "MN"])
def test_groupwise_maps_scales_by_storage_order(mate_standin, seed, mode):
    m, n, k = 6, 256, 384
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 3), pow2(2, 3)
    stored_a, stored_b = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
    out = poisoned(m, n, dtype=BF16)
    G.gemm_fp8_nt_groupwise(a, b, stored_a, stored_b, mode, out=out)
    call = only_call(mate_standin, "gemm.bmm")
    assert same_memory(call["a"], a) and same_memory(call["b"], b) and same_memory(call["out"], out)
    assert same_memory(call["scale_a"], stored_a) and same_memory(call["scale_b"], stored_b)
    assert call["scale_a"].shape == (1, *stored_a.shape)
    assert call["recipe_a"] == (1, 128) and call["recipe_b"] == (128, 128) and call["trans_b"] is True
    assert call["fixed_scale_layout"] is (True if mode == "MN" else None)
    assert call["out_dtype"] == BF16 and call["backend"] == "auto" and call["scale_out"] is None
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))


def test_groupwise_square_mn_scales_tie_broken_by_fixed_scale_layout(mate_standin, seed):
    m, n, k = 2, 256, 256  # a_scale (2, 2) and b_scale (2, 2): both orders match the shapes
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 2), pow2(2, 2)
    out = G.gemm_fp8_nt_groupwise(a, b, sa.t().contiguous(), sb.t().contiguous(), "MN")
    assert only_call(mate_standin, "gemm.bmm")["fixed_scale_layout"] is True
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))


def test_groupwise_trtllm_makes_the_mn_a_scale_k_major(mate_standin, seed):
    """One layout flag covers both scales: trtllm's MN a_scale with K b_scale needs one small copy."""
    m, n, k = 5, 128, 256
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 2), pow2(1, 2)
    x_scale = sa.t().contiguous().t()
    out = G.gemm_fp8_nt_groupwise(a, b, x_scale, sb, backend="trtllm")
    call = only_call(mate_standin, "gemm.bmm")
    assert call["scale_a"].is_contiguous() and call["scale_a"].shape == (1, m, 2)
    assert same_memory(call["scale_b"], sb) and call["fixed_scale_layout"] is None
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))


def test_groupwise_128_row_blocks_expand_a_scales_per_row(mate_standin, seed):
    m, n, k = 130, 128, 256
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(2, 2), pow2(1, 2)
    out = G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", scale_granularity_mnk=(128, 128, 128))
    call = only_call(mate_standin, "gemm.bmm")
    assert call["scale_a"].shape == (1, m, 2) and call["recipe_a"] == (1, 128)
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 128, 128, 128))


@pytest.mark.parametrize("mode", ["K", "MN"])
def test_groupwise_fp8_output_uses_scale_out_with_k_major_scales(mate_standin, seed, mode):
    m, n, k = 3, 200, 256
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 2), pow2(2, 2)
    stored_a, stored_b = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
    output_scale = torch.empty(m, 2)
    out = G.gemm_fp8_nt_groupwise(a, b, stored_a, stored_b, mode, backend="mubin", output_scale=output_scale)
    call = only_call(mate_standin, "gemm.bmm")
    assert same_memory(call["scale_out"], output_scale) and call["scale_out"].shape == (1, m, 2)
    assert call["backend"] == "auto" and call["out_dtype"] == E4M3 and not call["fixed_scale_layout"]
    assert same_memory(call["out"], out)
    from oracles import assert_fp8_output

    assert_fp8_output(out, output_scale, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))


# ----------------------------------------------------------------------------- grouped


def test_contiguous_grouped_call_and_padding_rows(mate_standin, seed):
    groups, n, k = 2, 128, 256
    ids = torch.tensor([0] * 128 + [1] * 100 + [-1] * 20 + [7] * 8, dtype=torch.int32)
    m = ids.numel()
    a, b = fp8(m, k), fp8(groups, n, k)
    sa, sb = pow2(m, 2), pow2(groups, 1, 2)
    out = poisoned(m, n, dtype=BF16)
    G.group_deepgemm_fp8_nt_groupwise(a, b, sa, sb, ids, out=out)
    call = only_call(mate_standin, "gemm.ragged_m_moe_gemm_8bit")
    assert call["input_a"][0] is a and same_memory(call["input_a"][1], sa)
    assert call["input_b"][0] is b and same_memory(call["input_b"][1], sb)
    sent = call["ragged_tokens_info"]
    assert sent.dtype == torch.int32 and sent.tolist() == [0] * 128 + [1] * 100 + [-1] * 28
    assert call["out"] is not out and call["gemm_mode"] == "per_token" and call["alignment_m"] == 128
    assert tuple(call["scale_granularity_mnk"]) == (1, 128, 128) and call["backend"] == "auto"
    assert out[228:].isnan().all(), "padding rows must keep the caller's values"
    for g, rows in ((0, slice(0, 128)), (1, slice(128, 228))):
        assert_matches(out[rows], *oracle_groupwise(a[rows], b[g], sa[rows], sb[g], 1, 128, 128))


def test_contiguous_grouped_mn_major_a_scale_is_made_k_major(mate_standin, seed):
    m, n, k = 128, 128, 256
    a, b = fp8(m, k), fp8(1, n, k)
    sa = pow2(m, 2)
    a_scale = sa.t().contiguous().t()
    out = G.group_deepgemm_fp8_nt_groupwise(a, b, a_scale, pow2(1, 1, 2), torch.zeros(m, dtype=torch.int32))
    sent = only_call(mate_standin, "gemm.ragged_m_moe_gemm_8bit")["input_a"][1]
    assert sent.is_contiguous() and torch.equal(sent, sa)
    assert out.isfinite().all()


def test_masked_grouped_call_keeps_rows_past_masked_m(mate_standin, seed):
    groups, m, n, k = 2, 40, 128, 256
    a, b = fp8(groups, m, k), fp8(groups, n, k)
    sa = pow2(groups, 2, m).transpose(1, 2)  # MN-major storage, passed as is
    sb = pow2(groups, 1, 2)
    masked = torch.tensor([13, 99], dtype=torch.int32)
    out = poisoned(groups, m, n, dtype=BF16)
    G.batch_deepgemm_fp8_nt_groupwise(a, b, sa, sb, masked, 20, out=out)
    call = only_call(mate_standin, "gemm.masked_moe_gemm_8bit")
    assert call["input_a"][0] is a and same_memory(call["input_a"][1], sa)
    assert call["input_b"][0] is b and same_memory(call["input_b"][1], sb)
    assert call["masked_tokens_info"].tolist() == [13, 40] and call["expect_tokens"] == 20
    assert call["backend"] == "auto" and call["enable_overlap"] is False
    assert out[0, 13:].isnan().all()
    assert_matches(out[0, :13], *oracle_groupwise(a[0, :13], b[0], sa[0, :13], sb[0], 1, 128, 128))
    assert_matches(out[1], *oracle_groupwise(a[1], b[1], sa[1], sb[1], 1, 128, 128))


# ----------------------------------------------------------------------------- finding MATE


def _every_api_once():
    a, b = fp8(2, 256), fp8(128, 256)
    yield lambda: G.bmm_bf16(torch.randn(1, 2, 8).to(BF16), torch.randn(1, 8, 4).to(BF16))
    yield lambda: G.bmm_fp8(fp8(1, 2, 8), fp8(1, 8, 4), pow2(1), pow2(1), BF16)
    yield lambda: G.gemm_fp8_nt_groupwise(a, b, pow2(2, 2), pow2(1, 2), "K")
    yield lambda: G.group_deepgemm_fp8_nt_groupwise(
        fp8(128, 128), fp8(1, 128, 128), pow2(128, 1), pow2(1, 1, 1), torch.zeros(128, dtype=torch.int32)
    )
    yield lambda: G.batch_deepgemm_fp8_nt_groupwise(
        fp8(1, 4, 128),
        fp8(1, 128, 128),
        pow2(1, 4, 1),
        pow2(1, 1, 1),
        torch.tensor([2], dtype=torch.int32),
        2,
    )


def test_missing_mate_raises_library_error(no_mate):
    for call in _every_api_once():
        with pytest.raises(LibraryError, match="MATE, which is not installed"):
            call()


def test_unrelated_mate_raises_a_different_library_error(unrelated_mate):
    for call in _every_api_once():
        with pytest.raises(LibraryError, match="unrelated project"):
            call()


@pytest.fixture
def mate_v022(mate_standin, monkeypatch):
    """The stand-in reshaped as MATE 0.2.2: separate GEMM functions, no unified bmm, no `backend` on grouped."""
    import mate_v022 as legacy

    from flashinfer._core import mate as mate_loader

    gemm = importlib.import_module("mate.gemm")
    monkeypatch.delattr(gemm, "bmm")
    for name in ("bmm_fp16", "bmm_fp8", "gemm_fp8_nt_groupwise"):
        monkeypatch.setattr(gemm, name, getattr(legacy, name), raising=False)
    for name in ("ragged_m_moe_gemm_8bit", "masked_moe_gemm_8bit"):
        monkeypatch.setattr(gemm, name, legacy.without_backend(getattr(gemm, name)))
    mate_loader.reset_cache()
    return mate_standin


def test_mate_022_bmm_bf16_row_major_b_is_made_column_major(mate_v022, seed):
    A, B = torch.randn(2, 3, 32).to(BF16), torch.randn(2, 32, 6).to(BF16)
    out = G.bmm_bf16(A, B, out_dtype=FP32)
    call = only_call(mate_v022, "gemm.bmm_fp16")
    assert call["b"].stride(1) == 1 and call["out_dtype"] == FP32 and call["backend"] == "auto"
    assert_matches(out, *oracle_bmm(A, B))


def test_mate_022_bmm_fp8(mate_v022, seed):
    A, B = fp8(2, 3, 64), fp8(2, 6, 64).transpose(-2, -1)
    sa, sb = pow2(1), pow2(1)
    out = G.bmm_fp8(A, B, sa, sb, BF16)
    call = only_call(mate_v022, "gemm.bmm_fp8")
    assert call["scale_granularity_mnk"] == (-1, -1, -1) and call["a_scale"].dim() == 0
    assert call["b"].data_ptr() == B.data_ptr() and call["a"] is A
    assert_matches(out, *oracle_bmm(A, B, sa, sb))
    sa_rows = pow2(2, 3, 1)
    out = G.bmm_fp8(A, B, sa_rows, sb, FP16)
    assert mate_v022.CALLS[-1][1]["scale_granularity_mnk"] == (1, -1, -1)
    assert_matches(out, *oracle_bmm(A, B, sa_rows, sb))


def test_mate_022_channel_b_scales_fall_back_to_the_reference(mate_v022, seed):
    A, B = fp8(2, 3, 64), fp8(2, 6, 64).transpose(-2, -1)
    sa, sb = pow2(1), pow2(2, 1, 6)
    out = G.bmm_fp8(A, B, sa, sb, BF16)
    assert mate_v022.CALLS == []
    assert_matches(out, *oracle_bmm(A, B, sa, sb))


@pytest.mark.parametrize("output_scale", [False, True])
def test_mate_022_groupwise(mate_v022, seed, output_scale):
    m, n, k = 4, 256, 256
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 2), pow2(2, 2)
    scale = torch.empty(m, 2) if output_scale else None
    out = G.gemm_fp8_nt_groupwise(
        a, b, sa.t().contiguous(), sb.t().contiguous(), "MN", mma_sm=2, output_scale=scale
    )
    call = only_call(mate_v022, "gemm.gemm_fp8_nt_groupwise")
    assert call["scale_major_mode"] == "K" and call["mma_sm"] is None
    assert call["backend"] == ("mubin" if output_scale else "auto")
    ref = oracle_groupwise(a, b, sa, sb, 1, 128, 128)
    if output_scale:
        from oracles import assert_fp8_output

        assert_fp8_output(out, scale, *ref)
    else:
        assert_matches(out, *ref)


def test_mate_022_grouped_calls_have_no_backend(mate_v022, seed):
    ids = torch.zeros(128, dtype=torch.int32)
    a, b, sa, sb = fp8(128, 128), fp8(1, 128, 128), pow2(128, 1), pow2(1, 1, 1)
    out = G.group_deepgemm_fp8_nt_groupwise(a, b, sa, sb, ids)  # the 0.2.2 stand-in raises on `backend`
    only_call(mate_v022, "gemm.ragged_m_moe_gemm_8bit")
    assert_matches(out, *oracle_groupwise(a, b[0], sa, sb[0], 1, 128, 128))


def test_mate_without_any_gemm_function_says_what_to_install(mate_standin, monkeypatch):
    from flashinfer._core import mate as mate_loader

    monkeypatch.delattr(importlib.import_module("mate.gemm"), "bmm")
    mate_loader.reset_cache()
    with pytest.raises(LibraryError, match=r"mate\.gemm\.bmm_fp8.*install MATE 0\.2\.2 or newer"):
        G.bmm_fp8(fp8(1, 2, 8), fp8(1, 8, 4), pow2(1), pow2(1), BF16)


def test_force_reference_bypasses_mate(mate_standin, monkeypatch, seed):
    from flashinfer._core import dispatch

    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING._replace(force_reference=True))
    A, B = fp8(1, 3, 32), fp8(1, 4, 32).transpose(-2, -1)
    s = pow2(1)
    out = G.bmm_fp8(A, B, s, s, BF16)
    assert mate_standin.CALLS == []
    assert_matches(out, *oracle_bmm(A, B, s, s))
