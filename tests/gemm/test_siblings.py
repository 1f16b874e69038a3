"""The sibling GEMM APIs on CPU beyond the op table: ``gemm_fp8_nt_blockscaled``,
``group_gemm_fp8_nt_groupwise``, ``fp8_blockscale_gemm_sm90`` (their samples and error inputs
are rows of ``tests/gemm_ops.py``), and the module-level names FlashInfer's own tests import.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from oracles import (
    BF16,
    E4M3,
    FP32,
    assert_matches,
    blockscale_oracle,
    fp8,
    oracle_segments,
    poisoned,
    pow2,
    quantization_error_bound,
    quantize_oracle,
)
from test_mate_adapter import mate_v022, only_call  # noqa: F401 (the fixture is used by name)

import flashinfer.gemm as G
from flashinfer.gemm import gemm_base

# ----------------------------------------------------------------------------- the surface

# inspect.signature of upstream v0.6.17's functions (flashinfer/gemm/gemm_base.py), annotations dropped
SIGNATURES = {
    "gemm_fp8_nt_blockscaled": "(a, b, a_scale, b_scale, scale_major_mode='MN', mma_sm=1, out=None, out_dtype=None)",
    "group_gemm_fp8_nt_groupwise": "(a, b, a_scale, b_scale, m_indptr, scale_granularity_mnk=(1, 128, 128), "
    "scale_major_mode='MN', mma_sm=1, out=None, out_dtype=None, backend='trtllm')",
    "fp8_blockscale_gemm_sm90": "(input, weight, input_scale=None, weight_scale=None, out=None, out_dtype=None)",
}


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_signature_is_upstreams(name):
    fn = getattr(G, name)
    assert str(inspect.signature(fn)) == SIGNATURES[name]
    assert fn.__name__ == name
    assert getattr(gemm_base, name) is fn and name in G.__all__ and name in gemm_base.__all__


def test_module_level_names_flashinfer_tests_import():
    """What upstream's tests/gemm/test_bmm_bf16.py and test_groupwise_scaled_gemm_fp8.py import."""
    from flashinfer.gemm.kernels.cutile.bmm_bf16_cutile import bmm_bf16_cutile, make_bmm_bf16_tune_cache
    from flashinfer.testing.utils import dequantize_fp8, quantize_fp8

    assert gemm_base.CUDNN_AVAILABLE is False
    assert G.is_cuda_tile_available() is False
    assert callable(quantize_fp8) and callable(dequantize_fp8)
    assert make_bmm_bf16_tune_cache() == {} and callable(bmm_bf16_cutile)


def test_bmm_bf16_cutile_computes_and_records_the_problem(seed):
    from flashinfer.gemm.kernels.cutile.bmm_bf16_cutile import bmm_bf16_cutile, make_bmm_bf16_tune_cache

    A = torch.randn(2, 5, 64).to(BF16)
    B = torch.randn(2, 12, 64).to(BF16).transpose(1, 2)
    out = poisoned(2, 5, 12, dtype=FP32)
    cache = make_bmm_bf16_tune_cache()
    assert bmm_bf16_cutile(A, B, out, tune_cache=cache) is out
    bmm_bf16_cutile(A, B, out, tune_cache=cache)
    assert len(cache) == 1
    ref = torch.einsum("bmk,bkn->bmn", A.double(), B.double())
    assert_matches(out, ref, torch.einsum("bmk,bkn->bmn", A.double().abs(), B.double().abs()))
    with pytest.raises(ValueError, match="requires bf16 A and B"):
        bmm_bf16_cutile(A.half(), B.half(), out)
    with pytest.raises(ValueError, match="out must be contiguous"):
        bmm_bf16_cutile(A, B, poisoned(2, 12, 5, dtype=FP32).transpose(1, 2))


def test_hooks():
    blockscaled, grouped = G.gemm_fp8_nt_blockscaled, G.group_gemm_fp8_nt_groupwise
    assert not blockscaled.has_backend_choices()
    assert grouped.has_backend_choices()
    for cc in (31, 89, 90, 100, 120):
        assert blockscaled.is_compute_capability_supported(cc)
        assert grouped.is_compute_capability_supported(cc)
        for name in ("trtllm", "cutile", "auto", "mubin"):
            assert grouped.is_backend_supported(name, cc) and grouped.has_backend(name)
    assert not grouped.is_backend_supported("cutlass") and not grouped.has_backend("cutlass")
    # upstream's fp8_blockscale_gemm_sm90 is not gated: no hidden keyword, no hooks
    assert not hasattr(G.fp8_blockscale_gemm_sm90, "is_backend_supported")
    with pytest.raises(TypeError):
        G.fp8_blockscale_gemm_sm90(
            torch.zeros(1, 128, dtype=BF16), torch.zeros(64, 128, dtype=BF16), skip_check=True
        )


# ----------------------------------------------------------------------------- gemm_fp8_nt_blockscaled


# ----------------------------------------------------------------------------- group_gemm_fp8_nt_groupwise


def test_group_gemm_malformed_offsets_are_clamped_never_read_out_of_bounds(implementation, seed):
    """Offsets past the rows, decreasing or negative: clamped to [0, m] and made non-decreasing."""
    m, n, k = 10, 128, 128
    a, b = fp8(m, k), fp8(3, n, k)
    sa, sb = pow2(m, 1), pow2(3, 1, 1)
    m_indptr = torch.tensor([-5, 6, 3, 40], dtype=torch.int32)  # effective: [0, 6, 6, 10]
    out = poisoned(m, n, dtype=BF16)
    G.group_gemm_fp8_nt_groupwise(a, b, sa, sb, m_indptr, scale_major_mode="K", out=out)
    effective = torch.tensor([0, 6, 6, 10], dtype=torch.int32)
    assert_matches(out, *oracle_segments(a, b, sa, sb, effective))


def test_group_gemm_zero_sizes(implementation, seed):
    m_indptr = torch.tensor([1, 3, 3], dtype=torch.int32)
    out = poisoned(4, 128, dtype=BF16)
    G.group_gemm_fp8_nt_groupwise(fp8(4, 0), fp8(2, 128, 0), pow2(0, 4), pow2(2, 0, 1), m_indptr, out=out)
    assert out[1:3].eq(0).all() and out[0].isnan().all() and out[3].isnan().all()
    empty = G.group_gemm_fp8_nt_groupwise(
        fp8(0, 128), fp8(2, 128, 128), pow2(1, 0), pow2(2, 1, 1), torch.zeros(3, dtype=torch.int32)
    )
    assert empty.shape == (0, 128)
    out = poisoned(4, 128, dtype=BF16)
    no_groups = torch.zeros(1, dtype=torch.int32)
    G.group_gemm_fp8_nt_groupwise(
        fp8(4, 128), fp8(0, 128, 128), pow2(1, 4), pow2(0, 1, 1), no_groups, out=out
    )
    assert out.isnan().all()


def test_group_gemm_rejects_an_out_overlapping_its_inputs(seed):
    storage = torch.full((8 * 128 + 2 * 128 * 256 // 2,), float("nan"), dtype=BF16)
    b = storage[8 * 128 - 64 :].view(E4M3)[: 2 * 128 * 256].view(2, 128, 256)
    out = storage[: 8 * 128].view(8, 128)
    m_indptr = torch.tensor([0, 4, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="overlap `b` for `out`"):
        G.group_gemm_fp8_nt_groupwise(fp8(8, 256), b, pow2(2, 8), pow2(2, 2, 1), m_indptr, out=out)
    assert out[:-1].isnan().all()


# ----------------------------------------------------------------------------- fp8_blockscale_gemm_sm90


def test_fp8_blockscale_quantization_error_is_what_is_stated(seed):
    """BF16 operands: the error against the unquantized product stays inside the stated bound, and
    the bound is not vacuous (the error reaches a good part of it)."""
    x, w = torch.randn(24, 512).to(BF16), torch.randn(128, 512).to(BF16)
    out = G.fp8_blockscale_gemm_sm90(x, w)
    ref, bound = quantization_error_bound(x, w, None, None, BF16)
    ratio = (out.double() - ref).abs() / bound
    assert ratio.max() <= 1 and ratio.max() > 0.03


def test_fp8_blockscale_internal_quantization_matches_upstreams_formula(seed):
    """The reference quantizes each block exactly as upstream (every value and scale bit for bit)."""
    from flashinfer.gemm import _reference
    from flashinfer.gemm._args import QuantizeBlocks

    x = (torch.randn(130, 256) * torch.logspace(-6, 4, 256)).to(BF16)
    x[3, :128] = 0  # an all-zero block: multiplier 1, scale 1
    for block_rows in (1, 128):
        values, scales, _ = quantize_oracle(x, block_rows)
        got = torch.empty(130, 256, dtype=E4M3)
        got_scales = torch.full(scales.shape, float("nan"))
        _reference.quantize_fp8_blocks(QuantizeBlocks(x, block_rows, got, got_scales))
        assert torch.equal(got.view(torch.uint8), values.view(torch.uint8))
        assert torch.equal(got_scales, scales)


def test_fp8_blockscale_zero_sizes(seed):
    out = poisoned(3, 64, dtype=BF16)
    assert G.fp8_blockscale_gemm_sm90(torch.randn(3, 0).to(BF16), torch.randn(64, 0).to(BF16), out=out) is out
    assert out.eq(0).all()
    assert G.fp8_blockscale_gemm_sm90(torch.randn(0, 128).to(BF16), torch.randn(64, 128).to(BF16)).shape == (
        0,
        64,
    )


def test_fp8_blockscale_on_mate_022_per_token_weights_run_the_reference(mate_v022, seed):  # noqa: F811
    x, w, scale = torch.randn(4, 256).to(BF16), fp8(128, 256), pow2(128, 2)
    out = G.fp8_blockscale_gemm_sm90(x, w, None, scale)
    assert mate_v022.CALLS == []  # MATE 0.2.2 has no per-row weight-scale recipe
    assert_matches(out, *blockscale_oracle(x, w, None, scale))
    block_scale = pow2(1, 2)
    G.fp8_blockscale_gemm_sm90(x, w, None, block_scale, out=out)
    assert only_call(mate_v022, "gemm.gemm_fp8_nt_groupwise")["scale_granularity_mnk"] == (1, 128, 128)
    assert_matches(out, *blockscale_oracle(x, w, None, block_scale))


def test_fp8_blockscale_rejects_an_out_overlapping_its_inputs(seed):
    x = torch.randn(4, 256).to(BF16)
    storage = torch.randn(128 * 256 + 4 * 128).to(BF16)
    w, out = storage[: 128 * 256].view(128, 256), storage[128 * 256 - 8 :][: 4 * 128].view(4, 128)
    before = storage.clone()
    with pytest.raises(ValueError, match="overlap `weight`"):
        G.fp8_blockscale_gemm_sm90(x, w, out=out)
    assert torch.equal(storage, before)
