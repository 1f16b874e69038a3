"""Which implementation serves a call: the tensor's device type picks it.

Every op package has three implementation modules with the same function names and the same
normalized arguments (``docs/internals.md``):

- ``_reference``: plain PyTorch in float32, runs on any device; what runs on CPU;
- ``_cuda``: the NVIDIA path (vendor libraries through PyTorch, Triton kernels);
- ``_mate``: the MUSA path through MATE; it routes what MATE cannot do to the reference.

A package names itself, e.g. ``Dispatcher("flashinfer.gemm")`` in ``flashinfer/gemm/_dispatch.py``,
and each kind's module ``<package>._<kind>`` is imported on first use (importing a package never
imports Triton or MATE). Backend *names* only select rules inside the API layer, never a module.
``FLASHINFER_FORCE_REFERENCE=1`` forces the reference on every device, for debugging and parity
checks; it is read once, at import (set it before starting Python).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from functools import partial
from types import ModuleType
from typing import NamedTuple

import torch

from .fallback import warn_reference

FORCE_REFERENCE_ENV = "FLASHINFER_FORCE_REFERENCE"
KINDS = ("reference", "cuda", "mate")


def triton_available() -> bool:
    """Whether Triton can be imported (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


class Routing(NamedTuple):
    """Device type -> implementation kind (any other device type runs the reference)."""

    device_kinds: dict
    force_reference: bool

    def kind(self, device_type: str) -> str:
        """The implementation kind of a call on a device of this type."""
        if self.force_reference:
            return "reference"
        kind = self.device_kinds.get(device_type, "reference")
        if kind == "cuda" and not _triton_present():
            return "reference"
        return kind

    def why_reference(self, device_type: str) -> str:
        """Why a device of this type runs the reference (for the one warning that says so)."""
        if self.force_reference:
            return f"{FORCE_REFERENCE_ENV}=1 is set"
        if self.device_kinds.get(device_type) == "cuda":
            return "Triton is not installed (pip install 'flashinfer-python[triton]')"
        return f"no implementation serves {device_type} devices"

    def routed(self, device_type: str, kind: str) -> Routing:
        """A copy that sends ``device_type`` to ``kind`` (tests route CPU tensors to ``mate``)."""
        return self._replace(device_kinds={**self.device_kinds, device_type: kind})


def _env_forces_reference() -> bool:
    return os.environ.get(FORCE_REFERENCE_ENV, "") not in ("", "0", "false", "False")


# The routing in force. It is replaced, never mutated: a Dispatcher's cache follows the object.
ROUTING = Routing({"cuda": "cuda", "musa": "mate"}, _env_forces_reference())


def force_reference() -> bool:
    """Whether ``FLASHINFER_FORCE_REFERENCE`` asks for the reference implementation."""
    return ROUTING.force_reference


def implementation_kind(device: torch.device | str) -> str:
    """The implementation a call on ``device`` uses: ``reference``, ``cuda`` or ``mate``."""
    return ROUTING.kind(device if isinstance(device, str) else device.type)


_TRITON_PRESENT: list[bool] = []


def _triton_present() -> bool:
    if not _TRITON_PRESENT:
        _TRITON_PRESENT.append(triton_available())
    return _TRITON_PRESENT[0]


class Dispatcher:
    """The implementation module of one op package for a tensor's device.

    Parameters
    ----------
    package : str
        The op package (``flashinfer.gemm``): its modules ``_reference``, ``_cuda`` and ``_mate``
        serve the kinds of :data:`KINDS`, each imported on first use; named in the warning when a
        GPU runs the reference.
    """

    def __init__(self, package: str):
        self.package = package
        # kind -> a function importing its module
        self.loaders = {kind: partial(importlib.import_module, f"{package}._{kind}") for kind in KINDS}
        self._routing: Routing | None = None
        self._modules: dict = {}  # device -> module
        self._kinds: dict = {}  # device -> kind

    def module(self, device: torch.device) -> ModuleType:
        """The implementation module for ``device``; cached per device (a dict lookup)."""
        if self._routing is not ROUTING:
            self._resolve(device)
        try:  # a subscript, not `.get`: no method call on every op's path (host time)
            return self._modules[device]
        except KeyError:
            return self._resolve(device)

    def kind(self, device: torch.device) -> str:
        """The implementation kind (``reference``, ``cuda``, ``mate``) :meth:`module` serves."""
        if self._routing is not ROUTING:
            self._resolve(device)
        try:
            return self._kinds[device]
        except KeyError:
            self._resolve(device)
            return self._kinds[device]

    def _resolve(self, device: torch.device) -> ModuleType:
        if self._routing is not ROUTING:
            self._routing, self._modules, self._kinds = ROUTING, {}, {}
        kind = ROUTING.kind(device.type)
        if kind == "reference":
            warn_reference(f"every {self.package} op", device, ROUTING.why_reference(device.type))
        module = self._modules[device] = self.loaders[kind]()
        self._kinds[device] = kind
        return module
