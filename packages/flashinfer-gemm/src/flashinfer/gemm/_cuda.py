"""The NVIDIA implementation of the GEMM family: cuBLAS through PyTorch first, Triton elsewhere.

Arguments arrive validated and normalized by the API layer (``docs/internals.md``); outputs are
written in place with their strides. Nothing here reads a device value on the host or
synchronizes, and temporaries come from PyTorch's caching allocator or the current stream's
scratch (``flashinfer._core.scratch``), so every call can be captured in a CUDA graph (Triton
kernels autotune on their first call for a shape class: run each shape once before capturing,
as serving engines do in their warm-up).

What runs per op is ``ROUTES`` in :mod:`._dispatch`; the conditions under which a library
call takes a problem as it lies in memory are at :func:`_scaled_mm_takes` and
:func:`_blockwise_cublas_takes`, those under which a Gluon kernel takes it (TMA layouts) at
:func:`_tma_readable`, :func:`_gluon_bmm_takes`, :func:`_gluon_groupwise_takes` and
:func:`_gluon_grouped_takes`. Everything else runs the Triton kernels of
``flashinfer.gemm.kernels``. Devices without FP8 tensor cores (compute capability below 8.9)
run the FP8 functions through ``flashinfer.gemm._reference``.

Kernel tiers (``flashinfer._core.kernel_tier``): the Gluon kernels (``kernels.bmm.gluon_fp8_bmm``, ``kernels.blockwise.gluon_fp8_blockwise``) run
on compute capability 9.0 with the Triton versions they were built for. ``auto`` takes them
where the H200 benchmark shows them ahead of the alternative (``GLUON_GROUPED_IN_AUTO``): the
grouped GEMMs (contiguous, masked and row segments), ahead of the tl kernels on DeepSeek's MoE
shapes (``benchmarks/RESULTS.md``, "The Hopper Gluon block-scaled GEMMs"); masked calls whose
``expected_m`` is at most ``MASKED_DECODE_MAX_EXPECTED_M`` take the decode-MoE kernel
(``kernels.blockwise.gluon_fp8_masked_decode_gemm``). The dense block-scaled GEMM runs the decode-size kernel up to
``DECODE_GEMM_MAX_M`` rows (``kernels.blockwise.fp8_decode_gemm``, a portable Triton kernel, on
every tier but a forced Gluon one), or cuBLASLt where its table measured cuBLASLt faster; above,
cuBLASLt, which is ahead at most m; ``bmm_fp8`` stays on its measured routes (``GLUON_IN_AUTO``).
``FLASHINFER_KERNEL_TIER=gluon`` forces every call the Gluon kernels take onto them, at every m
(and raises on a device or Triton they do not run on); ``tl`` keeps the portable kernels.
"""

from __future__ import annotations

import functools

import torch

from flashinfer._core.constants import FP8_TENSOR_CORE_CAPABILITY
from flashinfer._core.fallback import warn_reference
from flashinfer._core.kernel_tier import requested_tier, use_gluon
from flashinfer._core.replay import Replay
from flashinfer.utils import get_compute_capability

from . import _reference
from ._args import Bmm, GroupedContiguous, GroupedMasked, GroupedSegments, Groupwise, QuantizeBlocks

# cuBLASLt's 1x128 / 128x128 block scaling exists for sm90 only (PyTorch rejects other archs).
_BLOCKWISE_CUBLAS_MAJOR = 9
_CUBLAS_ALIGNMENT_BYTES = 16
# Dense block-scaled GEMMs up to this many rows take the Gluon kernel before cuBLASLt (small m is
# bound by reading B, which cuBLASLt does far above the floor); above it cuBLASLt, which leads at
# large m, until benchmarks/bench_gemm.py --tiles shows the Gluon tiles ahead (the figures:
# benchmarks/RESULTS.md, "FP8 GEMMs").
GLUON_OVER_CUBLAS_MAX_M = 256
# Whether FLASHINFER_KERNEL_TIER=auto takes the Gluon dense GEMM and bmm (behind cuBLASLt at most
# m in the last H200 run) and the grouped GEMMs (ahead of the tl kernels at every MoE shape).
GLUON_IN_AUTO = False
GLUON_GROUPED_IN_AUTO = True
# Dense block-scaled GEMMs up to this many rows run the decode-size kernel (A and B swapped, K
# split: kernels.blockwise.fp8_decode_gemm) on every tier but a forced Gluon one; its launch shapes
# come from the table benchmarks/decode_gemm_sweep.py writes, which also says where cuBLASLt's
# block-scaled GEMM is faster still (then it runs, where it takes the operands).
DECODE_GEMM_MAX_M = 256
# Whether FLASHINFER_KERNEL_TIER=auto takes the decode-size kernel's Gluon form
# (kernels.blockwise.gluon_fp8_decode_gemm: a producer warp bringing operands and scales by TMA and
# cp.async) over its portable one.
GLUON_DECODE_IN_AUTO = True
# Masked grouped GEMMs whose expected_m is at most this run the decode-MoE kernel on the Gluon
# tier (kernels.blockwise.gluon_fp8_masked_decode_gemm: each expert's weights streamed once,
# experts without tokens never read); above it, the persistent grouped kernel. auto takes it: on
# an H100 it streamed DeepSeek's MoE down projection (32 experts, n 7168, k 2048) at 1.03-1.09x
# DeepGEMM's speed up to expected_m 16 and 0.89-0.98x at 32-64, where the persistent kernel took
# 1.5x DeepGEMM's time (benchmarks/notes_decode_gemm.md, "The decode-MoE kernel").
MASKED_DECODE_MAX_EXPECTED_M = 64
GLUON_MASKED_DECODE_IN_AUTO = True


def _has_fp8_mma(device: torch.device) -> bool:
    return get_compute_capability(device) >= FP8_TENSOR_CORE_CAPABILITY


def _no_fp8_mma(op: str, device: torch.device) -> None:
    major, minor = get_compute_capability(device)
    needed = ".".join(map(str, FP8_TENSOR_CORE_CAPABILITY))
    warn_reference(
        op, device, f"FP8 tensor cores need compute capability {needed}+, this GPU has {major}.{minor}"
    )


@functools.cache
def _gluon_blockwise():
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise

    return gluon_fp8_blockwise


@functools.cache
def _gluon_masked_decode():
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_masked_decode_gemm

    return gluon_fp8_masked_decode_gemm


@functools.cache
def _decode_gemm():
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm

    return fp8_decode_gemm


@functools.cache
def _gluon_bmm():
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    return gluon_fp8_bmm


def _aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % _CUBLAS_ALIGNMENT_BYTES == 0 for t in tensors)


def _row_major(t: torch.Tensor) -> bool:
    """2-D, unit inner stride and a 16-byte-aligned leading dimension (cuBLASLt's FP8 rule)."""
    rows, cols = t.shape
    lead = t.stride(0)
    return t.stride(1) == 1 and (rows == 1 or (lead >= cols and lead * t.element_size() % 16 == 0))


# ---------------------------------------------------------------------------------------------
# bmm


def bmm(call: Bmm) -> None:
    """``out = cast((A @ B) * A_scale * B_scale)`` for 16-bit or FP8 batched operands
    (:class:`~._args.Bmm`; a column-major B, ``B.stride(-2) == 1``, is the fast case)."""
    if call.a_scale_given is None:
        _bmm_16bit(call.A, call.B, call.out)
        return
    A, B, out = call.A, call.B, call.out
    if not _has_fp8_mma(A.device):
        _no_fp8_mma("bmm_fp8", A.device)
        _reference.bmm(call)
        return
    if A.shape[0] == 1:
        A_scale, B_scale = call.a_scale, call.b_scale
        if _scaled_mm_takes(A[0], B[0], A_scale, B_scale, out[0]):
            _scaled_mm_single(A[0], B[0], A_scale, B_scale, out[0])
            return
    if _gluon_bmm_takes(A, B, out) and use_gluon(A.device, GLUON_IN_AUTO):
        _gluon_bmm().fp8_bmm(call)
    else:
        from flashinfer.gemm.kernels.bmm import fp8_bmm

        fp8_bmm.fp8_bmm(call)


def _bmm_16bit(A, B, out) -> None:
    if out.dtype == A.dtype:
        torch.bmm(A, B, out=out)
    elif out.dtype == torch.float32:
        # bmm's out_dtype overload: cuBLAS accumulates in fp32 and writes fp32 directly
        torch.bmm(A, B, torch.float32, out=out)
    else:
        # bf16 inputs, fp16 output: round once from the fp32 accumulator, like upstream
        out.copy_(torch.bmm(A, B, torch.float32))


def _tma_readable(t: torch.Tensor, rows_dim: int = -2) -> bool:
    """Whether TMA reads the K-major FP8 operand ``t`` as one ``[groups * rows, k]`` tensor: a
    16-byte aligned base and row stride, groups (dim 0 of a 3-D tensor) packed. Unit stride along
    k is the caller's to know: the block-scaled records guarantee it (the API checked it once),
    ``bmm``'s operands do not (:func:`_gluon_bmm_takes`)."""
    packed = t.dim() == 2 or t.shape[0] == 1 or t.stride(0) == t.shape[rows_dim] * t.stride(rows_dim)
    return t.stride(rows_dim) % 16 == 0 and t.data_ptr() % 16 == 0 and packed


def _gluon_bmm_takes(A, B, out) -> bool:
    # the Gluon kernel's TMA layouts: B column-major (B^T rows along k), out with unit last stride
    # and 16-byte aligned rows and batches (TMA stores)
    return (
        A.stride(2) == 1
        and B.stride(1) == 1
        and _tma_readable(A)
        and _tma_readable(B, rows_dim=2)
        and out.dtype in (torch.bfloat16, torch.float16)
        and out.stride(2) == 1
        and out.stride(1) % 8 == 0
        and out.stride(0) % 8 == 0
        and out.data_ptr() % 16 == 0
    )


def _scaled_mm_takes(a, b, a_scale, b_scale, out) -> bool:
    """Whether cuBLASLt's FP8 GEMM takes this single-batch product as it lies in memory."""
    k, n = b.shape
    if a.dtype == torch.float8_e5m2 and b.dtype == torch.float8_e5m2:
        return False  # cuBLASLt has no e5m2 x e5m2 kernel
    if k % 16 or n % 16:
        return False
    if not (_row_major(a) and _row_major(b.t()) and out.is_contiguous() and _aligned(a, b, out)):
        return False
    if a_scale.dim() == 0 and b_scale.dim() == 0:
        return True
    # row-wise scales: cuBLASLt's outer-vector scaling, bf16 output and e4m3 operands only
    return (
        a_scale.dim() == 3
        and b_scale.dim() == 3
        and out.dtype == torch.bfloat16
        and a.dtype == b.dtype == torch.float8_e4m3fn
        and a_scale[0].is_contiguous()
        and b_scale[0].is_contiguous()
    )


def _scaled_mm_single(a, b, a_scale, b_scale, out) -> None:
    if a_scale.dim() == 0:
        # per-tensor: fast accumulation, as upstream's cuBLAS backend does
        torch._scaled_mm(a, b, a_scale, b_scale, out_dtype=out.dtype, use_fast_accum=True, out=out)
    else:
        torch._scaled_mm(a, b, a_scale[0], b_scale[0], out_dtype=out.dtype, out=out)


# ---------------------------------------------------------------------------------------------
# gemm_groupwise


def gemm_groupwise(call: Groupwise) -> Replay | None:
    """``out = dequant(a) @ dequant(b).T`` with block scales, optionally quantized to FP8
    (:class:`~._args.Groupwise`). Returns the decode-size kernel's replay (a callable that
    repeats its launches for a record of the same call signature), None from the other routes."""
    a, b, out, output_scale = call.a, call.b, call.out, call.output_scale
    block_m, block_n, block_k = call.block_m, call.block_n, call.block_k
    if not _has_fp8_mma(a.device):
        _no_fp8_mma("gemm_fp8_nt_groupwise", a.device)
        _reference.gemm_groupwise(call)
    elif _decode_gemm_takes(call) and not _cublas_ahead_of_decode_gemm(
        a, b, block_m, out, gluon := use_gluon(a.device, GLUON_DECODE_IN_AUTO)
    ):
        return _decode_gemm().gemm_groupwise(call, gluon=gluon)
    elif (
        _gluon_groupwise_takes(a, b, block_m, block_n, block_k)
        and use_gluon(a.device, GLUON_IN_AUTO)
        and (
            output_scale is not None
            or a.shape[0] <= GLUON_OVER_CUBLAS_MAX_M
            or requested_tier() == "gluon"  # forced: tests and benchmarks
            or not _blockwise_cublas_takes(a, b, block_m, block_n, block_k, out)
        )
    ):
        _gluon_blockwise().gemm_groupwise(call)
    elif output_scale is None and _blockwise_cublas_takes(a, b, block_m, block_n, block_k, out):
        scale_a, scale_b = _blockwise_cublas_scales(call.a_scale, call.b_scale, a.shape[0], block_m)
        torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=out.dtype, out=out)
    else:
        from flashinfer.gemm.kernels.blockwise import fp8_blockwise

        fp8_blockwise.gemm_groupwise(call)
    return None


def _decode_gemm_takes(call: Groupwise) -> bool:
    # decode sizes with 16-bit output; 1x128 or 128x128 activation blocks, 1x128 or 128x128
    # weight blocks (the kernel reads both scale views through their strides)
    return (
        call.output_scale is None
        and requested_tier() != "gluon"  # forced: the Gluon kernel's tests
        and call.a.shape[0] <= DECODE_GEMM_MAX_M
        and call.block_k == 128
        and call.block_m in (1, 128)
        and call.block_n in (1, 128)
    )


def _cublas_ahead_of_decode_gemm(a, b, block_m, out, gluon: bool) -> bool:
    # where the sweep measured cuBLASLt ahead of the decode-size kernel (of the tier that runs)
    # and it takes the operands
    m, k = a.shape
    n = b.shape[0]
    return _decode_gemm().cublas_ahead(m, n, k, a.device, gluon) and _blockwise_cublas_takes(
        a, b, block_m, 128, 128, out
    )


def _gluon_groupwise_takes(a, b, block_m, block_n, block_k) -> bool:
    # the Gluon kernel: 1x128 or 128x128 A blocks, 128x128 B blocks, operands TMA reads
    return block_m in (1, 128) and block_n == block_k == 128 and _tma_readable(a) and _tma_readable(b)


def _blockwise_cublas_takes(a, b, block_m, block_n, block_k, out) -> bool:
    """Whether cuBLASLt's 1x128 x 128x128 block-scaled GEMM takes this product.

    Measured on an H200 (CUDA 13.0, torch 2.11): the scale tensors' leading dimensions (m for
    A, k/128 for B) must be multiples of 4 floats (16 bytes): m = 1 or 3 is rejected
    (CUBLAS_STATUS_NOT_SUPPORTED) and k/128 = 3 or 5 gives wrong results without an error.
    bf16 and fp16 outputs and mixed e4m3/e5m2 operands all run.
    """
    m, k = a.shape
    n = b.shape[0]
    return (
        get_compute_capability(a.device)[0] == _BLOCKWISE_CUBLAS_MAJOR
        and block_m in (1, 128)
        and block_n == 128
        and block_k == 128
        and out.dtype in (torch.bfloat16, torch.float16)
        and not (a.dtype == b.dtype == torch.float8_e5m2)
        and m % 4 == 0
        and k % (4 * 128) == 0
        and n % 16 == 0
        and _row_major(a)
        and _row_major(b)
        and out.is_contiguous()
        and _aligned(a, b, out)
    )


def _blockwise_cublas_scales(a_scale, b_scale, m, block_m):
    """Relay the logical scale views into the layouts cuBLASLt reads (no-ops when they match).

    A: ``[m, k/128]`` outer-dim-major (strides ``(1, m)``); 128-row blocks are expanded per row.
    B: passed as the ``[k/128, n/128]`` transpose of a contiguous ``[n/128, k/128]``.
    """
    k_blocks = a_scale.shape[1]
    if block_m != 1:
        row_blocks = a_scale.shape[0]
        per_row = a_scale.t().unsqueeze(-1).expand(k_blocks, row_blocks, block_m)
        a_scale = per_row.reshape(k_blocks, row_blocks * block_m)[:, :m].t()
    outer_major = a_scale.stride(0) == 1 and (k_blocks == 1 or a_scale.stride(1) == m)
    scale_a = a_scale if outer_major else a_scale.t().contiguous().t()
    return scale_a, b_scale.contiguous().t()


# ---------------------------------------------------------------------------------------------
# grouped GEMMs


def group_gemm_contiguous(call: GroupedContiguous) -> None:
    """Contiguous grouped FP8 GEMM (:class:`~._args.GroupedContiguous`)."""
    _contiguous_grouped("group_deepgemm_fp8_nt_groupwise", call)


def group_gemm_masked(call: GroupedMasked) -> None:
    """Masked grouped FP8 GEMM (:class:`~._args.GroupedMasked`): the reference below FP8 tensor
    cores; the Gluon tier where it takes the operands (the decode-MoE kernel up to
    ``MASKED_DECODE_MAX_EXPECTED_M`` expected rows, the persistent grouped kernel above); else the
    tl kernel."""
    a = call.a
    if not _has_fp8_mma(a.device):
        _no_fp8_mma("batch_deepgemm_fp8_nt_groupwise", a.device)
        _reference.group_gemm_masked(call)
    elif _gluon_grouped_takes(call):
        if _masked_decode_takes(call):
            _gluon_masked_decode().group_gemm_masked(call)
        else:
            _gluon_blockwise().group_gemm_masked(call)
    else:
        from flashinfer.gemm.kernels.blockwise import fp8_blockwise

        fp8_blockwise.group_gemm_masked(call)


def group_gemm_segments(call: GroupedSegments) -> None:
    """Grouped FP8 GEMM over row segments (:class:`~._args.GroupedSegments`): the segments become
    one group id per row on the device, then the contiguous grouped kernel runs (the Gluon tier
    for e4m3 operands only: e5m2 segments take the tl kernel, as tested)."""
    rows = call.as_contiguous()
    e4m3 = rows.a.dtype == rows.b.dtype == torch.float8_e4m3fn
    _contiguous_grouped("group_gemm_fp8_nt_groupwise", rows, gluon_takes_dtypes=e4m3)


def _contiguous_grouped(op: str, call: GroupedContiguous, gluon_takes_dtypes: bool = True) -> None:
    """The contiguous grouped GEMM on the reference below FP8 tensor cores, the Gluon tier where it
    takes the operands, else the tl kernel; ``op`` names the public function in the reference
    warning."""
    a = call.a
    if not _has_fp8_mma(a.device):
        _no_fp8_mma(op, a.device)
        _reference.group_gemm_contiguous(call)
    elif gluon_takes_dtypes and _gluon_grouped_takes(call):
        _gluon_blockwise().group_gemm_contiguous(call)
    else:
        from flashinfer.gemm.kernels.blockwise import fp8_blockwise

        fp8_blockwise.group_gemm_contiguous(call)


def _masked_decode_takes(call: GroupedMasked) -> bool:
    # few rows an expert, operands the kernel takes, and the tier asks for it
    return (
        call.expected_m <= MASKED_DECODE_MAX_EXPECTED_M
        and _gluon_masked_decode().takes(call)
        and use_gluon(call.a.device, GLUON_MASKED_DECODE_IN_AUTO)
    )


def _gluon_grouped_takes(call: GroupedContiguous | GroupedMasked) -> bool:
    # TMA reads both operands and the tier asks for the Gluon kernel (auto does: GLUON_GROUPED_IN_AUTO)
    return _tma_readable(call.a) and _tma_readable(call.b) and use_gluon(call.a.device, GLUON_GROUPED_IN_AUTO)


def quantize_fp8_blocks(call: QuantizeBlocks) -> Replay | None:
    """FP8 E4M3 quantization per ``block_rows x 128`` block (:class:`~._args.QuantizeBlocks`).
    Returns the kernel's replay (None where the reference runs)."""
    if not _has_fp8_mma(call.x.device):
        _no_fp8_mma("fp8_blockscale_gemm_sm90 (its FP8 quantization)", call.x.device)
        _reference.quantize_fp8_blocks(call)
        return None
    from flashinfer.gemm.kernels.blockwise import fp8_quantize

    return fp8_quantize.quantize_blocks(call)
