"""The MATE adapter: FlashInfer's GEMMs on MUSA through ``mate.gemm``.

Same functions and argument records as :mod:`._reference` (:mod:`._args`).
MATE is found lazily (:mod:`flashinfer._core.mate`); a missing or unrelated ``mate`` raises
:class:`flashinfer.utils.LibraryError` saying what to install. Two MATE generations are told
apart by the functions they have, never by version strings:

- MATE 0.2.6: one dense entry point ``mate.gemm.bmm(a, b, out, *, trans_b, scale_a, scale_b,
  recipe_a, recipe_b, fixed_scale_layout, out_dtype, backend, scale_out, ...)``;
- MATE 0.2.2: ``mate.gemm.bmm_fp16`` / ``bmm_fp8`` / ``gemm_fp8_nt_groupwise``.

Arguments are mapped without copies: ``B (b, k, n)`` column-major goes to MATE as
``B.transpose(-2, -1)`` with ``trans_b=True`` and row-major as ``B`` with ``trans_b=False``;
scalar scales are the 0-dim views the API layer made; strided outputs are passed through. MATE
is always called with ``backend="auto"`` (FlashInfer's names mean nothing to it) and an
explicit ``out_dtype`` (MATE silently writes bf16 for an FP8 ``out_dtype`` without
``scale_out``). What MATE cannot take is converted here, explicitly, and costs:

- an ``A`` or ``B`` with no unit stride in its last two dimensions (MATE needs one; callers'
  row-major A and column-major or row-major B have it), and on MATE 0.2.2 a row-major ``B``
  or a non-contiguous FP8 ``A``: a contiguous copy of that operand;
- an ``out`` whose last dimension is strided, or an fp16 output from bf16 inputs (MATE writes
  only ``a.dtype`` or float32): an ``(b, m, n)`` scratch and one copy;
- a scalar A scale with a channelwise B scale (MATE has no tensor/channel recipe): the A scale
  expanded to ``(b, m, 1)``;
- ``(128, 128, 128)`` granularity (MATE has no 128-row A recipe): the A scales repeated per row;
  per-row B scales (``fp8_blockscale_gemm_sm90``'s 1x128 weight scales) are MATE 0.2.6's
  group/group recipe; MATE 0.2.2 has no such recipe, so that case runs the reference;
- groupwise scales that are neither K- nor MN-contiguous, or MN-major scales for MUBIN's FP8
  output (K-major only): a contiguous K-major copy of the (small) scale tensor;
- grouped GEMMs: MATE leaves padding (-1) rows and rows past ``masked_m`` unspecified while
  FlashInfer leaves them untouched, so MATE writes a contiguous scratch and only valid rows are
  copied into ``out`` (one ``out``-sized scratch and one pass over ``out``); group ids outside
  ``[0, G)`` become -1 and ``masked_m`` is clamped to ``[0, m]`` (small int32 tensors) so MATE
  never reads ``b`` or ``a`` out of bounds;
- ``m_indptr`` segments: MATE's ``gemm_mode="per_expert"`` takes row counts packed from row 0,
  made from the clamped offsets (``flashinfer.gemm._group_gemm_segments``); rows outside every segment
  are restored from the caller's ``out`` as above. A K-major contiguous copy of ``a_scale`` is
  passed when it is stored otherwise (MATE does not inspect its layout);
- FP8 block quantization (``fp8_blockscale_gemm_sm90``'s BF16 operands): MATE has no such
  kernel, so the reference's PyTorch operations run on the MUSA device.
"""

from __future__ import annotations

import torch

from flashinfer._core.fallback import warn_reference
from flashinfer._core.mate import find_function, require_function

from . import _reference
from ._args import Bmm, GroupedContiguous, GroupedMasked, GroupedSegments, Groupwise, QuantizeBlocks
from ._group_gemm_segments import packed_counts, rows_in_segments

_OP = "flashinfer.gemm"
_GEMM = "mate.gemm"
_TENSOR_RECIPE = (-1, -1)
_CHANNEL_RECIPE = (1, -1)
_BLOCK = 128
_GRANULARITY = (1, _BLOCK, _BLOCK)


def _unified_bmm():
    """MATE 0.2.6's ``mate.gemm.bmm``, or None on MATE 0.2.2 (or without MATE)."""
    return find_function(_GEMM, "bmm")


def _legacy(name: str):
    """A MATE 0.2.2 GEMM function; raises LibraryError when MATE is missing, unrelated or lacks it."""
    return require_function(_GEMM, name, _OP, since="0.2.2")


def _b_operand(B):
    """``(b_arg, trans_b)`` for MATE: its b needs unit stride along its last dimension."""
    if B.stride(-2) == 1:
        return B.transpose(-2, -1), True
    if B.stride(-1) == 1:
        return B, False
    return B.transpose(-2, -1).contiguous(), True


def _target(out, allowed_dtypes, contiguous=False):
    """``out`` itself when MATE can write it, else a contiguous scratch MATE can write."""
    layout_ok = out.is_contiguous() if contiguous else out.stride(-1) == 1
    if layout_ok and out.dtype in allowed_dtypes:
        return out
    dtype = out.dtype if out.dtype in allowed_dtypes else torch.float32
    return torch.empty(out.shape, dtype=dtype, device=out.device)


def _finish(target, out) -> None:
    if target is not out:
        out.copy_(target)


def bmm(call: Bmm) -> None:
    A, B, out, A_scale, B_scale = call.A, call.B, call.out, call.a_scale, call.b_scale
    mate_bmm = _unified_bmm()
    if mate_bmm is None:
        _bmm_legacy(call, A, B, out, A_scale, B_scale)
        return
    if A.stride(-1) != 1:
        A = A.contiguous()
    b_arg, trans_b = _b_operand(B)
    if A_scale is None:
        target = _target(out, (A.dtype, torch.float32))
        mate_bmm(A, b_arg, target, trans_b=trans_b, out_dtype=target.dtype, backend="auto")
        _finish(target, out)
        return
    target = _target(out, (torch.bfloat16, torch.float16))
    if A_scale.dim() == 0 and B_scale.dim() == 0:
        recipe_a = recipe_b = _TENSOR_RECIPE
        fixed_scale_layout = None
    else:
        if A_scale.dim() == 0:
            A_scale = A_scale.expand(A.shape[0], A.shape[1], 1).contiguous()
        recipe_a = _CHANNEL_RECIPE
        if B_scale.dim() == 0:
            recipe_b = _TENSOR_RECIPE
        else:
            recipe_b = _CHANNEL_RECIPE
            B_scale = B_scale.transpose(1, 2)  # (b, n, 1): MATE's K-major channel shape
        # MATE requires an explicit layout flag for non-scalar scales in a non-NT call.
        fixed_scale_layout = None if trans_b else True
    mate_bmm(
        A,
        b_arg,
        target,
        trans_b=trans_b,
        scale_a=A_scale,
        scale_b=B_scale,
        recipe_a=recipe_a,
        recipe_b=recipe_b,
        fixed_scale_layout=fixed_scale_layout,
        out_dtype=target.dtype,
        backend="auto",
    )
    _finish(target, out)


def _bmm_legacy(call, A, B, out, A_scale, B_scale) -> None:
    """MATE 0.2.2: B must be column-major; FP8 A fully contiguous; no channelwise B scales."""
    if B.stride(-2) != 1:
        B = B.transpose(-2, -1).contiguous().transpose(-2, -1)
    if A_scale is None:
        if A.stride(-1) != 1:
            A = A.contiguous()
        target = _target(out, (A.dtype, torch.float32))
        _legacy("bmm_fp16")(A, B, target.dtype, out=target, backend="auto")
        _finish(target, out)
        return
    if B_scale.dim() != 0:
        warn_reference("bmm_fp8", A.device, "this MATE (0.2.2 API) has no per-channel B scales")
        _reference.bmm(call)
        return
    if A_scale.dim() == 0:
        granularity = (-1, -1, -1)
    else:
        granularity = (1, -1, -1)
        A_scale = A_scale.contiguous()
    target = _target(out, (torch.bfloat16, torch.float16))
    _legacy("bmm_fp8")(
        A.contiguous(),
        B,
        A_scale,
        B_scale,
        target.dtype,
        out=target,
        backend="auto",
        scale_granularity_mnk=granularity,
    )
    _finish(target, out)


def _stored(scale_view):
    """``(tensor, mn_major)``: the scale in a contiguous storage order MATE reads by shape."""
    if scale_view.is_contiguous():
        return scale_view, False
    if scale_view.t().is_contiguous():
        return scale_view.t(), True
    return scale_view.contiguous(), False


def gemm_groupwise(call: Groupwise) -> None:
    a, b, a_scale, b_scale, out, output_scale = (
        call.a,
        call.b,
        call.a_scale,
        call.b_scale,
        call.out,
        call.output_scale,
    )
    block_m, block_n, block_k = call.block_m, call.block_n, call.block_k
    if block_m != 1:
        a_scale = a_scale.repeat_interleave(block_m, dim=0)[: a.shape[0]]
    mate_bmm = _unified_bmm()
    if mate_bmm is None:
        if block_n != _BLOCK:  # MATE 0.2.2's groupwise GEMM takes (1, 128, 128) only
            warn_reference("gemm_fp8_nt_groupwise", a.device, "this MATE (0.2.2 API) has no per-row B scales")
            _reference.gemm_groupwise(call)
            return
        _gemm_groupwise_legacy(a, b, a_scale, b_scale, out, output_scale)
        return
    sa, a_mn = _stored(a_scale)
    sb, b_mn = _stored(b_scale)
    # One layout flag covers both scales, and MUBIN's FP8 output reads K-major scales only.
    if a_mn and (output_scale is not None or not b_mn):
        sa, a_mn = a_scale.contiguous(), False
    if b_mn and (output_scale is not None or not a_mn):
        sb, b_mn = b_scale.contiguous(), False
    if output_scale is None:
        target = _target(out, (torch.bfloat16, torch.float16))
        scale_out = None
    else:
        target = _target(out, (torch.float8_e4m3fn,), contiguous=True)
        scale_out = output_scale.unsqueeze(0)
    mate_bmm(
        a.unsqueeze(0),
        b.unsqueeze(0),
        target.unsqueeze(0),
        trans_b=True,
        scale_a=sa.unsqueeze(0),
        scale_b=sb.unsqueeze(0),
        scale_out=scale_out,
        recipe_a=(1, block_k),
        recipe_b=(block_n, block_k),
        fixed_scale_layout=True if a_mn else None,
        out_dtype=target.dtype,
        backend="auto",
    )
    _finish(target, out)


def _gemm_groupwise_legacy(a, b, a_scale, b_scale, out, output_scale) -> None:
    """MATE 0.2.2: a, b and the scales contiguous, K-major; MUBIN named for FP8 output."""
    if output_scale is None:
        target = _target(out, (torch.bfloat16, torch.float16))
    else:
        target = _target(out, (torch.float8_e4m3fn,), contiguous=True)
    _legacy("gemm_fp8_nt_groupwise")(
        a.contiguous(),
        b.contiguous(),
        a_scale.contiguous(),
        b_scale.contiguous(),
        scale_major_mode="K",
        mma_sm=None,
        scale_granularity_mnk=_GRANULARITY,
        out=target,
        out_dtype=target.dtype,
        backend="auto" if output_scale is None else "mubin",
        output_scale=output_scale,
    )
    _finish(target, out)


def _backend_kwargs() -> dict:
    # MATE 0.2.2's grouped GEMMs have no `backend` parameter.
    return {"backend": "auto"} if _unified_bmm() is not None else {}


def group_gemm_contiguous(call: GroupedContiguous) -> None:
    m_indices = call.m_indices
    valid = (m_indices >= 0) & (m_indices < call.b.shape[0])
    group_ids = torch.where(valid, m_indices, -1)
    _ragged(call, group_ids, valid, gemm_mode="per_token", alignment_m=_BLOCK)


def _ragged(call, rows_info, valid, **mode) -> None:
    """MATE's ``ragged_m_moe_gemm_8bit`` into a scratch (``rows_info``: group ids or packed row
    counts, as ``mode`` says), then only the ``valid`` rows copied into ``out``. MATE assumes a
    K-major contiguous ``a_scale`` without checking it."""
    a, b, a_scale, b_scale, _, out = call
    scratch = torch.empty(out.shape, dtype=out.dtype, device=out.device)
    _legacy("ragged_m_moe_gemm_8bit")(
        (a, a_scale.contiguous()),
        (b, b_scale.contiguous()),
        rows_info,
        scratch,
        scale_granularity_mnk=_GRANULARITY,
        **mode,
        **_backend_kwargs(),
    )
    out.copy_(torch.where(valid.unsqueeze(1), scratch, out))


def group_gemm_masked(call: GroupedMasked) -> None:
    a, b, a_scale, b_scale, masked_m, expected_m, out = call
    masked = _legacy("masked_moe_gemm_8bit")
    rows = a.shape[1]
    counts = masked_m.clamp(0, rows)
    valid = (torch.arange(rows, device=a.device).unsqueeze(0) < counts.unsqueeze(1)).unsqueeze(-1)
    # MATE reads an MN-major a_scale from its strides; other layouts are made K-major.
    if not (a_scale.is_contiguous() or a_scale.transpose(-2, -1).is_contiguous()):
        a_scale = a_scale.contiguous()
    scratch = torch.empty(out.shape, dtype=out.dtype, device=out.device)
    masked(
        (a, a_scale),
        (b, b_scale.contiguous()),
        counts,
        scratch,
        scale_granularity_mnk=_GRANULARITY,
        expect_tokens=expected_m,
        **_backend_kwargs(),
    )
    out.copy_(torch.where(valid, scratch, out))


def group_gemm_segments(call: GroupedSegments) -> None:
    m_indptr, m = call.m_indptr, call.a.shape[0]
    _ragged(call, packed_counts(m_indptr, m), rows_in_segments(m_indptr, m), gemm_mode="per_expert")


def quantize_fp8_blocks(call: QuantizeBlocks) -> None:
    """MATE has no FP8 block-quantization kernel: the reference's PyTorch operations run on the
    MUSA device."""
    warn_reference(
        "fp8_blockscale_gemm_sm90 (its FP8 quantization)", call.x.device, "MATE has no FP8 block quantization"
    )
    _reference.quantize_fp8_blocks(call)
