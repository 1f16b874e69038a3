"""Hypothesis over shapes, strides, dtypes and bad inputs (oracles and tolerances: ``tests/oracles.py``)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import (
    BF16,
    E4M3,
    E5M2,
    FP16,
    FP32,
    assert_matches,
    fp8,
    oracle_bmm,
    oracle_groupwise,
    oracle_masked,
    pow2,
)

import flashinfer.gemm as G

# The implementation fixture is set up once per test, not per example: that is intended.
relaxed = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=["reference", "mate"])
def implementation(request):
    if request.param == "mate":
        request.getfixturevalue("mate_standin")
    return request.param


def _layout(x, order):
    """``x`` with the same values, stored in the dimension order ``order`` (a permutation)."""
    inverse = [order.index(i) for i in range(x.dim())]
    return x.permute(order).contiguous().permute(inverse)


def _out(shape, dtype, strided):
    if not strided:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full((*shape[:-1], 3 * shape[-1]), float("nan"), dtype=dtype)[..., 1::3]


dims = st.integers(1, 40)


@relaxed
@given(
    b=st.integers(1, 3), m=dims, n=dims, k=st.integers(1, 96),
    da=st.sampled_from([E4M3, E5M2]), db=st.sampled_from([E4M3, E5M2]), out_dtype=st.sampled_from([BF16, FP16]),
    a_order=st.sampled_from([(0, 1, 2), (0, 2, 1), (2, 1, 0)]), b_order=st.sampled_from([(0, 1, 2), (0, 2, 1), (1, 0, 2)]),
    strided=st.booleans(), scales=st.sampled_from(["0d", "1", "chan_a", "chan_b", "chan_both"]), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_bmm_fp8_any_shape_and_stride(
    implementation, b, m, n, k, da, db, out_dtype, a_order, b_order, strided, scales, seed
):
    torch.manual_seed(seed)
    A = _layout(fp8(b, m, k, dtype=da), a_order)
    B = _layout(fp8(b, k, n, dtype=db), b_order)
    sa = (
        pow2(b, m, 1)
        if scales in ("chan_a", "chan_both")
        else pow2(1).reshape(() if scales == "0d" else (1,))
    )
    sb = pow2(b, 1, n) if scales in ("chan_b", "chan_both") else pow2(1)
    out = _out((b, m, n), out_dtype, strided)
    assert G.bmm_fp8(A, B, sa, sb, out_dtype, out) is out
    assert_matches(out, *oracle_bmm(A, B, sa.reshape(sa.shape or ()), sb))


@relaxed
@given(
    b=st.integers(1, 3), m=dims, n=dims, k=st.integers(1, 96), dtype=st.sampled_from([BF16, FP16]),
    out_dtype=st.sampled_from([BF16, FP16, FP32]), b_order=st.sampled_from([(0, 1, 2), (0, 2, 1), (1, 2, 0)]),
    strided=st.booleans(), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_bmm_bf16_any_shape_and_stride(implementation, b, m, n, k, dtype, out_dtype, b_order, strided, seed):
    torch.manual_seed(seed)
    A = torch.randn(b, m, k).to(dtype)
    B = _layout(torch.randn(b, k, n).to(dtype), b_order)
    out = _out((b, m, n), out_dtype, strided)
    assert G.bmm_bf16(A, B, out, out_dtype) is out
    assert_matches(out, *oracle_bmm(A, B))


@relaxed
@given(
    m=st.integers(1, 140), n=st.integers(1, 300), k=st.integers(1, 400), mode=st.sampled_from(["K", "MN"]),
    gm=st.sampled_from([1, 128]), out_dtype=st.sampled_from([BF16, FP16]), strided=st.booleans(),
    row_padding=st.integers(0, 16), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_groupwise_any_shape(implementation, m, n, k, mode, gm, out_dtype, strided, row_padding, seed):
    torch.manual_seed(seed)
    a = fp8(m, k + row_padding)[:, :k]  # a K-major view with a padded row stride
    b = fp8(n, k)
    sa, sb = pow2(math.ceil(m / gm), math.ceil(k / 128)), pow2(math.ceil(n / 128), math.ceil(k / 128))
    stored = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
    out = _out((m, n), out_dtype, strided)
    G.gemm_fp8_nt_groupwise(a, b, *stored, mode, scale_granularity_mnk=(gm, 128, 128), out=out)
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, gm, 128, 128))


@relaxed
@given(
    groups=st.integers(1, 3), m=st.integers(1, 50), n=st.integers(1, 200), k=st.integers(1, 300),
    masked=st.lists(st.integers(-3, 60), min_size=3, max_size=3), expected_m=st.integers(1, 64),
    seed=st.integers(0, 2**16),
)  # fmt: skip
def test_masked_any_mask(implementation, groups, m, n, k, masked, expected_m, seed):
    torch.manual_seed(seed)
    kb = math.ceil(k / 128)
    a, b = fp8(groups, m, k), fp8(groups, n, k)
    sa, sb = pow2(groups, m, kb), pow2(groups, math.ceil(n / 128), kb)
    masked_m = torch.tensor(masked[:groups], dtype=torch.int32)
    out = torch.full((groups, m, n), float("nan"), dtype=BF16)
    G.batch_deepgemm_fp8_nt_groupwise(a, b, sa, sb, masked_m, expected_m, out=out)
    valid = (torch.arange(m)[None, :] < masked_m[:, None])[..., None].expand(groups, m, n)
    assert_matches(out, *oracle_masked(a, b, sa, sb, masked_m), valid)


@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=4))
def test_bmm_fp8_scale_shapes_are_accepted_or_named(shape):
    """Any scale shape either is one of the documented forms or raises a ValueError naming it."""
    A, B = fp8(2, 3, 16), fp8(2, 4, 16).transpose(-2, -1)
    scale = pow2(*shape) if shape else pow2(1).reshape(())
    accepted = tuple(shape) in ((), (1,), (2, 3, 1), (2, 1, 3))
    if accepted:
        G.bmm_fp8(A, B, scale, pow2(1), BF16)
    else:
        with pytest.raises(ValueError, match="`A_scale`"):
            G.bmm_fp8(A, B, scale, pow2(1), BF16)
