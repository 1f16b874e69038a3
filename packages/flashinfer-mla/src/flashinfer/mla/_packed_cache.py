"""The packed FP8 MLA cache row: 656 bytes per token (FlashMLA's "V32" FP8 sparse layout).

Upstream FlashInfer v0.6.17 reads this layout in its ``sparse`` decode backend (SM120), FlashMLA's
Hopper sparse decode reads it (``tests/quant.py`` there builds it), and MATE's FlashMLA-style
decode takes it on MUSA. One token row:

============  ===========================================================================
bytes         content
============  ===========================================================================
0 .. 511      512 latent (NoPE) values, float8_e4m3fn
512 .. 527    4 float32 scales (native byte order): scale ``i`` multiplies values
              ``128 i .. 128 i + 127``
528 .. 655    64 RoPE values, bfloat16 (not quantized)
============  ===========================================================================

The dequantized row is the 576-wide K of the plain cache, ``[e4m3 * repeat(scales, 128) | rope]``;
V is its first 512 values. ``kv_scale_format`` names how the scales were chosen: ``pow2_fp32``
(DeepSeek-V3.2, and ``auto``) promises powers of two, ``arbitrary_fp32`` (GLM) any float. Both
dequantize as ``value * scale`` here; upstream's SM120 kernel reads only the exponent of a
``pow2_fp32`` scale in QK^T, so it gives other results for scales that break the promise.
"""

from __future__ import annotations

import torch

ROW_BYTES = 656
NOPE = 512
ROPE = 64
SCALE_BLOCK = 128
SCALES_OFFSET = NOPE
ROPE_OFFSET = NOPE + (NOPE // SCALE_BLOCK) * 4  # 528
KV_SCALE_FORMATS = ("arbitrary_fp32", "auto", "pow2_fp32")


def unpack_rows(rows: torch.Tensor) -> torch.Tensor:
    """Dequantize packed rows ``[..., 656]`` uint8 (last dim contiguous) to float32 ``[..., 576]``."""
    latent = rows[..., :NOPE].view(torch.float8_e4m3fn).float()
    scales = rows[..., SCALES_OFFSET:ROPE_OFFSET].view(torch.float32)
    rope = rows[..., ROPE_OFFSET:].view(torch.bfloat16).float()
    return torch.cat((latent * scales.repeat_interleave(SCALE_BLOCK, dim=-1), rope), dim=-1)
