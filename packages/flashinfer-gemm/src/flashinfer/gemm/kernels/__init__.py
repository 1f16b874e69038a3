"""Triton kernels of the NVIDIA GEMM path.

Each module reads top to bottom like Triton's tutorials: the layout, the autotune configs, the
kernel, then a launcher that derives strides and the grid and launches (autotuned kernels
through :class:`flashinfer._core.triton_launch.TunedLaunch`). Importing a module here
imports Triton; only ``flashinfer.gemm._cuda`` imports them, lazily, on the first CUDA call.
"""

import triton
import triton.language as tl

from ...utils import get_device_sm_count

__all__ = ["banded_tile", "group_strides", "multiprocessors"]


def multiprocessors(device) -> int:
    """Multiprocessors of a CUDA device (persistent grids are sized by it)."""
    if device.type == "cuda":
        return get_device_sm_count(device)  # cached per device
    return 4  # the CPU interpreter: a few programs still exercise the persistent loops


def group_strides(x) -> tuple:
    """``(group, row, column)`` strides of ``x``; a 2-D tensor is shared by all groups (group stride 0)."""
    strides = x.stride()
    return strides if len(strides) == 3 else (0, *strides)


@triton.jit
def banded_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row tile, column tile) of tile number ``tile``: row tiles go in bands of ``GROUP_M``, so
    tiles in flight together share B columns in L2."""
    band = tile // (GROUP_M * tiles_n)
    first_m = band * GROUP_M
    band_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile % band_rows), (tile % (GROUP_M * tiles_n)) // band_rows
