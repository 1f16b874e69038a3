"""Generic tests driven by the op table: every op x sample x implementation (reference, MATE stand-in)."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from gemm_cases import (
    BF16,
    E4M3,
    OPS,
    OPS_BY_NAME,
    assert_matches,
    check_sample,
    fp8,
    oracle_groupwise,
    poisoned,
    pow2,
)

import flashinfer.gemm as G
from flashinfer.utils import BackendSupportedError

torch.manual_seed(0)
SAMPLE_IDS = [(op.name, i, s.name) for op in OPS for i, s in enumerate(op.samples())]
ERROR_IDS = [(op.name, i, e.name) for op in OPS for i, e in enumerate(op.errors())]
BACKEND_IDS = [(op.name, name) for op in OPS for name in op.backends]


@pytest.fixture(params=["reference", "mate"])
def implementation(request):
    """The reference implementation, or the MATE adapter backed by the float64 stand-in."""
    if request.param == "mate":
        return request.getfixturevalue("mate_standin")
    return None


def _sample(op_name, index):
    return OPS_BY_NAME[op_name].samples()[index]


@pytest.mark.parametrize("op_name,index,name", SAMPLE_IDS, ids=[f"{o}-{n}" for o, _, n in SAMPLE_IDS])
def test_agreement_with_poisoned_out(op_name, index, name, implementation, seed):
    sample = _sample(op_name, index)
    result = OPS_BY_NAME[op_name].fn(*sample.args, **sample.kwargs)
    if sample.out is not None:
        assert result is sample.out
    check_sample(sample, result)
    if implementation is not None:
        assert len(implementation.CALLS) == 1, "the MATE adapter must make exactly one MATE call"


@pytest.mark.parametrize("op_name,index,name", SAMPLE_IDS, ids=[f"{o}-{n}" for o, _, n in SAMPLE_IDS])
def test_allocated_output_is_contiguous(op_name, index, name, implementation, seed):
    sample = _sample(op_name, index)
    kwargs = {k: v for k, v in sample.kwargs.items() if k != "out"}
    if op_name == "gemm_fp8_nt_groupwise" and sample.out is not None:
        kwargs["out_dtype"] = sample.out.dtype
    result = OPS_BY_NAME[op_name].fn(*sample.args, **kwargs)
    assert result.is_contiguous()
    assert result.shape == sample.ref.shape
    if sample.output_scale is None:
        valid = sample.valid if sample.valid is not None else torch.ones(result.shape, dtype=torch.bool)
        result = torch.where(valid, result, torch.full_like(result, float("nan")))
    check_sample(sample, result)


@pytest.mark.parametrize("op_name", [op.name for op in OPS])
def test_out_reuse_returns_the_same_buffer(op_name, implementation, seed):
    sample = OPS_BY_NAME[op_name].samples()[0]
    fn = OPS_BY_NAME[op_name].fn
    first = fn(*sample.args, **sample.kwargs)
    again = fn(*sample.args, **sample.kwargs)
    assert first is sample.out and again is sample.out
    check_sample(sample, again)


@pytest.mark.parametrize("op_name,index,name", ERROR_IDS, ids=[f"{o}-{n}" for o, _, n in ERROR_IDS])
def test_error_inputs(op_name, index, name, seed):
    """The exception type is upstream's; the message names the argument and keeps upstream's gist."""
    error = OPS_BY_NAME[op_name].errors()[index]
    with pytest.raises(error.exc) as raised:
        OPS_BY_NAME[op_name].fn(*error.args, **error.kwargs)
    for fragment in error.match.split(".*"):
        assert re.search(fragment, str(raised.value)), (fragment, str(raised.value))


def test_nothing_is_written_before_validation_passes(seed):
    a, b = fp8(4, 256), fp8(256, 256)
    out = poisoned(4, 256, dtype=BF16)
    with pytest.raises(BackendSupportedError):
        G.gemm_fp8_nt_groupwise(a, b, pow2(4, 2), pow2(2, 2), "K", out=out, backend="mubin")
    ids = torch.zeros(128, dtype=torch.int32)
    out = poisoned(128, 128, dtype=BF16)
    with pytest.raises(AssertionError):
        G.group_deepgemm_fp8_nt_groupwise(
            fp8(128, 128), fp8(1, 128, 128), pow2(1, 128), pow2(1, 1, 1), ids, out=out
        )
    assert out.isnan().all()
    out = poisoned(1, 3, 5, dtype=BF16)
    with pytest.raises(ValueError):  # k == 0 zero-fills, but only once the arguments are valid
        G.bmm_fp8(fp8(1, 3, 0), fp8(1, 0, 5), pow2(1), pow2(2), BF16, out)
    assert out.isnan().all()


@pytest.mark.parametrize("op_name,backend", BACKEND_IDS, ids=[f"{o}-{b}" for o, b in BACKEND_IDS])
def test_every_backend_name_runs_where_is_backend_supported_says(op_name, backend, implementation, seed):
    op = OPS_BY_NAME[op_name]
    assert op.fn.is_backend_supported(backend) and op.fn.is_backend_supported(backend, 90)
    assert op.fn.has_backend(backend)
    samples = op.samples()
    named = [s for s in samples if s.kwargs.get("backend") == backend]
    sample = named[0] if named else samples[0]
    kwargs = dict(sample.kwargs, backend=backend)
    result = op.fn(*sample.args, **kwargs)
    check_sample(sample, result)


@pytest.mark.parametrize("op_name", ["bmm_bf16", "bmm_fp8", "gemm_fp8_nt_groupwise"])
def test_unknown_backend_is_not_supported(op_name):
    fn = OPS_BY_NAME[op_name].fn
    assert not fn.is_backend_supported("no-such-backend")
    assert not fn.has_backend("no-such-backend")
    assert fn.has_backend_choices()


@pytest.mark.parametrize("op_name", ["group_deepgemm_fp8_nt_groupwise", "batch_deepgemm_fp8_nt_groupwise"])
def test_deepgemm_apis_have_no_backend_choices_but_run_on_every_capability(op_name):
    fn = OPS_BY_NAME[op_name].fn
    assert not fn.has_backend_choices()
    assert all(fn.is_compute_capability_supported(cc) for cc in (31, 90, 100, 120))


@pytest.mark.parametrize("op_name", [op.name for op in OPS])
def test_skip_check_runs_the_same_math(op_name, implementation, seed):
    sample = OPS_BY_NAME[op_name].samples()[0]
    result = OPS_BY_NAME[op_name].fn(*sample.args, skip_check=True, **sample.kwargs)
    check_sample(sample, result)


SIGNATURES = {
    "bmm_bf16": "(A, B, out=None, out_dtype=torch.bfloat16, backend='auto')",
    "bmm_fp8": "(A, B, A_scale, B_scale, dtype, out=None, backend='auto')",
    "gemm_fp8_nt_groupwise": "(a, b, a_scale, b_scale, scale_major_mode=None, mma_sm=1, "
    "scale_granularity_mnk=(1, 128, 128), out=None, out_dtype=None, backend='cutlass', output_scale=None)",
    "group_deepgemm_fp8_nt_groupwise": "(a, b, a_scale, b_scale, m_indices, scale_granularity_mnk=(1, 128, 128), "
    "out=None, out_dtype=None)",
    "batch_deepgemm_fp8_nt_groupwise": "(a, b, a_scale, b_scale, masked_m, expected_m, "
    "scale_granularity_mnk=(1, 128, 128), out=None, out_dtype=None)",
}


@pytest.mark.parametrize("op_name", list(SIGNATURES))
def test_signature_is_upstreams_with_skip_check_hidden(op_name):
    fn = getattr(G, op_name)
    assert str(inspect.signature(fn)) == SIGNATURES[op_name]
    assert fn.__name__ == op_name
    assert getattr(G.gemm_base, op_name) is fn


def test_public_surface():
    assert G.__all__ == [
        "batch_deepgemm_fp8_nt_groupwise",
        "bmm_bf16",
        "bmm_fp8",
        "fp8_blockscale_gemm_sm90",
        "gemm_fp8_nt_blockscaled",
        "gemm_fp8_nt_groupwise",
        "group_deepgemm_fp8_nt_groupwise",
        "group_gemm_fp8_nt_groupwise",
        "is_cuda_tile_available",
    ]
    assert G.is_cuda_tile_available() is False


# ----------------------------------------------------------------------------- zero-size problems


def test_zero_k_zero_fills_and_zero_rows_return_empty(implementation, seed):
    out = poisoned(2, 3, 5, dtype=BF16)
    assert G.bmm_bf16(torch.randn(2, 3, 0).to(BF16), torch.randn(2, 0, 5).to(BF16), out=out) is out
    assert out.eq(0).all()
    out = poisoned(1, 3, 5, dtype=BF16)
    G.bmm_fp8(fp8(1, 3, 0), fp8(1, 0, 5), pow2(1), pow2(1), BF16, out)
    assert out.eq(0).all()
    assert G.bmm_fp8(fp8(1, 0, 8), fp8(1, 8, 5), pow2(1), pow2(1), BF16).shape == (1, 0, 5)
    scale = torch.full((3, 1), float("nan"))
    result = G.gemm_fp8_nt_groupwise(fp8(3, 0), fp8(5, 0), pow2(3, 0), pow2(1, 0), "K", output_scale=scale)
    assert result.dtype == E4M3 and result.float().eq(0).all() and scale.eq(1e-12 / 448).all()
    ids = torch.tensor([0, -1, 5], dtype=torch.int32)
    out = poisoned(3, 128, dtype=BF16)
    G.group_deepgemm_fp8_nt_groupwise(fp8(3, 0), fp8(2, 128, 0), pow2(3, 0), pow2(2, 1, 0), ids, out=out)
    assert out[0].eq(0).all() and out[1:].isnan().all()
    empty = G.group_deepgemm_fp8_nt_groupwise(
        fp8(0, 128), fp8(2, 128, 128), pow2(0, 1), pow2(2, 1, 1), torch.zeros(0, dtype=torch.int32)
    )
    assert empty.shape == (0, 128)


def test_masked_rows_with_garbage_a_do_not_leak(implementation, seed):
    """Rows past masked_m hold NaN/inf in `a`: they must affect neither valid rows nor `out`."""
    groups, m, n, k = 2, 16, 128, 128
    a = fp8(groups, m, k)
    a[0, 5:] = float("nan")
    a[1, 9:] = float("inf")
    b, sa, sb = fp8(groups, n, k), pow2(groups, m, 1), pow2(groups, 1, 1)
    masked = torch.tensor([5, 9], dtype=torch.int32)
    out = poisoned(groups, m, n, dtype=BF16)
    G.batch_deepgemm_fp8_nt_groupwise(a, b, sa, sb, masked, 8, out=out)
    assert out[0, :5].isfinite().all() and out[1, :9].isfinite().all()
    assert out[0, 5:].isnan().all() and out[1, 9:].isnan().all()
    expected = (a[1, :9].double() * sa[1, :9]) @ (b[1].double() * sb[1]).t()
    assert_matches(
        out[1, :9], expected, (a[1, :9].double().abs() * sa[1, :9]) @ (b[1].double().abs() * sb[1]).t()
    )


def test_out_overlapping_an_input_is_rejected_before_any_write(seed):
    """Storage shared with an input is refused (a cheap storage-pointer test on the hot path)."""
    A = fp8(1, 4, 32)
    storage = torch.full((64 + 8 * 32,), 0x7F, dtype=torch.uint8)
    B = storage[64:].view(E4M3).view(1, 8, 32).transpose(-2, -1)
    out = storage[32:96].view(BF16).view(1, 4, 8)  # its last 32 bytes are B's first
    before = storage.clone()
    with pytest.raises(ValueError, match="overlap `B` for `out`"):
        G.bmm_fp8(A, B, pow2(1), pow2(1), BF16, out)
    assert torch.equal(storage, before)
    disjoint_view = torch.full((2, 4, 8), float("nan"), dtype=BF16)
    G.bmm_fp8(A, B, pow2(1), pow2(1), BF16, disjoint_view[0:1])  # same kind of view, no sharing


def test_trtllm_b_scale_in_upstream_docstring_order_is_read_as_its_transpose(implementation, seed):
    m, n, k = 3, 256, 384
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 3), pow2(2, 3)
    out = G.gemm_fp8_nt_groupwise(a, b, sa.t().contiguous(), sb.t().contiguous(), backend="trtllm")
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))


def test_mma_sm_is_ignored_silently(implementation, seed, capsys):
    a, b = fp8(4, 256), fp8(128, 256)
    G.gemm_fp8_nt_groupwise(a, b, pow2(4, 2), pow2(1, 2), "K", mma_sm=2)
    assert capsys.readouterr() == ("", "")
