"""Triton kernels of the NVIDIA GEMM path, by family.

- :mod:`.bmm`: ``bmm_fp8`` (``fp8_bmm``, the portable kernel; ``gluon_fp8_bmm``, its Hopper tier);
- :mod:`.blockwise`: the block-scaled GEMMs, dense and grouped (``fp8_blockwise``,
  ``gluon_fp8_blockwise``), and the block quantization of ``fp8_blockscale_gemm_sm90``
  (``fp8_quantize``);
- :mod:`.cutile`: upstream's cuTile module paths;
- :mod:`.gluon_tma`: what the two Gluon kernels share (tile order, warpgroup shares, TMA
  descriptors); here, what the Triton kernels share (``banded_tile``, ``group_strides``,
  ``multiprocessors``).

Each kernel module reads top to bottom like Triton's tutorials: the layout, the autotune configs,
the kernel, then a launcher that derives strides and the grid and launches (autotuned kernels
through :class:`flashinfer._core.triton_launch.TunedLaunch`), and imports no other kernel module's
private names. Importing a module here imports Triton; only ``flashinfer.gemm._cuda`` imports
them, lazily, on the first CUDA call.
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
