"""FP8 E4M3 block quantization (DeepSeek-V3 style), the input stage of ``fp8_blockscale_gemm_sm90``.

``x (rows, cols)`` bf16/fp16, ``cols`` a multiple of 128, is cut into ``BLOCK_ROWS x 128`` blocks
(``BLOCK_ROWS`` = 1 for activations, 128 for weights). Per block, in float32 as upstream's SM90
kernels compute it:

- ``amax = max |x|`` (exact: a maximum of 16-bit values);
- ``q = 448 / amax`` (correctly rounded), or 1 when ``amax == 0``;
- ``out = e4m3(clamp(x * q, -448, 448))`` (round to nearest even; the clamp is ``satfinite``);
- ``scale = 1 / q`` (correctly rounded): the dequantization multiplier the GEMM reads.

``scale`` is a logical ``(ceil(rows / BLOCK_ROWS), cols / 128)`` view with its own strides, so
the caller picks the layout its GEMM reads best (column-major for cuBLASLt's 1x128 scales).
Each program quantizes ``TILE_ROWS`` rows of one 128-column block: a 1x128 row needs one
reduction along the block, a 128x128 block one more across its rows. One launch, no host
synchronization.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...._core.constants import E4M3_MAX as _E4M3_MAX
from ...._core.triton_launch import FastLaunch
from ....utils import ceil_div

E4M3_MAX = tl.constexpr(_E4M3_MAX)
SCALE_COLS = 128
ACTIVATION_TILE_ROWS = 16


@triton.jit
def fp8_quantize_kernel(
    # input, quantized output, dequantization scales
    x_ptr,
    out_ptr,
    scale_ptr,
    # problem size
    rows,
    # strides, in elements
    stride_xm,
    stride_om,
    stride_sr,
    stride_sk,
    # 1 (one scale per row and 128 columns) or 128 (one per 128 x 128 block)
    BLOCK_ROWS: tl.constexpr,
    # rows handled by one program (BLOCK_ROWS itself for 128 x 128 blocks)
    TILE_ROWS: tl.constexpr,
):
    pid_rows = tl.program_id(0)
    col_block = tl.program_id(1)
    offs_r = pid_rows * TILE_ROWS + tl.arange(0, TILE_ROWS)
    offs_c = col_block * 128 + tl.arange(0, 128)
    row_ok = offs_r < rows
    rows64 = offs_r.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + offs_c[None, :], mask=row_ok[:, None], other=0.0)
    x = x.to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    if BLOCK_ROWS != 1:
        amax = tl.zeros_like(amax) + tl.max(amax, axis=0)
    multiplier = tl.where(amax != 0.0, tl.math.div_rn(tl.full(amax.shape, E4M3_MAX, tl.float32), amax), 1.0)
    quantized = tl.clamp(x * multiplier[:, None], -E4M3_MAX, E4M3_MAX)
    tl.store(
        out_ptr + rows64[:, None] * stride_om + offs_c[None, :],
        quantized.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )
    scale = tl.math.div_rn(tl.full(multiplier.shape, 1.0, tl.float32), multiplier)
    scale_rows = offs_r // BLOCK_ROWS
    # every row of a 128 x 128 block holds the same scale: its first row writes it
    first = row_ok & (offs_r % BLOCK_ROWS == 0)
    tl.store(scale_ptr + scale_rows * stride_sr + col_block * stride_sk, scale, mask=first)


_LAUNCH = FastLaunch(fp8_quantize_kernel, varying=("rows", "stride_sr", "stride_sk"))


def quantize_blocks(call):
    """Launch the block quantization of ``call.x`` into ``call.out`` and ``call.scale``.

    Parameters
    ----------
    call : flashinfer.gemm._args.QuantizeBlocks
        ``x (rows, cols)`` bf16/fp16 with ``stride(-1) == 1`` and ``cols % 128 == 0``;
        ``block_rows`` 1 or 128; ``out (rows, cols)`` float8_e4m3fn with ``stride(-1) == 1``;
        ``scale`` float32 ``(ceil(rows / block_rows), cols / 128)`` view, any strides.

    Returns
    -------
    callable
        The replay: repeats this launch for a record of the same call signature.
    """
    x, block_rows, out, scale = call
    rows, cols = x.shape
    tile_rows = ACTIVATION_TILE_ROWS if block_rows == 1 else block_rows
    grid = (ceil_div(rows, tile_rows), cols // SCALE_COLS)
    launch = _LAUNCH.bind(
        grid,
        x, out, scale, rows, x.stride(0), out.stride(0), scale.stride(0), scale.stride(1),
        BLOCK_ROWS=block_rows, TILE_ROWS=tile_rows, num_warps=4 if block_rows == 1 else 8,
    )  # fmt: skip
    return lambda call: launch(call.x, call.out, call.scale)
