"""Batched FP8 GEMM with per-tensor or per-channel scales for Hopper (sm_90) in Gluon.

``out[z, i, j] = cast(a_scale[z, i] * b_scale[z, j] * sum_k A[z, i, k] * B[z, k, j])``

The Hopper tier of :mod:`.fp8_bmm` (same arguments) for the layouts TMA takes, aimed at the
DeepSeek MLA absorb products (128 heads; tokens x 128 @ 128 x 512 and tokens x 512 @ 512 x 128),
whose time is mostly the bf16 output written back.

Layout
------
- ``A (batch, m, k)`` float8 with ``stride(-1) == 1`` and ``B (batch, k, n)`` column-major
  (``B.stride(-2) == 1``, the transpose of a ``(batch, n, k)`` weight): FP8 wgmma takes both
  operands K-major. Both are read by TMA as ``[batch * rows, k]`` (batches packed, 16-byte
  aligned base and row stride); a box that runs past a batch's rows reads the next batch's,
  whose products are never stored.
- ``a_scale (batch, m)`` / ``b_scale (batch, n)`` float32, read as the record's views
  ``call.a_scale`` / ``call.b_scale`` and addressed by (batch, row) and (batch, column) strides:
  a per-tensor scale is a 0-dim tensor read with strides 0, a per-channel one the
  ``(b, m, 1)`` / ``(b, 1, n)`` view with its own strides. They multiply the fp32
  accumulator once, in the epilogue.
- ``out (batch, m, n)`` bf16 or fp16 with ``stride(-1) == 1`` and 16-byte aligned strides: it is
  written by TMA stores of ``[1, 64, SUB_N]`` boxes, which stop at each batch's last row and
  column.

Accumulation: the FP8 tensor cores accumulate the whole k (at most a few hundred here) in their
reduced internal precision, like the cuBLAS fast accumulation upstream's ``bmm_fp8`` uses.

Schedule
--------
Persistent programs (one a multiprocessor) walk the tiles ``batch x row tile x column tile``.
A producer warp loads each tile's K steps with TMA into a ``STAGES``-deep ring; two math
warpgroups split the tile (64 rows each of a 128-row tile, or half the columns of a 64-row
tile), run the wgmma chain, scale, convert, write their share to a staging buffer in shared
memory and issue its TMA store, which drains while they compute the next tile (the buffer is
reused only after its store has read it).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ...._core.triton_compat import tma_load, tma_store
from ...._core.triton_launch import FastLaunch
from ....utils import ceil_div
from .. import multiprocessors
from ..gluon_tma import (
    BLOCK_K,
    SUB_M,
    GluonTile,
    box_layout,
    ring_barriers,
    share_col,
    share_row,
    tile_coords,
    tma_descriptor,
    tma_rows_descriptor,
)


@dataclasses.dataclass(frozen=True)
class GluonBmmConfig(GluonTile):
    """Tile of the batched kernel: ``block_m`` 128 (math warpgroups split rows) or 64 (they split
    columns), ``block_n`` up to 256 columns (a warpgroup's share at most 256), ``stages`` deep."""

    # columns of one math warpgroup's wgmma: its whole share (the same property, no second call
    # on the launch path)
    sub_n = GluonTile.share_n


# Shared memory: the ring ((block_m + block_n) x 128 bytes a stage) and one output staging
# buffer a math warpgroup (64 x sub_n x 2 bytes).
WIDE = GluonBmmConfig(128, 256, 3)  # n >= 256: a 128 x 256 tile a K step
SQUARE = GluonBmmConfig(128, 128, 4)  # n = 128 (512 -> 128)
FEW_ROWS = GluonBmmConfig(64, 256, 4)  # m <= 64: half the columns a warpgroup
CONFIGS = (WIDE, SQUARE, FEW_ROWS)


def pick_config(m: int, n: int) -> GluonBmmConfig:
    """The tile for ``m`` rows and ``n`` columns a batch (a first rule; the H200 probe times it)."""
    if m <= SUB_M.value:
        return FEW_ROWS
    return WIDE if n >= 256 else SQUARE


@gluon.jit
def _producer(
    a_desc, b_desc, a_ring, b_ring, full, empty, M, N, K, num_tiles, num_programs,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    STEP_BYTES: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    BK: gl.constexpr = a_desc.block_type.shape[1]
    k_steps = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, num_programs):
        batch, off_m, off_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for step in range(k_steps):
            stage = it % STAGES
            mbarrier.wait(empty.index(stage), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(stage), STEP_BYTES)
            tma_load(a_desc, [batch * M + off_m, step * BK], full.index(stage), a_ring.index(stage))
            tma_load(b_desc, [batch * N + off_n, step * BK], full.index(stage), b_ring.index(stage))
            it += 1


@gluon.jit
def _math(
    a_ring, b_ring, full, empty, out_desc, staging, a_scale_ptr, b_scale_ptr, M, N, K, num_tiles, num_programs,
    stride_saz, stride_sam, stride_sbz, stride_sbn,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, SUB_N: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr, WARPGROUP: gl.constexpr,
):  # fmt: skip
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, SUB_N, 32]
    )
    BK: gl.constexpr = a_ring.type.shape[2]
    ROW0: gl.constexpr = share_row(BLOCK_M, WARPGROUP)
    COL0: gl.constexpr = share_col(BLOCK_M, SUB_N, WARPGROUP)
    k_steps = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, num_programs):
        batch, off_m, off_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        row0 = off_m + ROW0
        col0 = off_n + COL0
        rows = row0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, mma_layout))
        cols = col0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(0, mma_layout))
        # the scales load while the K steps run
        sa = gl.load(a_scale_ptr + batch * stride_saz + rows * stride_sam, mask=rows < M, other=0.0)
        sb = gl.load(b_scale_ptr + batch * stride_sbz + cols * stride_sbn, mask=cols < N, other=0.0)
        acc = gl.zeros([SUB_M, SUB_N], gl.float32, layout=mma_layout)
        for step in range(k_steps):
            stage = it % STAGES
            mbarrier.wait(full.index(stage), (it // STAGES) & 1)
            a_tile = a_ring.index(stage).slice(ROW0, SUB_M, dim=0)
            b_tile = b_ring.index(stage).slice(COL0, SUB_N, dim=0)
            acc = warpgroup_mma(a_tile, b_tile.permute((1, 0)), acc, use_acc=step > 0, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            mbarrier.arrive(empty.index(stage), count=1)
            it += 1
        values = (acc * sa[:, None] * sb[None, :]).to(out_desc.dtype)
        # the staging buffer is free once the previous tile's store has read it
        tma.store_wait(pendings=0)
        staging.store(values)
        fence_async_shared()
        tma_store(out_desc, [batch, row0, col0], staging.reshape([1, SUB_M, SUB_N]))
    tma.store_wait(pendings=0)


@gluon.jit
def fp8_bmm_ws_kernel(
    # TMA descriptors: A as [batch * m, k], B^T as [batch * n, k], out as [batch, m, n]
    a_desc, b_desc, out_desc,
    # float32 scales, addressed by (batch, row) / (batch, column) strides (0 for per-tensor)
    a_scale_ptr, b_scale_ptr,
    # sizes (per batch) and the persistent schedule
    M, N, K, num_tiles, num_programs,
    stride_saz, stride_sam, stride_sbz, stride_sbn,
    # tile: BLOCK_M x BLOCK_N, a math warpgroup's share 64 x SUB_N
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, SUB_N: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):  # fmt: skip
    BK: gl.constexpr = a_desc.block_type.shape[1]
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BK], b_desc.layout)
    staging_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([SUB_M, SUB_N], out_desc.dtype)
    staging0 = gl.allocate_shared_memory(out_desc.dtype, [SUB_M, SUB_N], staging_layout)
    staging1 = gl.allocate_shared_memory(out_desc.dtype, [SUB_M, SUB_N], staging_layout)
    full, empty = ring_barriers(STAGES, 2)

    gl.warp_specialize(
        [
            (_math, (a_ring, b_ring, full, empty, out_desc, staging0, a_scale_ptr, b_scale_ptr, M, N, K, num_tiles,
                     num_programs, stride_saz, stride_sam, stride_sbz, stride_sbn,
                     BLOCK_M, BLOCK_N, SUB_N, GROUP_M, STAGES, 0)),
            (_math, (a_ring, b_ring, full, empty, out_desc, staging1, a_scale_ptr, b_scale_ptr, M, N, K, num_tiles,
                     num_programs, stride_saz, stride_sam, stride_sbz, stride_sbn,
                     BLOCK_M, BLOCK_N, SUB_N, GROUP_M, STAGES, 1)),
            (_producer, (a_desc, b_desc, a_ring, b_ring, full, empty, M, N, K, num_tiles, num_programs,
                         BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
        ],
        [4, 1],
        [240, 24],
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# launcher

# token counts (and what follows from them) take many values: keyed by specialization only
_LAUNCH = FastLaunch(fp8_bmm_ws_kernel, varying=("M", "num_tiles", "num_programs"))
_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


@functools.cache
def _out_layout(dtype: torch.dtype, sub_n: int):
    return gl.NVMMASharedLayout.get_default_for([1, SUB_M.value, sub_n], _GL_DTYPES[dtype])


def fp8_bmm(call, config=None) -> None:
    """Launch ``out = (A @ B) * A_scale * B_scale`` over all batches in one persistent grid.

    Parameters
    ----------
    call : flashinfer.gemm._args.Bmm
        FP8 ``A (batch, m, k)`` and column-major ``B (batch, k, n)`` (e4m3 or e5m2) in the layout
        of the module docstring; float32 scales per tensor or per channel; ``out (batch, m, n)``
        bf16 or fp16, written in place.
    config : GluonBmmConfig, optional
        A fixed tile instead of :func:`pick_config`'s.
    """
    A, B, out, A_scale, B_scale = call.A, call.B, call.out, call.a_scale, call.b_scale
    batch, m, k = A.shape
    n = B.shape[2]
    if config is None:
        config = pick_config(m, n)
    a_desc = tma_rows_descriptor(A, batch * m, config.block_m)
    # B (batch, k, n) column-major is B^T (batch, n, k) with rows along k
    b_desc = tma_descriptor(
        B, [batch * n, k], [B.stride(2), 1], [config.block_n, BLOCK_K], box_layout(config.block_n)
    )
    out_desc = tma_descriptor(
        out, [batch, m, n], [out.stride(0), out.stride(1), 1], [1, SUB_M.value, config.sub_n],
        _out_layout(out.dtype, config.sub_n),
    )  # fmt: skip
    a_scale_strides = A_scale.stride()[:2] if A_scale.dim() else (0, 0)
    b_scale_strides = B_scale.stride()[::2] if B_scale.dim() else (0, 0)
    num_tiles = batch * ceil_div(m, config.block_m) * ceil_div(n, config.block_n)
    num_programs = min(num_tiles, multiprocessors(A.device))
    _LAUNCH.launch(
        (num_programs,),
        a_desc, b_desc, out_desc, A_scale, B_scale, m, n, k, num_tiles, num_programs,
        *a_scale_strides, *b_scale_strides,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, SUB_N=config.sub_n, GROUP_M=config.group_m,
        STAGES=config.stages, num_warps=4, maxnreg=168,
    )  # fmt: skip
