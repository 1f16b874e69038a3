"""The sibling GEMM APIs on CUDA at real (DeepSeek-V3) sizes, against float64 oracles.

- ``fp8_blockscale_gemm_sm90``: the internal FP8 quantization is checked bit for bit against a
  float64 oracle of upstream's formula (per block ``q = fl32(448 / amax)``, ``e4m3(fl32(x * q))``
  saturated, scale ``fl32(1 / q)``), and the product against the float64 product of the
  quantized operands (one output ulp plus the block-scaled accumulation term of
  ``test_gemm_cuda``).
- ``group_gemm_fp8_nt_groupwise``: per-segment float64 oracles; rows outside the segments must
  stay NaN.
- ``gemm_fp8_nt_blockscaled``: the groupwise oracle with 128 x 128 blocks.
Every API is captured in a CUDA graph and replayed on new inputs (offsets included), and runs
with host synchronization forbidden once warmed up.
"""

from __future__ import annotations

import pytest
import torch
from cuda_inputs import E4M3, fp8, nan_like, needs_fp8, pow2, replay_with_new_inputs
from oracles import E5M2, expand_blocks, quantize_oracle
from oracles import assert_within_rms as check
from oracles import groupwise_dequant_oracle as groupwise_oracle
from test_gemm_cuda import BLOCK_ACCUM_TOL

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BF16, FP16 = torch.bfloat16, torch.float16
DEEPSEEK_NK = [(7168, 2048), (2112, 7168), (24576, 1536), (4096, 7168)]


def api():
    import flashinfer.gemm as fg

    return fg


# ---------------------------------------------------------------------------------------------
# fp8_blockscale_gemm_sm90


def blockscale_oracle(x, w, x_scale, w_scale):
    """float64 product of the operands as the API quantizes them (scales: logical K-major views)."""
    if x.dtype == BF16:
        x, x_scale, _ = quantize_oracle(x, 1)
    if w.dtype == BF16:
        w, w_scale, _ = quantize_oracle(w, 128)
    (m, k), n = x.shape, w.shape[0]
    block_n = 1 if w_scale.shape[0] == n else 128
    a = x.double() * expand_blocks(x_scale, m, k, 1, 128)
    b = w.double() * expand_blocks(w_scale, n, k, block_n, 128)
    return a @ b.t()


@pytest.mark.parametrize(
    "rows,cols,block_rows", [(4096, 7168, 1), (3, 2048, 1), (7168, 2048, 128), (2112, 7168, 128)]
)
def test_quantization_is_upstreams_bit_for_bit(seed, rows, cols, block_rows):
    needs_fp8()
    from flashinfer.gemm import _cuda
    from flashinfer.gemm._args import QuantizeBlocks

    x = (torch.randn(rows, cols, device="cuda") * torch.logspace(-4, 4, cols, device="cuda")).to(BF16)
    x[0, :128] = 0  # an all-zero block
    values, scales, _ = quantize_oracle(x, block_rows)
    out = nan_like((rows, cols), torch.float32).to(E4M3)
    got = nan_like((scales.shape[1], scales.shape[0]), torch.float32).t()  # column-major, as the API
    _cuda.quantize_fp8_blocks(QuantizeBlocks(x, block_rows, out, got))
    assert torch.equal(got, scales)
    assert torch.equal(out.view(torch.uint8), values.view(torch.uint8))


def _operands(m, n, k, combo, weight_scale):
    """Inputs for one dtype combination; FP8 scales are powers of two (exact)."""
    kb = k // 128
    x_scale = w_scale = None
    if combo == "w8a8":
        x, x_scale_logical = fp8((m, k)), pow2((m, kb))
        padded = nan_like((kb, -(-m // 4) * 4), torch.float32)  # upstream's MN-major, rows padded to 4
        padded[:, :m] = x_scale_logical.t()
        x_scale = padded[:, :m]
    else:
        x = torch.randn(m, k, device="cuda").to(BF16)
    if combo == "bf16+bf16":
        w = torch.randn(n, k, device="cuda").to(BF16)
    else:
        w = fp8((n, k))
        w_scale = pow2((n, kb)) if weight_scale == "token" else pow2((-(-n // 128), kb))
    logical = x_scale.t() if x_scale is not None else None
    return x, w, x_scale, w_scale, logical


@pytest.mark.parametrize("n,k", DEEPSEEK_NK)
@pytest.mark.parametrize("m", [1, 16, 64, 300])
@pytest.mark.parametrize("combo,weight_scale", [("w8a8", "block"), ("w8a8", "token"), ("bf16+fp8", "block"),
                                                ("bf16+fp8", "token"), ("bf16+bf16", None)])  # fmt: skip
def test_fp8_blockscale(seed, m, n, k, combo, weight_scale):
    needs_fp8()
    x, w, x_scale, w_scale, x_logical = _operands(m, n, k, combo, weight_scale)
    out = nan_like((m, n), BF16)
    assert api().fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out) is out
    check(out, blockscale_oracle(x, w, x_logical, w_scale), BF16, BLOCK_ACCUM_TOL)


def test_fp8_blockscale_fp16_and_strided_output(seed):
    needs_fp8()
    m, n, k = 48, 2112, 7168
    x, w = torch.randn(m, k, device="cuda").to(BF16), fp8((n, k))
    w_scale = pow2((17, 56))
    buffer = nan_like((m, 2 * n), FP16)
    out = buffer[:, ::2]
    api().fp8_blockscale_gemm_sm90(x, w, None, w_scale, out=out)
    check(out, blockscale_oracle(x, w, None, w_scale), FP16, BLOCK_ACCUM_TOL)
    assert buffer[:, 1::2].isnan().all()


@pytest.mark.parametrize("combo", ["bf16+fp8", "bf16+bf16", "w8a8"])
def test_graph_fp8_blockscale(seed, combo):
    needs_fp8()
    m, n, k = 16, 7168, 2048
    x, w, x_scale, w_scale, _ = _operands(m, n, k, combo, "block")
    fresh_x, fresh_w, fresh_xs, fresh_ws, fresh_logical = _operands(m, n, k, combo, "block")
    out = nan_like((m, n), BF16)
    inputs = [t for t in (x, w, x_scale, w_scale) if t is not None]
    fresh = [t for t in (fresh_x, fresh_w, fresh_xs, fresh_ws) if t is not None]
    replay_with_new_inputs(
        lambda: api().fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out), inputs, fresh, out
    )
    check(out, blockscale_oracle(fresh_x, fresh_w, fresh_logical, fresh_ws), BF16, BLOCK_ACCUM_TOL)


# ---------------------------------------------------------------------------------------------
# group_gemm_fp8_nt_groupwise


def segments_oracle(a, b, a_blocks, b_blocks, bounds, block_m, mode):
    """float64 per segment; rows outside every segment NaN. Scales as stored (``mode``)."""
    if mode == "MN":
        a_blocks, b_blocks = a_blocks.t(), b_blocks.transpose(1, 2)
    m, k = a.shape
    n = b.shape[1]
    ref = torch.full((m, n), float("nan"), dtype=torch.float64, device="cuda")
    for g in range(len(bounds) - 1):
        start, end = bounds[g], bounds[g + 1]
        if end == start:
            continue
        rows = torch.arange(start, end, device="cuda")
        scale_rows = a_blocks[start // block_m + (rows - start) // block_m]
        a_deq = a[start:end].double() * expand_blocks(scale_rows, end - start, k, 1, 128)
        b_deq = b[g].double() * expand_blocks(b_blocks[g], n, k, 128, 128)
        ref[start:end] = a_deq @ b_deq.t()
    return ref


def group_operands(bounds, m, n, k, mode, block_m, dtypes=(E4M3, E4M3)):
    groups = len(bounds) - 1
    a, b = fp8((m, k), dtypes[0]), fp8((groups, n, k), dtypes[1])
    kb, nb = -(-k // 128), -(-n // 128)
    a_blocks, b_blocks = pow2((-(-m // block_m), kb)), pow2((groups, nb, kb))
    if mode == "MN":
        a_blocks, b_blocks = a_blocks.t().contiguous(), b_blocks.transpose(1, 2).contiguous()
    return a, b, a_blocks, b_blocks, torch.tensor(bounds, dtype=torch.int32, device="cuda")


GROUP_SHAPES = [
    # (offsets, rows, n, k)
    ([0, 256, 256, 1000, 1004, 2048], 2048, 4096, 7168),
    ([0, 4, 8, 12, 16, 20, 24, 28, 32], 32, 7168, 2048),
    ([8, 300, 301, 777], 800, 2112, 7168),
]


@pytest.mark.parametrize("bounds,m,n,k", GROUP_SHAPES)
@pytest.mark.parametrize("mode", ["MN", "K"])
@pytest.mark.parametrize("block_m", [1, 128])
def test_group_gemm(seed, bounds, m, n, k, mode, block_m):
    needs_fp8()
    a, b, sa, sb, m_indptr = group_operands(bounds, m, n, k, mode, block_m)
    out = nan_like((m, n), BF16)
    api().group_gemm_fp8_nt_groupwise(
        a, b, sa, sb, m_indptr, scale_granularity_mnk=(block_m, 128, 128), scale_major_mode=mode, out=out
    )
    ref = segments_oracle(a, b, sa, sb, bounds, block_m, mode)
    valid = ~ref.isnan()
    assert out[~valid].isnan().all()
    check(out[valid], ref[valid], BF16, BLOCK_ACCUM_TOL)


def test_group_gemm_fp16_e5m2(seed):
    needs_fp8()
    bounds, m, n, k = [0, 100, 612], 612, 2048, 1536
    a, b, sa, sb, m_indptr = group_operands(bounds, m, n, k, "K", 1, dtypes=(E5M2, E4M3))
    out = api().group_gemm_fp8_nt_groupwise(a, b, sa, sb, m_indptr, scale_major_mode="K", out_dtype=FP16)
    check(out, segments_oracle(a, b, sa, sb, bounds, 1, "K"), FP16, BLOCK_ACCUM_TOL)


def test_graph_group_gemm_new_offsets(seed):
    """Offsets are device data: new offsets copied into the captured buffer change the groups."""
    needs_fp8()
    m, n, k = 1024, 2048, 2048
    a, b, sa, sb, m_indptr = group_operands([0, 512, 512, 1024], m, n, k, "MN", 1)
    fresh_bounds = [16, 100, 700, 1000]
    fresh = group_operands(fresh_bounds, m, n, k, "MN", 1)
    out = nan_like((m, n), BF16)
    replay_with_new_inputs(
        lambda: api().group_gemm_fp8_nt_groupwise(a, b, sa, sb, m_indptr, out=out), (a, b, sa, sb, m_indptr),
        fresh, out,
    )  # fmt: skip
    ref = segments_oracle(*fresh[:4], fresh_bounds, 1, "MN")
    valid = ~ref.isnan()
    assert out[~valid].isnan().all()
    check(out[valid], ref[valid], BF16, BLOCK_ACCUM_TOL)


# ---------------------------------------------------------------------------------------------
# gemm_fp8_nt_blockscaled


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 7168), (300, 2112, 7168), (128, 7168, 2048)])
@pytest.mark.parametrize("mode", ["MN", "K"])
def test_blockscaled(seed, m, n, k, mode):
    needs_fp8()
    a, b = fp8((m, k)), fp8((n, k))
    sa, sb = pow2((-(-m // 128), k // 128)), pow2((-(-n // 128), k // 128))
    stored = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
    out = api().gemm_fp8_nt_blockscaled(a, b, *stored, mode)
    check(out, groupwise_oracle(a, b, sa, sb, (128, 128, 128)), BF16, BLOCK_ACCUM_TOL)


# ---------------------------------------------------------------------------------------------
# no host synchronization once warmed up (first calls autotune)


def test_no_host_synchronization(seed):
    needs_fp8()
    fg = api()
    x, w, ws = torch.randn(16, 2048, device="cuda").to(BF16), fp8((7168, 2048)), pow2((56, 16))
    a, b, sa, sb, m_indptr = group_operands([0, 100, 300], 300, 2048, 2048, "MN", 1)
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
