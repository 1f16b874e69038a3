"""The reference GEMMs: plain PyTorch in float32, on any device.

These are what runs on CPU, what ``FLASHINFER_FORCE_REFERENCE=1`` selects everywhere, and what
the MATE adapter falls back to where MATE has no kernel. Each function takes the op's argument
record (:mod:`._args`), validated by the API layer; outputs are written in place, honouring
their strides. No function reads a device value on the host, so none synchronizes.
"""

from __future__ import annotations

import torch

from flashinfer._core.constants import E4M3_MAX, OUTPUT_SCALE_BLOCK, OUTPUT_SCALE_FLOOR
from flashinfer.utils import ceil_div

from ._args import Bmm, GroupedContiguous, GroupedMasked, GroupedSegments, Groupwise, QuantizeBlocks

DEEPGEMM_BLOCK = 128
QUANT_BLOCK_COLS = 128  # fp8_blockscale_gemm_sm90 quantizes blocks of 128 columns


def bmm(call: Bmm) -> None:
    """``out = cast((A.float() @ B.float()) * A_scale * B_scale)`` (:class:`~._args.Bmm`)."""
    acc = torch.matmul(call.A.float(), call.B.float())
    if call.a_scale_given is not None:
        acc = acc * call.a_scale * call.b_scale
    call.out.copy_(acc)


def _expand_blocks(scale, rows, cols, block_rows, block_cols):
    """Repeat each scale over its ``block_rows x block_cols`` tile, cropped to ``rows x cols``."""
    scale = scale.repeat_interleave(block_rows, dim=-2)[..., :rows, :]
    return scale.repeat_interleave(block_cols, dim=-1)[..., :cols]


def _dequantize(x, scale, block_rows, block_cols):
    rows, cols = x.shape[-2], x.shape[-1]
    return x.float() * _expand_blocks(scale.float(), rows, cols, block_rows, block_cols)


def gemm_groupwise(call: Groupwise) -> None:
    """``out = dequant(a) @ dequant(b).T``; with ``output_scale``, FP8 E4M3 output per 1x128 block
    (:class:`~._args.Groupwise`)."""
    a_deq = _dequantize(call.a, call.a_scale, call.block_m, call.block_k)
    acc = torch.matmul(a_deq, _dequantize(call.b, call.b_scale, call.block_n, call.block_k).t())
    out, output_scale = call.out, call.output_scale
    if output_scale is None:
        out.copy_(acc)
        return
    m, n = acc.shape
    padded = torch.nn.functional.pad(acc, (0, (-n) % OUTPUT_SCALE_BLOCK))
    block_amax = padded.abs().view(m, -1, OUTPUT_SCALE_BLOCK).amax(dim=-1)
    scale = block_amax.clamp_min(OUTPUT_SCALE_FLOOR) / E4M3_MAX
    output_scale.copy_(scale)
    per_element = scale.repeat_interleave(OUTPUT_SCALE_BLOCK, dim=1)[:, :n]
    out.copy_((acc / per_element).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn))


def group_gemm_contiguous(call: GroupedContiguous) -> None:
    """Row ``r`` of ``out`` is row ``r`` of ``a`` times group ``m_indices[r]`` of ``b``
    (:class:`~._args.GroupedContiguous`).

    Rows whose group id is outside ``[0, G)`` keep their ``out`` values. Which rows go to which
    group is only known on the device, so every group's product is computed for all rows and
    selected with ``torch.where`` (G times the work of a ragged GEMM: this is the reference,
    not the fast path).
    """
    out, b = call.out, call.b
    groups = b.shape[0]
    a_deq = _dequantize(call.a, call.a_scale, 1, DEEPGEMM_BLOCK)
    b_deq = _dequantize(b, call.b_scale, DEEPGEMM_BLOCK, DEEPGEMM_BLOCK)
    ids = call.m_indices.long().unsqueeze(1)
    acc = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    for g in range(groups):
        acc = torch.where(ids == g, torch.matmul(a_deq, b_deq[g].t()), acc)
    valid = (ids >= 0) & (ids < groups)
    out.copy_(torch.where(valid, acc.to(out.dtype), out))


def group_gemm_masked(call: GroupedMasked) -> None:
    """``out[g, r] = dequant(a[g])[r] @ dequant(b[g]).T`` for ``r < masked_m[g]``; other rows kept
    (:class:`~._args.GroupedMasked`).

    ``expected_m`` is a kernel-configuration hint with no effect here. Rows past ``masked_m[g]``
    are zeroed before the product, so their ``a`` values (possibly garbage) cannot reach
    ``out``.
    """
    a, out = call.a, call.out
    rows = torch.arange(a.shape[1], device=a.device)
    valid = (rows.unsqueeze(0) < call.masked_m.unsqueeze(1)).unsqueeze(-1)
    a_deq = torch.where(valid, _dequantize(a, call.a_scale, 1, DEEPGEMM_BLOCK), 0.0)
    b_deq = _dequantize(call.b, call.b_scale, DEEPGEMM_BLOCK, DEEPGEMM_BLOCK)
    acc = torch.matmul(a_deq, b_deq.transpose(-1, -2))
    out.copy_(torch.where(valid, acc.to(out.dtype), out))


def group_gemm_segments(call: GroupedSegments) -> None:
    """Rows ``[m_indptr[g], m_indptr[g + 1])`` of ``out`` are those rows of ``a`` times group ``g``
    of ``b`` (:class:`~._args.GroupedSegments`).

    The segments become one group id per row (:func:`flashinfer.gemm._group_gemm_segments.row_groups`);
    rows outside every segment keep their ``out`` values.
    """
    group_gemm_contiguous(call.as_contiguous())


def quantize_fp8_blocks(call: QuantizeBlocks) -> None:
    """E4M3 values and float32 dequantization scales per ``block_rows x 128`` block of ``x``
    (:class:`~._args.QuantizeBlocks`).

    Per block: ``q = 448 / amax`` (1 where ``amax == 0``), ``out = e4m3(clamp(x * q, -448,
    448))`` and ``scale = 1 / q``, each step rounded in float32 as upstream's SM90 kernels do.
    """
    x, block_rows, out, scale = call
    rows, cols = x.shape
    row_blocks = ceil_div(rows, block_rows)
    values = x.float()
    padded = torch.nn.functional.pad(values, (0, 0, 0, row_blocks * block_rows - rows))
    amax = (
        padded.view(row_blocks, block_rows, cols // QUANT_BLOCK_COLS, QUANT_BLOCK_COLS).abs().amax(dim=(1, 3))
    )
    # tensor / tensor: one correctly rounded division (`448 / amax` would be 448 * (1 / amax))
    multiplier = torch.where(amax != 0, torch.full_like(amax, E4M3_MAX) / amax, 1.0)
    scale.copy_(torch.ones_like(multiplier) / multiplier)
    per_element = multiplier.repeat_interleave(block_rows, 0)[:rows].repeat_interleave(QUANT_BLOCK_COLS, 1)
    out.copy_((values * per_element).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn))
