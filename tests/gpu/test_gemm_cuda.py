"""The NVIDIA GEMM path (``flashinfer.gemm._cuda``) at real sizes, against float64 oracles.

Inputs are FP8 values and power-of-two scales (exact in float64), so the error left is the fp32
accumulation and the final cast: one output ulp, plus a norm-relative term for cuBLAS's fast FP8
accumulation (per-tensor ``bmm_fp8``, as upstream's cuBLAS backend uses). Outputs are poisoned
with NaN, and rows that must stay untouched are checked to still be NaN. Every function is also
captured in a CUDA graph and replayed on new inputs copied into the captured buffers.
"""

from __future__ import annotations

import pytest
import torch
from cuda_inputs import E4M3, deepgemm_m_indices, fp8, nan_like, needs_fp8, pow2, replay_with_new_inputs
from oracles import assert_within_rms as check
from oracles import contiguous_dequant_oracle as contiguous_oracle
from oracles import expand_blocks
from oracles import groupwise_dequant_oracle as groupwise_oracle

from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked, Groupwise

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

E5M2 = torch.float8_e5m2
# Hopper's FP8 tensor cores accumulate with fewer bits than fp32 (about 14 mantissa bits).
# Per-tensor FP8 products accumulate all of k that way (cuBLAS fast accumulation, as upstream's
# cublas backend, and Triton's default on sm90): slack relative to the output's rms.
FAST_ACCUM_TOL = 2e-2
# Block-scaled products promote to fp32 after every 128-wide K block (DeepGEMM's scheme).
BLOCK_ACCUM_TOL = 2e-3


def cuda_module():
    from flashinfer.gemm import _cuda

    return _cuda


# ---------------------------------------------------------------------------------------------
# bmm, 16-bit


@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_bmm_16bit(seed, in_dtype, out_dtype):
    batch, m, k, n = 16, 128, 2688, 512
    A = torch.randn(batch, m, k, device="cuda").to(in_dtype)
    B = torch.randn(batch, n, k, device="cuda").to(in_dtype).transpose(1, 2)
    out = nan_like((batch, m, n), out_dtype)
    cuda_module().bmm(Bmm(A, B, out))
    # cuBLAS may reduce split-K partial sums in 16 bits (PyTorch's default): one ulp of the rms
    check(out, A.double() @ B.double(), out_dtype, norm_tol=4e-3)


def test_bmm_16bit_strided_out(seed):
    A = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(4, 256, 96, device="cuda", dtype=torch.bfloat16)
    buffer = nan_like((4, 96, 128), torch.float32)
    out = buffer[:, :, :64].transpose(1, 2)
    cuda_module().bmm(Bmm(A, B, out))
    check(out, A.double() @ B.double(), torch.float32)
    assert buffer[:, :, 64:].isnan().all()


# ---------------------------------------------------------------------------------------------
# bmm, FP8


FP8_PAIRS = [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3), (E5M2, E5M2)]


@pytest.mark.parametrize("a_dtype,b_dtype", FP8_PAIRS, ids=str)
@pytest.mark.parametrize("batch,m,k,n", [(1, 48, 2688, 10304), (1, 1, 7168, 2112), (16, 48, 256, 80)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_bmm_fp8_per_tensor(seed, a_dtype, b_dtype, batch, m, k, n, out_dtype):
    needs_fp8()
    A = fp8((batch, m, k), a_dtype)
    B = fp8((batch, n, k), b_dtype).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2(())
    out = nan_like((batch, m, n), out_dtype)
    cuda_module().bmm(Bmm(A, B, out, A_scale, B_scale))
    check(out, (A.double() @ B.double()) * A_scale.double() * B_scale.double(), out_dtype, FAST_ACCUM_TOL)


@pytest.mark.parametrize("tokens", [1, 64, 512])
@pytest.mark.parametrize("path", ["q", "v"])
def test_bmm_fp8_mla_absorb(seed, tokens, path):
    """sglang's MLA absorb products: 128 heads, column-major weights, positional out."""
    needs_fp8()
    k, n = (128, 512) if path == "q" else (512, 128)
    A = fp8((128, tokens, k))
    B = fp8((128, n, k)).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2(())
    out = nan_like((128, tokens, n), torch.bfloat16)
    cuda_module().bmm(Bmm(A, B, out, A_scale, B_scale))
    check(
        out, (A.double() @ B.double()) * A_scale.double() * B_scale.double(), torch.bfloat16, FAST_ACCUM_TOL
    )


def test_bmm_fp8_repeat_calls_take_the_cached_tile(seed):
    """After a shape bucket's first (autotuned) call, launches skip the Autotuner and the JIT
    dispatch (``TunedLaunch``/``FastLaunch``): row counts of the same bucket, rows not divisible
    by 16 and an output at another pointer alignment are all exact."""
    needs_fp8()
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    B = fp8((128, 512, 128)).transpose(1, 2)
    scale = pow2(())
    # 65-128 rows share one autotune bucket; an offset of 4 elements is 8 bytes (not 16-aligned)
    for tokens, offset in ((96, 0), (80, 0), (77, 0), (96, 4), (65, 4)):
        A = fp8((128, tokens, 128))
        buf = nan_like((128 * tokens * 512 + 16,), torch.bfloat16)
        out = buf[offset : offset + 128 * tokens * 512].view(128, tokens, 512)
        cuda_module().bmm(Bmm(A, B, out, scale, scale))
        oracle = (A.double() @ B.double()) * scale.double() ** 2
        check(out, oracle, torch.bfloat16, FAST_ACCUM_TOL)
    if fp8_bmm._TUNED.fast.enabled:
        # one entry per (rows divisible by 16, output alignment): 96/80, 77, 96 at +8 bytes, 65 at +8
        assert len(fp8_bmm._TUNED.fast._compiled) >= 2


@pytest.mark.parametrize("k,n", [(128, 512), (512, 128)])
@pytest.mark.parametrize(
    "tile", [(128, 128, 8, 3, 1), (128, 128, 8, 2, 2), (64, 128, 4, 3, 2), (128, 128, 8, 3, 0)], ids=str
)
def test_bmm_fp8_every_tile_kind(seed, k, n, tile):
    """The persistent and one-program-a-tile kernels, one K step (k = 128) or a K loop, at an
    MLA absorb shape, whichever the autotuner would pick."""
    needs_fp8()
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    bm, bn, warps, stages, per_sm = tile
    A = fp8((128, 300, k))
    B = fp8((128, n, k)).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2((128, 1, n))
    out = nan_like((128, 300, n), torch.bfloat16)
    config = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "GROUP_M": 8, "PROGRAMS_PER_SM": per_sm,
              "num_warps": warps, "num_stages": stages}  # fmt: skip
    fp8_bmm.fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=config)
    check(
        out, (A.double() @ B.double()) * A_scale.double() * B_scale.double(), torch.bfloat16, FAST_ACCUM_TOL
    )


@pytest.mark.parametrize("batch", [1, 8])
def test_bmm_fp8_channelwise_and_strided(seed, batch):
    needs_fp8()
    m, k, n = 96, 512, 256
    A = fp8((batch, m, k))
    B = fp8((batch, n, k)).transpose(1, 2)
    A_scale, B_scale = pow2((batch, m, 1)), pow2((batch, 1, n))
    out = nan_like((batch, m, n), torch.bfloat16)
    cuda_module().bmm(Bmm(A, B, out, A_scale, B_scale))
    oracle = (A.double() @ B.double()) * A_scale.double() * B_scale.double()
    check(out, oracle, torch.bfloat16, FAST_ACCUM_TOL)
    buffer = nan_like((batch, n, 2 * m), torch.float16)
    strided = buffer[:, :, ::2].transpose(1, 2)
    cuda_module().bmm(Bmm(A, B, strided, A_scale, B_scale))
    check(strided, oracle, torch.float16, FAST_ACCUM_TOL)
    assert buffer[:, :, 1::2].isnan().all()


# ---------------------------------------------------------------------------------------------
# gemm_groupwise


GROUPWISE_SHAPES = [(1, 7168, 2048), (64, 2112, 7168), (300, 24576, 1536), (4096, 4096, 7168)]


@pytest.mark.parametrize("m,n,k", GROUPWISE_SHAPES)
@pytest.mark.parametrize("granularity", [(1, 128, 128), (128, 128, 128)], ids=str)
@pytest.mark.parametrize("mn_major", [False, True], ids=["K-major", "MN-major"])
def test_gemm_groupwise(seed, m, n, k, granularity, mn_major):
    needs_fp8()
    gm, gn, gk = granularity
    a, b = fp8((m, k)), fp8((n, k))
    a_scale = pow2((-(-m // gm), -(-k // gk)))
    b_scale = pow2((-(-n // gn), -(-k // gk)))
    if mn_major:
        a_scale, b_scale = a_scale.t().contiguous().t(), b_scale.t().contiguous().t()
    out = nan_like((m, n), torch.bfloat16)
    cuda_module().gemm_groupwise(Groupwise(a, b, a_scale, b_scale, False, False, gm, gn, gk, out))
    check(out, groupwise_oracle(a, b, a_scale, b_scale, granularity), torch.bfloat16, BLOCK_ACCUM_TOL)


@pytest.mark.parametrize("m,n,k", [(100, 2112, 200), (64, 1000, 7168), (256, 4096, 1536)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gemm_groupwise_triton_shapes(seed, m, n, k, out_dtype):
    """Shapes or dtypes cuBLASLt's block scaling does not take (k % 128, n % 16, fp16 out)."""
    needs_fp8()
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((m, -(-k // 128))), pow2((-(-n // 128), -(-k // 128)))
    out = nan_like((m, n), out_dtype)
    cuda_module().gemm_groupwise(Groupwise(a, b, a_scale, b_scale, False, False, 1, 128, 128, out))
    check(out, groupwise_oracle(a, b, a_scale, b_scale, (1, 128, 128)), out_dtype, BLOCK_ACCUM_TOL)


def test_gemm_groupwise_fp8_output(seed):
    needs_fp8()
    m, n, k = 256, 2112, 7168
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((m, 56)), pow2((17, 56))
    out = nan_like((m, n), torch.float32).to(E4M3)
    output_scale = nan_like((m, 17), torch.float32)
    cuda_module().gemm_groupwise(
        Groupwise(a, b, a_scale, b_scale, False, False, 1, 128, 128, out, output_scale)
    )
    acc = groupwise_oracle(a, b, a_scale, b_scale, (1, 128, 128))
    padded = torch.nn.functional.pad(acc, (0, 17 * 128 - n))
    expected_scale = padded.abs().view(m, 17, 128).amax(-1).clamp_min(1e-12) / 448
    # block amaxes come from the tensor-core accumulator (see BLOCK_ACCUM_TOL)
    torch.testing.assert_close(output_scale.double(), expected_scale, rtol=BLOCK_ACCUM_TOL, atol=0)
    per_element = output_scale.double().repeat_interleave(128, 1)[:, :n]
    dequantized = out.double() * per_element
    # half an e4m3 ulp (2**-4 relative), the smallest subnormal step, and the accumulation slack
    bound = acc.abs() * 2**-4 + per_element * 2**-9 + BLOCK_ACCUM_TOL * acc.pow(2).mean().sqrt()
    assert ((dequantized - acc).abs() <= bound).all()


# ---------------------------------------------------------------------------------------------
# grouped GEMMs


def grouped_operands(groups, rows, n, k):
    return fp8((rows, k)), fp8((groups, n, k)), pow2((rows, k // 128)), pow2((groups, n // 128, k // 128))


@pytest.mark.parametrize("n,k", [(4096, 7168), (7168, 2048), (512, 128)])
def test_group_gemm_contiguous(seed, n, k):
    needs_fp8()
    m_indices = deepgemm_m_indices([128, 200, 0, 384, 77])
    rows = m_indices.numel()
    a, b, a_scale, b_scale = grouped_operands(5, rows, n, k)
    out = nan_like((rows, n), torch.bfloat16)
    cuda_module().group_gemm_contiguous(GroupedContiguous(a, b, a_scale, b_scale, m_indices, out))
    valid = m_indices >= 0
    assert out[~valid].isnan().all()
    check(
        out[valid],
        contiguous_oracle(a, b, a_scale, b_scale, m_indices)[valid],
        torch.bfloat16,
        BLOCK_ACCUM_TOL,
    )


def test_group_gemm_contiguous_ragged(seed):
    """Rows in any order, including ids -1 and >= G: exact per row."""
    needs_fp8()
    m_indices = torch.randint(-1, 6, (1000,), device="cuda").int()
    a, b, a_scale, b_scale = grouped_operands(4, 1000, 256, 512)
    out = nan_like((1000, 256), torch.bfloat16)
    cuda_module().group_gemm_contiguous(GroupedContiguous(a, b, a_scale, b_scale, m_indices, out))
    valid = (m_indices >= 0) & (m_indices < 4)
    assert out[~valid].isnan().all()
    check(
        out[valid],
        contiguous_oracle(a, b, a_scale, b_scale, m_indices)[valid],
        torch.bfloat16,
        BLOCK_ACCUM_TOL,
    )


@pytest.mark.parametrize("groups,m,n,k", [(8, 256, 4096, 7168), (4, 1024, 7168, 2048), (2, 64, 512, 128)])
def test_group_gemm_masked(seed, groups, m, n, k):
    needs_fp8()
    masked_m = torch.randint(0, m + 1, (groups,), device="cuda").int()
    masked_m[0] = 0
    masked_m[-1] = m
    a, b = fp8((groups, m, k)), fp8((groups, n, k))
    a_scale, b_scale = pow2((groups, m, k // 128)), pow2((groups, n // 128, k // 128))
    out = nan_like((groups, m, n), torch.bfloat16)
    expected_m = min(int(masked_m.float().mean()) + 1, m)
    cuda_module().group_gemm_masked(GroupedMasked(a, b, a_scale, b_scale, masked_m, expected_m, out))
    for g in range(groups):
        valid = int(masked_m[g])
        a_deq = a[g, :valid].double() * expand_blocks(a_scale[g, :valid], valid, k, 1, 128)
        b_deq = b[g].double() * expand_blocks(b_scale[g], n, k, 128, 128)
        check(out[g, :valid], a_deq @ b_deq.t(), torch.bfloat16, BLOCK_ACCUM_TOL)
        assert out[g, valid:].isnan().all()


# ---------------------------------------------------------------------------------------------
# CUDA graph capture and replay with new inputs in the captured buffers


def test_graph_bmm(seed):
    needs_fp8()
    A, B = fp8((128, 64, 128)), fp8((128, 512, 128)).transpose(1, 2)
    sa, sb = pow2(()), pow2(())
    out = nan_like((128, 64, 512), torch.bfloat16)
    A2, B2, sa2, sb2 = fp8(A.shape), fp8((128, 512, 128)).transpose(1, 2), pow2(()), pow2(())
    replay_with_new_inputs(
        lambda: cuda_module().bmm(Bmm(A, B, out, sa, sb)), (A, B, sa, sb), (A2, B2, sa2, sb2), out
    )
    check(out, (A2.double() @ B2.double()) * sa2.double() * sb2.double(), torch.bfloat16, FAST_ACCUM_TOL)

    X, W = (
        torch.randn(8, 256, 512, device="cuda").bfloat16(),
        torch.randn(8, 512, 256, device="cuda").bfloat16(),
    )
    out16 = nan_like((8, 256, 256), torch.float32)
    X2, W2 = torch.randn_like(X), torch.randn_like(W)
    replay_with_new_inputs(lambda: cuda_module().bmm(Bmm(X, W, out16)), (X, W), (X2, W2), out16)
    check(out16, X2.double() @ W2.double(), torch.float32)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_graph_gemm_groupwise(seed, out_dtype):
    needs_fp8()
    m, n, k = 128, 2112, 7168
    a, b, sa, sb = fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56))
    out = nan_like((m, n), out_dtype)
    fresh = (fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56)))
    replay_with_new_inputs(
        lambda: cuda_module().gemm_groupwise(Groupwise(a, b, sa, sb, False, False, 1, 128, 128, out)),
        (a, b, sa, sb),
        fresh,
        out,
    )
    check(out, groupwise_oracle(*fresh, (1, 128, 128)), out_dtype, BLOCK_ACCUM_TOL)


def test_graph_grouped(seed):
    needs_fp8()
    m_indices = deepgemm_m_indices([256, 100, 384])
    rows = m_indices.numel()
    a, b, sa, sb = grouped_operands(3, rows, 1024, 512)
    out = nan_like((rows, 1024), torch.bfloat16)
    fresh_ids = deepgemm_m_indices([128, 300, 200])[:rows]
    fresh = (*grouped_operands(3, rows, 1024, 512), fresh_ids)
    replay_with_new_inputs(
        lambda: cuda_module().group_gemm_contiguous(GroupedContiguous(a, b, sa, sb, m_indices, out)),
        (a, b, sa, sb, m_indices),
        fresh,
        out,
    )
    valid = fresh_ids >= 0
    assert out[~valid].isnan().all()
    check(out[valid], contiguous_oracle(*fresh)[valid], torch.bfloat16, BLOCK_ACCUM_TOL)

    groups, m = 4, 256
    a3, b3 = fp8((groups, m, 512)), fp8((groups, 1024, 512))
    sa3, sb3 = pow2((groups, m, 4)), pow2((groups, 8, 4))
    masked_m = torch.tensor([0, 10, 200, 256], dtype=torch.int32, device="cuda")
    out3 = nan_like((groups, m, 1024), torch.bfloat16)
    fresh_masked = torch.tensor([256, 3, 0, 129], dtype=torch.int32, device="cuda")
    replay_with_new_inputs(
        lambda: cuda_module().group_gemm_masked(GroupedMasked(a3, b3, sa3, sb3, masked_m, 128, out3)),
        (masked_m,),
        (fresh_masked,),
        out3,
    )
    for g in range(groups):
        valid = int(fresh_masked[g])
        a_deq = a3[g, :valid].double() * expand_blocks(sa3[g, :valid], valid, 512, 1, 128)
        b_deq = b3[g].double() * expand_blocks(sb3[g], 1024, 512, 128, 128)
        check(out3[g, :valid], a_deq @ b_deq.t(), torch.bfloat16, BLOCK_ACCUM_TOL)
        assert out3[g, valid:].isnan().all()


# ---------------------------------------------------------------------------------------------
# the public API on CUDA tensors (upstream's call forms)


def test_public_api_forms(seed):
    needs_fp8()
    import flashinfer.gemm as fg

    # sglang MLA absorb: all positional, (1,) scales, preallocated out
    A, B = fp8((16, 32, 128)), fp8((16, 512, 128)).transpose(1, 2)
    sa, sb = pow2((1,)), pow2((1,))
    out = nan_like((16, 32, 512), torch.bfloat16)
    assert fg.bmm_fp8(A, B, sa, sb, out.dtype, out) is out
    check(out, (A.double() @ B.double()) * sa.double() * sb.double(), torch.bfloat16, FAST_ACCUM_TOL)

    # vLLM per-tensor linear: 0-dim scales, backend positional
    a, w = fp8((1, 64, 2048)), fp8((1, 7168, 2048)).transpose(1, 2)
    res = fg.bmm_fp8(a, w, pow2(()), pow2(()), torch.bfloat16, None, "auto")
    assert res.shape == (1, 64, 7168) and res.is_contiguous()

    # bmm_bf16 with fp32 out
    X, W = torch.randn(4, 48, 64, device="cuda").bfloat16(), torch.randn(4, 80, 64, device="cuda").bfloat16()
    out32 = nan_like((4, 48, 80), torch.float32)
    fg.bmm_bf16(X, W.transpose(1, 2), out=out32, out_dtype=torch.float32)
    check(out32, X.double() @ W.double().transpose(1, 2), torch.float32)

    # sglang cutlass groupwise with MN-major scales
    m, n, k = 64, 2112, 7168
    a2, b2 = fp8((m, k)), fp8((n, k))
    xs, ws = pow2((k // 128, m)), pow2((k // 128, -(-n // 128)))
    y = fg.gemm_fp8_nt_groupwise(
        a2, b2, xs, ws, out_dtype=torch.bfloat16, backend="cutlass", scale_major_mode="MN"
    )
    check(y, groupwise_oracle(a2, b2, xs.t(), ws.t(), (1, 128, 128)), torch.bfloat16, BLOCK_ACCUM_TOL)

    # DeepGEMM grouped forms
    G, rows = 4, 512
    m_indices = torch.arange(G, device="cuda", dtype=torch.int32).repeat_interleave(rows // G)
    ga, gb, gsa, gsb = grouped_operands(G, rows, 512, 256)
    gout = fg.group_deepgemm_fp8_nt_groupwise(ga, gb, gsa, gsb, m_indices, out_dtype=torch.bfloat16)
    check(gout, contiguous_oracle(ga, gb, gsa, gsb, m_indices), torch.bfloat16, BLOCK_ACCUM_TOL)
    masked_m = torch.tensor([5, 0, 128, 64], dtype=torch.int32, device="cuda")
    ma, mb = fp8((G, 128, 256)), fp8((G, 512, 256))
    msa, msb = pow2((G, 128, 2)), pow2((G, 4, 2))
    mout = fg.batch_deepgemm_fp8_nt_groupwise(ma, mb, msa, msb, masked_m, 50, out_dtype=torch.bfloat16)
    for g in range(G):
        valid = int(masked_m[g])
        a_deq = ma[g, :valid].double() * expand_blocks(msa[g, :valid], valid, 256, 1, 128)
        b_deq = mb[g].double() * expand_blocks(msb[g], 512, 256, 128, 128)
        check(mout[g, :valid], a_deq @ b_deq.t(), torch.bfloat16, BLOCK_ACCUM_TOL)
