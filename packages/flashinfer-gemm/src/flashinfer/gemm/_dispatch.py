"""Which implementation module serves the GEMMs, what every one offers, and what each runs per op.

``DISPATCH.module(device)`` returns ``flashinfer.gemm._reference``, ``._cuda`` or ``._mate``
(:mod:`flashinfer._core.dispatch`), each a :class:`GemmImpl`: the same functions, each taking one
argument record of :mod:`._args`, so an op makes one call whatever the device. ``ROUTES`` (with the backend tables' rules) is the one description of what runs where: the
README's tables and ``python -m flashinfer show-config`` are generated from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from flashinfer._core.dispatch import Dispatcher
from flashinfer._core.replay import Replay

from ._args import Bmm, GroupedContiguous, GroupedMasked, GroupedSegments, Groupwise, QuantizeBlocks
from ._backends import TABLES


class GemmImpl(Protocol):
    """What an implementation module (``_reference``, ``_cuda``, ``_mate``) offers: one function per
    argument record, which computes into the record's outputs in place (honouring their strides),
    never synchronizes with the host and trusts the record (the API layer validated it). A function
    annotated ``Replay | None`` may return a replay of the call (``flashinfer._core.replay``; an
    implementation that never does says ``None``). ``tests/gemm/test_impl_protocol.py`` holds
    every module to it."""

    def bmm(self, call: Bmm) -> None:
        """``bmm_bf16`` and ``bmm_fp8``."""

    def gemm_groupwise(self, call: Groupwise) -> Replay | None:
        """``gemm_fp8_nt_groupwise``, ``gemm_fp8_nt_blockscaled``, ``fp8_blockscale_gemm_sm90``'s product."""

    def group_gemm_contiguous(self, call: GroupedContiguous) -> None:
        """``group_deepgemm_fp8_nt_groupwise``."""

    def group_gemm_masked(self, call: GroupedMasked) -> None:
        """``batch_deepgemm_fp8_nt_groupwise``."""

    def group_gemm_segments(self, call: GroupedSegments) -> None:
        """``group_gemm_fp8_nt_groupwise``."""

    def quantize_fp8_blocks(self, call: QuantizeBlocks) -> Replay | None:
        """``fp8_blockscale_gemm_sm90``'s quantization of 16-bit operands."""


DISPATCH = Dispatcher("flashinfer.gemm")


def run(launch: Callable, call, k: int) -> torch.Tensor:
    """The ending every GEMM API shares: compute the validated record ``call`` (``k`` its depth)
    with ``launch`` (an implementation's function, e.g. ``DISPATCH.module(device).bmm``) and
    return ``call.out``. An empty ``out`` is returned as is; at ``k == 0`` every dot product sums
    nothing, and the record's ``zero_fill`` writes that result where the op writes."""
    out = call.out
    if out.numel() == 0:
        return out
    if k == 0:
        call.zero_fill()
    else:
        launch(call)
    return out


_FP8_BELOW_SM89 = "; the reference below compute capability 8.9"
# the dense Gluon GEMM and bmm trail cuBLASLt: they run only when FLASHINFER_KERNEL_TIER=gluon asks;
# the grouped ones lead the tl kernels and run on Hopper under auto (gemm/_cuda.py)
_GLUON_FORCED = " (FLASHINFER_KERNEL_TIER=gluon: the Gluon kernel on Hopper where TMA takes the operands)"
_GLUON_GROUPED = (
    "on Hopper (sm_90) with Triton 3.6 or 3.7, the warp-specialized Gluon kernel where TMA takes the operands; "
    "elsewhere the persistent Triton blockwise FP8 kernel"
)

# op -> implementation kind -> what runs
ROUTES = {
    "bmm_bf16": {
        "reference": "torch.matmul in float32, cast once",
        "cuda": "cuBLAS (torch.bmm; B's transposed view, never copied)",
        "mate": "mate.gemm.bmm (muDNN)",
    },
    "bmm_fp8": {
        "reference": "dequantize to float32, torch.matmul, scale, cast once",
        "cuda": "torch._scaled_mm (cuBLASLt) for one batch where it takes the layout, else the batched "
        "Triton FP8 kernel" + _GLUON_FORCED + _FP8_BELOW_SM89,
        "mate": "mate.gemm.bmm (muDNN), tensor or channel recipes",
    },
    "gemm_fp8_nt_groupwise": {
        "reference": "dequantize by scale blocks, torch.matmul in float32",
        "cuda": "torch._scaled_mm blockwise (sm90, bf16/fp16 output) where cuBLASLt takes the shape; else "
        "the Triton blockwise kernel (also FP8 output)" + _GLUON_FORCED + _FP8_BELOW_SM89,
        "mate": "mate.gemm.bmm (muDNN); MUBIN for FP8 output",
    },
    "gemm_fp8_nt_blockscaled": {
        "reference": "gemm_fp8_nt_groupwise's, granularity (128, 128, 128)",
        "cuda": "gemm_fp8_nt_groupwise's (128-row A scale blocks expanded per row for cuBLASLt)",
        "mate": "gemm_fp8_nt_groupwise's: mate.gemm.bmm (muDNN), A scales expanded per row",
    },
    "group_gemm_fp8_nt_groupwise": {
        "reference": "one float32 matmul per group, rows selected by the m_indptr segments",
        "cuda": "on Hopper (sm_90) with Triton 3.6 or 3.7, the warp-specialized Gluon kernel for e4m3 operands TMA "
        "takes; elsewhere the persistent Triton blockwise FP8 kernel (segments become per-row group ids "
        "on the device)" + _FP8_BELOW_SM89,
        "mate": "mate.gemm.ragged_m_moe_gemm_8bit (MUBIN, gemm_mode='per_expert') into a scratch; rows "
        "outside the segments kept",
    },
    "fp8_blockscale_gemm_sm90": {
        "reference": "BF16 operands quantized per 1x128 / 128x128 block, then the groupwise reference",
        "cuda": "BF16 operands quantized by one Triton launch each, then gemm_fp8_nt_groupwise's path "
        "(cuBLASLt blockwise or the Triton blockwise kernel)" + _FP8_BELOW_SM89,
        "mate": "BF16 operands quantized by PyTorch operations, then mate.gemm.bmm (muDNN; per-row weight "
        "scales: the group/group recipe)",
    },
    "group_deepgemm_fp8_nt_groupwise": {
        "reference": "one float32 matmul per group, rows selected by m_indices",
        "cuda": _GLUON_GROUPED + _FP8_BELOW_SM89,
        "mate": "mate.gemm.ragged_m_moe_gemm_8bit (MUBIN)",
    },
    "batch_deepgemm_fp8_nt_groupwise": {
        "reference": "batched float32 matmul, rows past masked_m kept",
        "cuda": "on Hopper (sm_90) with Triton 3.6 or 3.7, where TMA takes the operands: up to expected_m 64 the "
        "Gluon decode-MoE kernel (each expert's weights streamed once, experts without tokens never read), "
        "above it the warp-specialized Gluon grouped kernel; elsewhere the persistent Triton blockwise FP8 "
        "kernel" + _FP8_BELOW_SM89,
        "mate": "mate.gemm.masked_moe_gemm_8bit (MUBIN)",
    },
}

BACKEND_TABLES = tuple(TABLES.values())


def compile_layer():
    """The custom-op layer of the GEMMs (``_compile``), imported only by a traced call's hand-off
    (:func:`flashinfer._core.compile.one_node`)."""
    from . import _compile

    return _compile
