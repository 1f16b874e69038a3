"""The sibling GEMM APIs on CPU: ``gemm_fp8_nt_blockscaled``, ``group_gemm_fp8_nt_groupwise``,
``fp8_blockscale_gemm_sm90``, and the module-level names FlashInfer's own tests import.

Every sample runs on the reference and on the MATE adapter (backed by the float64 stand-in),
against the float64 oracles of ``tests/oracles.py`` with NaN-poisoned outputs; every error rule
is checked to raise, with FlashInfer's exception type and message, before anything is written.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field

import pytest
import torch
from oracles import (
    BF16,
    E4M3,
    E5M2,
    FP16,
    FP32,
    assert_matches,
    blockscale_oracle,
    fp8,
    oracle_groupwise,
    oracle_segments,
    poisoned,
    pow2,
    quantization_error_bound,
    quantize_oracle,
    row_scales,
)
from test_mate_adapter import mate_v022, only_call  # noqa: F401 (the fixture is used by name)

import flashinfer.gemm as G
from flashinfer.gemm import gemm_base


@pytest.fixture(params=["reference", "mate"])
def implementation(request):
    """The reference implementation, or the MATE adapter backed by the float64 stand-in."""
    if request.param == "mate":
        return request.getfixturevalue("mate_standin")
    return None


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


@pytest.mark.parametrize("mode", ["MN", "K"])
@pytest.mark.parametrize(
    "m,n,k,out_dtype", [(256, 128, 256, BF16), (130, 200, 384, FP16), (1, 128, 128, BF16)]
)
def test_blockscaled(implementation, seed, mode, m, n, k, out_dtype):
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(math.ceil(m / 128), math.ceil(k / 128)), pow2(math.ceil(n / 128), math.ceil(k / 128))
    stored = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
    out = poisoned(m, n, dtype=out_dtype)
    assert G.gemm_fp8_nt_blockscaled(a, b, *stored, mode, out=out) is out
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 128, 128, 128))
    if implementation is not None:
        assert only_call(implementation, "gemm.bmm")["recipe_a"] == (1, 128)  # A scales expanded per row


def test_blockscaled_rules(seed):
    a, b = fp8(128, 256), fp8(128, 256)
    out = poisoned(128, 128, dtype=BF16)
    with pytest.raises(ValueError, match="scale_major_mode is required in CUTLASS"):
        G.gemm_fp8_nt_blockscaled(a, b, pow2(2, 1), pow2(2, 1), None, out=out)
    with pytest.raises(ValueError, match="`a_scale`.*shape"):
        G.gemm_fp8_nt_blockscaled(a, b, pow2(128, 2), pow2(2, 1), "MN", out=out)  # per-row: groupwise's shape
    with pytest.raises(ValueError, match="nsupported output dtype"):
        G.gemm_fp8_nt_blockscaled(a, b, pow2(2, 1), pow2(2, 1), out=poisoned(128, 128, dtype=FP32))
    assert out.isnan().all()
    G.gemm_fp8_nt_blockscaled(a, b, pow2(2, 1), pow2(2, 1), out=out, skip_check=True)
    assert out.isfinite().all()


# ----------------------------------------------------------------------------- group_gemm_fp8_nt_groupwise


@dataclass
class GroupCase:
    name: str
    bounds: list
    m: int
    n: int = 128
    k: int = 256
    mode: str = "MN"
    block_m: int = 1
    dtypes: tuple = (E4M3, E4M3)
    out_dtype: torch.dtype = BF16
    strided_out: bool = False
    kwargs: dict = field(default_factory=dict)


GROUP_CASES = [
    GroupCase("mn-empty-groups", [0, 4, 4, 12, 12, 20], 20),
    GroupCase("k-major", [0, 7, 20], 20, mode="K", n=200, k=384),
    GroupCase("tail-rows-untouched", [0, 8, 16], 24, out_dtype=FP16),
    GroupCase("leading-rows-untouched", [4, 9, 16], 16, mode="K", strided_out=True),
    GroupCase("e5m2-mix", [0, 5, 13], 13, dtypes=(E5M2, E4M3), kwargs={"backend": "cutile"}, mode="K"),
    GroupCase("block-128-aligned", [0, 128, 256], 256, block_m=128, mode="K"),
    GroupCase("block-128-unaligned", [0, 100, 300], 300, block_m=128),
    GroupCase("one-group", [0, 3], 3, n=8, k=16),
    GroupCase("mubin-name", [0, 2, 6], 6, kwargs={"backend": "mubin", "mma_sm": 2}),
]


def group_inputs(case: GroupCase):
    groups = len(case.bounds) - 1
    m_indptr = torch.tensor(case.bounds, dtype=torch.int32)
    a, b = fp8(case.m, case.k, dtype=case.dtypes[0]), fp8(groups, case.n, case.k, dtype=case.dtypes[1])
    gm = case.block_m
    kb, nb = math.ceil(case.k / 128), math.ceil(case.n / 128)
    sa_blocks, sb = pow2(math.ceil(case.m / gm), kb), pow2(groups, nb, kb)
    if case.mode == "K":
        stored = (sa_blocks, sb)
    else:
        stored = (sa_blocks.t().contiguous(), sb.transpose(1, 2).contiguous())
    if case.strided_out:
        out = poisoned(case.m, 2 * case.n, dtype=case.out_dtype)[:, ::2]
    else:
        out = poisoned(case.m, case.n, dtype=case.out_dtype)
    expected = oracle_segments(a, b, row_scales(sa_blocks, m_indptr, case.m, gm), sb, m_indptr)
    args = (a, b, *stored, m_indptr)
    kwargs = dict(case.kwargs, scale_granularity_mnk=(gm, 128, 128), scale_major_mode=case.mode, out=out)
    return args, kwargs, expected


@pytest.mark.parametrize("case", GROUP_CASES, ids=lambda c: c.name)
def test_group_gemm(implementation, seed, case):
    args, kwargs, (ref, ref_abs) = group_inputs(case)
    out = kwargs["out"]
    assert G.group_gemm_fp8_nt_groupwise(*args, **kwargs) is out
    assert_matches(out, ref, ref_abs, valid=~ref.isnan())
    if implementation is not None:
        call = only_call(implementation, "gemm.ragged_m_moe_gemm_8bit")
        assert call["gemm_mode"] == "per_expert" and call["backend"] == "auto"
        assert call["input_a"][0] is args[0] and call["input_b"][0] is args[1]


def test_group_gemm_allocates_a_contiguous_output(implementation, seed):
    args, kwargs, (ref, ref_abs) = group_inputs(GROUP_CASES[0])
    kwargs.pop("out")
    out = G.group_gemm_fp8_nt_groupwise(*args, out_dtype=FP16, **kwargs)
    assert out.dtype == FP16 and out.is_contiguous() and out.shape == ref.shape
    assert_matches(out, ref, ref_abs)


def test_group_gemm_skip_check_runs_the_same_math(implementation, seed):
    args, kwargs, (ref, ref_abs) = group_inputs(GROUP_CASES[1])
    G.group_gemm_fp8_nt_groupwise(*args, skip_check=True, **kwargs)
    assert_matches(kwargs["out"], ref, ref_abs)


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


def _group_error_inputs():
    m, n, k, groups = 8, 128, 256, 2
    a, b = fp8(m, k), fp8(groups, n, k)
    sa, sb = pow2(2, m), pow2(groups, 2, 1)  # MN-major
    m_indptr = torch.tensor([0, 4, 8], dtype=torch.int32)
    base = dict(a=a, b=b, a_scale=sa, b_scale=sb, m_indptr=m_indptr)

    def case(name, exc, match, **changes):
        return pytest.param(dict(base, **changes), exc, match, id=name)

    return [
        case("a bf16", ValueError, r"^a must be a float8 tensor, but got torch.bfloat16$", a=a.to(BF16)),
        case("b fp16", ValueError, r"^b must be a float8 tensor, but got torch.float16$", b=b.to(FP16)),
        case("a_scale fp16", ValueError, r"^a_scale must be a float32 tensor, but got torch.float16$", a_scale=sa.half()),
        case("b_scale fp64", ValueError, r"^b_scale must be a float32 tensor", b_scale=sb.double()),
        case("m_indptr int64", ValueError, r"^m_indptr must be a int32 tensor, but got torch.int64$", m_indptr=m_indptr.long()),
        case("mode", ValueError, r"^scale_major_mode must be either 'MN' or 'K', but got None$", scale_major_mode=None),
        case("mma_sm", ValueError, r"^mma_sm must be either 1 or 2, but got 3$", mma_sm=3),
        case("out shape", ValueError, r"^Shape mismatch\. out\.shape = .*\(a\.shape\[0\], n\) = \(8, 128\)$",
             out=poisoned(8, 64, dtype=BF16)),
        case("out vs out_dtype", ValueError, r"^dtype mismatch\. out\.dtype = torch\.bfloat16, out_dtype = torch\.float16$",
             out_dtype=FP16),
        case("out_dtype fp32", ValueError, r"^Unsupported output dtype: torch.float32\. Only torch.bfloat16 and "
             r"torch.float16 are supported for FP8 GEMM operations\.$", out=None, out_dtype=FP32),
        case("k mismatch", ValueError, r"^Shape mismatch\. a\.shape\[1\] = 128, k = 256$", a=a[:, :128]),
        case("n % 8", ValueError, r"^n must be a multiple of 8, but got 4$", b=b[:, :4], out=poisoned(8, 4, dtype=BF16)),
        case("k % 16", ValueError, r"^k must be a multiple of 16, but got 136$", a=fp8(m, 136), b=fp8(groups, n, 136)),
        case("unknown backend", ValueError, r"'trtllm', 'cutile'.*`backend`", backend="cutlass"),
        case("granularity", ValueError, r"`scale_granularity_mnk`", scale_granularity_mnk=(1, 64, 128)),
        case("cutile MN", NotImplementedError, r"scale_major_mode='K'", backend="cutile"),
        case("cutile block 128", NotImplementedError, r"scale_granularity_mnk\[0\] == 1", backend="cutile",
             scale_major_mode="K", scale_granularity_mnk=(128, 128, 128), a_scale=pow2(1, 2)),
        case("a 3-D", ValueError, r"2-D.*for `a`", a=a[None]),
        case("b 2-D", ValueError, r"3-D.*for `b`", b=b[0]),
        case("m_indptr groups", ValueError, r"shape \(3,\).*for `m_indptr`", m_indptr=m_indptr[:2]),
        case("a_scale shape", ValueError, r"shape \(2, 8\).*for `a_scale`", a_scale=pow2(8, 2)),
        case("b_scale shape", ValueError, r"shape \(2, 2, 1\).*for `b_scale`", b_scale=pow2(groups, 1, 2)),
        case("a not K-major", ValueError, r"K-major.*for `a`", a=fp8(k, m).t()),
        case("b device", ValueError, r"device of `a`\) for `b`", b=b.to("meta")),
        case("m_indptr not a tensor", TypeError, r"`m_indptr`", m_indptr=[0, 4, 8]),
    ]  # fmt: skip


@pytest.mark.parametrize("call,exc,match", _group_error_inputs())
def test_group_gemm_errors_raise_before_any_write(seed, call, exc, match):
    call = dict(call)
    out = call.pop("out", poisoned(8, 128, dtype=BF16))
    with pytest.raises(exc) as raised:
        G.group_gemm_fp8_nt_groupwise(
            call.pop("a"), call.pop("b"), call.pop("a_scale"), call.pop("b_scale"), call.pop("m_indptr"),
            out=out, **call,
        )  # fmt: skip
    assert re.search(match, str(raised.value)), str(raised.value)
    if out is not None:
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


def _input_scale_form(scale, form):
    """``scale`` (M, K/128) stored as a caller may pass it."""
    m, kb = scale.shape
    if form == "row-major":
        return scale.contiguous()
    if form == "column-major":  # the memory upstream's kernel reads, as an (M, K/128) view
        return scale.t().contiguous().t()
    if form == "mn-storage":
        return scale.t().contiguous()
    padded = torch.full((kb, -(-m // 4) * 4), float("nan"))  # upstream's test: rows padded to 4
    padded[:, :m] = scale.t()
    return padded[:, :m]


BLOCKSCALE_CASES = [
    # (M, N, K, input dtype, weight dtype, weight scale, input_scale form, out dtype)
    (3, 128, 256, BF16, BF16, None, None, BF16),
    (37, 192, 384, BF16, BF16, None, None, FP16),
    (5, 256, 256, BF16, E4M3, "block", None, BF16),
    (16, 64, 128, BF16, E4M3, "token", None, BF16),
    (7, 128, 512, E4M3, E4M3, "token", "padded", BF16),
    (6, 256, 256, E4M3, E4M3, "block", "row-major", FP16),
    (2, 128, 256, E4M3, E4M3, "block", "column-major", BF16),
    (3, 64, 256, E4M3, E4M3, "token", "mn-storage", BF16),
]


def blockscale_inputs(M, N, K, in_dtype, w_dtype, w_scale, form, out_dtype):
    kb = K // 128
    if in_dtype == BF16:
        x, x_scale, x_ref_scale = (torch.randn(M, K) * 2).to(BF16), None, None
    else:
        x, x_ref_scale = fp8(M, K), pow2(M, kb)
        x_scale = _input_scale_form(x_ref_scale, form)
    if w_dtype == BF16:
        w, w_scale_t = torch.randn(N, K).to(BF16), None
    else:
        w = fp8(N, K)
        w_scale_t = pow2(N, kb) if w_scale == "token" else pow2(math.ceil(N / 128), kb)
    return x, w, x_scale, w_scale_t, x_ref_scale


@pytest.mark.parametrize("case", BLOCKSCALE_CASES, ids=lambda c: "-".join(str(v) for v in c))
def test_fp8_blockscale(implementation, seed, case):
    M, N, K, in_dtype, w_dtype, _, _, out_dtype = case
    x, w, x_scale, w_scale, x_ref_scale = blockscale_inputs(*case)
    out = poisoned(M, 2 * N, dtype=out_dtype)[:, ::2]
    assert G.fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out) is out
    # exact for upstream's quantization of the 16-bit operands
    assert_matches(out, *blockscale_oracle(x, w, x_ref_scale, w_scale))
    # and within the stated quantization error of the operands as given
    ref, bound = quantization_error_bound(x, w, x_ref_scale, w_scale, out_dtype)
    assert ((out.double() - ref).abs() <= bound).all()
    if implementation is not None:
        call = only_call(implementation, "gemm.bmm")
        per_token = w_scale is not None and w_scale.shape[0] == N
        assert call["recipe_a"] == (1, 128) and call["recipe_b"] == ((1, 128) if per_token else (128, 128))


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


def _blockscale_error_inputs():
    M, N, K = 4, 128, 256
    x, w = torch.randn(M, K).to(BF16), torch.randn(N, K).to(BF16)
    x8, w8 = fp8(M, K), fp8(N, K)
    sx, sw = pow2(M, 2), pow2(1, 2)

    def case(name, exc, match, *args, **kwargs):
        return pytest.param(args, kwargs, exc, match, id=name)

    return [
        case("input 3-D", ValueError, r"^Input must be 2D \(M, K\), got shape torch.Size\(\[1, 4, 256\]\)$", x[None], w),
        case("weight 1-D", ValueError, r"^Weight must be 2D \(N, K\), got shape", x, w[0]),
        case("K mismatch", ValueError, r"^K dimension mismatch: input has K=256, weight has K=128$", x, w[:, :128]),
        case("K % 128", ValueError, r"^K dimension must be divisible by block size \(128\), got K=192$",
             x[:, :192], w[:, :192]),
        case("N % 64", ValueError, r"^N dimension must be divisible by 64, got N=96$", x, w[:96]),
        case("fp8 input bf16 weight", ValueError, r"^FP8 input \+ BF16 weight is not supported", x8, w, sx),
        case("input_scale missing", ValueError, r"^input_scale is required when input is FP8", x8, w8, None, sw),
        case("input_scale fp16", ValueError, r"^input_scale must be float32, got torch.float16$", x8, w8, sx.half(), sw),
        case("input_scale device", ValueError, r"^input_scale device mismatch\. Expected cpu, got meta$",
             x8, w8, sx.to("meta"), sw),
        case("input_scale shape", ValueError, r"shape \(4, 2\).*for `input_scale`", x8, w8, pow2(4, 4), sw),
        case("input fp16", ValueError, r"^Input must be either FP8 \(torch.float8_e4m3fn\) or BF16 \(torch.bfloat16\), "
             r"got torch.float16$", x.half(), w),
        case("input e5m2", ValueError, r"^Input must be either FP8.*got torch.float8_e5m2$", x.to(E5M2), w8, sx, sw),
        case("input_scale with bf16", ValueError, r"^input_scale should not be provided for BF16 inputs\. "
             r"Use FP8 inputs if you want to provide external scales\.$", x, w, sx),
        case("weight_scale missing", ValueError, r"^weight_scale is required when weight is FP8", x, w8),
        case("weight_scale shape", ValueError, r"^weight_scale shape mismatch\. Expected either \(128, 2\) \(per-token, "
             r"1x128 blocks\) or \(1, 2\) \(per-block, 128x128 blocks\), got torch.Size\(\[2, 2\]\)$", x, w8, None,
             pow2(2, 2)),
        case("weight_scale fp64", ValueError, r"^weight_scale must be float32, got torch.float64$", x, w8, None,
             sw.double()),
        case("weight fp16", ValueError, r"^Weight must be either FP8 .* got torch.float16$", x, w.half()),
        case("weight_scale with bf16", ValueError, r"^weight_scale should not be provided for BF16 weights\.", x, w,
             None, sw),
        case("out shape", ValueError, r"^Output shape mismatch\. Expected \(4, 128\), got torch.Size\(\[4, 64\]\)$",
             x, w, out=poisoned(4, 64, dtype=BF16)),
        case("out device", ValueError, r"^Output device mismatch\. Expected cpu, got meta$", x, w,
             out=torch.empty(4, 128, dtype=BF16, device="meta")),
        case("out fp32", ValueError, r"^Output dtype must be torch.bfloat16 or torch.float16, got torch.float32$", x, w,
             out=poisoned(4, 128, dtype=FP32)),
        case("out vs out_dtype", ValueError, r"^Output dtype mismatch\. Expected torch.float16, got torch.bfloat16$",
             x, w, out_dtype=FP16),
        case("out_dtype fp32", ValueError, r"^Output dtype must be torch.bfloat16 or torch.float16, got torch.float32$",
             x, w, out=None, out_dtype=FP32),
        case("weight device", ValueError, r"device of `input`\) for `weight`", x, w.to("meta")),
        case("input not K-major", ValueError, r"K-major.*for `input`", torch.randn(K, M).to(BF16).t(), w),
        case("weight_scale not a tensor", TypeError, r"`weight_scale`", x, w8, None, [1.0]),
    ]  # fmt: skip


@pytest.mark.parametrize("args,kwargs,exc,match", _blockscale_error_inputs())
def test_fp8_blockscale_errors_raise_before_any_write(seed, args, kwargs, exc, match):
    kwargs = dict(kwargs)
    out = kwargs.pop("out", poisoned(4, 128, dtype=BF16))
    with pytest.raises(exc) as raised:
        G.fp8_blockscale_gemm_sm90(*args, out=out, **kwargs)
    assert re.search(match, str(raised.value)), str(raised.value)
    if out is not None and out.device.type == "cpu":
        assert out.isnan().all()


def test_fp8_blockscale_rejects_an_out_overlapping_its_inputs(seed):
    x = torch.randn(4, 256).to(BF16)
    storage = torch.randn(128 * 256 + 4 * 128).to(BF16)
    w, out = storage[: 128 * 256].view(128, 256), storage[128 * 256 - 8 :][: 4 * 128].view(4, 128)
    before = storage.clone()
    with pytest.raises(ValueError, match="overlap `weight`"):
        G.fp8_blockscale_gemm_sm90(x, w, out=out)
    assert torch.equal(storage, before)
