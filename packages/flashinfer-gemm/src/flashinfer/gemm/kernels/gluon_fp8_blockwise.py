"""Block-scaled FP8 GEMMs for Hopper (sm_90) in Gluon: a TMA warp feeding two wgmma warpgroups.

``out[i, j] = sum_kb a_scale[i // SCALE_BM, kb] * b_scale[g, j // 128, kb] * sum_{k in kb} a[i, k] * b[g, j, k]``

The same three layouts as :mod:`.fp8_blockwise` (read its docstring first), for the shapes and
strides TMA takes:

- ``DENSE``: ``a (m, k)``, ``b (n, k)``; bf16/fp16 output, or e4m3 output with the per-(row,
  128-column block) scale ``output_scale[i, jb] = max(amax_jb |acc[i, :]|, 1e-12) / 448``.
- ``CONTIGUOUS``: ``a (m, k)`` rows belong to group ``m_indices[i]`` of ``b (G, n, k)``; a row
  tile is computed once per distinct valid group id it holds (once for DeepGEMM's 128-row aligned
  groups; a tile of -1 padding is skipped), and only the rows of that group are written.
- ``MASKED``: ``a (G, m, k)``, ``b (G, n, k)``; a row tile at or past ``masked_m[g]`` (clamped
  to ``[0, m]``) is skipped, and rows past it are never written.

Layout
------
- ``a`` and ``b`` are read by TMA as 2-D ``[rows, k]`` tensors (``a (G, m, k)`` as ``[G * m, k]``,
  ``b (G, n, k)`` as ``[G * n, k]``): ``stride(-1) == 1``, 16-byte aligned base and row strides,
  groups packed (``stride(0) == rows * stride(1)``). Boxes past the end of the tensor read zeros,
  so ``m``, ``n`` and ``k`` need not be multiples of the tile. A box that straddles a group
  boundary reads the next group's rows, whose products are discarded (never stored): in the
  masked layout, rows of ``a`` past ``masked_m[g]`` inside the last row tile of a group are read
  by the TMA box (within ``a``), never a whole tile past it.
- Scales are float32 *logical* views with any strides (row- or column-major, ``.t()`` views):
  ``a_scale (G?, ceil(m / SCALE_BM), ceil(k / 128))`` with ``SCALE_BM`` 1 or 128 and
  ``b_scale (G?, ceil(n / 128), ceil(k / 128))``. They are read from global memory by the math
  warpgroups, one K step ahead, and applied exactly in float32.
- ``out`` has any strides (written with masked stores); ``output_scale`` has a free row stride.

Schedule (DeepGEMM's Hopper structure)
--------------------------------------
Persistent programs, one a multiprocessor, walk the tile list (``group x row tile x column
tile``, row tiles in bands of ``GROUP_M`` so that tiles in flight share B columns in L2). Each
program runs three partitions (``gl.warp_specialize``):

- the **producer** (one warp, 40 registers) issues the TMA loads of each 128-wide K step of A and
  B into a ``STAGES``-deep shared-memory ring, one ``full`` mbarrier a stage (expect-tx);
- two **math warpgroups** (the default partition and a worker, 232 registers each) split the tile:
  by rows (``BLOCK_M = 128``: 64 rows each) or, for small m, by columns (``BLOCK_M = 64``). A
  warpgroup's share is one or two ``64 x WN`` sub-tiles (``WN <= 128``). For every K step it
  issues the wgmma of the step into a fresh accumulator (FP8 tensor cores accumulate 128 products
  in reduced precision, never more), waits for it, releases the stage (``empty`` mbarrier, one
  arrival per warpgroup) and promotes the product into the fp32 accumulator, scaled by
  ``a_scale[row] * b_scale``: while one warpgroup promotes, the other's wgmma runs, so the tensor
  cores stay busy. The epilogue converts to the output dtype (or quantizes to e4m3 with the
  output scales) and stores with row and column masks, while the producer already fills the ring
  with the next tile.

Every decision (which tiles have work, which groups a row tile holds) is made on the device by
all three partitions from the same data: no host synchronization, and launches can be captured
in a CUDA graph. Needs Triton 3.6's Gluon API (``flashinfer._core.kernel_tier``).
"""

from __future__ import annotations

import dataclasses
import functools

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..._core.triton_launch import FastLaunch
from ...utils import ceil_div
from . import multiprocessors

DENSE = gl.constexpr(0)
CONTIGUOUS = gl.constexpr(1)
MASKED = gl.constexpr(2)
E4M3_MAX = gl.constexpr(448.0)
BLOCK_K = 128  # one scale block of K a step: the wgmma accumulator never spans two
SUB_M = gl.constexpr(64)  # rows of one warpgroup's wgmma


@dataclasses.dataclass(frozen=True)
class GluonGemmConfig:
    """Tile of the block-scaled kernel.

    Attributes
    ----------
    block_m : int
        Rows of the tile: 128 or 192 (two or three math warpgroups of 64 rows each), or 64 (two
        math warpgroups taking half the columns each: small m).
    block_n : int
        Columns of the tile (a math warpgroup's share is at most 128 columns).
    stages : int
        Depth of the TMA ring (``(block_m + block_n) * 128`` bytes a stage).
    group_m : int
        Row tiles per band of the tile order.
    """

    block_m: int
    block_n: int
    stages: int
    group_m: int = 8

    @property
    def math_warpgroups(self) -> int:
        return 3 if self.block_m == 3 * SUB_M.value else 2

    @property
    def a_box(self) -> int:
        """Rows of one TMA box of A (a power of two of at most 128: a 192-row tile is 3 boxes)."""
        return 128 if self.block_m % 128 == 0 else SUB_M.value

    @property
    def sub_n(self) -> int:
        """Columns of one math warpgroup's wgmma."""
        return self.block_n // 2 if self.block_m == SUB_M.value else self.block_n

    @property
    def launch_options(self) -> dict:
        """Warps of the default partition (the first math warpgroup) and the register cap that
        the partitions' budgets are carved from (65536 registers over all warpgroups)."""
        warpgroups = self.math_warpgroups + 1  # the producer warp holds a warpgroup's registers
        return {"num_warps": 4, "maxnreg": 65536 // (warpgroups * 128) // 8 * 8}


# Tiles (block_m, block_n, stages), sized to the 227 KB of shared memory (ring + the epilogue's
# layout conversion). 192 x 128 (three math warpgroups) moves 20% fewer bytes from L2 per FLOP
# than 128 x 128, which large GEMMs need to pass ~1000 TFLOP/s (128 x 256 as two 64 x 128
# accumulators a warpgroup spilled: ptxas gives each wgmma its own accumulator registers);
# 128 x 128 keeps grouped tiles aligned to DeepGEMM's 128-row groups; 128 x 64 fills the
# multiprocessors for mid-size m; 64-row tiles with narrow columns spread the weight reads of
# small m (memory-bound) over every multiprocessor.
LARGE = GluonGemmConfig(192, 128, 5)
MEDIUM = GluonGemmConfig(128, 128, 6)
NARROW = GluonGemmConfig(128, 64, 8)
SMALL_M = {
    128: GluonGemmConfig(64, 128, 8),
    64: GluonGemmConfig(64, 64, 13),
    32: GluonGemmConfig(64, 32, 18),
}
FP8_OUTPUT = MEDIUM  # a math warpgroup's share is one 128-column output-scale block
CONFIGS = (LARGE, MEDIUM, NARROW, *SMALL_M.values())


def pick_config(layout: int, rows: int, n: int, tiles_m: int, num_sms: int, out_fp8: bool) -> GluonGemmConfig:
    """The tile for ``rows`` rows per group (``tiles_m`` 128-row tiles in all) and ``n`` columns.

    A first rule from tile counts (the H200 probe ``benchmarks/gluon_gemm_probe.py`` times the
    alternatives). m <= 64 is bound by reading B: it takes the 64-row tile whose busiest
    multiprocessor reads the fewest B rows (waves x width; the wider on ties). Larger m takes the
    largest tile that still gives every multiprocessor a tile; grouped layouts keep 128-row tiles
    (DeepGEMM aligns groups to 128 rows).
    """
    if out_fp8:
        return FP8_OUTPUT
    if rows <= SUB_M.value:
        width = min(SMALL_M, key=lambda w: (ceil_div(tiles_m * ceil_div(n, w), num_sms) * w, -w))
        return SMALL_M[width]
    candidates = (MEDIUM, NARROW) if layout != DENSE.value else (LARGE, MEDIUM, NARROW)
    for config in candidates:
        if ceil_div(tiles_m * 128, config.block_m) * ceil_div(n, config.block_n) >= num_sms:
            return config
    return NARROW


# ---------------------------------------------------------------------------------------------
# the tile schedule, computed identically by every partition


@gluon.jit
def _banded(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    # (row tile, column tile): row tiles in bands of GROUP_M share B columns in L2
    band = tile // (GROUP_M * tiles_n)
    first_m = band * GROUP_M
    band_rows = gl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + tile % band_rows, (tile % (GROUP_M * tiles_n)) // band_rows


@gluon.jit
def _masked_rows(rows_ptr, group, M):
    # valid rows of a masked group, clamped to [0, M]
    return gl.minimum(gl.maximum(gl.load(rows_ptr + group), 0), M)


@gluon.constexpr_function
def _pow2(x):
    return 1 << (x - 1).bit_length()


@gluon.jit
def _next_group(rows_ptr, off_m, M, num_groups, after, BLOCK_M: gl.constexpr, NUM_WARPS: gl.constexpr):
    # CONTIGUOUS: the smallest valid group id above `after` in the row tile (num_groups if none)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    offs = off_m + gl.arange(0, _pow2(BLOCK_M), layout=layout)
    ids = gl.load(rows_ptr + offs, mask=(offs < M) & (offs < off_m + BLOCK_M), other=-1)
    return gl.min(gl.where((ids > after) & (ids < num_groups), ids, num_groups), axis=0)


@gluon.jit
def _tile_start(
    tile, rows_ptr, M, N, num_groups,
    LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
    NUM_WARPS: gl.constexpr,
):  # fmt: skip
    # (first group to compute, or num_groups when the tile has no work; row and column offsets)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    per_group = tiles_m * tiles_n
    pid_m, pid_n = _banded(tile % per_group, tiles_m, tiles_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    if LAYOUT == MASKED:
        group = tile // per_group
        group = gl.where(off_m < _masked_rows(rows_ptr, group, M), group, num_groups)
    elif LAYOUT == CONTIGUOUS:
        group = _next_group(rows_ptr, off_m, M, num_groups, -1, BLOCK_M, NUM_WARPS)
    else:
        group = tile * 0
    return group, off_m, pid_n * BLOCK_N


@gluon.jit
def _following_group(group, rows_ptr, off_m, M, num_groups, LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr,
                     NUM_WARPS: gl.constexpr):  # fmt: skip
    if LAYOUT == CONTIGUOUS:
        return _next_group(rows_ptr, off_m, M, num_groups, group, BLOCK_M, NUM_WARPS)
    return group * 0 + num_groups


# ---------------------------------------------------------------------------------------------
# partitions


@gluon.jit
def _producer(
    a_desc, b_desc, rings, rows_ptr, sizes,
    LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):  # fmt: skip
    a_ring, b_ring, full, empty = rings
    M, N, K, num_groups, num_tiles, num_programs = sizes
    # A arrives in BLOCK_M / A_BOX boxes (a box is at most 128 rows, a power of two)
    A_BOX: gl.constexpr = a_desc.block_type.shape[0]
    A_LOADS: gl.constexpr = BLOCK_M // A_BOX
    STEP_BYTES: gl.constexpr = A_LOADS * a_desc.block_type.nbytes + b_desc.block_type.nbytes
    k_steps = gl.cdiv(K, a_desc.block_type.shape[1])
    it = 0
    for tile in range(gl.program_id(0), num_tiles, num_programs):
        group, off_m, off_n = _tile_start(
            tile, rows_ptr, M, N, num_groups, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M, 1
        )
        while group < num_groups:
            a_row = off_m
            if LAYOUT == MASKED:
                a_row += group * M
            b_row = group * N + off_n
            for step in range(k_steps):
                stage = it % STAGES
                # a stage is free once both math warpgroups released its previous use
                mbarrier.wait(empty.index(stage), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(full.index(stage), STEP_BYTES)
                k0 = step * a_desc.block_type.shape[1]
                for box in gl.static_range(A_LOADS):
                    tma.async_copy_global_to_shared(
                        a_desc,
                        [a_row + box * A_BOX, k0],
                        full.index(stage),
                        a_ring.index(stage * A_LOADS + box),
                    )
                tma.async_copy_global_to_shared(b_desc, [b_row, k0], full.index(stage), b_ring.index(stage))
                it += 1
            group = _following_group(group, rows_ptr, off_m, M, num_groups, LAYOUT, BLOCK_M, 1)


@gluon.jit
def _row_mask(rows, group, rows_ptr, M, LAYOUT: gl.constexpr):
    # the rows of a tile that this group's pass computes and writes
    if LAYOUT == CONTIGUOUS:
        return gl.load(rows_ptr + rows, mask=rows < M, other=-1) == group
    elif LAYOUT == MASKED:
        return rows < _masked_rows(rows_ptr, group, M)
    else:
        return rows < M


@gluon.jit
def _opaque(x):
    # an int32 copy the compiler cannot see through: what is derived from it is computed where it
    # is used (after the K loop), not hoisted above the loop into registers the accumulators need
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _store_sub_tile(
    acc, out_ptr, out_scale_ptr, row0, col0, group, rows_ptr, M, N,
    stride_og, stride_om, stride_on, stride_osm,
    LAYOUT: gl.constexpr, OUT_FP8: gl.constexpr,
):  # fmt: skip
    # a 64 x SUB_N sub-tile: convert (or quantize with its output scales) and store its rows
    mma_layout: gl.constexpr = acc.type.layout
    SUB_N: gl.constexpr = acc.type.shape[1]
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    row0 = _opaque(row0)
    col0 = _opaque(col0)
    if OUT_FP8:
        # the sub-tile is one 128-column output-scale block; columns past N are left out
        rows = row0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, mma_layout))
        cols = col0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(0, mma_layout))
        amax = gl.max(gl.where((cols < N)[None, :], gl.abs(acc), 0.0), axis=1)
        row_scale = gl.maximum(amax, 1e-12) / E4M3_MAX
        gl.store(
            out_scale_ptr + rows.to(gl.int64) * stride_osm + col0 // 128,
            row_scale,
            mask=_row_mask(rows, group, rows_ptr, M, LAYOUT),
        )
        values = gl.minimum(gl.maximum(acc / row_scale[:, None], -E4M3_MAX), E4M3_MAX).to(dtype)
    else:
        values = acc.to(dtype)
    # coalesced stores: 16-byte vectors along rows (the conversion goes through shared memory)
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    LANES_N: gl.constexpr = SUB_N // VEC if SUB_N // VEC < 32 else 32
    store_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // LANES_N, LANES_N], [4, 1], [1, 0])
    values = gl.convert_layout(values, store_layout)
    rows = row0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, store_layout))
    cols = col0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(0, store_layout))
    mask = _row_mask(rows, group, rows_ptr, M, LAYOUT)[:, None] & (cols < N)[None, :]
    ptrs = out_ptr + group.to(gl.int64) * stride_og + rows.to(gl.int64)[:, None] * stride_om
    gl.store(ptrs + cols.to(gl.int64)[None, :] * stride_on, values, mask=mask)


@gluon.constexpr_function
def _share_row(block_m, warpgroup):
    # first row of a math warpgroup's share: 64 rows each of a 128- or 192-row tile
    return 0 if block_m == SUB_M.value else warpgroup * SUB_M.value


@gluon.constexpr_function
def _share_col(block_m, sub_n, warpgroup):
    # first column of a math warpgroup's share: half the columns each of a 64-row tile
    return warpgroup * sub_n if block_m == SUB_M.value else 0


@gluon.jit
def _math(
    rings, pointers, sizes, strides,
    SCALE_BM: gl.constexpr, LAYOUT: gl.constexpr, OUT_FP8: gl.constexpr, BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr, SUB_N: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    WARPGROUP: gl.constexpr,
):  # fmt: skip
    a_ring, b_ring, full, empty = rings
    out_ptr, a_scale_ptr, b_scale_ptr, rows_ptr, out_scale_ptr = pointers
    M, N, K, num_groups, num_tiles, num_programs = sizes
    (stride_og, stride_om, stride_on, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn, stride_sbk,
     stride_osm) = strides  # fmt: skip
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, SUB_N, 32]
    )
    BK: gl.constexpr = a_ring.type.shape[2]
    A_BOX: gl.constexpr = a_ring.type.shape[1]
    A_LOADS: gl.constexpr = BLOCK_M // A_BOX
    # this warpgroup's share of the tile: 64 rows (BLOCK_M = 128, 192) or half the columns (64)
    ROW0: gl.constexpr = _share_row(BLOCK_M, WARPGROUP)
    COL0: gl.constexpr = _share_col(BLOCK_M, SUB_N, WARPGROUP)
    k_steps = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, num_programs):
        group, off_m, off_n = _tile_start(
            tile, rows_ptr, M, N, num_groups, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M, 4
        )
        while group < num_groups:
            rows = off_m + ROW0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, mma_layout))
            row_ok = _row_mask(rows, group, rows_ptr, M, LAYOUT)
            sa_ptrs = a_scale_ptr + group * stride_sag + (rows // SCALE_BM) * stride_sam
            col0 = off_n + COL0
            sb_ptr = b_scale_ptr + group * stride_sbg + (col0 // 128) * stride_sbn
            sb_ok = col0 < N  # a share past the last column is computed on zeros, never stored
            sa = gl.load(sa_ptrs, mask=row_ok, other=0.0)
            sb = gl.load(sb_ptr, mask=sb_ok, other=0.0)
            acc = gl.zeros([SUB_M, SUB_N], gl.float32, layout=mma_layout)
            # the wgmma accumulator of one K step: its registers are reused step after step
            part = gl.zeros([SUB_M, SUB_N], gl.float32, layout=mma_layout)
            for step in range(k_steps):
                stage = it % STAGES
                # the next step's scales load while this step's wgmma runs
                more = step + 1 < k_steps
                sa_next = gl.load(sa_ptrs + (step + 1) * stride_sak, mask=row_ok & more, other=0.0)
                sb_next = gl.load(sb_ptr + (step + 1) * stride_sbk, mask=sb_ok & more, other=0.0)
                mbarrier.wait(full.index(stage), (it // STAGES) & 1)
                a_tile = a_ring.index(stage * A_LOADS + ROW0 // A_BOX).slice(ROW0 % A_BOX, SUB_M, dim=0)
                b_tile = b_ring.index(stage).slice(COL0, SUB_N, dim=0)
                part = warpgroup_mma(a_tile, b_tile.permute((1, 0)), part, use_acc=False, is_async=True)
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                mbarrier.arrive(empty.index(stage), count=1)
                # promotion: the 128-deep block product, scaled, into the fp32 accumulator
                acc += part * (sa * sb)[:, None]
                sa = sa_next
                sb = sb_next
                it += 1
            _store_sub_tile(
                acc, out_ptr, out_scale_ptr, off_m + ROW0, col0, group, rows_ptr, M, N,
                stride_og, stride_om, stride_on, stride_osm, LAYOUT, OUT_FP8,
            )  # fmt: skip
            group = _following_group(group, rows_ptr, off_m, M, num_groups, LAYOUT, BLOCK_M, 4)


@gluon.jit
def fp8_blockwise_ws_kernel(
    # TMA descriptors of a [rows, k] and b [groups * n, k]; output, scales
    a_desc, b_desc, out_ptr, a_scale_ptr, b_scale_ptr,
    # CONTIGUOUS: int32 group id per row; MASKED: int32 valid rows per group; else unused
    rows_ptr,
    # DENSE with FP8 output: float32 (m, ceil(n / 128)) output scales, written here
    out_scale_ptr,
    # problem size (M: rows per group) and the persistent schedule
    M, N, K, num_groups, num_tiles, num_programs,
    # strides, in elements ("g" is the group dimension; 0 where there is none)
    stride_og, stride_om, stride_on, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn, stride_sbk,
    stride_osm,
    # scale granularity of a (rows), layout and epilogue
    SCALE_BM: gl.constexpr, LAYOUT: gl.constexpr, OUT_FP8: gl.constexpr,
    # tile: BLOCK_M x BLOCK_N, a math warpgroup's share 64 x SUB_N
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, SUB_N: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):  # fmt: skip
    BK: gl.constexpr = a_desc.block_type.shape[1]
    A_BOX: gl.constexpr = a_desc.block_type.shape[0]
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES * (BLOCK_M // A_BOX), A_BOX, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BK], b_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    MATH_WARPGROUPS: gl.constexpr = BLOCK_M // SUB_M if BLOCK_M > SUB_M else 2
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=MATH_WARPGROUPS)  # one arrival per math warpgroup
    fence_async_shared()

    rings = (a_ring, b_ring, full, empty)
    pointers = (out_ptr, a_scale_ptr, b_scale_ptr, rows_ptr, out_scale_ptr)
    sizes = (M, N, K, num_groups, num_tiles, num_programs)
    strides = (stride_og, stride_om, stride_on, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn,
               stride_sbk, stride_osm)  # fmt: skip
    # register budgets (setmaxnreg) out of the launch's maxnreg: the producer warp keeps 24, the
    # math warpgroups share the rest (the default partition takes what is left)
    if MATH_WARPGROUPS == 3:
        gl.warp_specialize(
            [
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, BLOCK_M, BLOCK_N, SUB_N,
                         GROUP_M, STAGES, 0)),
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, BLOCK_M, BLOCK_N, SUB_N,
                         GROUP_M, STAGES, 1)),
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, BLOCK_M, BLOCK_N, SUB_N,
                         GROUP_M, STAGES, 2)),
                (_producer, (a_desc, b_desc, rings, rows_ptr, sizes, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
            ],
            [4, 4, 1],
            [160, 160, 24],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, BLOCK_M, BLOCK_N, SUB_N,
                         GROUP_M, STAGES, 0)),
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, BLOCK_M, BLOCK_N, SUB_N,
                         GROUP_M, STAGES, 1)),
                (_producer, (a_desc, b_desc, rings, rows_ptr, sizes, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
            ],
            [4, 1],
            [240, 24],
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# launchers

# row counts (and what follows from them) take many values: keyed by specialization only
_LAUNCH = FastLaunch(fp8_blockwise_ws_kernel, varying=("M", "num_tiles", "num_programs"))


@functools.cache
def _box_layout(rows: int):
    # 128-byte rows of FP8: the 128-byte swizzle wgmma reads without bank conflicts
    return gl.NVMMASharedLayout.get_default_for([rows, BLOCK_K], gl.float8e4nv)


def tma_descriptor(base, shape, strides, block_shape, layout) -> TensorDescriptor:
    """A host TMA descriptor, built without ``TensorDescriptor``'s checks (about 13 us of host time
    a descriptor): the callers have checked what TMA needs (16-byte aligned base and strides,
    unit last stride; ``flashinfer.gemm._cuda``). The compiled launcher encodes it per launch."""
    descriptor = object.__new__(TensorDescriptor)
    descriptor.__dict__.update(
        base=base, shape=shape, strides=strides, block_shape=block_shape, layout=layout, padding="zero"
    )
    return descriptor


def _tma_rows(t, rows: int, box_rows: int) -> TensorDescriptor:
    """``t`` (2-D, or 3-D with packed groups) read by TMA as ``[rows, k]`` in ``box_rows x 128`` boxes."""
    return tma_descriptor(
        t, [rows, t.shape[-1]], [t.stride(-2), 1], [box_rows, BLOCK_K], _box_layout(box_rows)
    )


def _strides3(x) -> tuple:
    # (group, row, column) strides; a 2-D tensor is shared by all groups
    strides = x.stride()
    return strides if len(strides) == 3 else (0, *strides)


def _launch(
    a, b, a_scale, b_scale, rows, out, output_scale, m, n, k, groups, m_hint, layout, scale_bm, config
):
    """Shared launcher: ``a`` is ``[m, k]`` or ``[G, m, k]``, ``b`` is ``[n, k]`` or ``[G, n, k]``."""
    num_sms = multiprocessors(a.device)
    tiles_m = groups * ceil_div(m_hint, 128) if layout == MASKED.value else ceil_div(m, 128)
    out_fp8 = output_scale is not None
    if config is None:
        config = pick_config(layout, m_hint, n, tiles_m, num_sms, out_fp8)
    a_rows = groups * m if layout == MASKED.value else m
    a_desc = _tma_rows(a, a_rows, config.a_box)
    b_desc = _tma_rows(b, groups * n, config.block_n)
    per_group = ceil_div(m, config.block_m) * ceil_div(n, config.block_n)
    num_tiles = groups * per_group if layout == MASKED.value else per_group
    num_programs = min(num_tiles, num_sms)
    _LAUNCH.launch(
        (num_programs,),
        a_desc, b_desc, out, a_scale, b_scale,
        rows if rows is not None else a_scale,
        output_scale if out_fp8 else a_scale,
        m, n, k, groups, num_tiles, num_programs,
        *_strides3(out), *_strides3(a_scale), *_strides3(b_scale),
        output_scale.stride(0) if out_fp8 else 0,
        SCALE_BM=scale_bm, LAYOUT=layout, OUT_FP8=out_fp8, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        SUB_N=config.sub_n, GROUP_M=config.group_m, STAGES=config.stages, **config.launch_options,
    )  # fmt: skip


def gemm_groupwise(call, config=None) -> None:
    """Launch the dense block-scaled GEMM ``out = dequant(a) @ dequant(b).T`` (granularity
    ``(block_m, 128, 128)``, ``block_m`` 1 or 128).

    Parameters
    ----------
    call : flashinfer.gemm._args.Groupwise
        TMA-readable FP8 ``a (m, k)`` and ``b (n, k)`` (see the module docstring); the logical
        scale views (any strides); ``out (m, n)`` bf16/fp16 (any strides), or float8_e4m3fn with
        ``output_scale`` (``(m, ceil(n / 128))`` float32, last stride 1, written here).
    config : GluonGemmConfig, optional
        A fixed tile instead of :func:`pick_config`'s (FP8 output needs ``sub_n == 128``).
    """
    a, b, out, output_scale = call.a, call.b, call.out, call.output_scale
    m, k = a.shape
    n = b.shape[0]
    _launch(
        a,
        b,
        call.a_scale,
        call.b_scale,
        None,
        out,
        output_scale,
        m,
        n,
        k,
        1,
        m,
        DENSE.value,
        call.block_m,
        config,
    )


def group_gemm_contiguous(call, config=None) -> None:
    """Launch the contiguous grouped GEMM: row ``r`` of ``a`` times group ``m_indices[r]`` of ``b``.

    Parameters
    ----------
    call : flashinfer.gemm._args.GroupedContiguous
        TMA-readable ``a (m, k)`` and ``b (G, n, k)`` (groups packed); rows with ids outside
        ``[0, G)`` are neither computed nor written; ``out`` has any strides.
    config : GluonGemmConfig, optional
        A fixed 128-row tile instead of :func:`pick_config`'s.
    """
    a, b, a_scale, b_scale, m_indices, out = call
    m, k = a.shape
    groups, n, _ = b.shape
    _launch(a, b, a_scale, b_scale, m_indices, out, None, m, n, k, groups, m, CONTIGUOUS.value, 1, config)


def group_gemm_masked(call, config=None) -> None:
    """Launch the masked grouped GEMM: ``out[g, r] = dequant(a[g])[r] @ dequant(b[g]).T`` for ``r < masked_m[g]``.

    Parameters
    ----------
    call : flashinfer.gemm._args.GroupedMasked
        TMA-readable ``a (G, m, k)`` (groups packed) and ``b (G, n, k)``; ``masked_m`` is clamped
        to ``[0, m]`` on the device; ``expected_m`` picks the tile, never the result; rows past
        ``masked_m[g]`` of ``out`` (any strides) are left untouched.
    config : GluonGemmConfig, optional
        A fixed tile instead of :func:`pick_config`'s.
    """
    a, b, a_scale, b_scale, masked_m, expected_m, out = call
    groups, m, k = a.shape
    n = b.shape[1]
    m_hint = max(1, min(expected_m, m))
    _launch(a, b, a_scale, b_scale, masked_m, out, None, m, n, k, groups, m_hint, MASKED.value, 1, config)
