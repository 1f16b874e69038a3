"""``flashinfer.autotuner.autotune``: upstream's tuning context manager.

Our implementations choose their configurations without a tuning pass (Triton kernels carry
their own autotune tables), so the context manager only records whether tuning was asked
for; callers and upstream tests can enter it unchanged.
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["autotune", "is_tuning"]

_state = threading.local()


@contextlib.contextmanager
def autotune(
    tune_mode: bool = True, cache: str | None = None, tuning_buckets=None, round_up=None, skip_ops=None
):
    """Enter a region where FlashInfer would tune its kernels (accepted; selection is static)."""
    previous = getattr(_state, "tuning", False)
    _state.tuning = bool(tune_mode)
    try:
        yield
    finally:
        _state.tuning = previous


def is_tuning() -> bool:
    """Whether the current thread is inside ``autotune(True)``."""
    return getattr(_state, "tuning", False)
