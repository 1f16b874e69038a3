"""Triton kernels of the NVIDIA GEMM path.

Each module reads top to bottom like Triton's tutorials: the layout, the autotune configs, the
kernel, then a launcher that derives strides and the grid and launches. Importing a module here
imports Triton; only ``flashinfer.gemm._cuda`` imports them, lazily, on the first CUDA call.
"""

import threading

import triton
import triton.language as tl

from ..._core.triton_launch import FastLaunch
from ...utils import get_device_sm_count

# Triton's Autotuner keeps per-call state on the shared object (it sets ``nargs`` at the start of
# every call and clears it at the end), so calls from several threads at once corrupt each
# other ("'NoneType' object is not a mapping", found on the H200). Launches of autotuned kernels
# hold this lock; an uncontended acquire costs well under a microsecond.
AUTOTUNED_LAUNCH = threading.Lock()


class TunedLaunch:
    """An autotuned kernel whose tuned tile is then launched without the Autotuner.

    The first call of a key runs Triton's Autotuner (which times the configs, under
    ``AUTOTUNED_LAUNCH``) and records the config it chose; later calls of the key launch that
    config through :class:`~flashinfer._core.triton_launch.FastLaunch`, skipping the Autotuner's
    and the JIT's per-call dispatch (tens of microseconds of host time on an H200's host).

    Parameters
    ----------
    tuned : triton.runtime.Autotuner
        The ``triton.autotune``-decorated kernel.
    varying : tuple of str, optional
        Integer parameters that take many values (see ``FastLaunch``).
    """

    def __init__(self, tuned, varying: tuple = ()):
        self.tuned = tuned
        self.fast = FastLaunch(tuned.fn, varying)
        self._chosen: dict = {}

    def launch(self, grid, key: tuple, *args, **constants) -> None:
        """Launch with the config tuned for ``key``.

        ``grid`` is a tuple or a function of the meta-parameters (as for ``kernel[grid]``).
        ``key`` must determine the Autotuner's choice and which configs are valid: its key
        arguments, the tensor dtypes and every constexpr in ``constants``.
        """
        chosen = self._chosen.get(key)
        if chosen is None:
            with AUTOTUNED_LAUNCH:
                self.tuned[grid](*args, **constants)
                chosen = self.tuned.best_config.all_kwargs()
            self._chosen[key] = chosen
            return
        meta = {**constants, **chosen}
        self.fast.launch(grid(meta) if callable(grid) else grid, *args, **meta)


def multiprocessors(device) -> int:
    """Multiprocessors of a CUDA device (persistent grids are sized by it)."""
    if device.type == "cuda":
        return get_device_sm_count(device)  # cached per device
    return 4  # the CPU interpreter: a few programs still exercise the persistent loops


@triton.jit
def banded_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row tile, column tile) of tile number ``tile``: row tiles go in bands of ``GROUP_M``, so
    tiles in flight together share B columns in L2."""
    band = tile // (GROUP_M * tiles_n)
    first_m = band * GROUP_M
    band_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile % band_rows), (tile % (GROUP_M * tiles_n)) // band_rows
