"""The shared rule vocabulary of ``flashinfer._core.checks``: each rule passes what it allows and
names the argument, what was expected and what came when it fails."""

from __future__ import annotations

import pytest
import torch

from flashinfer._core import checks

E4M3 = torch.float8_e4m3fn
META = torch.device("meta")


def fp8(*shape):
    return torch.randn(*shape).to(E4M3)


def test_device_rule_names_the_anchor():
    x = torch.randn(3)
    checks.check_device(x, "b", x.device, "a")
    with pytest.raises(
        ValueError, match=r"expected a tensor on meta \(the device of `a`\) for `b`, got a tensor on cpu"
    ):
        checks.check_device(x, "b", META, "a")
    with pytest.raises(RuntimeError, match="the device of `a`"):  # the op's upstream type
        checks.check_device(x, "b", META, "a", RuntimeError)


def test_last_dim_contiguous_rule():
    for x in (
        torch.randn(2, 3),
        torch.randn(4, 6)[:, :3],
        torch.randn(3, 1).t().t(),
        torch.randn(()),
        torch.randn(3, 1)[::2],
    ):
        checks.check_last_dim_contiguous(x, "x")
    with pytest.raises(
        RuntimeError, match=r"last dimension is contiguous \(stride 1; major_a must be KMajor\) for `a`"
    ):
        checks.check_last_dim_contiguous(torch.randn(3, 2).t(), "a", RuntimeError, "major_a must be KMajor")


def test_op_modules_do_not_reuse_the_rule_names():
    """One name, one rule: no op module defines a function named like a shared rule."""
    import inspect

    import flashinfer.gemm._bmm
    import flashinfer.gemm._deepgemm_fp8_nt
    import flashinfer.gemm._fp8_blockscale_gemm_sm90
    import flashinfer.gemm._gemm_fp8_nt
    import flashinfer.gemm._group_gemm_fp8_nt
    import flashinfer.mla._checks
    import flashinfer.mla._packed_decode
    import flashinfer.mla._rope
    import flashinfer.mla._unpacked_decode

    rules = {name.lstrip("_") for name, f in vars(checks).items() if inspect.isfunction(f)}
    for module in (
        flashinfer.gemm._bmm,
        flashinfer.gemm._deepgemm_fp8_nt,
        flashinfer.gemm._fp8_blockscale_gemm_sm90,
        flashinfer.gemm._gemm_fp8_nt,
        flashinfer.gemm._group_gemm_fp8_nt,
        flashinfer.mla._checks,
        flashinfer.mla._packed_decode,
        flashinfer.mla._rope,
        flashinfer.mla._unpacked_decode,
    ):
        own = {
            name.lstrip("_")
            for name, f in vars(module).items()
            if inspect.isfunction(f) and f.__module__ == module.__name__
        }
        assert not own & rules, (module.__name__, own & rules)


@pytest.mark.parametrize("k", [1, 16])
def test_k_major_rule(k):
    a = fp8(8, k)
    checks.check_k_major(a, "a")
    checks.check_k_major(fp8(2, 8, k), "a", 2)
    transposed = fp8(k, 8).t()
    if k == 1:  # one element along k has no stride to honour
        checks.check_k_major(transposed, "a")
        return
    with pytest.raises(ValueError, match=r"K-major .* for `a`, got .* strides \(1, 8\)"):
        checks.check_k_major(transposed, "a")


def test_fp8_rule_lists_the_dtypes_allowed():
    checks.check_fp8(fp8(2), "a")
    checks.check_fp8(torch.randn(2).to(torch.float8_e5m2), "a", checks.FP8)
    with pytest.raises(
        ValueError, match=r"dtype torch.float8_e4m3fn \(FP8 operand\) for `b`, got dtype torch.float8_e5m2"
    ):
        checks.check_fp8(torch.randn(2).to(torch.float8_e5m2), "b")
    with pytest.raises(TypeError, match="float8_e4m3fn or torch.float8_e5m2 .* got dtype torch.bfloat16"):
        checks.check_fp8(torch.randn(2, dtype=torch.bfloat16), "A", checks.FP8, TypeError)


def test_scale_rule_checks_dtype_shape_and_device_in_that_order():
    scale = torch.rand(2, 3) + 0.5
    checks.check_scale(scale, "a_scale", (2, 3), scale.device, "a")
    checks.check_scale(scale, "a_scale", None, scale.device, "a")
    with pytest.raises(ValueError, match=r"dtype torch.float32 .* for `a_scale`, got dtype torch.float16"):
        checks.check_scale(scale.half(), "a_scale", (9, 9), META, "a")
    with pytest.raises(ValueError, match=r"shape \(3, 2\) for `a_scale`, got shape \(2, 3\)"):
        checks.check_scale(scale, "a_scale", (3, 2), META, "a")
    with pytest.raises(ValueError, match=r"the device of `a`\) for `a_scale`"):
        checks.check_scale(scale, "a_scale", (2, 3), META, "a")


def test_out_rule_checks_shape_dtype_device():
    out = torch.randn(2, 3, dtype=torch.bfloat16)
    checks.check_out(out, (2, 3), torch.bfloat16, out.device)
    with pytest.raises(
        ValueError, match=r"shape \(3, 2\) \(output shape mismatch\) for `out`, got shape \(2, 3\)"
    ):
        checks.check_out(out, (3, 2), torch.bfloat16, out.device)
    with pytest.raises(
        ValueError, match=r"output dtype mismatch with `dtype`\) for `out`, got dtype torch.bfloat16"
    ):
        checks.check_out(out, (2, 3), torch.float16, out.device, "with `dtype`")
    with pytest.raises(ValueError, match="output device mismatch"):
        checks.check_out(out, (2, 3), torch.bfloat16, META)


def test_overlap_rule_names_the_input_shared():
    buffer = torch.randn(4, 8)
    a, out = buffer[:2], buffer[1:3]
    checks.check_no_overlap(torch.randn(2, 8), "out", ("a",), a)
    checks.check_no_overlap(buffer[2:], "out", ("a",), a)
    with pytest.raises(ValueError, match="does not overlap `a`"):
        checks.check_no_overlap(out, "out", ("a",), a)


def test_k_major_rule_along_another_dimension_of_a_contiguous_tensor():
    """A contiguous tensor is K-major along its last dimension only: the rule's fast path for
    contiguous tensors must not pass a reduction dimension that is not the last."""
    checks.check_k_major(fp8(2, 16, 8).transpose(1, 2), "B", 1)
    with pytest.raises(ValueError, match=r"K-major tensor \(stride 1 along k, dimension 1\) for `B`"):
        checks.check_k_major(fp8(2, 8, 16), "B", 1)
