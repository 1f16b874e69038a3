"""Oracles and inputs for the sibling GEMM APIs (float64, written here, independent of the package).

- ``gemm_fp8_nt_blockscaled`` and ``group_gemm_fp8_nt_groupwise``: FP8 operands and power-of-two
  scales, so the oracle is exact and the tolerance is :func:`gemm_cases.assert_matches`' (half an
  output ulp plus a float32-accumulation term).
- ``fp8_blockscale_gemm_sm90``: 16-bit operands are quantized inside. :func:`quantize_oracle`
  computes upstream's quantization in float64, rounding to float32 once per step (exactly
  IEEE float32 arithmetic), so the product of its results is the exact answer for the quantized
  operands (:func:`blockscale_oracle`). :func:`quantization_error_bound` states how far that is
  from the product of the unquantized operands, per dtype combination.
"""

from __future__ import annotations

import math

import torch
from gemm_cases import ACC_TOL, RTOL, oracle_groupwise

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
# E4M3 keeps 3 mantissa bits: rounding to nearest costs at most 2**-4 relative in the normal
# range and half the subnormal step (2**-9) absolute; the three float32 roundings of the
# quantization (q = 448 / amax, x * q, 1 / q) add at most 2**-20 relative.
E4M3_REL = 2.0**-4 + 2.0**-20
E4M3_SUBNORMAL_HALF_STEP = 2.0**-10


def quantize_oracle(x: torch.Tensor, block_rows: int):
    """Upstream's SM90 block quantization, independently: ``(values e4m3, scales float32, amax)``.

    Per ``block_rows x 128`` block: ``q = fl32(448 / amax)`` (1 if ``amax == 0``),
    ``values = e4m3(clamp(fl32(x * q), +-448))``, ``scale = fl32(1 / q)``. float64 division
    and multiplication of float32 numbers rounded once to float32 equal float32 arithmetic.
    """
    rows, cols = x.shape
    row_blocks, col_blocks = math.ceil(rows / block_rows), cols // 128
    values = torch.empty(rows, cols, dtype=E4M3)
    scales = torch.empty(row_blocks, col_blocks, dtype=torch.float32)
    amaxes = torch.empty(row_blocks, col_blocks, dtype=torch.float64)
    for i in range(row_blocks):
        r = slice(i * block_rows, min(rows, (i + 1) * block_rows))
        for j in range(col_blocks):
            c = slice(j * 128, (j + 1) * 128)
            block = x[r, c].double()
            amax = block.abs().max()
            # tensor / tensor divides once (a Python number / tensor multiplies by a reciprocal)
            q = (
                torch.tensor(1.0)
                if amax == 0
                else (torch.tensor(E4M3_MAX, dtype=torch.float64) / amax).float()
            )
            scaled = (block * q.double()).float().clamp(-E4M3_MAX, E4M3_MAX)
            values[r, c] = scaled.to(E4M3)
            scales[i, j] = (torch.tensor(1.0, dtype=torch.float64) / q.double()).float()
            amaxes[i, j] = amax
    return values, scales, amaxes


def dequantized(values, scales, block_rows):
    per_element = scales.double().repeat_interleave(block_rows, 0)[: values.shape[0]]
    return values.double() * per_element.repeat_interleave(128, 1)


def blockscale_oracle(input, weight, input_scale, weight_scale):
    """float64 ``(ref, ref_abs)`` of ``fp8_blockscale_gemm_sm90`` with upstream's quantization.

    ``input_scale`` is the logical ``(M, K/128)`` scale (FP8 input) and ``weight_scale`` the
    ``(N or N/128, K/128)`` one (FP8 weight); 16-bit operands are quantized by the oracle.
    """
    if input.dtype == torch.bfloat16:
        values, scales, _ = quantize_oracle(input, 1)
        a, sa = values, scales
    else:
        a, sa = input, input_scale
    if weight.dtype == torch.bfloat16:
        values, scales, _ = quantize_oracle(weight, 128)
        b, sb, block_n = values, scales, 128
    else:
        b, sb = weight, weight_scale
        block_n = 1 if weight_scale.shape[0] == weight.shape[0] else 128
    return oracle_groupwise(a, b, sa, sb, 1, block_n, 128)


def _quantization_error(x, block_rows):
    """Per-element bound on ``|dequant(quant(x)) - x|`` (float64), or zeros for FP8 operands."""
    if x.dtype != torch.bfloat16:
        return torch.zeros(x.shape, dtype=torch.float64)
    _, _, amax = quantize_oracle(x, block_rows)
    step = (amax / E4M3_MAX).repeat_interleave(block_rows, 0)[: x.shape[0]].repeat_interleave(128, 1)
    return E4M3_REL * x.double().abs() + E4M3_SUBNORMAL_HALF_STEP * step * (1 + 2.0**-20)


def quantization_error_bound(input, weight, input_scale, weight_scale, out_dtype):
    """``(ref, bound)``: the float64 product of the operands as given, and the stated error bound.

    With ``da`` / ``db`` the quantization errors above (zero for an FP8 operand, which is used as
    given with its scales):
    ``|out - ref| <= |da| |b|^T + |a| |db|^T + |da| |db|^T + 2**-16 (|a| + |da|)(|b| + |db|)^T``
    plus one output rounding. So W8A8 is exact up to accumulation and rounding, BF16 + FP8 adds
    about ``2**-4 sum |a||b|`` (the activation's 3-bit mantissa), BF16 + BF16 twice that.
    """
    a = input.double() if input.dtype == torch.bfloat16 else dequantized(input, input_scale, 1)
    if weight.dtype == torch.bfloat16:
        b = weight.double()
    else:
        b = dequantized(weight, weight_scale, 1 if weight_scale.shape[0] == weight.shape[0] else 128)
    da, db = _quantization_error(input, 1), _quantization_error(weight, 128)
    ref = a @ b.t()
    bound = da @ b.abs().t() + a.abs() @ db.t() + da @ db.t()
    bound += ACC_TOL * (a.abs() + da) @ (b.abs() + db).t()
    return ref, bound + RTOL[out_dtype] * (ref.abs() + bound)


def row_scales(a_scale_blocks, m_indptr, m, block_m):
    """Per-row A scales of the grouped GEMM: group ``g``'s blocks start at ``m_indptr[g] // block_m``."""
    rows = torch.zeros(m, a_scale_blocks.shape[1], dtype=a_scale_blocks.dtype)
    bounds = m_indptr.tolist()
    for g in range(len(bounds) - 1):
        for r in range(bounds[g], bounds[g + 1]):
            rows[r] = a_scale_blocks[bounds[g] // block_m + (r - bounds[g]) // block_m]
    return rows


def oracle_segments(a, b, a_rows, b_blocks, m_indptr):
    """float64 ``(ref, ref_abs)`` per segment; rows outside every segment are NaN (untouched)."""
    m, n = a.shape[0], b.shape[1]
    ref = torch.full((m, n), float("nan"), dtype=torch.float64)
    ref_abs = torch.zeros(m, n, dtype=torch.float64)
    bounds = m_indptr.tolist()
    for g in range(len(bounds) - 1):
        rows = slice(bounds[g], bounds[g + 1])
        if bounds[g + 1] > bounds[g]:
            ref[rows], ref_abs[rows] = oracle_groupwise(a[rows], b[g], a_rows[rows], b_blocks[g], 1, 128, 128)
    return ref, ref_abs
