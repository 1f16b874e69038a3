"""The GEMM kernel tiers on the GPU, what the op table cannot state: which kernels each tier
routes to (``test_routing_per_tier``), the portable fallback for layouts TMA cannot read, the
masked kernel's clamping of out-of-range counts, and (``slow``) every tile configuration the
launchers ship, run directly with ``config=`` in both scale majors: the op table's real-size rows
run only the configuration the launcher picks for their shape.

Inputs are FP8 values and power-of-two scales (exact in float64), so the error left is the tensor
cores' FP8 accumulation within a 128-deep block (``BLOCK_ACCUM_TOL`` of the output's rms) or over
the whole k for the batched kernel (``FAST_ACCUM_TOL``), and the final rounding; past the
bound a kernel must be no worse than cuBLASLt on the same inputs (block-scaled, or per-tensor FP8
with fast accumulation; ``oracles.assert_matches_or_no_worse``; the bound: ``oracles.assert_matches``).
"""

from __future__ import annotations

import pytest
import torch
from cuda_inputs import (
    E4M3,
    deepgemm_m_indices,
    fp8,
    nan_like,
    pow2,
)
from oracles import (
    assert_matches,
    assert_matches_or_no_worse,
    cublas_blockscaled,
    cublas_fp8_bmm,
    oracle_bmm,
    oracle_contiguous,
    oracle_groupwise,
)

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


def masked_decode():
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_masked_decode_gemm

    return gluon_fp8_masked_decode_gemm


def batched():
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    return gluon_fp8_bmm


def groupwise(a, b, a_scale, b_scale, block_m, out, output_scale=None):
    """The record of a dense call with logical (K-major) scale views, 128 x 128 B blocks."""
    return Groupwise(a, b, a_scale, b_scale, False, False, block_m, 128, 128, out, output_scale)


def cdiv(a, b):
    return -(-a // b)


def check_dense(out, a, b, a_scale, b_scale, block_m):
    assert_matches_or_no_worse(
        out,
        *oracle_groupwise(a, b, a_scale, b_scale, block_m, 128, 128),
        BLOCK_ACCUM_TOL,
        lambda: cublas_blockscaled(a, b, a_scale, b_scale, block_m, out.dtype),
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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------------------------
# the decode-size GEMM's Gluon form


def decode_gemm():
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm

    return fp8_decode_gemm


def gluon_decode_config(block_n, block_m, split, stages=None):
    from flashinfer.gemm.kernels.blockwise.gluon_fp8_decode_gemm import stages_for

    stages = stages or stages_for(block_n, block_m)
    return decode_gemm().DecodeGemmConfig(block_n, block_m, split, stages, 4, True, True, True)


@pytest.mark.parametrize("block_n", [64, 128])
@pytest.mark.parametrize("block_m", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("split", [1, 3])
def test_decode_gemm_gluon_every_tile(seed, block_n, block_m, split):
    """Every tile of the Gluon kernel, with and without the K split, on a shape that cuts the last
    weight tile, the last token tile and the last range of the split (m, n not multiples, 13 K
    steps over 3 ranges)."""
    m, n, k = block_m + 3, 2 * block_n + 40, 13 * 128
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = mn_major(pow2((m, k // 128))), pow2((cdiv(n, 128), k // 128))
    out = nan_like((m, n), torch.bfloat16)
    decode_gemm().gemm_groupwise(
        groupwise(a, b, a_scale, b_scale, 1, out), gluon_decode_config(block_n, block_m, split)
    )
    check_dense(out, a, b, a_scale, b_scale, 1)


def test_decode_gemm_gluon_split_counters_reset(seed):
    """The split's arrival counters are left zero by every launch: launches of different tiles and
    splits back to back (sharing the counters, on one stream) each give their own product."""
    m, n, k = 20, 1000, 16 * 128
    for _ in range(3):
        for config in (
            gluon_decode_config(64, 32, 4),
            gluon_decode_config(128, 8, 2),
            gluon_decode_config(64, 16, 16),
        ):
            a, b = fp8((m, k)), fp8((n, k))
            a_scale, b_scale = mn_major(pow2((m, k // 128))), pow2((cdiv(n, 128), k // 128))
            out = nan_like((m, n), torch.bfloat16)
            decode_gemm().gemm_groupwise(groupwise(a, b, a_scale, b_scale, 1, out), config)
            check_dense(out, a, b, a_scale, b_scale, 1)
    from flashinfer._core import scratch

    counters = [c for key, c in scratch._BUFFERS.items() if key[2] == "decode GEMM arrival counters"]
    assert counters and all(int(c.abs().max()) == 0 for c in counters)


def test_decode_gemm_gluon_split_in_concurrent_streams(seed):
    """Split launches in two streams at once (two-batch overlap) count on separate counters and
    write separate partial sums (each stream's scratch)."""
    m, n, k = 24, 4096, 28 * 128
    streams = [torch.cuda.Stream() for _ in range(2)]
    calls = []
    for stream in streams:
        a, b = fp8((m, k)), fp8((n, k))
        a_scale, b_scale = mn_major(pow2((m, k // 128))), pow2((cdiv(n, 128), k // 128))
        calls.append((stream, groupwise(a, b, a_scale, b_scale, 1, nan_like((m, n), torch.bfloat16))))
    torch.cuda.synchronize()
    for _ in range(20):
        for stream, call in calls:
            with torch.cuda.stream(stream):
                decode_gemm().gemm_groupwise(call, gluon_decode_config(64, 32, 7))
    torch.cuda.synchronize()
    for _, call in calls:
        check_dense(call.out, call.a, call.b, call.a_scale, call.b_scale, 1)


@pytest.mark.parametrize(
    "case", ["a_blocks_128", "b_rows_1", "e5m2", "ragged_k", "strided_out", "fp16", "k_major_a", "shallow"]
)
def test_decode_gemm_gluon_layouts(seed, case):
    """Scale granularities (128-row activation blocks, one weight scale a row), e5m2 operands, a
    partial last K block (k = 1040: TMA reads zeros past it), a strided output, fp16 output,
    K-major activation scales and a two-stage ring."""
    m, n, k = 37, 2112, 1040 if case == "ragged_k" else 2048
    dtype = torch.float8_e5m2 if case == "e5m2" else E4M3
    a, b = fp8((m, k), dtype), fp8((n, k), dtype)
    block_m, block_n = (128 if case == "a_blocks_128" else 1), (1 if case == "b_rows_1" else 128)
    a_scale = pow2((cdiv(m, block_m), cdiv(k, 128)))
    if case != "k_major_a":
        a_scale = mn_major(a_scale)
    b_scale = pow2((cdiv(n, block_n), cdiv(k, 128)))
    out_dtype = torch.float16 if case == "fp16" else torch.bfloat16
    out = nan_like((m, 2 * n), out_dtype)[:, ::2] if case == "strided_out" else nan_like((m, n), out_dtype)
    call = Groupwise(a, b, a_scale, b_scale, False, False, block_m, block_n, 128, out)
    decode_gemm().gemm_groupwise(call, gluon_decode_config(64, 64, 4, 2 if case == "shallow" else None))
    assert_matches(
        out, *oracle_groupwise(a, b, a_scale, b_scale, block_m, block_n, 128), slack=BLOCK_ACCUM_TOL
    )


@pytest.mark.slow
def test_decode_gemm_gluon_every_table_launch_shape(seed):
    """Each launch shape the Gluon table holds, on its own shape at its largest and an odd row
    count, with 128-row activation blocks too."""
    for (n, k, _), rows in decode_gemm().GLUON_TABLE.items():
        for max_m, config, _ in rows:
            for m, block_m in ((max_m, 1), (max(1, max_m - 3), 128)):
                a, b = fp8((m, k)), fp8((n, k))
                a_scale, b_scale = (
                    mn_major(pow2((cdiv(m, block_m), k // 128))),
                    pow2((cdiv(n, 128), k // 128)),
                )
                out = nan_like((m, n), torch.bfloat16)
                call = groupwise(a, b, a_scale, b_scale, block_m, out)
                decode_gemm().gemm_groupwise(call, decode_gemm().DecodeGemmConfig(*config))
                expected = oracle_groupwise(a, b, a_scale, b_scale, block_m, 128, 128)
                assert_matches(out, *expected, slack=BLOCK_ACCUM_TOL)


# ---------------------------------------------------------------------------------------------
# grouped: contiguous and masked


def check_contiguous(out, a, b, a_scale, b_scale, m_indices):
    valid = (m_indices >= 0) & (m_indices < b.shape[0])
    assert out[~valid].isnan().all(), "rows of no group were written"
    ref, ref_abs = oracle_contiguous(a, b, a_scale, b_scale, m_indices)

    def cublas():
        theirs = torch.empty_like(out)
        for g in range(b.shape[0]):
            mine = m_indices == g
            if mine.any():
                rows = a.view(torch.uint8)[mine].view(a.dtype)  # no boolean indexing of float8
                theirs[mine] = cublas_blockscaled(rows, b[g], a_scale[mine], b_scale[g], 1, out.dtype)
        return theirs[valid]

    assert_matches_or_no_worse(out[valid], ref[valid], ref_abs[valid], BLOCK_ACCUM_TOL, cublas)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.parametrize("block_w", [64, 128])
@pytest.mark.parametrize("block_t", [16, 32, 64, 128])
@pytest.mark.parametrize("major", ["K", "MN"])
def test_masked_decode_every_tile(seed, block_w, block_t, major):
    """The decode-MoE kernel: 40 experts (a group table wider than 32), counts around the tile
    with an empty expert, a full one and one a token past the tile (a second token tile); n and
    k not multiples of the tile; MN-major scales as DeepGEMM's engines hand them."""
    groups, m, n, k = 40, 200, 576, 640
    masked_m = torch.randint(0, 2 * block_t, (groups,), device="cuda").int().clamp(max=m)
    masked_m[:3] = torch.tensor([0, m, block_t + 1])
    a, b, a_scale, b_scale = masked_operands(groups, m, n, k, masked_m)
    if major == "MN":
        a_scale, b_scale = mn_major(a_scale), mn_major(b_scale)
    out = nan_like((groups, m, n), torch.bfloat16)
    config = masked_decode().MaskedDecodeConfig(
        block_w, block_t, masked_decode().stages_for(block_w, block_t)
    )
    masked_decode().group_gemm_masked(GroupedMasked(a, b, a_scale, b_scale, masked_m, 8, out), config=config)
    check_masked(out, a, b, a_scale, b_scale, masked_m)


def test_masked_decode_few_experts_hold_tokens(seed, monkeypatch):
    """DeepSeek's MoE down projection at batch 1: 32 experts, most of them empty, counts out of
    range clamped to [0, m], through the routing (the Gluon tier takes the decode-MoE kernel at
    expected_m 1); no expert holding a token: nothing written."""
    from flashinfer._core.kernel_tier import KERNEL_TIER_ENV
    from flashinfer.gemm import _cuda

    monkeypatch.setenv(KERNEL_TIER_ENV, "gluon")
    spy = Spy(masked_decode(), monkeypatch)
    groups, m, n, k = 32, 64, 7168, 2048
    masked_m = torch.zeros(groups, dtype=torch.int32, device="cuda")
    masked_m[[3, 17, 30, 31]] = torch.tensor([1, 2, -5, 10**6], dtype=torch.int32, device="cuda")
    a, b, a_scale, b_scale = masked_operands(groups, m, n, k, masked_m.clamp(0, m))
    out = nan_like((groups, m, n), torch.bfloat16)
    _cuda.group_gemm_masked(GroupedMasked(a, b, a_scale, b_scale, masked_m, 1, out))
    check_masked(out, a, b, a_scale, b_scale, masked_m)
    empty = nan_like((groups, m, n), torch.bfloat16)  # no expert holds a token: nothing written
    _cuda.group_gemm_masked(GroupedMasked(a, b, a_scale, b_scale, torch.zeros_like(masked_m), 1, empty))
    assert empty.isnan().all()
    assert spy.calls == 2


# ---------------------------------------------------------------------------------------------
# batched per-tensor / per-channel FP8 GEMM (bmm_fp8)


def check_bmm(out, A, B, A_scale, B_scale):
    """Within the fast-accumulation bound, or past it no worse than cuBLASLt's fast accumulation."""
    ref, ref_abs = oracle_bmm(A, B, A_scale, B_scale)
    assert_matches_or_no_worse(
        out, ref, ref_abs, FAST_ACCUM_TOL, lambda: cublas_fp8_bmm(A, B, A_scale, B_scale, out.dtype)
    )


@pytest.mark.slow
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
    check_bmm(out, A, B, A_scale, B_scale)


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
    spies = Spy(blockwise(), monkeypatch), Spy(batched(), monkeypatch), Spy(masked_decode(), monkeypatch)
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
    check_bmm(bout, A, B, A_scale, B_scale)
    return spies


@pytest.mark.parametrize("tier", ["auto", "gluon", "tl"])
def test_routing_per_tier(seed, monkeypatch, tier):
    from flashinfer.gemm._cuda import GLUON_MASKED_DECODE_IN_AUTO

    spy_blockwise, spy_bmm, spy_masked_decode = routed_calls(monkeypatch, tier)
    # the masked call (expected_m 64) takes the decode-MoE kernel where the tier asks for it
    if tier == "gluon":
        assert (spy_blockwise.calls, spy_bmm.calls, spy_masked_decode.calls) == (2, 1, 1)
    elif tier == "auto":  # the grouped GEMMs, ahead of the tl kernels on the H200 (gemm/_cuda.py)
        decode_moe = int(GLUON_MASKED_DECODE_IN_AUTO)
        assert (spy_blockwise.calls, spy_bmm.calls, spy_masked_decode.calls) == (
            2 - decode_moe,
            0,
            decode_moe,
        )
    else:
        assert spy_blockwise.calls == spy_bmm.calls == spy_masked_decode.calls == 0


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
    check_bmm(bout, A, B, scale, scale)
    assert spy_blockwise.calls == spy_bmm.calls == 0
