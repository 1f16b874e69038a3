"""The Triton paths of the sibling GEMM APIs under TRITON_INTERPRET=1 (CPU), against float64 oracles.

- ``kernels.blockwise.fp8_quantize``: FP8 block quantization (1x128 and 128x128), as upstream's SM90 kernels
  quantize (per block ``q = 448 / amax``, ``e4m3(x * q)``, scale ``1 / q``, in float32);
- ``kernels.blockwise.fp8_blockwise`` with 1x128 weight scales (``fp8_blockscale_gemm_sm90``'s per-token
  weights) and with the segment-derived group ids of ``group_gemm_fp8_nt_groupwise``.
"""

from __future__ import annotations

import pytest
import torch
from oracles import assert_matches, oracle_groupwise, oracle_segments, quantized_blocks

from flashinfer.gemm._args import GroupedContiguous, Groupwise, QuantizeBlocks

pytestmark = pytest.mark.triton

E4M3 = torch.float8_e4m3fn
SMALL_TILES = {"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 1}


def fp8(shape):
    return (torch.randn(shape) * 4).to(E4M3)


def pow2(shape):
    return 2.0 ** torch.randint(-3, 4, shape).float()


def same_e4m3(got, expected_float):
    """``got`` is ``expected_float`` cast to e4m3 (round to nearest even), bit for bit: the
    conftest's patched interpreter converts as the GPU's ``cvt.rn`` does."""
    return torch.equal(got.view(torch.uint8), expected_float.to(E4M3).view(torch.uint8))


@pytest.mark.parametrize("rows,cols,block_rows", [(5, 256, 1), (37, 384, 1), (130, 256, 128), (40, 128, 128)])
def test_quantize_blocks(seed, rows, cols, block_rows):
    from flashinfer.gemm.kernels.blockwise import fp8_quantize

    x = (torch.randn(rows, cols) * torch.logspace(-4, 3, cols)).to(torch.bfloat16)
    x[0, :128] = 0  # an all-zero block: multiplier 1, scale 1
    row_blocks = -(-rows // block_rows)
    out = torch.full((rows, cols), float("nan")).to(E4M3)
    # the activation scales go column-major (cuBLASLt's layout), the weight scales row-major
    if block_rows == 1:
        scale = torch.full((cols // 128, row_blocks), float("nan")).t()
    else:
        scale = torch.full((row_blocks, cols // 128), float("nan"))
    fp8_quantize.quantize_blocks(QuantizeBlocks(x, block_rows, out, scale))
    values, expected_scale, _ = quantized_blocks(x, block_rows)
    assert torch.equal(scale, expected_scale)
    assert same_e4m3(out, values)


def test_quantize_blocks_strided_rows(seed):
    from flashinfer.gemm.kernels.blockwise import fp8_quantize

    x = torch.randn(6, 512).to(torch.bfloat16)[:, :256]  # row stride 512
    out = torch.full((6, 384), float("nan")).to(E4M3)[:, :256]
    scale = torch.full((6, 4), float("nan"))[:, 1:3]
    fp8_quantize.quantize_blocks(QuantizeBlocks(x, 1, out, scale))
    values, expected_scale, _ = quantized_blocks(x, 1)
    assert torch.equal(scale, expected_scale) and same_e4m3(out, values)


def test_gemm_groupwise_with_per_row_weight_scales(seed):
    """1x128 weight scales (SCALE_BN = 1), as fp8_blockscale_gemm_sm90 sends per-token weights."""
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    m, n, k = 9, 40, 384
    a, b = fp8((m, k)), fp8((n, k))
    a_scale = pow2((3, m)).t()  # column-major, as the internal activation quantization writes
    b_scale = pow2((n, 3))
    out = torch.full((m, n), float("nan")).to(torch.bfloat16)
    fp8_blockwise.gemm_groupwise(
        Groupwise(a, b, a_scale, b_scale, False, False, 1, 1, 128, out), config=SMALL_TILES
    )
    assert_matches(out, *oracle_groupwise(a, b, a_scale, b_scale, 1, 1, 128))


def test_segments_through_the_contiguous_kernel(seed):
    """group_gemm_fp8_nt_groupwise's CUDA route: m_indptr -> per-row group ids -> the grouped kernel."""
    from flashinfer.gemm._group_gemm_segments import row_groups
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    bounds = [2, 7, 7, 30, 33]  # rows 0-1 and 33-35 belong to no group; group 1 is empty
    m, n, k, groups = 36, 24, 256, 4
    a, b = fp8((m, k)), fp8((groups, n, k))
    a_scale, b_scale = pow2((2, m)).t(), pow2((groups, 1, 2))
    out = torch.full((m, n), float("nan")).to(torch.bfloat16)
    m_indices = row_groups(torch.tensor(bounds, dtype=torch.int32), m)
    fp8_blockwise.group_gemm_contiguous(
        GroupedContiguous(a, b, a_scale, b_scale, m_indices, out), config=SMALL_TILES
    )
    valid = torch.zeros(m, n, dtype=torch.bool)
    valid[bounds[0] : bounds[-1]] = True  # the rows of no group must be left untouched
    assert_matches(out, *oracle_segments(a, b, a_scale, b_scale, torch.tensor(bounds)), valid)
