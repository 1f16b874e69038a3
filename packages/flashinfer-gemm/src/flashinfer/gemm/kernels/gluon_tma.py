"""What the Hopper (sm_90) Gluon GEMM kernels share: the wgmma row block, the banded tile order,
the math warpgroups' shares of a tile, and TMA descriptors built on the host.

Layout: FP8 operands are read by TMA as 2-D ``[rows, k]`` tensors in ``box_rows x 128`` boxes
(``stride(-1) == 1``, 16-byte aligned base and row stride, groups or batches packed, so that a
3-D ``(G, rows, k)`` tensor is one ``[G * rows, k]`` tensor). The callers check those conditions
(``flashinfer.gemm._cuda``) before they launch, so the descriptors here skip
``TensorDescriptor``'s own checks. Runs on the Triton releases ``flashinfer._core.kernel_tier`` lists (it compiles under 3.6 to 3.9; the names that differ between them come from ``flashinfer._core.triton_compat``).
"""

from __future__ import annotations

import dataclasses
import functools

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

__all__ = [
    "BLOCK_K",
    "SUB_M",
    "GluonTile",
    "banded",
    "box_layout",
    "ring_barriers",
    "share_col",
    "share_row",
    "tile_coords",
    "tma_descriptor",
    "tma_rows_descriptor",
]

BLOCK_K = 128  # one scale block of K a step: the wgmma accumulator never spans two
SUB_M = gl.constexpr(64)  # rows of one warpgroup's wgmma


@dataclasses.dataclass(frozen=True)
class GluonTile:
    """Tile of a warp-specialized GEMM kernel: its math warpgroups take 64 rows each, or, in a
    64-row tile, half the columns each.

    Attributes
    ----------
    block_m : int
        Rows of the tile: 64 or a multiple of 64.
    block_n : int
        Columns of the tile.
    stages : int
        Depth of the TMA ring (``(block_m + block_n) * 128`` bytes a stage).
    group_m : int
        Row tiles per band of the tile order (:func:`banded`).
    """

    block_m: int
    block_n: int
    stages: int
    group_m: int = 8

    @property
    def share_n(self) -> int:
        """Columns of one math warpgroup's share (half the tile's for a 64-row tile)."""
        return self.block_n // 2 if self.block_m == SUB_M.value else self.block_n


@gluon.jit
def banded(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    # (row tile, column tile): row tiles in bands of GROUP_M share B columns in L2
    band = tile // (GROUP_M * tiles_n)
    first_m = band * GROUP_M
    band_rows = gl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + tile % band_rows, (tile % (GROUP_M * tiles_n)) // band_rows


@gluon.jit
def tile_coords(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    # (slot, first row, first column) of a persistent tile index: slots (batches, the masked
    # layout's groups; 0 for one dense problem) of M x N outermost, banded within a slot
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    per_slot = tiles_m * tiles_n
    pid_m, pid_n = banded(tile % per_slot, tiles_m, tiles_n, GROUP_M)
    return tile // per_slot, pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def ring_barriers(STAGES: gl.constexpr, MATH_WARPGROUPS: gl.constexpr):
    # the operand ring's barriers, initialized and fenced before the partitions start: a stage's
    # `full` completes when the producer's TMA bytes land, its `empty` when every math warpgroup
    # has arrived (done reading it)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=MATH_WARPGROUPS)
    fence_async_shared()
    return full, empty


@gluon.constexpr_function
def share_row(block_m, warpgroup):
    # first row of a math warpgroup's share: 64 rows each of a 128- or 192-row tile
    return 0 if block_m == SUB_M.value else warpgroup * SUB_M.value


@gluon.constexpr_function
def share_col(block_m, sub_n, warpgroup):
    # first column of a math warpgroup's share: half the columns each of a 64-row tile
    return warpgroup * sub_n if block_m == SUB_M.value else 0


@functools.cache
def box_layout(rows: int):
    """The shared-memory layout of a ``rows x 128`` FP8 box: 128-byte rows, the 128-byte swizzle
    wgmma reads without bank conflicts."""
    return gl.NVMMASharedLayout.get_default_for([rows, BLOCK_K], gl.float8e4nv)


def tma_descriptor(base, shape, strides, block_shape, layout) -> TensorDescriptor:
    """A host TMA descriptor, built without ``TensorDescriptor``'s checks (a descriptor is built
    on every call, and those checks would add their host time to each): the callers have checked
    what TMA needs (16-byte aligned base and strides, unit last stride; ``flashinfer.gemm._cuda``).
    The compiled launcher encodes it per launch."""
    descriptor = object.__new__(TensorDescriptor)
    descriptor.__dict__.update(
        base=base, shape=shape, strides=strides, block_shape=block_shape, layout=layout, padding="zero"
    )
    return descriptor


def tma_rows_descriptor(t, rows: int, box_rows: int) -> TensorDescriptor:
    """The descriptor of ``t`` (2-D, or 3-D with packed groups) read by TMA as ``[rows, k]`` in
    ``box_rows x 128`` boxes."""
    return tma_descriptor(
        t, [rows, t.shape[-1]], [t.stride(-2), 1], [box_rows, BLOCK_K], box_layout(box_rows)
    )
