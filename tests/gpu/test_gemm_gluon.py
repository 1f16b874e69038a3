"""The Hopper Gluon GEMM kernels (``kernels.blockwise.gluon_fp8_blockwise``, ``kernels.bmm.gluon_fp8_bmm``) on an
sm_90 GPU, against float64 oracles at real sizes.

Every tile configuration the launchers ship is run directly (``config=``), in every layout:
both scale majors, m not a multiple of the tile, k/128 odd and k not a multiple of 128, -1 and
out-of-range group ids, masked_m of 0 and of all rows (rows past it poisoned with NaN: they must
neither be written nor change a valid row), FP8 output with its scales, per-tensor and per-channel
batched scales. Then the routing of ``flashinfer.gemm._cuda`` under each kernel tier, and CUDA
graph capture after warm-up with new inputs copied into the captured buffers.

Inputs are FP8 values and power-of-two scales (exact in float64), so the error left is the
tensor cores' FP8 accumulation within a 128-deep block (``BLOCK_ACCUM_TOL`` of the output's rms)
or over the whole k for the batched kernel (``FAST_ACCUM_TOL``), and the final rounding. The
FP8 tensor cores keep fewer bits than float32 while they accumulate a block, and on some inputs
that takes an element past the block-scaled bound; there the block-scaled kernels must be no
worse than cuBLASLt's block-scaled GEMM on the same inputs, measured against the same oracle
(:func:`check_blockscaled`).
"""

from __future__ import annotations

import pytest
import torch
from cuda_inputs import (
    E4M3,
    cublas_blockscaled,
    deepgemm_m_indices,
    fp8,
    nan_like,
    pow2,
    replay_with_new_inputs,
)
from oracles import assert_within_rms as check
from oracles import contiguous_dequant_oracle as contiguous_oracle
from oracles import dequant, rms_bound_ratio

from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked, Groupwise

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BLOCK_ACCUM_TOL = 2e-3
FAST_ACCUM_TOL = 2e-2


@pytest.fixture(autouse=True)
def gluon_device():
    from flashinfer._core.kernel_tier import gluon_supported

    if not gluon_supported(torch.cuda.current_device()):
        pytest.skip("the Gluon kernels run on compute capability 9.0 with the Triton versions of kernel_tier")


def blockwise():
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise

    return gluon_fp8_blockwise


def batched():
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    return gluon_fp8_bmm


def groupwise(a, b, a_scale, b_scale, block_m, out, output_scale=None):
    """The record of a dense call with logical (K-major) scale views, 128 x 128 B blocks."""
    return Groupwise(a, b, a_scale, b_scale, False, False, block_m, 128, 128, out, output_scale)


def cdiv(a, b):
    return -(-a // b)


def check_blockscaled(out, oracle, dtype, cublas):
    """Within the block-scaled bound (``BLOCK_ACCUM_TOL``), or, past it, no worse than
    cuBLASLt's output ``cublas()`` on the same inputs against the same oracle and bound."""
    ours = rms_bound_ratio(out, oracle, dtype, BLOCK_ACCUM_TOL)
    if ours <= 1.0:
        return
    theirs = rms_bound_ratio(cublas(), oracle, dtype, BLOCK_ACCUM_TOL)
    assert ours <= theirs, f"max error / bound = {ours:.3g}; cuBLASLt's on the same inputs: {theirs:.3g}"


def check_dense(out, a, b, a_scale, b_scale, block_m):
    oracle = dequant(a, a_scale, block_m) @ dequant(b, b_scale, 128).t()
    check_blockscaled(
        out, oracle, out.dtype, lambda: cublas_blockscaled(a, b, a_scale, b_scale, block_m, out.dtype)
    )


def mn_major(scale):
    """The same logical scale view, stored transposed (sglang's MN-major layout)."""
    return scale.transpose(-1, -2).contiguous().transpose(-1, -2)


# ---------------------------------------------------------------------------------------------
# dense block-scaled GEMM


def config_names():
    return ["WIDE", "LARGE", "MEDIUM", "NARROW", "SMALL_M[128]", "SMALL_M[64]", "SMALL_M[32]"]


def config_named(name):
    k = blockwise()
    return k.SMALL_M[int(name[8:-1])] if name.startswith("SMALL_M") else getattr(k, name)


# (m, n, k): m of 1, 100 and 300 rows (no tile multiple), k/128 of 3, 5 (odd) and 56, k = 208
# (a partial last K block), n past the last full tile (2112 = 16.5 x 128, 1000)
DENSE_SHAPES = [(1, 7168, 2048), (100, 2112, 7168), (300, 1000, 640), (64, 512, 384), (257, 384, 208)]


@pytest.mark.parametrize("name", config_names())
@pytest.mark.parametrize("m,n,k", DENSE_SHAPES)
@pytest.mark.parametrize("major", ["K", "MN"])
def test_dense_every_config(seed, name, m, n, k, major):
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((m, cdiv(k, 128))), pow2((cdiv(n, 128), cdiv(k, 128)))
    if major == "MN":
        a_scale, b_scale = mn_major(a_scale), mn_major(b_scale)
    out = nan_like((m, n), torch.bfloat16)
    blockwise().gemm_groupwise(groupwise(a, b, a_scale, b_scale, 1, out), config=config_named(name))
    check_dense(out, a, b, a_scale, b_scale, 1)


@pytest.mark.parametrize("name", ["LARGE", "MEDIUM", "SMALL_M[64]"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dense_128_row_a_blocks_and_fp16(seed, name, out_dtype):
    """Granularity (128, 128, 128): one A scale per 128-row block; fp16 output; a strided out."""
    m, n, k = 4096 + 33, 2112, 1536
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((cdiv(m, 128), k // 128)), pow2((cdiv(n, 128), k // 128))
    buffer = nan_like((n, 2 * m), out_dtype)
    out = buffer[:, ::2].t()  # column-major, every other column of the buffer
    blockwise().gemm_groupwise(groupwise(a, b, a_scale, b_scale, 128, out), config=config_named(name))
    check_dense(out, a, b, a_scale, b_scale, 128)
    assert buffer[:, 1::2].isnan().all()


@pytest.mark.parametrize("m,n,k", [(256, 2112, 7168), (77, 7168, 2048), (1, 384, 640)])
def test_fp8_output(seed, m, n, k):
    a, b = fp8((m, k)), fp8((n, k))
    blocks = cdiv(n, 128)
    a_scale, b_scale = pow2((m, cdiv(k, 128))), pow2((blocks, cdiv(k, 128)))
    out = nan_like((m, n), torch.float32).to(E4M3)
    output_scale = nan_like((m, blocks), torch.float32)
    blockwise().gemm_groupwise(groupwise(a, b, a_scale, b_scale, 1, out, output_scale))
    check_fp8_output(out, output_scale, dequant(a, a_scale, 1) @ dequant(b, b_scale, 128).t())


def check_fp8_output(out, output_scale, acc):
    m, n = acc.shape
    blocks = output_scale.shape[1]
    padded = torch.nn.functional.pad(acc, (0, blocks * 128 - n))
    expected_scale = padded.abs().view(m, blocks, 128).amax(-1).clamp_min(1e-12) / 448
    torch.testing.assert_close(output_scale.double(), expected_scale, rtol=BLOCK_ACCUM_TOL, atol=0)
    per_element = output_scale.double().repeat_interleave(128, 1)[:, :n]
    # half an e4m3 ulp (2**-4 relative), the smallest subnormal step, and the accumulation slack
    bound = acc.abs() * 2**-4 + per_element * 2**-9 + BLOCK_ACCUM_TOL * acc.pow(2).mean().sqrt()
    assert ((out.double() * per_element - acc).abs() <= bound).all()


# ---------------------------------------------------------------------------------------------
# grouped: contiguous and masked


def check_contiguous(out, a, b, a_scale, b_scale, m_indices):
    valid = (m_indices >= 0) & (m_indices < b.shape[0])
    assert out[~valid].isnan().all(), "rows of no group were written"
    oracle = contiguous_oracle(a, b, a_scale, b_scale, m_indices)

    def cublas():
        theirs = torch.empty_like(out)
        for g in range(b.shape[0]):
            mine = m_indices == g
            if mine.any():
                rows = a.view(torch.uint8)[mine].view(a.dtype)  # no boolean indexing of float8
                theirs[mine] = cublas_blockscaled(rows, b[g], a_scale[mine], b_scale[g], 1, out.dtype)
        return theirs[valid]

    check_blockscaled(out[valid], oracle[valid], torch.bfloat16, cublas)


@pytest.mark.parametrize("name", ["WIDE", "MEDIUM", "NARROW", "SMALL_M[128]", "SMALL_M[32]"])
@pytest.mark.parametrize("n,k", [(4096, 7168), (7168, 2048), (512, 640)])
@pytest.mark.parametrize("major", ["K", "MN"])
def test_contiguous_every_config(seed, name, n, k, major):
    m_indices = deepgemm_m_indices([128, 200, 0, 384, 77])
    rows, groups = m_indices.numel(), 5
    a, b = fp8((rows, k)), fp8((groups, n, k))
    a_scale, b_scale = pow2((rows, cdiv(k, 128))), pow2((groups, cdiv(n, 128), cdiv(k, 128)))
    if major == "MN":
        a_scale, b_scale = mn_major(a_scale), mn_major(b_scale)
    out = nan_like((rows, n), torch.bfloat16)
    blockwise().group_gemm_contiguous(
        GroupedContiguous(a, b, a_scale, b_scale, m_indices, out), config=config_named(name)
    )
    check_contiguous(out, a, b, a_scale, b_scale, m_indices)


@pytest.mark.parametrize("name", ["WIDE", "MEDIUM", "SMALL_M[64]"])
def test_contiguous_ragged_ids(seed, name):
    """Ids in any order, including -1 and ids >= G: a row tile holding several groups is
    computed once per group and each pass writes only its own rows."""
    m_indices = torch.randint(-1, 6, (1000,), device="cuda").int()
    a, b = fp8((1000, 512)), fp8((4, 256, 512))
    a_scale, b_scale = pow2((1000, 4)), pow2((4, 2, 4))
    out = nan_like((1000, 256), torch.bfloat16)
    blockwise().group_gemm_contiguous(
        GroupedContiguous(a, b, a_scale, b_scale, m_indices, out), config=config_named(name)
    )
    check_contiguous(out, a, b, a_scale, b_scale, m_indices)


def masked_operands(groups, m, n, k, masked_m):
    a, b = fp8((groups, m, k)), fp8((groups, n, k))
    a_scale, b_scale = pow2((groups, m, cdiv(k, 128))), pow2((groups, cdiv(n, 128), cdiv(k, 128)))
    for g, valid in enumerate(masked_m.tolist()):  # rows past masked_m: NaN, never to show up
        a[g, valid:] = nan_like(a[g, valid:].shape, E4M3)
        a_scale[g, valid:] = float("nan")
    return a, b, a_scale, b_scale


def check_masked(out, a, b, a_scale, b_scale, masked_m):
    for g, valid in enumerate(masked_m.clamp(0, a.shape[1]).tolist()):
        if valid:
            check_dense(out[g, :valid], a[g, :valid], b[g], a_scale[g, :valid], b_scale[g], 1)
        assert out[g, valid:].isnan().all(), f"group {g}: rows past masked_m were written"


@pytest.mark.parametrize("name", ["WIDE", "MEDIUM", "NARROW", "SMALL_M[128]", "SMALL_M[64]", "SMALL_M[32]"])
@pytest.mark.parametrize("groups,m,n,k", [(8, 256, 4096, 7168), (4, 1000, 7168, 2048), (3, 64, 512, 384)])
def test_masked_every_config(seed, name, groups, m, n, k):
    masked_m = torch.randint(1, m, (groups,), device="cuda").int()
    masked_m[0], masked_m[-1] = 0, m  # an empty group and a full one
    a, b, a_scale, b_scale = masked_operands(groups, m, n, k, masked_m)
    out = nan_like((groups, m, n), torch.bfloat16)
    expected_m = int(masked_m.float().mean()) + 1
    blockwise().group_gemm_masked(
        GroupedMasked(a, b, a_scale, b_scale, masked_m, expected_m, out), config=config_named(name)
    )
    check_masked(out, a, b, a_scale, b_scale, masked_m)


def test_masked_counts_out_of_range_are_clamped(seed):
    groups, m, n, k = 3, 200, 256, 256
    masked_m = torch.tensor([-5, 10**6, 150], dtype=torch.int32, device="cuda")
    a, b, a_scale, b_scale = masked_operands(groups, m, n, k, masked_m.clamp(0, m))
    out = nan_like((groups, m, n), torch.bfloat16)
    blockwise().group_gemm_masked(GroupedMasked(a, b, a_scale, b_scale, masked_m, 100, out))
    check_masked(out, a, b, a_scale, b_scale, masked_m)


# ---------------------------------------------------------------------------------------------
# batched per-tensor / per-channel FP8 GEMM (bmm_fp8)


@pytest.mark.parametrize("name", ["WIDE", "SQUARE", "FEW_ROWS"])
@pytest.mark.parametrize("tokens", [64, 77, 300, 512])
@pytest.mark.parametrize("k,n", [(128, 512), (512, 128)])
@pytest.mark.parametrize("scales", ["tensor", "channel"])
def test_bmm_every_config(seed, name, tokens, k, n, scales):
    heads = 128
    A = fp8((heads, tokens, k))
    B = fp8((heads, n, k)).transpose(1, 2)  # column-major, as the MLA weights
    if scales == "tensor":
        A_scale, B_scale = pow2(()), pow2(())
    else:
        A_scale, B_scale = pow2((heads, tokens, 1)), pow2((heads, 1, n))
    out = nan_like((heads, tokens, n), torch.bfloat16)
    batched().fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=getattr(batched(), name))
    oracle = (A.double() @ B.double()) * A_scale.double() * B_scale.double()
    check(out, oracle, torch.bfloat16, FAST_ACCUM_TOL)


def test_bmm_fp16_output_into_a_strided_buffer(seed):
    """fp16 output written into every other row block of a larger buffer (16-byte aligned strides:
    TMA stores stop at each batch's rows)."""
    A = fp8((16, 96, 256))
    B = fp8((16, 384, 256)).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2(())
    buffer = nan_like((16, 2, 96, 384), torch.float16)
    out = buffer[:, 0]
    batched().fp8_bmm(Bmm(A, B, out, A_scale, B_scale))
    check(out, A.double() @ B.double() * A_scale.double() * B_scale.double(), torch.float16, FAST_ACCUM_TOL)
    assert buffer[:, 1].isnan().all()


# ---------------------------------------------------------------------------------------------
# routing through flashinfer.gemm._cuda, per kernel tier


class Spy:
    """Counts the launches of one Gluon module (wrapping its FastLaunch)."""

    def __init__(self, module, monkeypatch):
        self.calls = 0
        launch = module._LAUNCH.launch

        def counted(*args, **kwargs):
            self.calls += 1
            return launch(*args, **kwargs)

        monkeypatch.setattr(module._LAUNCH, "launch", counted)


def routed_calls(monkeypatch, tier):
    from flashinfer._core.kernel_tier import KERNEL_TIER_ENV
    from flashinfer.gemm import _cuda

    monkeypatch.setenv(KERNEL_TIER_ENV, tier)
    spies = Spy(blockwise(), monkeypatch), Spy(batched(), monkeypatch)
    m, n, k = 300, 2112, 640
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = mn_major(pow2((m, k // 128))), pow2((cdiv(n, 128), k // 128))
    out = nan_like((m, n), torch.bfloat16)
    _cuda.gemm_groupwise(groupwise(a, b, a_scale, b_scale, 1, out))
    check_dense(out, a, b, a_scale, b_scale, 1)
    m_indices = deepgemm_m_indices([100, 300])
    rows = m_indices.numel()
    ga, gb, gsa, gsb = (
        fp8((rows, k)),
        fp8((2, n, k)),
        pow2((rows, k // 128)),
        pow2((2, cdiv(n, 128), k // 128)),
    )
    gout = nan_like((rows, n), torch.bfloat16)
    _cuda.group_gemm_contiguous(GroupedContiguous(ga, gb, gsa, gsb, m_indices, gout))
    check_contiguous(gout, ga, gb, gsa, gsb, m_indices)
    masked_m = torch.tensor([5, 128], dtype=torch.int32, device="cuda")
    ma, mb, msa, msb = masked_operands(2, 128, n, k, masked_m)
    mout = nan_like((2, 128, n), torch.bfloat16)
    _cuda.group_gemm_masked(GroupedMasked(ma, mb, msa, msb, masked_m, 64, mout))
    check_masked(mout, ma, mb, msa, msb, masked_m)
    A, B = fp8((128, 64, 512)), fp8((128, 128, 512)).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2(())
    bout = nan_like((128, 64, 128), torch.bfloat16)
    _cuda.bmm(Bmm(A, B, bout, A_scale, B_scale))
    check(bout, A.double() @ B.double() * A_scale.double() * B_scale.double(), torch.bfloat16, FAST_ACCUM_TOL)
    return spies


@pytest.mark.parametrize("tier", ["auto", "gluon", "tl"])
def test_routing_per_tier(seed, monkeypatch, tier):
    spy_blockwise, spy_bmm = routed_calls(monkeypatch, tier)
    if tier == "gluon":
        assert spy_blockwise.calls == 3 and spy_bmm.calls == 1
    elif tier == "auto":  # the grouped GEMMs, ahead of the tl kernels on the H200 (gemm/_cuda.py)
        assert spy_blockwise.calls == 2 and spy_bmm.calls == 0
    else:
        assert spy_blockwise.calls == spy_bmm.calls == 0


def test_layouts_tma_cannot_read_take_the_portable_kernels(seed, monkeypatch):
    """Under the forced Gluon tier, operands TMA cannot read (a row stride that is not a multiple
    of 16 bytes, a row-major B of bmm) still run, on the tl kernels."""
    from flashinfer._core.kernel_tier import KERNEL_TIER_ENV
    from flashinfer.gemm import _cuda

    monkeypatch.setenv(KERNEL_TIER_ENV, "gluon")
    spy_blockwise, spy_bmm = Spy(blockwise(), monkeypatch), Spy(batched(), monkeypatch)
    m, n, k = 64, 256, 200  # k = 200: rows of 200 bytes
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((m, 2)), pow2((2, 2))
    out = nan_like((m, n), torch.bfloat16)
    _cuda.gemm_groupwise(groupwise(a, b, a_scale, b_scale, 1, out))
    check_dense(out, a, b, a_scale, b_scale, 1)
    A, B = fp8((8, 64, 256)), fp8((8, 256, 128))  # row-major B
    scale = pow2(())
    bout = nan_like((8, 64, 128), torch.bfloat16)
    _cuda.bmm(Bmm(A, B, bout, scale, scale))
    check(bout, A.double() @ B.double() * scale.double() ** 2, torch.bfloat16, FAST_ACCUM_TOL)
    assert spy_blockwise.calls == spy_bmm.calls == 0


# ---------------------------------------------------------------------------------------------
# CUDA graph capture after warm-up, replayed on new inputs copied into the captured buffers


def test_graph_dense_and_fp8_output(seed):
    m, n, k = 128, 2112, 7168
    a, b, sa, sb = fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56))
    fresh = (fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56)))
    out = nan_like((m, n), torch.bfloat16)
    replay_with_new_inputs(
        lambda: blockwise().gemm_groupwise(groupwise(a, b, sa, sb, 1, out)), (a, b, sa, sb), fresh, out
    )
    check(out, dequant(fresh[0], fresh[2], 1) @ dequant(fresh[1], fresh[3], 128).t(), torch.bfloat16,
          BLOCK_ACCUM_TOL)  # fmt: skip

    out8 = nan_like((m, n), torch.float32).to(E4M3)
    scales = nan_like((m, 17), torch.float32)
    replay_with_new_inputs(
        lambda: blockwise().gemm_groupwise(groupwise(a, b, sa, sb, 1, out8, scales)),
        (a, b, sa, sb),
        fresh,
        out8,
    )
    check_fp8_output(out8, scales, dequant(fresh[0], fresh[2], 1) @ dequant(fresh[1], fresh[3], 128).t())


def test_graph_grouped(seed):
    k, n = 512, 1024
    m_indices = deepgemm_m_indices([256, 100, 384])
    rows = m_indices.numel()
    a, b, sa, sb = fp8((rows, k)), fp8((3, n, k)), pow2((rows, 4)), pow2((3, 8, 4))
    out = nan_like((rows, n), torch.bfloat16)
    fresh_ids = deepgemm_m_indices([128, 300, 200])[:rows]
    fresh = (fp8((rows, k)), fp8((3, n, k)), pow2((rows, 4)), pow2((3, 8, 4)), fresh_ids)
    replay_with_new_inputs(
        lambda: blockwise().group_gemm_contiguous(GroupedContiguous(a, b, sa, sb, m_indices, out)),
        (a, b, sa, sb, m_indices),
        fresh,
        out,
    )
    check_contiguous(out, *fresh)

    groups, m = 4, 256
    masked_m = torch.tensor([0, 10, 200, 256], dtype=torch.int32, device="cuda")
    fresh_masked = torch.tensor([256, 3, 0, 129], dtype=torch.int32, device="cuda")
    a3, b3, sa3, sb3 = masked_operands(groups, m, n, k, torch.full_like(masked_m, m))
    out3 = nan_like((groups, m, n), torch.bfloat16)
    replay_with_new_inputs(
        lambda: blockwise().group_gemm_masked(GroupedMasked(a3, b3, sa3, sb3, masked_m, 128, out3)),
        (masked_m,),
        (fresh_masked,),
        out3,
    )
    check_masked(out3, a3, b3, sa3, sb3, fresh_masked)


def test_graph_bmm(seed):
    A, B = fp8((128, 64, 128)), fp8((128, 512, 128)).transpose(1, 2)
    sa, sb = pow2(()), pow2(())
    out = nan_like((128, 64, 512), torch.bfloat16)
    fresh = (fp8(A.shape), fp8((128, 512, 128)).transpose(1, 2), pow2(()), pow2(()))
    replay_with_new_inputs(lambda: batched().fp8_bmm(Bmm(A, B, out, sa, sb)), (A, B, sa, sb), fresh, out)
    A2, B2, sa2, sb2 = fresh
    check(out, (A2.double() @ B2.double()) * sa2.double() * sb2.double(), torch.bfloat16, FAST_ACCUM_TOL)
