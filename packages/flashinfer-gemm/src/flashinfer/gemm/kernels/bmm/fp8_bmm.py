"""Batched FP8 GEMM with per-tensor or per-channel scales, in one launch for all batches.

``out[z, i, j] = cast(a_scale[z, i] * b_scale[z, j] * sum_k A[z, i, k] * B[z, k, j])``

Layout
------
- ``A (batch, m, k)`` and ``B (batch, k, n)``: float8 e4m3 or e5m2, in any combination (the
  tensor-core FP8 dot takes any pair of the two formats); any strides. The usual B is
  column-major (``B.stride(-2) == 1``, the transpose of a contiguous ``(batch, n, k)``
  weight), so both operands are read along k in 16-byte vectors.
- ``a_scale (batch, m)`` / ``b_scale (batch, n)`` float32, read as the record's views
  ``call.a_scale`` / ``call.b_scale`` and addressed by (batch, row) and (batch, column) strides:
  a per-tensor scale is a 0-dim tensor read with strides 0, a per-channel one the
  ``(b, m, 1)`` / ``(b, 1, n)`` view with its own strides. Scales multiply the fp32
  accumulator once, in the epilogue.
- ``out (batch, m, n)``: bf16, fp16 or fp32, any strides; written once.

Accumulation: on Hopper, Triton lets the FP8 tensor cores accumulate the whole k with their
reduced internal precision (its default ``max_num_imprecise_acc``), like the cuBLAS fast
accumulation that upstream's ``bmm_fp8`` uses; the error stays around 1e-3 of the output's rms.

One program computes one ``BLOCK_M x BLOCK_N`` tile of one batch; programs of a batch are
ordered in ``GROUP_M``-row bands so that concurrent tiles share B columns in L2.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...._core.triton_launch import TunedLaunch
from ....utils import ceil_div, next_positive_power_of_2
from .. import banded_tile, multiprocessors

MIN_BLOCK_K = 128  # the smallest BLOCK_K of the autotuned tiles


def _configs():
    # The DeepSeek MLA absorb products are (tokens x 128) @ (128 x 512) and
    # (tokens x 512) @ (512 x 128) for 128 heads: small k or small n, so tiles of 64 rows keep
    # enough programs in flight; 128-row tiles win once tokens reach the hundreds. Persistent
    # tiles (last field: programs a multiprocessor) walk the tile list in one loop; at k = 128
    # that loop has no inner K loop and is software-pipelined, so the next tiles' loads overlap
    # a tile's output stores, which bound the k = 128 products. (What was tried and measured:
    # benchmarks/RESULTS.md, "`bmm_fp8` in the MLA weight absorption".)
    shapes = [
        (64, 128, 128, 4, 3, 0),
        (64, 64, 128, 4, 4, 0),
        (128, 128, 128, 8, 3, 0),
        (128, 64, 128, 4, 4, 0),
        (128, 256, 128, 8, 3, 0),
        (16, 64, 256, 4, 4, 0),
        (128, 128, 128, 8, 3, 1),
        (128, 128, 128, 8, 2, 2),
        (64, 128, 128, 4, 3, 2),
        (128, 256, 128, 8, 2, 1),
    ]
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "PROGRAMS_PER_SM": p},
            num_warps=w,
            num_stages=s,
        )
        for bm, bn, bk, w, s, p in shapes
    ]


@triton.jit
def _bmm_tile(
    a_ptr, b_ptr, out_ptr, a_scale_ptr, b_scale_ptr, pid, batch, M, N, K,
    stride_az, stride_am, stride_ak, stride_bz, stride_bk, stride_bn, stride_oz, stride_om, stride_on,
    stride_saz, stride_sam, stride_sbz, stride_sbn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ONE_K_STEP: tl.constexpr,
):  # fmt: skip
    # one BLOCK_M x BLOCK_N output tile of one batch
    pid_m, pid_n = banded_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_ptrs = a_ptr + batch * stride_az + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bz + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    if ONE_K_STEP:
        # no K loop: in a persistent program the tile loop itself is software-pipelined, so the
        # next tiles' operands load while this tile's output is stored
        mask_k = offs_k < K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            mask_k = offs_k < K - k0
            a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

    a_scale = tl.load(a_scale_ptr + batch * stride_saz + offs_m * stride_sam, mask=mask_m, other=0.0)
    b_scale = tl.load(b_scale_ptr + batch * stride_sbz + offs_n * stride_sbn, mask=mask_n, other=0.0)
    acc = acc * a_scale[:, None] * b_scale[None, :]
    out_ptrs = out_ptr + batch * stride_oz + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def fp8_bmm_kernel(
    # operands and output
    a_ptr,
    b_ptr,
    out_ptr,
    a_scale_ptr,
    b_scale_ptr,
    # problem size; M_BUCKET is only an autotune key (m rounded up to a power of two)
    M,
    N,
    K,
    M_BUCKET,
    BATCH,
    # strides, in elements
    stride_az,
    stride_am,
    stride_ak,
    stride_bz,
    stride_bk,
    stride_bn,
    stride_oz,
    stride_om,
    stride_on,
    stride_saz,
    stride_sam,
    stride_sbz,
    stride_sbn,
    # tile shape
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    # 0: one program a tile, grid (tiles, batch); else persistent programs, grid (programs,)
    PROGRAMS_PER_SM: tl.constexpr = 0,
    # K <= 128 (every tile's BLOCK_K is at least 128): a tile is one load and one dot
    ONE_K_STEP: tl.constexpr = False,
):
    if PROGRAMS_PER_SM == 0:
        _bmm_tile(
            a_ptr, b_ptr, out_ptr, a_scale_ptr, b_scale_ptr, tl.program_id(0), tl.program_id(1).to(tl.int64),
            M, N, K, stride_az, stride_am, stride_ak, stride_bz, stride_bk, stride_bn,
            stride_oz, stride_om, stride_on, stride_saz, stride_sam, stride_sbz, stride_sbn,
            BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, ONE_K_STEP,
        )  # fmt: skip
    else:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in tl.range(tl.program_id(0), BATCH * tiles, tl.num_programs(0)):
            _bmm_tile(
                a_ptr, b_ptr, out_ptr, a_scale_ptr, b_scale_ptr, tile % tiles, (tile // tiles).to(tl.int64),
                M, N, K, stride_az, stride_am, stride_ak, stride_bz, stride_bk, stride_bn,
                stride_oz, stride_om, stride_on, stride_saz, stride_sam, stride_sbz, stride_sbn,
                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, ONE_K_STEP,
            )  # fmt: skip


fp8_bmm_tuned = triton.autotune(configs=_configs(), key=["M_BUCKET", "N", "K"])(fp8_bmm_kernel)
_TUNED = TunedLaunch(fp8_bmm_tuned, varying=("M",))


def fp8_bmm(call, config=None) -> None:
    """Launch ``out = (A @ B) * A_scale * B_scale`` over all batches in one grid.

    Parameters
    ----------
    call : flashinfer.gemm._args.Bmm
        FP8 ``A (batch, m, k)`` and ``B (batch, k, n)`` (e4m3 or e5m2), any strides; float32
        scales per tensor or per channel; ``out (batch, m, n)`` bf16, fp16 or fp32, any strides,
        written in place.
    config : dict, optional
        Fixed tile parameters (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M`` and optionally
        ``PROGRAMS_PER_SM``, ``num_warps``/``num_stages``) instead of autotuning; the tests use
        small tiles.
    """
    A, B, out, A_scale, B_scale = call.A, call.B, call.out, call.a_scale, call.b_scale
    batch, m, k = A.shape
    n = B.shape[2]
    # (batch, row) / (batch, column) strides of the scales, read without making views
    a_scale_strides = A_scale.stride()[:2] if A_scale.dim() else (0, 0)
    b_scale_strides = B_scale.stride()[::2] if B_scale.dim() else (0, 0)
    args = (
        A, B, out, A_scale, B_scale,
        m, n, k, next_positive_power_of_2(m), batch,
        *A.stride(), *B.stride(), *out.stride(), *a_scale_strides, *b_scale_strides,
    )  # fmt: skip
    num_sms = multiprocessors(A.device)

    def grid(meta):
        tiles = ceil_div(m, meta["BLOCK_M"]) * ceil_div(n, meta["BLOCK_N"])
        per_sm = meta.get("PROGRAMS_PER_SM", 0)
        return (min(batch * tiles, num_sms * per_sm),) if per_sm else (tiles, batch)

    if config is None:  # every autotuned tile's BLOCK_K is at least MIN_BLOCK_K
        key = (args[8], n, k, A.dtype, B.dtype, out.dtype)
        _TUNED.launch(grid, key, *args, ONE_K_STEP=k <= MIN_BLOCK_K)
    else:
        fp8_bmm_kernel[grid](*args, **config, ONE_K_STEP=k <= config["BLOCK_K"])
