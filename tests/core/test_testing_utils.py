"""``flashinfer.testing.utils``: the FP8 tile quantization helpers FlashInfer's GEMM tests use.

The oracle walks the tiles one by one in float64: each tile's scale is
``2 ** ceil(log2(max(amax, 1e-4) / 448))``, its values ``e4m3(x / (scale + 1e-8))``, and the
dequantized values ``fp8 * scale`` (exact products).
"""

from __future__ import annotations

import doctest
import itertools
import math
import subprocess
import sys

import pytest
import torch

from flashinfer.testing import utils

E4M3 = torch.float8_e4m3fn


def tile_oracle(x, tile_shape):
    """Per-tile scales (in x's block order) and the quantized tensor, tile by tile."""
    blocks = [size // tile for size, tile in zip(x.shape, tile_shape)]
    scales = torch.empty(blocks, dtype=x.dtype)
    values = torch.empty(x.shape, dtype=E4M3)
    for index in itertools.product(*(range(b) for b in blocks)):
        region = tuple(slice(i * t, (i + 1) * t) for i, t in zip(index, tile_shape))
        amax = max(x[region].abs().max().item(), 1e-4)
        scale = torch.tensor(2.0 ** math.ceil(math.log2(torch.tensor(amax / 448, dtype=x.dtype).item())))
        scales[index] = scale.to(x.dtype)
        values[region] = (x[region] / (scales[index] + 1e-8)).to(E4M3)
    return values, scales


CASES = [
    # (shape, tile, mode)
    ((256, 384), (128, 128), "K"),
    ((256, 384), (128, 128), "MN"),
    ((6, 256), (1, 128), "K"),
    ((6, 256), (1, 128), "MN"),
    ((2, 256, 384), (1, 128, 128), "K"),
    ((2, 256, 384), (1, 128, 128), "MN"),
    ((2, 4, 256), (1, 1, 128), "K"),
]


@pytest.mark.parametrize("shape,tile,mode", CASES)
def test_quantize_and_dequantize(seed, shape, tile, mode):
    x = torch.randn(shape) * torch.logspace(-5, 3, shape[-1])  # tiles of very different ranges
    blocks = [s // t for s, t in zip(shape, tile)]
    scale_shape = blocks if mode == "K" else blocks[:-2] + [blocks[-1], blocks[-2]]
    values, scales = utils.quantize_fp8(x, tuple(scale_shape), tile, mode)
    expected_values, expected_scales = tile_oracle(x, tile)
    if mode != "K":
        expected_scales = expected_scales.transpose(-1, -2)
    assert tuple(scales.shape) == tuple(scale_shape) and scales.dtype == x.dtype
    assert torch.equal(scales, expected_scales)
    assert values.dtype == E4M3 and torch.equal(values.view(torch.uint8), expected_values.view(torch.uint8))
    deq = utils.dequantize_fp8(values, scales, mode)
    per_element = expected_scales if mode == "K" else expected_scales.transpose(-1, -2)
    for dim, t in enumerate(tile):
        per_element = per_element.repeat_interleave(t, dim=dim)
    assert deq.dtype == torch.float32 and torch.equal(deq, values.float() * per_element)
    # power-of-two scales >= amax / 448: one E4M3 rounding away from x
    assert ((deq.double() - x.double()).abs() <= 2.0**-4 * x.double().abs() + 2.0**-10 * per_element).all()


def test_bf16_input_keeps_its_dtype_for_the_scales(seed):
    """The scale is computed in the input's dtype, as upstream (log2 rounded to bf16 included)."""
    x = torch.randn(4, 256).to(torch.bfloat16)
    values, scales = utils.quantize_fp8(x, (4, 2), (1, 128), "K")
    assert scales.dtype == torch.bfloat16
    assert torch.equal(scales, 2.0 ** torch.round(torch.log2(scales.float())))  # powers of two
    deq = utils.dequantize_fp8(values, scales, "K").double()
    step = scales.double().repeat_interleave(128, 1)
    assert ((deq - x.double()).abs() <= 2.0**-4 * x.double().abs() + 2.0**-10 * step).all()


def test_shapes_that_do_not_tile_are_rejected():
    with pytest.raises(ValueError, match="tile `x` of shape"):
        utils.quantize_fp8(torch.randn(4, 6), (2, 3), (3, 2), "K")
    with pytest.raises(AssertionError, match="x.ndim must be 2 or 3"):
        utils.quantize_fp8(torch.randn(4), (1,), (4,), "K")
    with pytest.raises(AssertionError):
        utils.quantize_fp8(torch.randn(4, 4), (1, 1, 1), (4, 4), "K")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_per_token_cast_to_fp8_against_a_float64_walk(seed, dtype):
    """DeepGEMM's 1 x 128 row quantizer: each block's scale the power of two at or above
    ``max(amax, 1e-4) / 448``, values ``e4m3(x / scale)``, one block with a zero row part."""
    x = (torch.randn(5, 384) * torch.tensor([1e-3, 1.0, 300.0]).repeat_interleave(128)).to(dtype)
    x[2, 128:256] = 0
    values, scales = utils.per_token_cast_to_fp8(x)
    assert values.dtype == E4M3 and scales.dtype == torch.float32 and tuple(scales.shape) == (5, 3)
    for r in range(5):
        for b in range(3):
            block = x[r, 128 * b : 128 * (b + 1)].double()
            scale = 2.0 ** math.ceil(math.log2(max(block.abs().max().item(), 1e-4) / 448))
            assert scales[r, b].item() == scale
            assert torch.equal(values[r, 128 * b : 128 * (b + 1)], (block / scale).float().to(E4M3))
    with pytest.raises(AssertionError):
        utils.per_token_cast_to_fp8(torch.randn(4, 100))


def test_docstring_examples_run():
    results = doctest.testmod(utils, raise_on_error=False)
    assert results.attempted > 0 and results.failed == 0


def test_import_flashinfer_does_not_load_testing():
    code = "import sys, flashinfer; print('flashinfer.testing' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
