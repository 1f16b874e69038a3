"""Which tier of our own kernels runs on a CUDA device: Gluon (Hopper) or portable Triton.

Two tiers of Triton kernels serve the NVIDIA path:

- ``gluon``: kernels written in Gluon (``triton.experimental.gluon``) for Hopper (compute
  capability 9.0 exactly): warp-specialized partitions, wgmma, ``cp.async``/TMA rings and
  mbarriers. Gluon's API changes between Triton releases (the names that differ come from
  :mod:`.triton_compat`), so they run only on the releases listed in ``GLUON_TRITON_VERSIONS``:
  those whose GPU tests (``tests/gpu``, on an H100) passed with them and under which every
  variant compiles to the standard of the compile tests (``tests/*/test_gluon*_compile.py``: no
  spills beyond the stated allowances, no serialized wgmma). 3.8 and 3.9 pass the GPU tests but
  not that standard (3.8: the 128 x 256 contiguous GEMM tile spills; 3.9: the 192 x 128 tile
  spills and ptxas serializes the FP8 decode's wgmma), so there the ``tl`` kernels run;
- ``tl``: the portable ``triton.language`` kernels, everywhere else (Ampere, Ada, Blackwell, any
  other Triton).

``FLASHINFER_KERNEL_TIER`` chooses: ``auto`` (the default) takes ``gluon`` where it runs, ``tl``
forces the portable kernels, ``gluon`` forces the Gluon kernels and raises where they cannot run
(for tests and benchmarks). An op may still take ``tl`` for a shape its Gluon kernel does not
cover; the op's module says which. A Gluon kernel that has not yet been measured against the
portable one on an H200 is asked for with ``auto_ok=False``: ``auto`` then keeps the portable
kernel and only ``gluon`` runs it.
"""

from __future__ import annotations

import functools
import os

import torch

from .errors import BackendSupportedError

__all__ = ["GLUON_TRITON_VERSIONS", "KERNEL_TIER_ENV", "gluon_supported", "requested_tier", "use_gluon"]

KERNEL_TIER_ENV = "FLASHINFER_KERNEL_TIER"
GLUON_TRITON_VERSIONS = ((3, 6), (3, 7))
GLUON_CAPABILITY = (9, 0)


@functools.cache
def _triton_has_gluon() -> bool:
    try:
        import triton
        from triton.experimental.gluon.language.nvidia import hopper  # noqa: F401
    except ImportError:
        return False
    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    return version in GLUON_TRITON_VERSIONS


@functools.cache
def gluon_supported(device_index: int) -> bool:
    """Whether the Gluon tier can run on CUDA device ``device_index`` with this Triton."""
    return torch.cuda.get_device_capability(device_index) == GLUON_CAPABILITY and _triton_has_gluon()


def requested_tier() -> str:
    """The tier ``FLASHINFER_KERNEL_TIER`` asks for, as set (``auto`` when unset): the one read of
    the environment. Read on every call, so a change of the variable takes effect at once; not
    validated here (:func:`use_gluon` raises for a value it does not know)."""
    if _ENVIRON is None:
        return os.environ.get(KERNEL_TIER_ENV, "auto")
    value = _ENVIRON.get(_ENV_KEY)  # os.environ's own store: a read without encoding the key
    return "auto" if value is None else os.environ.decodevalue(value)


# os.environ keeps its variables in ``_data`` by encoded key (POSIX and Windows alike since
# Python 3.2); every change through os.environ updates it. A Python without it reads os.environ.
_ENVIRON = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(KERNEL_TIER_ENV) if _ENVIRON is not None else None


def use_gluon(device: torch.device, auto_ok: bool = True) -> bool:
    """Whether an op on CUDA ``device`` (with an index) should take its Gluon kernel.

    ``auto_ok``: whether ``auto`` may pick this kernel (False: only a forced ``gluon`` runs it).

    Raises
    ------
    BackendSupportedError
        ``FLASHINFER_KERNEL_TIER=gluon`` on a device or Triton the Gluon kernels do not run on.
    ValueError
        ``FLASHINFER_KERNEL_TIER`` set to anything but ``auto``, ``gluon`` or ``tl``.
    """
    tier = requested_tier()
    if tier == "auto":
        return auto_ok and gluon_supported(device.index)
    if tier == "tl":
        return False
    if tier == "gluon":
        if not gluon_supported(device.index):
            raise BackendSupportedError(
                f"{KERNEL_TIER_ENV}=gluon: the Gluon kernels need compute capability "
                f"{GLUON_CAPABILITY[0]}.{GLUON_CAPABILITY[1]} and Triton "
                f"{' or '.join('.'.join(map(str, v)) for v in GLUON_TRITON_VERSIONS)}; this is "
                f"{torch.cuda.get_device_capability(device.index)} with Triton {_triton_version()}"
            )
        return True
    raise ValueError(f"{KERNEL_TIER_ENV} must be 'auto', 'gluon' or 'tl', got {tier!r}")


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "(not installed)"
    return triton.__version__
