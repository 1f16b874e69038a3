"""The GEMM op table (``tests/gemm_ops.py``) through the generic checks (``tests/optable.py``) on
the reference and the MATE adapter (over the float64 stand-in), plus the surface upstream's tests
rely on. The CUDA implementation runs the same table in ``tests/gpu/test_optable_cuda.py``."""

from __future__ import annotations

import inspect

import pytest
import torch
from gemm_ops import OPS, OPS_BY_NAME
from optable import build, error_named, error_params, raises_before_any_write, run_sample, sample_params
from oracles import BF16, E4M3, assert_matches, fp8, oracle_groupwise, poisoned, pow2

import flashinfer.gemm as G
from flashinfer.utils import BackendSupportedError

SAMPLES = sample_params(OPS)
BACKENDS = [
    pytest.param(impl, op, name, id=f"{impl}-{op.name}-{name}")
    for impl in ("reference", "mate")
    for op in OPS
    for name in op.backends
]
FIRST = [pytest.param(impl, op, id=f"{impl}-{op.name}") for impl in ("reference", "mate") for op in OPS]


@pytest.mark.parametrize("implementation, op, name", SAMPLES, indirect=["implementation"])
def test_agreement_with_poisoned_out(implementation, op, name, seed):
    sample = build(op, name)
    run_sample(op, sample)
    if implementation == "mate":
        import mate

        if op.mate_call is not None:
            op.mate_call(sample, mate.CALLS)
        else:
            assert len(mate.CALLS) == 1, "the MATE adapter must make exactly one MATE call"


@pytest.mark.parametrize("implementation, op, name", SAMPLES, indirect=["implementation"])
def test_allocated_output_is_contiguous(implementation, op, name, seed):
    sample = build(op, name)
    kwargs = {k: v for k, v in sample.kwargs.items() if k != "out"}
    given = sample.kwargs.get("out")
    if given is not None and "out_dtype" in inspect.signature(op.fn).parameters:
        kwargs["out_dtype"] = given.dtype
    result = op.fn(*sample.args, **kwargs)
    assert result.is_contiguous()
    valid = sample.extra.get("valid")
    if valid is not None:  # rows an implementation never writes hold garbage in a fresh buffer
        result = torch.where(valid, result, torch.full_like(result, float("nan")))
    op.compare(result, sample)


@pytest.mark.parametrize("implementation, op", FIRST, indirect=["implementation"])
def test_out_reuse_returns_the_same_buffer(implementation, op, seed):
    sample = build(op, op.samples()[0].name)
    first = op.fn(*sample.args, **sample.kwargs)
    again = op.fn(*sample.args, **sample.kwargs)
    assert first is sample.kwargs["out"] and again is sample.kwargs["out"]
    op.compare(again, sample)


@pytest.mark.parametrize("implementation, op, name", error_params(OPS), indirect=["implementation"])
def test_error_inputs(implementation, op, name, seed):
    """Upstream's exception type, a message naming the argument, nothing written before."""
    raises_before_any_write(op, error_named(op, name))


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


@pytest.mark.parametrize("implementation, op, backend", BACKENDS, indirect=["implementation"])
def test_every_backend_name_runs_where_is_backend_supported_says(implementation, op, backend, seed):
    assert op.fn.is_backend_supported(backend) and op.fn.is_backend_supported(backend, 90)
    assert op.fn.has_backend(backend)
    samples = [entry.build() for entry in op.samples()]
    named = [s for s in samples if s.kwargs.get("backend") == backend]
    run_sample(op, named[0] if named else samples[0], backend=backend)


@pytest.mark.parametrize("op_name", ["bmm_bf16", "bmm_fp8", "gemm_fp8_nt_groupwise"])
def test_unknown_backend_is_not_supported(op_name):
    fn = OPS_BY_NAME[op_name].fn
    assert not fn.is_backend_supported("no-such-backend")
    assert not fn.has_backend("no-such-backend")
    assert fn.has_backend_choices()


def test_suitable_auto_backends_follow_each_auto_call():
    """FlashInfer's hook (flashinfer-api.md 3.1-3.2, 4.4, 5.4): after a ``backend="auto"`` call the
    list holds the names whose rules the call meets, in upstream's heuristic order; with
    ``skip_check=True`` too; a named backend leaves it alone."""
    A, B, s = fp8(1, 2, 32), fp8(1, 4, 32).transpose(1, 2), pow2(1)
    G.bmm_fp8(A, B, s, s, BF16, backend="auto")
    assert G.bmm_fp8.suitable_auto_backends == ["cutlass", "cublas", "cudnn", "mudnn"]
    G.bmm_fp8(A.to(torch.float8_e5m2), B, s, s, BF16, skip_check=True)  # cutlass takes no e5m2
    assert G.bmm_fp8.suitable_auto_backends == ["cublas", "cudnn", "mudnn"]
    G.bmm_fp8(A, B, s, s, BF16, backend="cublas")
    assert G.bmm_fp8.suitable_auto_backends == ["cublas", "cudnn", "mudnn"]

    A16, B16 = torch.randn(1, 2, 32, dtype=BF16), torch.randn(1, 32, 4, dtype=BF16)
    G.bmm_bf16(A16, B16, out_dtype=torch.float32)  # tgv: bf16 output only; cutile never
    assert G.bmm_bf16.suitable_auto_backends == ["cudnn", "cutlass", "mudnn"]
    G.bmm_bf16(A16, B16)
    assert G.bmm_bf16.suitable_auto_backends == ["cudnn", "cutlass", "tgv", "mudnn"]

    a, b = fp8(2, 256), fp8(128, 256)
    G.gemm_fp8_nt_groupwise(a, b, pow2(2, 2), pow2(2, 1), "MN", backend="auto")
    assert G.gemm_fp8_nt_groupwise.suitable_auto_backends == ["cutlass", "trtllm", "mudnn"]

    ids = torch.tensor([0, 2], dtype=torch.int32)
    G.group_gemm_fp8_nt_groupwise(a, fp8(1, 128, 256), pow2(2, 2), pow2(1, 2, 1), ids, backend="auto")
    assert G.group_gemm_fp8_nt_groupwise.suitable_auto_backends == ["trtllm", "mubin"]


def test_checks_upstream_makes_in_cpp_raise_runtime_error_and_value_error():
    """Upstream's C++ checks surface as RuntimeError; ours are Python checks, ValueError like the
    rest: the error is both, so ``except`` clauses written for either keep working."""
    A, B, s = fp8(2, 3, 64), fp8(2, 5, 64).transpose(1, 2), pow2(1)
    calls = [
        lambda: G.bmm_fp8(A, B, s, s, BF16, torch.empty(2, 3, 6, dtype=BF16)),
        lambda: G.bmm_fp8(A, fp8(2, 5, 32).transpose(1, 2), s, s, BF16),
        lambda: G.bmm_bf16(A.to(BF16), B[:, :32].to(BF16)),
        lambda: G.gemm_fp8_nt_groupwise(fp8(2, 256), fp8(128, 256), pow2(2, 2), pow2(1, 2), "K", mma_sm=3),
        lambda: G.gemm_fp8_nt_groupwise(
            fp8(2, 256), fp8(128, 256), pow2(2, 2), pow2(1, 2), "K", scale_granularity_mnk=(1, 64, 128)
        ),
    ]
    for call in calls:
        for exc in (RuntimeError, ValueError):
            with pytest.raises(exc):
                call()


def test_skip_check_still_refuses_a_missing_fp8_scale():
    """The implementations read a None scale as 1 (the 16-bit form): under skip_check that would
    be a silent wrong answer."""
    A, B = fp8(1, 2, 32), fp8(1, 4, 32).transpose(1, 2)
    for scales in ((None, pow2(1)), (pow2(1), None)):
        with pytest.raises(TypeError, match="_scale`"):
            G.bmm_fp8(A, B, *scales, BF16, skip_check=True)


def test_mma_sm_is_upstreams_cutlass_rule_only():
    a, b, sa, sb = fp8(2, 256), fp8(128, 256), pow2(2, 2), pow2(1, 2)
    for mma_sm in (1, 2):
        G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", mma_sm=mma_sm)
    G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", mma_sm=3, backend="trtllm")  # the trtllm runner ignores it
    with pytest.raises(RuntimeError, match="`mma_sm`"):
        G.gemm_fp8_nt_blockscaled(fp8(128, 256), b, pow2(2, 1), pow2(2, 1), mma_sm=0)


@pytest.mark.parametrize("op_name", ["group_deepgemm_fp8_nt_groupwise", "batch_deepgemm_fp8_nt_groupwise"])
def test_deepgemm_apis_have_no_backend_choices_but_run_on_every_capability(op_name):
    fn = OPS_BY_NAME[op_name].fn
    assert not fn.has_backend_choices()
    assert all(fn.is_compute_capability_supported(cc) for cc in (31, 90, 100, 120))


@pytest.mark.parametrize(
    "implementation, op",
    [p for p in FIRST if hasattr(p.values[1].fn, "is_backend_supported")],
    indirect=["implementation"],
)
def test_skip_check_runs_the_same_math(implementation, op, seed):
    run_sample(op, build(op, op.samples()[0].name), skip_check=True)


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
    assert_matches(out[1, :9], *oracle_groupwise(a[1, :9], b[1], sa[1, :9], sb[1], 1, 128, 128))


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
