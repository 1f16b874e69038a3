"""Numbers the op packages share, each defined once (kernels wrap them in ``tl.constexpr``)."""

from __future__ import annotations

import math

import torch

# exp(x) == exp2(x * LOG2E): base-2 LSE and exp2-domain softmax
LOG2E = math.log2(math.e)

# Largest finite values of the FP8 formats: saturating casts clamp to them.
E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448.0
FP8_MAX = {torch.float8_e4m3fn: E4M3_MAX, torch.float8_e5m2: torch.finfo(torch.float8_e5m2).max}

# A NaN bit pattern in both float8_e4m3fn and float8_e5m2.
FP8_NAN_BITS = 0x7F

# FP8 x FP8 tensor-core dots exist from compute capability 8.9 (Ada, Hopper and later).
FP8_TENSOR_CORE_CAPABILITY = (8, 9)

# FP8 output of the groupwise GEMM: one float32 scale per row and OUTPUT_SCALE_BLOCK columns,
# max(block amax, OUTPUT_SCALE_FLOOR) / E4M3_MAX.
OUTPUT_SCALE_BLOCK = 128
OUTPUT_SCALE_FLOOR = 1e-12
