"""The GEMM Triton kernels under TRITON_INTERPRET=1 (CPU), against the float64 oracles of tests/oracles.py.

Inputs are FP8 values (exact in float64), scales are powers of two, so the only rounding left is
the fp32 accumulation and the final cast: ``oracles.assert_matches`` (the output's rounding plus
a float32 accumulation bound). Outputs are poisoned with NaN before each launch, and rows the
kernels must not touch are checked to still be NaN.
Launchers are called directly with small fixed tiles (no autotuning under the interpreter).
"""

from __future__ import annotations

import pytest
import torch
from oracles import assert_matches, oracle_bmm, oracle_contiguous, oracle_groupwise, oracle_masked

from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked, Groupwise

pytestmark = pytest.mark.triton

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
SMALL_TILES = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 1}


def fp8(shape, dtype=E4M3):
    """Random FP8 values, spread over a few binades (every one exact in float64)."""
    return (torch.randn(shape) * 4).to(dtype)


def pow2(shape):
    """Power-of-two scales in [1/8, 8]: multiplying by them is exact."""
    return 2.0 ** torch.randint(-3, 4, shape).float()


def groupwise(a, b, a_scale, b_scale, granularity, out, output_scale=None):
    """The launcher's record for logical (K-major view) scales."""
    return Groupwise(a, b, a_scale, b_scale, False, False, *granularity, out, output_scale)


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# batched FP8 GEMM


@pytest.mark.parametrize("a_dtype,b_dtype", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3), (E5M2, E5M2)], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("channelwise", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("per_sm", [0, 1], ids=["tile-grid", "persistent"])
def test_fp8_bmm(seed, a_dtype, b_dtype, out_dtype, channelwise, per_sm):
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    batch, m, k, n = 3, 20, 80, 24
    A = fp8((batch, m, k), a_dtype)
    B = fp8((batch, n, k), b_dtype).transpose(1, 2)  # column-major per batch, as callers pass it
    if channelwise:
        A_scale, B_scale = pow2((batch, m, 1)), pow2((batch, 1, n))
    else:
        A_scale, B_scale = pow2(()), pow2(())
    out = nan_like((batch, m, n), out_dtype)

    # persistent: 4 programs (the interpreter's "multiprocessors") walk the 12 tiles
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2, "PROGRAMS_PER_SM": per_sm}
    fp8_bmm.fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=config)

    assert_matches(out, *oracle_bmm(A, B, A_scale, B_scale))


@pytest.mark.parametrize("per_sm", [0, 1], ids=["tile-grid", "persistent"])
def test_fp8_bmm_one_k_step(seed, per_sm):
    """k within one BLOCK_K (the MLA absorb product with k = 128): a tile is one load and one dot."""
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    batch, m, k, n = 5, 20, 24, 40  # k not a multiple of 16: the K mask matters
    A = fp8((batch, m, k))
    B = fp8((batch, n, k)).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2((batch, 1, n))
    out = nan_like((batch, m, n), torch.bfloat16)

    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2, "PROGRAMS_PER_SM": per_sm}
    fp8_bmm.fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=config)

    assert_matches(out, *oracle_bmm(A, B, A_scale, B_scale))


@pytest.mark.parametrize("per_sm", [0, 2], ids=["tile-grid", "persistent"])
def test_fp8_bmm_strided_everything(seed, per_sm):
    """Row-major B, padded A rows, scale views with gaps, and an output that is a strided view."""
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    batch, m, k, n = 2, 33, 64, 40
    A = fp8((batch, m, k + 16))[:, :, :k]
    B = fp8((batch, k, n))
    A_scale = pow2((batch, m, 2))[:, :, :1]
    B_scale = pow2((batch, 3, n))[:, 1:2, :]
    buffer = nan_like((batch, n, 2 * m), torch.bfloat16)
    out = buffer[:, :, ::2].transpose(1, 2)  # (batch, m, n) with strides (2mn, 2, 2m)

    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "PROGRAMS_PER_SM": per_sm}
    fp8_bmm.fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=config)

    assert_matches(out, *oracle_bmm(A, B, A_scale, B_scale))
    assert buffer[:, :, 1::2].isnan().all(), "the kernel wrote outside the output view"


# ---------------------------------------------------------------------------------------------
# dense groupwise FP8 GEMM


@pytest.mark.parametrize("granularity", [(1, 128, 128), (128, 128, 128), (1, 32, 64), (16, 64, 32)], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gemm_groupwise(seed, granularity, out_dtype):
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    block_m, block_n, block_k = granularity
    m, n, k = 40, 72, 320  # k and n not multiples of the scale blocks
    a, b = fp8((m, k)), fp8((n, k))
    a_scale = pow2((-(-m // block_m), -(-k // block_k)))
    # B scales arrive as the transpose of MN-major storage: a non-contiguous logical view
    b_scale = pow2((-(-k // block_k), -(-n // block_n))).t()
    out = nan_like((m, n), out_dtype)

    fp8_blockwise.gemm_groupwise(groupwise(a, b, a_scale, b_scale, granularity, out), config=SMALL_TILES)

    assert_matches(out, *oracle_groupwise(a, b, a_scale, b_scale, *granularity))


def test_gemm_groupwise_strided_output(seed):
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    m, n, k = 24, 40, 256
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((m, 2)), pow2((1, 2))
    buffer = nan_like((m, 2 * n), torch.bfloat16)
    out = buffer[:, 1::2]

    fp8_blockwise.gemm_groupwise(groupwise(a, b, a_scale, b_scale, (1, 128, 128), out), config=SMALL_TILES)

    assert_matches(out, *oracle_groupwise(a, b, a_scale, b_scale, 1, 128, 128))
    assert buffer[:, 0::2].isnan().all()


def test_gemm_groupwise_fp8_output(seed):
    """FP8 output: per-(row, 128-column block) scales and values within half an e4m3 ulp."""
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    m, n, k = 20, 200, 256  # the last 128-column block is partial
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = pow2((m, 2)), pow2((2, 2))
    out = nan_like((m, n), torch.float32).to(E4M3)
    output_scale = nan_like((m, 2), torch.float32)

    config = dict(SMALL_TILES, BLOCK_N=128)
    fp8_blockwise.gemm_groupwise(
        groupwise(a, b, a_scale, b_scale, (1, 128, 128), out, output_scale), config=config
    )

    acc, _ = oracle_groupwise(a, b, a_scale, b_scale, 1, 128, 128)
    padded = torch.nn.functional.pad(acc, (0, 256 - n))
    expected_scale = padded.abs().view(m, 2, 128).amax(-1).clamp_min(1e-12) / 448
    torch.testing.assert_close(output_scale.double(), expected_scale, rtol=1e-6, atol=0)
    per_element = expected_scale.repeat_interleave(128, 1)[:, :n]
    expected = (acc / per_element).float().to(E4M3).float()
    got = out.float()
    # within one e4m3 ulp: the fp32 and float64 amax may straddle a rounding boundary
    assert ((got - expected).abs() <= expected.abs() * 2**-3 + 2**-9).all()
    assert (got == expected).float().mean() > 0.9


# ---------------------------------------------------------------------------------------------
# grouped FP8 GEMMs


def grouped_operands(groups, rows, n, k):
    b = fp8((groups, n, k))
    b_scale = pow2((groups, -(-n // 128), -(-k // 128)))
    a = fp8((rows, k))
    a_scale = pow2((rows, -(-k // 128)))
    return a, b, a_scale, b_scale


@pytest.mark.parametrize("aligned", [True, False], ids=["tile-aligned", "ragged"])
def test_group_gemm_contiguous(seed, aligned):
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    groups, n, k = 3, 40, 256
    if aligned:
        # DeepGEMM's layout: each group's segment starts on a row tile, padded with -1 rows
        segments = [torch.full((16,), 1), torch.full((16,), -1), torch.full((32,), 0), torch.full((16,), 2)]
        m_indices = torch.cat(segments).int()
    else:
        # any row may belong to any group, or to none (-1, or an id >= G)
        m_indices = torch.randint(-1, groups + 2, (53,)).int()
    rows = m_indices.numel()
    a, b, a_scale, b_scale = grouped_operands(groups, rows, n, k)
    a_scale = a_scale.t().contiguous().t()  # MN-major storage, seen through its logical view
    out = nan_like((rows, n), torch.bfloat16)

    fp8_blockwise.group_gemm_contiguous(
        GroupedContiguous(a, b, a_scale, b_scale, m_indices, out), config=SMALL_TILES
    )

    # rows without a valid group must be left untouched
    valid = ((m_indices >= 0) & (m_indices < groups))[:, None].expand(rows, n)
    assert_matches(out, *oracle_contiguous(a, b, a_scale, b_scale, m_indices), valid)


def test_group_gemm_contiguous_all_padding():
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    a, b, a_scale, b_scale = grouped_operands(2, 32, 16, 128)
    out = nan_like((32, 16), torch.bfloat16)
    m_indices = torch.full((32,), -1, dtype=torch.int32)

    fp8_blockwise.group_gemm_contiguous(
        GroupedContiguous(a, b, a_scale, b_scale, m_indices, out), config=SMALL_TILES
    )

    assert out.isnan().all()


def test_group_gemm_masked(seed):
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    groups, m, n, k = 5, 40, 48, 384
    # empty, partial, full, beyond m (clamped) and negative (clamped to 0) groups
    masked_m = torch.tensor([0, 17, m, m + 9, -3], dtype=torch.int32)
    a = fp8((groups, m, k))
    b = fp8((groups, n, k))
    a_scale = pow2((groups, m, 3))
    b_scale = pow2((groups, 3, 1)).expand(groups, 3, 3)  # a broadcast view (stride 0)
    buffer = nan_like((groups, m, n + 8), torch.bfloat16)
    out = buffer[:, :, :n]

    fp8_blockwise.group_gemm_masked(
        GroupedMasked(a, b, a_scale, b_scale, masked_m, 17, out), config=SMALL_TILES
    )

    # rows past masked_m must be left untouched
    valid = (torch.arange(m)[None, :] < masked_m[:, None])[..., None].expand(groups, m, n)
    assert_matches(out, *oracle_masked(a, b, a_scale, b_scale, masked_m), valid)
    assert buffer[:, :, n:].isnan().all()


# ---------------------------------------------------------------------------------------------
# thread safety


def test_tuned_launch_autotunes_once_per_key_under_the_lock(monkeypatch):
    """Triton's Autotuner keeps per-call state on the shared object, so concurrent calls corrupt
    each other (found by the CUDA thread test on the H200): a key's first launch autotunes under
    ``AUTOTUNED_LAUNCH``; later launches of the key take the chosen config without the
    Autotuner (and without the lock)."""
    import triton

    from flashinfer._core import triton_launch
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    events = []
    chosen = triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8}, num_warps=4)

    class RecordingAutotuner:
        fn = None  # no JIT function behind it: FastLaunch stays disabled and is replaced below
        best_config = chosen

        def __getitem__(self, grid):
            return lambda *args, **kwargs: events.append(
                ("autotune", triton_launch.AUTOTUNED_LAUNCH.locked())
            )

    class RecordingFastLaunch:
        def launch(self, grid, *args, **meta):
            events.append(
                ("cached", triton_launch.AUTOTUNED_LAUNCH.locked(), grid, meta["BLOCK_M"], meta["num_warps"])
            )

    for module in (fp8_bmm, fp8_blockwise):
        tuned = triton_launch.TunedLaunch(RecordingAutotuner())
        tuned.fast = RecordingFastLaunch()
        monkeypatch.setattr(module, "_TUNED", tuned)
    one = torch.ones(())
    for m in (100, 120, 300):  # 100 and 120 share the power-of-two bucket of the autotune key
        fp8_bmm.fp8_bmm(
            Bmm(fp8((2, m, 32)), fp8((2, 32, 200)), torch.empty(2, m, 200, dtype=torch.bfloat16), one, one)
        )
    assert events == [("autotune", True), ("cached", False, (4 * 4, 2), 32, 4), ("autotune", True)]

    events.clear()
    a, b = fp8((16, 128)), fp8((128, 128))
    out = torch.empty(16, 128, dtype=torch.bfloat16)
    for _ in range(2):
        fp8_blockwise.gemm_groupwise(groupwise(a, b, pow2((16, 1)), pow2((1, 1)), (1, 128, 128), out))
    assert [e[:2] for e in events] == [("autotune", True), ("cached", False)]
    assert not triton_launch.AUTOTUNED_LAUNCH.locked()
