"""Say, once per op and reason, that a GPU tensor runs the reference implementation.

The reference is plain PyTorch in float32: correct everywhere, but many times slower than the
device's kernels (the figures: ``benchmarks/RESULTS.md``, "Summary"). A GPU call takes it for a
reason that holds for the whole process (FP8 on a device without FP8 tensor cores, a MATE
without the op, Triton missing, ``FLASHINFER_FORCE_REFERENCE=1``), so the first such call of
each op logs one warning on the ``flashinfer`` logger naming the op, the device and the reason;
later calls log nothing. Only the fallback branches call :func:`warn_reference`, so the fast
paths pay nothing.
"""

from __future__ import annotations

import logging

import torch

__all__ = ["warn_reference"]

_logger = logging.getLogger("flashinfer")
_warned: set = set()
# device types without memory of their own (no kernels to miss): never warned about
_QUIET_DEVICES = frozenset(("cpu", "meta"))


def warn_reference(op: str, device: torch.device, reason: str) -> None:
    """Log once per ``(op, device type, reason)`` that ``op`` runs the reference on ``device``."""
    key = (op, device.type, reason)
    if key in _warned or device.type in _QUIET_DEVICES:
        return
    _warned.add(key)
    _logger.warning(
        "flashinfer: %s runs the PyTorch reference implementation on %s (%s); it is correct but "
        "many times slower than the device's kernels",
        op,
        device,
        reason,
    )
