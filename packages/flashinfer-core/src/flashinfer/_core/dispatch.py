"""Implementation resolution: tensor device type x backend name -> implementation module.

Every op package has three implementation modules with the same function names and the
same normalized arguments:

- ``_reference``: plain PyTorch in float32, runs on any device; what runs on CPU.
- ``_cuda``: the NVIDIA path (vendor libraries through PyTorch, Triton kernels).
- ``_mate``: the MUSA path through MATE; it routes what MATE cannot do to the reference.

The device type picks the module (a dictionary lookup, cached); backend *names* only select
rules inside the API layer, never a different module. Setting the environment variable
``FLASHINFER_FORCE_REFERENCE=1`` forces the reference implementation on every device, for
debugging and parity checks. It is read once, when this module is imported (set it before
starting Python); :func:`reload_environment` reads it again.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import torch

FORCE_REFERENCE_ENV = "FLASHINFER_FORCE_REFERENCE"

# device type -> implementation kind; any other device type runs the reference.
DEVICE_IMPLEMENTATION = {"cuda": "cuda", "musa": "mate"}


def _env_forces_reference() -> bool:
    return os.environ.get(FORCE_REFERENCE_ENV, "") not in ("", "0", "false", "False")


# Read once: an environment lookup on every call would be most of the dispatch cost.
_forced = _env_forces_reference()


def reload_environment() -> None:
    """Read ``FLASHINFER_FORCE_REFERENCE`` again (it is otherwise read once, at import)."""
    global _forced
    _forced = _env_forces_reference()


def force_reference() -> bool:
    """Whether ``FLASHINFER_FORCE_REFERENCE`` asks for the reference implementation."""
    return _forced


def triton_available() -> bool:
    """Whether Triton can be imported (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def implementation_kind(device: torch.device | str) -> str:
    """The implementation a call on ``device`` uses: ``reference``, ``cuda`` or ``mate``."""
    if _forced:
        return "reference"
    device_type = device if isinstance(device, str) else device.type
    kind = DEVICE_IMPLEMENTATION.get(device_type, "reference")
    if kind == "cuda" and not _triton_present():
        return "reference"
    return kind


_TRITON_PRESENT: list[bool] = []


def _triton_present() -> bool:
    if not _TRITON_PRESENT:
        _TRITON_PRESENT.append(triton_available())
    return _TRITON_PRESENT[0]


class Dispatcher:
    """Maps a tensor's device to the implementation module of one op package.

    Parameters
    ----------
    package : str
        The op package, e.g. ``"flashinfer.gemm"``; its implementation modules are
        ``<package>._reference``, ``<package>._cuda`` and ``<package>._mate``.
    """

    def __init__(self, package: str):
        self.package = package
        self._modules: dict[str, object] = {}

    def module(self, device: torch.device):
        """The implementation module for ``device`` (imported on first use, then cached)."""
        kind = "reference" if _forced else DEVICE_IMPLEMENTATION.get(device.type, "reference")
        if kind == "cuda" and not _triton_present():
            kind = "reference"
        mod = self._modules.get(kind)
        if mod is None:
            mod = importlib.import_module(f"{self.package}._{kind}")
            self._modules[kind] = mod
        return mod

    def reference(self):
        """The reference implementation module."""
        mod = self._modules.get("reference")
        if mod is None:
            mod = importlib.import_module(f"{self.package}._reference")
            self._modules["reference"] = mod
        return mod
