"""What the GEMM op table (``tests/gemm_ops.py``, run on the GPU by ``test_optable_cuda.py``)
cannot state: CUDA graph capture and replay on new inputs copied into the captured buffers (per
kernel tier), repeat launches through the cached kernel, upstream's FP8 quantization bit for bit,
and no host synchronization once warmed up.

Inputs are FP8 values and power-of-two scales (exact in float64); outputs are poisoned with NaN
and rows that must stay untouched are checked to still be NaN. Tolerance: ``oracles.assert_matches``
(the output's rounding and a float32 accumulation bound), plus the tensor cores' FP8 accumulation
over the whole k (per-tensor ``bmm_fp8``, ``FAST_ACCUM_TOL``) or within each 128-deep block
(block-scaled GEMMs, ``BLOCK_ACCUM_TOL``), relative to the output's rms.
"""

from __future__ import annotations

import pytest
import torch
from cuda_inputs import E4M3, deepgemm_m_indices, fp8, nan_like, needs_fp8, pow2, replay_with_new_inputs
from optable import use_tier
from oracles import (
    assert_fp8_output,
    assert_matches,
    assert_matches_or_no_worse,
    blockscale_oracle,
    cublas_fp8_bmm,
    oracle_bmm,
    oracle_contiguous,
    oracle_groupwise,
    oracle_masked,
    oracle_segments,
    quantize_oracle,
)

from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked, Groupwise

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BF16, FP16 = torch.bfloat16, torch.float16
# Hopper's FP8 tensor cores accumulate with fewer bits than fp32 (about 14 mantissa bits):
# per-tensor FP8 products over all of k; block-scaled products promote after every 128-wide block.
FAST_ACCUM_TOL = 2e-2
BLOCK_ACCUM_TOL = 2e-3


def cuda_module():
    from flashinfer.gemm import _cuda

    return _cuda


@pytest.fixture(params=["gluon", "tl"])
def tier(request, monkeypatch):
    """The kernel tier the routed calls take (``FLASHINFER_KERNEL_TIER``; Gluon only where it runs)."""
    needs_fp8()
    use_tier(f"cuda-{request.param}", monkeypatch)
    return request.param


def grouped_operands(groups, rows, n, k):
    return fp8((rows, k)), fp8((groups, n, k)), pow2((rows, k // 128)), pow2((groups, n // 128, k // 128))


# ---------------------------------------------------------------------------------------------
# CUDA graph capture and replay with new inputs in the captured buffers, per kernel tier


def test_graph_bmm(seed, tier):
    A, B = fp8((128, 64, 128)), fp8((128, 512, 128)).transpose(1, 2)
    sa, sb = pow2(()), pow2(())
    out = nan_like((128, 64, 512), BF16)
    A2, B2, sa2, sb2 = fp8(A.shape), fp8((128, 512, 128)).transpose(1, 2), pow2(()), pow2(())
    replay_with_new_inputs(
        lambda: cuda_module().bmm(Bmm(A, B, out, sa, sb)), (A, B, sa, sb), (A2, B2, sa2, sb2), out
    )
    assert_matches_or_no_worse(
        out, *oracle_bmm(A2, B2, sa2, sb2), FAST_ACCUM_TOL, lambda: cublas_fp8_bmm(A2, B2, sa2, sb2, BF16)
    )

    X, W = (
        torch.randn(8, 256, 512, device="cuda").bfloat16(),
        torch.randn(8, 512, 256, device="cuda").bfloat16(),
    )
    out16 = nan_like((8, 256, 256), torch.float32)
    X2, W2 = torch.randn_like(X), torch.randn_like(W)
    replay_with_new_inputs(lambda: cuda_module().bmm(Bmm(X, W, out16)), (X, W), (X2, W2), out16)
    assert_matches(out16, *oracle_bmm(X2, W2), slack=1e-4)


def test_graph_gemm_groupwise_and_fp8_output(seed, tier):
    m, n, k = 128, 2112, 7168
    a, b, sa, sb = fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56))
    fresh = (fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56)))
    out = nan_like((m, n), FP16)
    replay_with_new_inputs(
        lambda: cuda_module().gemm_groupwise(Groupwise(a, b, sa, sb, False, False, 1, 128, 128, out)),
        (a, b, sa, sb),
        fresh,
        out,
    )
    ref, ref_abs = oracle_groupwise(*fresh, 1, 128, 128)
    assert_matches(out, ref, ref_abs, slack=BLOCK_ACCUM_TOL)

    out8 = nan_like((m, n), torch.float32).to(E4M3)
    scales = nan_like((m, 17), torch.float32)
    replay_with_new_inputs(
        lambda: cuda_module().gemm_groupwise(
            Groupwise(a, b, sa, sb, False, False, 1, 128, 128, out8, scales)
        ),
        (a, b, sa, sb),
        fresh,
        out8,
    )
    assert_fp8_output(out8.cpu(), scales.cpu(), ref.cpu(), ref_abs.cpu(), BLOCK_ACCUM_TOL)


def test_graph_grouped(seed, tier):
    m_indices = deepgemm_m_indices([256, 100, 384])
    rows = m_indices.numel()
    a, b, sa, sb = grouped_operands(3, rows, 1024, 512)
    out = nan_like((rows, 1024), BF16)
    fresh_ids = deepgemm_m_indices([128, 300, 200])[:rows]
    fresh = (*grouped_operands(3, rows, 1024, 512), fresh_ids)
    replay_with_new_inputs(
        lambda: cuda_module().group_gemm_contiguous(GroupedContiguous(a, b, sa, sb, m_indices, out)),
        (a, b, sa, sb, m_indices),
        fresh,
        out,
    )
    valid = (fresh_ids >= 0)[:, None].expand(rows, 1024)
    assert_matches(out, *oracle_contiguous(*fresh), valid, BLOCK_ACCUM_TOL)

    groups, m = 4, 256
    a3, b3 = fp8((groups, m, 512)), fp8((groups, 1024, 512))
    sa3, sb3 = pow2((groups, m, 4)), pow2((groups, 8, 4))
    masked_m = torch.tensor([0, 10, 200, 256], dtype=torch.int32, device="cuda")
    out3 = nan_like((groups, m, 1024), BF16)
    fresh_masked = torch.tensor([256, 3, 0, 129], dtype=torch.int32, device="cuda")
    replay_with_new_inputs(
        lambda: cuda_module().group_gemm_masked(GroupedMasked(a3, b3, sa3, sb3, masked_m, 128, out3)),
        (masked_m,),
        (fresh_masked,),
        out3,
    )
    row = torch.arange(m, device="cuda")[None, :, None]
    valid = (row < fresh_masked[:, None, None]).expand(groups, m, 1024)
    assert_matches(out3, *oracle_masked(a3, b3, sa3, sb3, fresh_masked), valid, BLOCK_ACCUM_TOL)


def blockscale_operands(m, n, k, combo):
    """``fp8_blockscale_gemm_sm90``'s inputs: (x, w, x_scale as passed, w_scale, x_scale's
    logical (M, K/128) view). FP8 scales are powers of two; upstream's MN-major input scales,
    rows padded to 4."""
    kb = k // 128
    x_scale = w_scale = logical = None
    if combo == "w8a8":
        x, logical = fp8((m, k)), pow2((m, kb))
        padded = nan_like((kb, -(-m // 4) * 4), torch.float32)
        padded[:, :m] = logical.t()
        x_scale = padded[:, :m]
    else:
        x = torch.randn(m, k, device="cuda").to(BF16)
    if combo == "bf16+bf16":
        w = torch.randn(n, k, device="cuda").to(BF16)
    else:
        w, w_scale = fp8((n, k)), pow2((-(-n // 128), kb))
    return x, w, x_scale, w_scale, logical


@pytest.mark.parametrize("combo", ["bf16+fp8", "bf16+bf16", "w8a8"])
def test_graph_fp8_blockscale(seed, combo):
    """The public API captured whole: the activation's quantization and the GEMM."""
    needs_fp8()
    import flashinfer.gemm as fg

    m, n, k = 16, 7168, 2048
    x, w, x_scale, w_scale, _ = blockscale_operands(m, n, k, combo)
    fresh_x, fresh_w, fresh_xs, fresh_ws, fresh_logical = blockscale_operands(m, n, k, combo)
    out = nan_like((m, n), BF16)
    inputs = [t for t in (x, w, x_scale, w_scale) if t is not None]
    fresh = [t for t in (fresh_x, fresh_w, fresh_xs, fresh_ws) if t is not None]
    replay_with_new_inputs(
        lambda: fg.fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out), inputs, fresh, out
    )
    assert_matches(out, *blockscale_oracle(fresh_x, fresh_w, fresh_logical, fresh_ws), slack=BLOCK_ACCUM_TOL)


@pytest.mark.parametrize("tier", ["auto", "tl"])
@pytest.mark.parametrize("combo", ["bf16+fp8", "w8a8"])
def test_a_replayed_blockscale_call_allocates_nothing(seed, combo, tier, monkeypatch):
    """The serving call repeated (m = 1, ``out=`` given, a split K) through the decode-size GEMM
    (``auto``: the Gluon kernel on sm90; ``tl``: the portable one): its temporaries (the quantized
    input, its scales, the split's partial sums and counters) are the stream's scratch
    (``flashinfer._core.scratch``), so a replay makes no CUDA allocation, and each call's result
    is its own."""
    needs_fp8()
    import flashinfer.gemm as fg

    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", tier)
    m, n, k = 1, 2112, 7168
    calls = [blockscale_operands(m, n, k, combo) for _ in range(2)]
    outs = [nan_like((m, n), BF16) for _ in calls]
    for _ in range(2):
        for (x, w, x_scale, w_scale, _), out in zip(calls, outs):
            fg.fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for out in outs:
        out.fill_(float("nan"))
    for _ in range(3):
        for (x, w, x_scale, w_scale, _), out in zip(calls, outs):
            fg.fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    for (x, w, _, w_scale, logical), out in zip(calls, outs):
        assert_matches(out, *blockscale_oracle(x, w, logical, w_scale), slack=BLOCK_ACCUM_TOL)


def test_replayed_blockscale_calls_in_concurrent_streams(seed):
    """BF16-input calls replayed in two streams at once (two-batch overlap): each stream quantizes
    into and sums in its own scratch, so neither call reads the other's temporaries."""
    needs_fp8()
    import flashinfer.gemm as fg

    m, n, k = 4, 2112, 7168
    streams = [torch.cuda.Stream() for _ in range(2)]
    calls = [(*blockscale_operands(m, n, k, "bf16+fp8"), nan_like((m, n), BF16)) for _ in streams]
    torch.cuda.synchronize()
    for _ in range(20):
        for stream, (x, w, _, w_scale, _, out) in zip(streams, calls):
            with torch.cuda.stream(stream):
                fg.fp8_blockscale_gemm_sm90(x, w, None, w_scale, out=out)
    torch.cuda.synchronize()
    for x, w, _, w_scale, _, out in calls:
        assert_matches(out, *blockscale_oracle(x, w, None, w_scale), slack=BLOCK_ACCUM_TOL)


def segment_operands(bounds, m, n, k):
    a, b = fp8((m, k)), fp8((len(bounds) - 1, n, k))
    a_blocks, b_blocks = pow2((k // 128, m)), pow2((len(bounds) - 1, k // 128, n // 128))  # MN-major
    return a, b, a_blocks, b_blocks, torch.tensor(bounds, dtype=torch.int32, device="cuda")


def test_graph_group_gemm_new_offsets(seed):
    """Offsets are device data: new offsets copied into the captured buffer change the groups."""
    needs_fp8()
    import flashinfer.gemm as fg

    m, n, k = 1024, 2048, 2048
    a, b, sa, sb, m_indptr = segment_operands([0, 512, 512, 1024], m, n, k)
    fresh_bounds = [16, 100, 700, 1000]
    fresh = segment_operands(fresh_bounds, m, n, k)
    out = nan_like((m, n), BF16)
    replay_with_new_inputs(
        lambda: fg.group_gemm_fp8_nt_groupwise(a, b, sa, sb, m_indptr, out=out), (a, b, sa, sb, m_indptr),
        fresh, out,
    )  # fmt: skip
    fa, fb, fsa, fsb, f_indptr = fresh
    valid = torch.zeros(m, n, dtype=torch.bool, device="cuda")
    valid[fresh_bounds[0] : fresh_bounds[-1]] = True  # the rows of no segment must stay untouched
    expected = oracle_segments(fa, fb, fsa.t(), fsb.transpose(1, 2), f_indptr)
    assert_matches(out, *expected, valid, BLOCK_ACCUM_TOL)


# ---------------------------------------------------------------------------------------------
# launches


def test_bmm_fp8_repeat_calls_take_the_cached_tile(seed, monkeypatch):
    """After a shape bucket's first (autotuned) call, launches of the portable kernel skip the
    Autotuner and the JIT dispatch (``TunedLaunch``/``FastLaunch``): row counts of the same
    bucket, rows not divisible by 16 and an output at another pointer alignment are all exact."""
    needs_fp8()
    use_tier("cuda-tl", monkeypatch)
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    B = fp8((128, 512, 128)).transpose(1, 2)
    scale = pow2(())
    # 65-128 rows share one autotune bucket; an offset of 4 elements is 8 bytes (not 16-aligned)
    for tokens, offset in ((96, 0), (80, 0), (77, 0), (96, 4), (65, 4)):
        A = fp8((128, tokens, 128))
        buf = nan_like((128 * tokens * 512 + 16,), BF16)
        out = buf[offset : offset + 128 * tokens * 512].view(128, tokens, 512)
        cuda_module().bmm(Bmm(A, B, out, scale, scale))
        assert_matches(out, *oracle_bmm(A, B, scale, scale), slack=FAST_ACCUM_TOL)
    if fp8_bmm._TUNED.fast.enabled:
        # one entry per (rows divisible by 16, output alignment): 96/80, 77, 96 at +8 bytes, 65 at +8
        assert len(fp8_bmm._TUNED.fast._compiled) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("k,n", [(128, 512), (512, 128)])
@pytest.mark.parametrize(
    "tile", [(128, 128, 8, 3, 1), (128, 128, 8, 2, 2), (64, 128, 4, 3, 2), (128, 128, 8, 3, 0)], ids=str
)
def test_bmm_fp8_every_tile_kind(seed, k, n, tile):
    """The portable kernel's persistent and one-program-a-tile forms, one K step (k = 128) or a K
    loop, at an MLA absorb shape, whichever the autotuner would pick (``config=``)."""
    needs_fp8()
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    bm, bn, warps, stages, per_sm = tile
    A = fp8((128, 300, k))
    B = fp8((128, n, k)).transpose(1, 2)
    A_scale, B_scale = pow2(()), pow2((128, 1, n))
    out = nan_like((128, 300, n), BF16)
    config = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "GROUP_M": 8, "PROGRAMS_PER_SM": per_sm,
              "num_warps": warps, "num_stages": stages}  # fmt: skip
    fp8_bmm.fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=config)
    assert_matches(out, *oracle_bmm(A, B, A_scale, B_scale), slack=FAST_ACCUM_TOL)


@pytest.mark.parametrize(
    "rows,cols,block_rows", [(4096, 7168, 1), (3, 2048, 1), (7168, 2048, 128), (2112, 7168, 128)]
)
def test_quantization_is_upstreams_bit_for_bit(seed, rows, cols, block_rows):
    """``fp8_blockscale_gemm_sm90``'s internal quantization against upstream's formula in float64
    (per block ``q = fl32(448 / amax)``, ``e4m3(fl32(x * q))`` saturated, scale ``fl32(1 / q)``)."""
    needs_fp8()
    from flashinfer.gemm._args import QuantizeBlocks

    x = (torch.randn(rows, cols, device="cuda") * torch.logspace(-4, 4, cols, device="cuda")).to(BF16)
    x[0, :128] = 0  # an all-zero block
    values, scales, _ = quantize_oracle(x, block_rows)
    out = nan_like((rows, cols), torch.float32).to(E4M3)
    got = nan_like((scales.shape[1], scales.shape[0]), torch.float32).t()  # column-major, as the API
    cuda_module().quantize_fp8_blocks(QuantizeBlocks(x, block_rows, out, got))
    assert torch.equal(got, scales)
    assert torch.equal(out.view(torch.uint8), values.view(torch.uint8))


def test_no_host_synchronization(seed):
    """Once warmed up (first calls autotune), the sibling APIs never synchronize with the host."""
    needs_fp8()
    import flashinfer.gemm as fg

    x, w, ws = torch.randn(16, 2048, device="cuda").to(BF16), fp8((7168, 2048)), pow2((56, 16))
    a, b, sa, sb, m_indptr = segment_operands([0, 100, 300], 300, 2048, 2048)
    calls = [
        lambda: fg.fp8_blockscale_gemm_sm90(x, w, None, ws),
        lambda: fg.fp8_blockscale_gemm_sm90(x, w.to(torch.float32).to(BF16)),
        lambda: fg.group_gemm_fp8_nt_groupwise(a, b, sa, sb, m_indptr),
        lambda: fg.gemm_fp8_nt_blockscaled(fp8((256, 2048)), w, pow2((16, 2)), pow2((16, 56))),
    ]
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for call in calls:
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# the decode-size GEMM: every launch shape of its table, and where auto routes


def decode_gemm():
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm

    return fp8_decode_gemm


@pytest.mark.slow
def test_decode_gemm_every_table_launch_shape(seed):
    """Each launch shape the table holds, on its own shape at its largest and an odd row count,
    with 128-row activation blocks too (one oracle rule: the block-scaled kernels')."""
    needs_fp8()
    for (n, k, _), rows in decode_gemm().TABLE.items():
        for max_m, config, _ in rows:
            for m, block_m in ((max_m, 1), (max(1, max_m - 3), 128)):
                a, b = fp8((m, k)), fp8((n, k))
                sa, sb = pow2((k // 128, -(-m // block_m))).t(), pow2((-(-n // 128), k // 128))
                out = nan_like((m, n), BF16)
                call = Groupwise(a, b, sa, sb, False, False, block_m, 128, 128, out)
                decode_gemm().gemm_groupwise(call, decode_gemm().DecodeGemmConfig(*config))
                expected = oracle_groupwise(a, b, sa, sb, block_m, 128, 128)
                assert_matches(out, *expected, slack=BLOCK_ACCUM_TOL)


@pytest.mark.parametrize(
    "tier_name, m, expected",
    [("auto", 64, "auto"), ("tl", 7, "tl"), ("gluon", 64, None), ("auto", 300, None)],
)
def test_decode_gemm_routing(seed, monkeypatch, tier_name, m, expected):
    """auto and tl run the decode-size kernel up to DECODE_GEMM_MAX_M rows (where its table does
    not prefer cuBLASLt: n = 2112, k = 7168 never does), auto in its Gluon form where the Gluon
    tier runs; a forced Gluon tier keeps the Gluon dense kernel; more rows take the other routes."""
    from flashinfer._core.kernel_tier import gluon_supported

    needs_fp8()
    if tier_name == "gluon":
        use_tier("cuda-gluon", monkeypatch)
    else:
        monkeypatch.setenv("FLASHINFER_KERNEL_TIER", tier_name)
    launches = []
    forms = [(decode_gemm(), "_GEMM", "tl")]
    if gluon_supported(torch.cuda.current_device()):
        from flashinfer.gemm.kernels.blockwise import gluon_fp8_decode_gemm

        forms.append((gluon_fp8_decode_gemm, "_LAUNCH", "gluon"))
    for module, name, form in forms:
        launcher = getattr(module, name)
        launch = launcher.launch
        monkeypatch.setattr(
            launcher,
            "launch",
            lambda *a, form=form, launch=launch, **k: launches.append(form) or launch(*a, **k),
        )
    n, k = 2112, 7168
    a, b, sa, sb = fp8((m, k)), fp8((n, k)), pow2((m, 56)), pow2((17, 56))
    out = nan_like((m, n), BF16)
    cuda_module().gemm_groupwise(Groupwise(a, b, sa, sb, False, False, 1, 128, 128, out))
    assert_matches(out, *oracle_groupwise(a, b, sa, sb, 1, 128, 128), slack=BLOCK_ACCUM_TOL)
    if expected == "auto":
        expected = "gluon" if len(forms) == 2 else "tl"
    assert launches == ([expected] if expected else [])
