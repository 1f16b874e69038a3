"""Shared runtime of the FlashInfer-compatible op packages.

Nothing here imports MATE, torch_musa or Triton at import time; each is found lazily when a
tensor on its device is seen (see :mod:`flashinfer._core.mate`).
"""

from .checks import describe, fail
from .dispatch import FORCE_REFERENCE_ENV, Dispatcher, implementation_kind
from .errors import BackendSupportedError, GPUArchitectureError, LibraryError

__all__ = [
    "BackendSupportedError",
    "Dispatcher",
    "FORCE_REFERENCE_ENV",
    "GPUArchitectureError",
    "LibraryError",
    "describe",
    "fail",
    "implementation_kind",
]
