"""Every GEMM call pattern of spec/callers.md G1-G7 and section 5.1, verbatim, on the reference
and on the MATE adapter (stand-in). Oracles and tolerances: ``tests/oracles.py``."""

from __future__ import annotations

import pytest
import torch
from oracles import BF16, E4M3, FP16, FP32, assert_matches, fp8, oracle_bmm, oracle_groupwise, pow2


@pytest.fixture(params=["reference", "mate"])
def implementation(request):
    if request.param == "mate":
        request.getfixturevalue("mate_standin")
    return request.param


def test_g1_sglang_mla_absorbed_bmm_fp8_all_positional(implementation, seed):
    from flashinfer import bmm_fp8 as _raw_bmm_fp8_batched

    H, T = 16, 1
    q_nope_val = fp8(H, T, 128)
    w = fp8(H, 128, 512)
    w_kc = w.transpose(1, 2).contiguous().transpose(1, 2)  # column-major per batch
    assert w_kc.stride() == (128 * 512, 1, 128)
    A_scale, B_scale = pow2(1), pow2(1)
    out = torch.empty((q_nope_val.shape[0], q_nope_val.shape[1], w_kc.shape[2]), dtype=BF16)
    out.fill_(float("nan"))
    result = _raw_bmm_fp8_batched(q_nope_val, w_kc, A_scale, B_scale, out.dtype, out)
    assert result is out
    assert_matches(out, *oracle_bmm(q_nope_val, w_kc, A_scale, B_scale))
    # v path: [H, T, 512] x w_vc [H, 512, 128] column-major
    attn = fp8(H, 3, 512)
    w_vc = fp8(H, 128, 512).contiguous().transpose(1, 2)
    out = torch.full((H, 3, 128), float("nan"), dtype=BF16)
    _raw_bmm_fp8_batched(attn, w_vc, A_scale, B_scale, out.dtype, out)
    assert_matches(out, *oracle_bmm(attn, w_vc, A_scale, B_scale))


def test_g2_sglang_per_tensor_fp8_linear(implementation, seed):
    from flashinfer import bmm_fp8 as _raw_flashinfer_bmm_fp8

    m, k, n = 5, 256, 64
    q_input = fp8(m, k)
    weight = fp8(n, k).t()  # [K, N] column-major
    x_scale, weight_scale = pow2(1).reshape(()), pow2(1, 1)
    out_dtype = BF16
    result = _raw_flashinfer_bmm_fp8(
        q_input.unsqueeze(0),
        weight.unsqueeze(0),
        x_scale.reshape(1),
        weight_scale.reshape(1),
        out_dtype,
        backend="cublas",
    ).view(m, n)
    ref, ref_abs = oracle_bmm(q_input[None], weight[None], x_scale, weight_scale.reshape(()))
    assert_matches(result, ref[0], ref_abs[0])


@pytest.mark.parametrize("scale_shape", [(), (1,)])
def test_g3_vllm_scaled_mm(implementation, seed, scale_shape):
    from flashinfer import bmm_fp8 as bmm_fp8_

    M, K, N = 7, 128, 48
    a = fp8(M, K)
    b = fp8(N, K).t()
    assert b.stride() == (1, K)
    scale_a, scale_b = pow2(1).reshape(scale_shape), pow2(1).reshape(scale_shape)
    ref, ref_abs = oracle_bmm(a[None], b[None], scale_a.reshape(()), scale_b.reshape(()))
    # the custom op: all positional, out None
    result = bmm_fp8_(a.unsqueeze(0), b.unsqueeze(0), scale_a, scale_b, BF16, None, "auto")
    assert_matches(result, ref, ref_abs)
    # flashinfer_scaled_fp8_mm
    result = bmm_fp8_(a.unsqueeze(0), b.unsqueeze(0), scale_a, scale_b, FP16, "auto").view(M, N)
    assert_matches(result, ref[0], ref_abs[0])
    # the _out variant: a preallocated 2-D buffer viewed as 3-D
    out = torch.full((M, N), float("nan"), dtype=BF16)
    assert a.is_contiguous()
    returned = bmm_fp8_(
        a.unsqueeze(0), b.unsqueeze(0), scale_a, scale_b, None or out.dtype, out.unsqueeze(0), "auto"
    )
    assert returned.data_ptr() == out.data_ptr()
    assert_matches(out, ref[0], ref_abs[0])


def test_g4_vllm_musa_scaled_mm(implementation, seed):
    from flashinfer import bmm_fp8

    def _as_mate_scalar_scale(scale):
        return scale.reshape(())

    M, K, N = 3, 64, 32
    a, b = fp8(M, K), fp8(N, K).t()
    a_scale, b_scale = pow2(1), pow2(1)
    result = bmm_fp8(
        a.unsqueeze(0), b.unsqueeze(0), _as_mate_scalar_scale(a_scale), _as_mate_scalar_scale(b_scale), FP16,
        out=None, backend="auto",
    ).view(M, N)  # fmt: skip
    ref, ref_abs = oracle_bmm(a[None], b[None], a_scale.reshape(()), b_scale.reshape(()))
    assert_matches(result, ref[0], ref_abs[0])


def test_g5_sglang_block_fp8_cutlass_mn_major(implementation, seed):
    from flashinfer.gemm import gemm_fp8_nt_groupwise as _raw_gemm_fp8_nt_groupwise

    M, N, K = 9, 256, 512
    q_input, weight = fp8(M, K), fp8(N, K)
    sa, sb = pow2(M, K // 128), pow2(N // 128, K // 128)
    x_scale, weight_scale = sa.t().contiguous(), sb.t().contiguous()  # (K/128, M), (K/128, N/128)
    result = _raw_gemm_fp8_nt_groupwise(
        q_input, weight, x_scale.contiguous(), weight_scale.contiguous(), out_dtype=BF16, backend="cutlass",
        scale_major_mode="MN",
    )  # fmt: skip
    assert result.shape == (M, N) and result.dtype == BF16 and result.is_contiguous()
    assert_matches(result, *oracle_groupwise(q_input, weight, sa, sb, 1, 128, 128))


def test_g6_sglang_block_fp8_trtllm_column_major_a_scale(implementation, seed):
    from flashinfer.gemm import gemm_fp8_nt_groupwise as _raw_gemm_fp8_nt_groupwise

    M, N, K = 6, 128, 256
    q_input, weight = fp8(M, K), fp8(N, K)
    sa, sb = pow2(M, K // 128), pow2(N // 128, K // 128)
    x_scale = sa.t().contiguous().t()  # (M, K/128) column-major, non-contiguous
    assert not x_scale.is_contiguous()
    result = _raw_gemm_fp8_nt_groupwise(q_input, weight, x_scale, sb, out_dtype=BF16, backend="trtllm")
    assert_matches(result, *oracle_groupwise(q_input, weight, sa, sb, 1, 128, 128))


def test_g7_grouped_and_bmm_bf16_forms(implementation, seed):
    import flashinfer
    from flashinfer.gemm import batch_deepgemm_fp8_nt_groupwise, bmm_bf16, group_deepgemm_fp8_nt_groupwise

    # contiguous grouped: test form, then benchmark form with out= and arange(G).repeat_interleave(m)
    groups, m, n, k = 2, 128, 128, 256
    a_fp8, b_fp8 = fp8(groups * m, k), fp8(groups, n, k)
    a_scale, b_scale = pow2(groups * m, k // 128), pow2(groups, n // 128, k // 128)
    m_indices = torch.arange(groups, dtype=torch.int32).repeat_interleave(m)
    result = group_deepgemm_fp8_nt_groupwise(
        a_fp8, b_fp8, a_scale, b_scale, m_indices, out_dtype=torch.bfloat16
    )
    for g in range(groups):
        rows = slice(g * m, (g + 1) * m)
        assert_matches(
            result[rows], *oracle_groupwise(a_fp8[rows], b_fp8[g], a_scale[rows], b_scale[g], 1, 128, 128)
        )
    out = torch.full((groups * m, n), float("nan"), dtype=BF16)
    assert group_deepgemm_fp8_nt_groupwise(a_fp8, b_fp8, a_scale, b_scale, m_indices, out=out) is out
    assert torch.equal(out, result)
    # masked: test form; only rows < masked_m are checked
    a, a_s = fp8(groups, 64, k), pow2(groups, 64, k // 128)
    masked_m = torch.tensor([17, 0], dtype=torch.int32)
    expected_m = min(int(masked_m.float().mean()) + 1, 64)
    result = batch_deepgemm_fp8_nt_groupwise(
        a, b_fp8, a_s, b_scale, masked_m, expected_m, out_dtype=torch.bfloat16
    )
    assert_matches(
        result[0, :17], *oracle_groupwise(a[0, :17], b_fp8[0], a_s[0, :17], b_scale[0], 1, 128, 128)
    )
    # example form: G = 1, masked_m = [m], b_scale transposed to (1, n_blocks, k_blocks)
    b_scale_mn = pow2(1, k // 128, n // 128)
    out = batch_deepgemm_fp8_nt_groupwise(
        a[:1], b_fp8[:1], a_s[:1], b_scale_mn.transpose(1, 2), torch.tensor([64], dtype=torch.int32), 64
    )
    sb = b_scale_mn.transpose(1, 2)[0]
    assert_matches(out[0], *oracle_groupwise(a[0], b_fp8[0], a_s[0], sb, 1, 128, 128))
    # bmm_bf16: test, benchmark and example forms
    A = torch.randn(2, 48, 64).to(BF16)
    B = torch.randn(2, 80, 64).to(BF16).transpose(-2, -1)
    ref = oracle_bmm(A, B)
    for res_dtype in (BF16, FP16, FP32):
        out = torch.full((2, 48, 80), float("nan"), dtype=res_dtype)
        with flashinfer.autotune():
            bmm_bf16(A, B, out=out, out_dtype=res_dtype, backend="cudnn")
        assert_matches(out, *ref)
    assert_matches(flashinfer.bmm_bf16(A=A, B=B, out_dtype=BF16, backend="auto"), *ref)
    assert_matches(flashinfer.bmm_bf16(A, B, backend="cutlass"), *ref)


def test_section_5_1_keyword_forms(implementation, seed):
    import flashinfer

    A, B = fp8(1, 4, 128), fp8(1, 32, 128).transpose(-2, -1)
    A_scale, B_scale = pow2(1), pow2(1)
    for backend in ("cudnn", "cublas", "cutlass", "auto"):
        result = flashinfer.gemm.bmm_fp8(
            A=A, B=B, A_scale=A_scale, B_scale=B_scale, dtype=BF16, backend=backend
        )
        assert_matches(result, *oracle_bmm(A, B, A_scale, B_scale))
    a, b = fp8(8, 256), fp8(128, 256)
    sa, sb = pow2(8, 2), pow2(1, 2)
    for mode in ("K", "MN"):
        a_scale = sa if mode == "K" else sa.t().contiguous()
        b_scale = sb if mode == "K" else sb.t().contiguous()
        result = flashinfer.gemm.gemm_fp8_nt_groupwise(
            a=a,
            b=b,
            a_scale=a_scale,
            b_scale=b_scale,
            scale_major_mode=mode,
            out_dtype=BF16,
            mma_sm=2,
            backend="cutlass",
        )
        assert_matches(result, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))
        out = torch.full((8, 128), float("nan"), dtype=BF16)
        assert (
            flashinfer.gemm.gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, out=out, scale_major_mode=mode)
            is out
        )
        assert_matches(out, *oracle_groupwise(a, b, sa, sb, 1, 128, 128))
    assert E4M3 == a.dtype
