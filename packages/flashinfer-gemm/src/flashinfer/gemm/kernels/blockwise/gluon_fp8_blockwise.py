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
  warpgroups (A scales one K step ahead, B scales at their step) and applied exactly in float32.
- ``out`` has any strides (written with masked stores); ``output_scale`` has a free row stride.

Schedule (DeepGEMM's Hopper structure)
--------------------------------------
Persistent programs, one a multiprocessor, walk the tile list (``group x row tile x column
tile``, row tiles in bands of ``GROUP_M`` so that tiles in flight share B columns in L2). Each
program runs three partitions (``gl.warp_specialize``):

- the **producer** (one warp, 24 registers) issues the TMA loads of each 128-wide K step of A and
  B into a ``STAGES``-deep shared-memory ring, one ``full`` mbarrier a stage (expect-tx);
- two **math warpgroups** (the default partition and a worker, 240 registers each) split the tile:
  by rows (``BLOCK_M = 128``: 64 rows each) or, for small m, by columns (``BLOCK_M = 64``). A
  warpgroup's share is ``HALVES`` (1 or 2) sub-tiles of ``64 x SUB_N`` (``SUB_N <= 128``). For
  every K step and sub-tile it issues the wgmma into a fresh accumulator (FP8 tensor cores
  accumulate 128 products in reduced precision, never more), waits for it and promotes the
  product into that sub-tile's fp32 sum, scaled by ``a_scale[row] * b_scale``; after the last
  sub-tile it releases the stage (``empty`` mbarrier, one arrival per warpgroup). While one
  warpgroup promotes, the other's wgmma runs, so the tensor cores stay busy. The epilogue
  converts to the output dtype (or quantizes to e4m3 with the output scales) and stores with row
  and column masks, while the producer already fills the ring with the next tile.

What decides a tile's work (the group ids of its rows, a group's valid rows) is loaded one tile
ahead by the math warpgroups, so its latency hides behind the current tile's K loop (the
producer, a ring ahead of them, loads it at the tile); which groups a row tile holds is then
reduced from registers. Every decision is made on the device by all
three partitions from the same data: no host synchronization, and launches can be captured in a
CUDA graph. Runs on the Triton releases ``flashinfer._core.kernel_tier`` lists (it compiles under 3.6 to 3.9; the names that differ between them come from ``flashinfer._core.triton_compat``).
"""

from __future__ import annotations

import dataclasses

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ...._core.triton_compat import tma_load
from ...._core.triton_launch import FastLaunch
from ....utils import ceil_div
from .. import group_strides, multiprocessors
from ..gluon_tma import SUB_M, GluonTile, share_col, share_row, tile_coords, tma_rows_descriptor

DENSE = gl.constexpr(0)
CONTIGUOUS = gl.constexpr(1)
MASKED = gl.constexpr(2)
E4M3_MAX = gl.constexpr(448.0)


@dataclasses.dataclass(frozen=True)
class GluonGemmConfig(GluonTile):
    """Tile of the block-scaled kernel: ``block_m`` 128 or 192 (two or three math warpgroups of 64
    rows each), or 64 (two math warpgroups taking half the columns each: small m); ``block_n``
    such that a math warpgroup's share is at most 128 columns, or 256 as two 128-column halves
    (``block_m`` 128, ``block_n`` 256)."""

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
        return min(self.share_n, 128)

    @property
    def halves(self) -> int:
        """wgmmas a math warpgroup's share takes a K step (1, or 2 for a 256-column share)."""
        return self.share_n // self.sub_n

    @property
    def launch_options(self) -> dict:
        """Warps of the default partition (the first math warpgroup) and the register cap that
        the partitions' budgets are carved from (65536 registers over all warpgroups)."""
        warpgroups = self.math_warpgroups + 1  # the producer warp holds a warpgroup's registers
        return {"num_warps": 4, "maxnreg": 65536 // (warpgroups * 128) // 8 * 8}


# Tiles (block_m, block_n, stages), sized to the 227 KB of shared memory. Large and grouped GEMMs
# want the tile that moves the fewest bytes from L2 per FLOP: 128 x 256 (two 128-column halves a
# warpgroup, 1.5 bytes a product-step; ahead of the 128 x 128 tile on the H200's grouped MoE
# shapes, ``benchmarks/notes_gluon_gemm.md``) over 192 x 128 (three warpgroups, 1.67) and
# 128 x 128 (2). 128-row tiles keep grouped tiles aligned to
# DeepGEMM's 128-row groups; 128 x 64 fills the multiprocessors for mid-size m; 64-row tiles with
# narrow columns spread the weight reads of small m (memory-bound) over every multiprocessor.
WIDE = GluonGemmConfig(128, 256, 4)
LARGE = GluonGemmConfig(192, 128, 5)
MEDIUM = GluonGemmConfig(128, 128, 6)
NARROW = GluonGemmConfig(128, 64, 8)
SMALL_M = {
    128: GluonGemmConfig(64, 128, 8),
    64: GluonGemmConfig(64, 64, 13),
    32: GluonGemmConfig(64, 32, 18),
}
FP8_OUTPUT = MEDIUM  # a math warpgroup's share is one 128-column output-scale block
CONFIGS = (WIDE, LARGE, MEDIUM, NARROW, *SMALL_M.values())


def pick_config(layout: int, rows: int, n: int, tiles_m: int, num_sms: int, out_fp8: bool) -> GluonGemmConfig:
    """The tile for ``rows`` rows per group (``tiles_m`` 128-row tiles in all) and ``n`` columns.

    m <= 64 is bound by reading B: it takes the 64-row tile whose busiest multiprocessor reads
    the fewest B rows (waves x width; the wider on ties). Larger m takes the first tile, from the
    fewest bytes per FLOP down, that still gives every multiprocessor a tile; grouped layouts
    keep 128-row tiles (DeepGEMM aligns groups to 128 rows).
    """
    if out_fp8:
        return FP8_OUTPUT
    if rows <= SUB_M.value:
        width = min(SMALL_M, key=lambda w: (ceil_div(tiles_m * ceil_div(n, w), num_sms) * w, -w))
        return SMALL_M[width]
    candidates = (WIDE, MEDIUM, NARROW) if layout != DENSE.value else (WIDE, LARGE, MEDIUM, NARROW)
    for config in candidates:
        if ceil_div(tiles_m * 128, config.block_m) * ceil_div(n, config.block_n) >= num_sms:
            return config
    return NARROW


# ---------------------------------------------------------------------------------------------
# the tile schedule, computed identically by every partition


@gluon.constexpr_function
def _pow2(x):
    return 1 << (x - 1).bit_length()


@gluon.jit
def _tile_ids(
    tile, rows_ptr, M, N, num_tiles,
    LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
):  # fmt: skip
    # What decides a tile's groups (the math warpgroups load it a tile ahead, so that its latency
    # hides behind the current tile's K loop): CONTIGUOUS the group ids of its rows (-1 past M),
    # MASKED the valid rows of its group clamped to [0, M], DENSE nothing. The ids are spread over
    # the warps of the calling partition (gl.num_warps: the producer's one, a math warpgroup's 4).
    slot, off_m, off_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    if LAYOUT == CONTIGUOUS:
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
        offs = off_m + gl.arange(0, _pow2(BLOCK_M), layout=layout)
        valid = (offs < M) & (offs < off_m + BLOCK_M) & (tile < num_tiles)
        return gl.load(rows_ptr + offs, mask=valid, other=-1)
    elif LAYOUT == MASKED:
        rows = gl.load(rows_ptr + slot, mask=tile < num_tiles, other=0)
        return gl.minimum(gl.maximum(rows, 0), M)
    else:
        return tile * 0


@gluon.jit
def _first_group(ids, slot, off_m, num_groups, LAYOUT: gl.constexpr):
    # the first group a tile computes, num_groups when it has no work
    if LAYOUT == CONTIGUOUS:
        return gl.min(gl.where((ids >= 0) & (ids < num_groups), ids, num_groups), axis=0)
    elif LAYOUT == MASKED:
        return gl.where(off_m < ids, slot, num_groups)
    else:
        return slot * 0


@gluon.jit
def _next_group(ids, group, num_groups, LAYOUT: gl.constexpr):
    # CONTIGUOUS: the smallest valid group id above `group` among the tile's rows (a tile of
    # DeepGEMM's 128-row aligned groups holds one); every other layout: one pass a tile
    if LAYOUT == CONTIGUOUS:
        return gl.min(gl.where((ids > group) & (ids < num_groups), ids, num_groups), axis=0)
    else:
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
        slot, off_m, off_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # loaded at the tile (not a tile ahead, as the math warpgroups do): the producer runs a
        # ring ahead of them, and its 24 registers have no room for a second set of ids
        ids = _tile_ids(tile, rows_ptr, M, N, num_tiles, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M)
        group = _first_group(ids, slot, off_m, num_groups, LAYOUT)
        while group < num_groups:
            a_row = off_m
            if LAYOUT == MASKED:
                a_row += group * M
            b_row = group * N + off_n
            for step in range(k_steps):
                stage = it % STAGES
                # a stage is free once every math warpgroup released its previous use
                mbarrier.wait(empty.index(stage), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(full.index(stage), STEP_BYTES)
                k0 = step * a_desc.block_type.shape[1]
                for box in gl.static_range(A_LOADS):
                    tma_load(
                        a_desc,
                        [a_row + box * A_BOX, k0],
                        full.index(stage),
                        a_ring.index(stage * A_LOADS + box),
                    )
                tma_load(b_desc, [b_row, k0], full.index(stage), b_ring.index(stage))
                it += 1
            group = _next_group(ids, group, num_groups, LAYOUT)


@gluon.jit
def _row_ids(
    tile, rows_ptr, M, N, num_tiles, row_layout: gl.constexpr,
    LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
    ROW0: gl.constexpr,
):  # fmt: skip
    # CONTIGUOUS: the group ids of a math warpgroup's 64 rows in the accumulator's row layout
    # (its row mask), loaded a tile ahead; other layouts need none
    if LAYOUT == CONTIGUOUS:
        slot, off_m, off_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = off_m + ROW0 + gl.arange(0, SUB_M, layout=row_layout)
        return gl.load(rows_ptr + rows, mask=(rows < M) & (tile < num_tiles), other=-1)
    else:
        return tile * 0


@gluon.jit
def _row_mask(rows, rids, ids, group, M, LAYOUT: gl.constexpr):
    # the rows of a tile that this group's pass computes and writes
    if LAYOUT == CONTIGUOUS:
        return rids == group
    elif LAYOUT == MASKED:
        return rows < ids
    else:
        return rows < M


@gluon.jit
def _opaque(x):
    # an int32 copy the compiler cannot see through: what is derived from it is computed where it
    # is used (after the K loop), not hoisted above the loop into registers the accumulators need
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _store_sub_tile(
    acc, row_ok, out_ptr, out_scale_ptr, row0, col0, group, N,
    stride_og, stride_om, stride_on, stride_osm, OUT_FP8: gl.constexpr, OUT_ALIGNED: gl.constexpr,
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
        gl.store(out_scale_ptr + rows.to(gl.int64) * stride_osm + col0 // 128, row_scale, mask=row_ok)
        values = gl.minimum(gl.maximum(acc / row_scale[:, None], -E4M3_MAX), E4M3_MAX).to(dtype)
    else:
        values = acc.to(dtype)
    # coalesced stores: 16-byte vectors along rows (the conversion goes through shared memory;
    # stored from the accumulator's layout, each thread's 64-bit addresses would need more
    # registers than the second half's sums leave)
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    LANES_N: gl.constexpr = SUB_N // VEC if SUB_N // VEC < 32 else 32
    store_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // LANES_N, LANES_N], [4, 1], [1, 0])
    values = gl.convert_layout(values, store_layout)
    row_ok = gl.convert_layout(row_ok, gl.SliceLayout(1, store_layout))
    rows = row0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, store_layout))
    cols = col0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(0, store_layout))
    ptrs = out_ptr + group.to(gl.int64) * stride_og + rows.to(gl.int64)[:, None] * stride_om
    ptrs = ptrs + cols.to(gl.int64)[None, :] * stride_on
    if OUT_ALIGNED:
        # rows of 16-byte aligned runs of columns (the launcher checked the base and strides),
        # said here because a worker partition does not see the launch's specializations; a
        # sub-tile inside n is stored with row masks only, whole 16-byte vectors a thread
        ptrs = gl.max_contiguous(gl.multiple_of(ptrs, [1, 16]), [1, VEC])
        if col0 + SUB_N <= N:
            gl.store(ptrs, values, mask=row_ok[:, None])
        else:
            gl.store(ptrs, values, mask=row_ok[:, None] & (cols < N)[None, :])
    else:
        gl.store(ptrs, values, mask=row_ok[:, None] & (cols < N)[None, :])


@gluon.jit
def _math(
    rings, pointers, sizes, strides,
    SCALE_BM: gl.constexpr, LAYOUT: gl.constexpr, OUT_FP8: gl.constexpr, OUT_ALIGNED: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, SUB_N: gl.constexpr, HALVES: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr, WARPGROUP: gl.constexpr,
):  # fmt: skip
    a_ring, b_ring, full, empty = rings
    out_ptr, a_scale_ptr, b_scale_ptr, rows_ptr, out_scale_ptr = pointers
    M, N, K, num_groups, num_tiles, num_programs = sizes
    (stride_og, stride_om, stride_on, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn, stride_sbk,
     stride_osm) = strides  # fmt: skip
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, SUB_N, 32]
    )
    row_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    BK: gl.constexpr = a_ring.type.shape[2]
    A_BOX: gl.constexpr = a_ring.type.shape[1]
    A_LOADS: gl.constexpr = BLOCK_M // A_BOX
    # this warpgroup's share of the tile: 64 rows (BLOCK_M = 128, 192) or half the columns (64),
    # HALVES wgmmas of SUB_N columns each (a 256-column share is two 128-column halves that take
    # turns in one wgmma accumulator: 64 registers for the product, 128 for the two sums)
    ROW0: gl.constexpr = share_row(BLOCK_M, WARPGROUP)
    COL0: gl.constexpr = share_col(BLOCK_M, SUB_N, WARPGROUP)
    k_steps = gl.cdiv(K, BK)
    it = 0
    ids = _tile_ids(gl.program_id(0), rows_ptr, M, N, num_tiles, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M)
    rids = _row_ids(gl.program_id(0), rows_ptr, M, N, num_tiles, row_layout, LAYOUT, BLOCK_M, BLOCK_N,
                    GROUP_M, ROW0)  # fmt: skip
    for tile in range(gl.program_id(0), num_tiles, num_programs):
        slot, off_m, off_n = tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        following = tile + num_programs
        ids_next = _tile_ids(following, rows_ptr, M, N, num_tiles, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M)
        rids_next = _row_ids(following, rows_ptr, M, N, num_tiles, row_layout, LAYOUT, BLOCK_M, BLOCK_N,
                             GROUP_M, ROW0)  # fmt: skip
        group = _first_group(ids, slot, off_m, num_groups, LAYOUT)
        rows = off_m + ROW0 + gl.arange(0, SUB_M, layout=row_layout)
        while group < num_groups:
            row_ok = _row_mask(rows, rids, ids, group, M, LAYOUT)
            # scale offsets in int32 (one register a row, not a 64-bit pointer)
            sa_offs = group * stride_sag + (rows // SCALE_BM) * stride_sam
            col0 = off_n + COL0
            sb_ptr = b_scale_ptr + group * stride_sbg + (col0 // 128) * stride_sbn
            # a share (or half) past the last column is computed on zeros, never stored
            sb0_ok = col0 < N
            sb1_ok = col0 + SUB_N < N
            sa = gl.load(a_scale_ptr + sa_offs, mask=row_ok, other=0.0)
            sb0 = gl.load(sb_ptr, mask=sb0_ok, other=0.0)
            acc0 = gl.zeros([SUB_M, SUB_N], gl.float32, layout=mma_layout)
            acc1 = gl.zeros([SUB_M, SUB_N], gl.float32, layout=mma_layout)
            # the wgmma accumulator of one K step: its registers are reused step after step
            part = gl.zeros([SUB_M, SUB_N], gl.float32, layout=mma_layout)
            for step in range(k_steps):
                stage = it % STAGES
                # the next step's scales load while this step's wgmma runs (a 256-column share
                # has no registers left for the B scales: they load at their step, from L1 mostly)
                more = step + 1 < k_steps
                sa_next = gl.load(
                    a_scale_ptr + sa_offs + (step + 1) * stride_sak, mask=row_ok & more, other=0.0
                )
                if HALVES == 2:
                    sb0 = gl.load(sb_ptr + step * stride_sbk, mask=sb0_ok, other=0.0)
                else:
                    sb0_next = gl.load(sb_ptr + (step + 1) * stride_sbk, mask=sb0_ok & more, other=0.0)
                mbarrier.wait(full.index(stage), (it // STAGES) & 1)
                a_tile = a_ring.index(stage * A_LOADS + ROW0 // A_BOX).slice(ROW0 % A_BOX, SUB_M, dim=0)
                b_half = b_ring.index(stage).slice(COL0, SUB_N, dim=0)
                part = warpgroup_mma(a_tile, b_half.permute((1, 0)), part, use_acc=False, is_async=True)
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                if HALVES == 2:
                    sb1 = gl.load(sb_ptr + stride_sbn + step * stride_sbk, mask=sb1_ok, other=0.0)
                    # each half's promotion runs while the other warpgroup's wgmma does
                    acc0 += part * (sa * sb0)[:, None]
                    b_half = b_ring.index(stage).slice(COL0 + SUB_N, SUB_N, dim=0)
                    part = warpgroup_mma(a_tile, b_half.permute((1, 0)), part, use_acc=False, is_async=True)
                    part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                    mbarrier.arrive(empty.index(stage), count=1)
                    acc1 += part * (sa * sb1)[:, None]
                else:
                    mbarrier.arrive(empty.index(stage), count=1)
                    # promotion: the 128-deep block product, scaled, into the fp32 accumulator
                    acc0 += part * (sa * sb0)[:, None]
                    sb0 = sb0_next
                sa = sa_next
                it += 1
            _store_sub_tile(acc0, row_ok, out_ptr, out_scale_ptr, off_m + ROW0, col0, group, N,
                            stride_og, stride_om, stride_on, stride_osm, OUT_FP8, OUT_ALIGNED)  # fmt: skip
            if HALVES == 2:
                _store_sub_tile(acc1, row_ok, out_ptr, out_scale_ptr, off_m + ROW0, col0 + SUB_N, group, N,
                                stride_og, stride_om, stride_on, stride_osm, OUT_FP8, OUT_ALIGNED)  # fmt: skip
            group = _next_group(ids, group, num_groups, LAYOUT)
        ids = ids_next
        rids = rids_next


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
    # scale granularity of a (rows), layout and epilogue (OUT_ALIGNED: out's base and every stride
    # but a unit last one are multiples of 16 bytes, so rows are stored in 16-byte vectors)
    SCALE_BM: gl.constexpr, LAYOUT: gl.constexpr, OUT_FP8: gl.constexpr, OUT_ALIGNED: gl.constexpr,
    # tile: BLOCK_M x BLOCK_N, a math warpgroup's share 64 x (HALVES * SUB_N)
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, SUB_N: gl.constexpr, HALVES: gl.constexpr,
    GROUP_M: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    BK: gl.constexpr = a_desc.block_type.shape[1]
    A_BOX: gl.constexpr = a_desc.block_type.shape[0]
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES * (BLOCK_M // A_BOX), A_BOX, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BK], b_desc.layout)
    MATH_WARPGROUPS: gl.constexpr = BLOCK_M // SUB_M if BLOCK_M > SUB_M else 2
    # the ring's barriers inline rather than through gluon_tma.ring_barriers: with the helper,
    # ptxas schedules this kernel's 128-row-share and FP8-output variants differently (the same
    # instructions, reordered; sm_90 compile, Triton 3.6)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
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
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, OUT_ALIGNED, BLOCK_M, BLOCK_N, SUB_N,
                         HALVES, GROUP_M, STAGES, 0)),
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, OUT_ALIGNED, BLOCK_M, BLOCK_N, SUB_N,
                         HALVES, GROUP_M, STAGES, 1)),
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, OUT_ALIGNED, BLOCK_M, BLOCK_N, SUB_N,
                         HALVES, GROUP_M, STAGES, 2)),
                (_producer, (a_desc, b_desc, rings, rows_ptr, sizes, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
            ],
            [4, 4, 1],
            [160, 160, 24],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, OUT_ALIGNED, BLOCK_M, BLOCK_N, SUB_N,
                         HALVES, GROUP_M, STAGES, 0)),
                (_math, (rings, pointers, sizes, strides, SCALE_BM, LAYOUT, OUT_FP8, OUT_ALIGNED, BLOCK_M, BLOCK_N, SUB_N,
                         HALVES, GROUP_M, STAGES, 1)),
                (_producer, (a_desc, b_desc, rings, rows_ptr, sizes, LAYOUT, BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
            ],
            [4, 1],
            [240, 24],
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# launchers

# row counts (and what follows from them) take many values: keyed by specialization only
_LAUNCH = FastLaunch(fp8_blockwise_ws_kernel, varying=("M", "num_tiles", "num_programs"))


def _aligned_rows(out) -> bool:
    """Whether ``out``'s rows are runs of 16-byte aligned vectors (unit last stride, base and other
    strides multiples of 16 bytes): the epilogue then stores 16 bytes a thread, else element-wise."""
    vec = 16 // out.element_size()
    strides = out.stride()
    return strides[-1] == 1 and out.data_ptr() % 16 == 0 and all(s % vec == 0 for s in strides[:-1])


def _launch(layout: int, operands: tuple, sizes: tuple, scale_bm: int, config) -> None:
    """Shared launcher. ``operands`` is ``(a, b, a_scale, b_scale, rows, out, output_scale)``:
    ``a`` ``[m, k]`` or ``[G, m, k]``, ``b`` ``[n, k]`` or ``[G, n, k]``, ``rows`` the layout's
    int32 tensor (or None), ``output_scale`` None but for FP8 output. ``sizes`` is
    ``(m, n, k, groups, m_hint)``, ``m_hint`` the rows a group is expected to have."""
    a, b, a_scale, b_scale, rows, out, output_scale = operands
    m, n, k, groups, m_hint = sizes
    num_sms = multiprocessors(a.device)
    tiles_m = groups * ceil_div(m_hint, 128) if layout == MASKED.value else ceil_div(m, 128)
    out_fp8 = output_scale is not None
    if config is None:
        config = pick_config(layout, m_hint, n, tiles_m, num_sms, out_fp8)
    a_rows = groups * m if layout == MASKED.value else m
    a_desc = tma_rows_descriptor(a, a_rows, config.a_box)
    b_desc = tma_rows_descriptor(b, groups * n, config.block_n)
    per_group = ceil_div(m, config.block_m) * ceil_div(n, config.block_n)
    num_tiles = groups * per_group if layout == MASKED.value else per_group
    num_programs = min(num_tiles, num_sms)
    _LAUNCH.launch(
        (num_programs,),
        a_desc, b_desc, out, a_scale, b_scale,
        rows if rows is not None else a_scale,
        output_scale if out_fp8 else a_scale,
        m, n, k, groups, num_tiles, num_programs,
        *group_strides(out), *group_strides(a_scale), *group_strides(b_scale),
        output_scale.stride(0) if out_fp8 else 0,
        SCALE_BM=scale_bm, LAYOUT=layout, OUT_FP8=out_fp8, OUT_ALIGNED=_aligned_rows(out),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        SUB_N=config.sub_n, HALVES=config.halves, GROUP_M=config.group_m, STAGES=config.stages,
        **config.launch_options,
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
    operands = (a, b, call.a_scale, call.b_scale, None, out, output_scale)
    _launch(DENSE.value, operands, (m, n, k, 1, m), call.block_m, config)


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
    operands = (a, b, a_scale, b_scale, m_indices, out, None)
    _launch(CONTIGUOUS.value, operands, (m, n, k, groups, m), 1, config)


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
    operands = (a, b, a_scale, b_scale, masked_m, out, None)
    _launch(MASKED.value, operands, (m, n, k, groups, m_hint), 1, config)
