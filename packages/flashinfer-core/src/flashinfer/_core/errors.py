"""FlashInfer's exception classes (re-exported by :mod:`flashinfer.utils`)."""


class BackendSupportedError(Exception):
    """A backend name is known but cannot run this call on this device."""


class GPUArchitectureError(Exception):
    """The device's architecture cannot run the requested kernel."""


class LibraryError(Exception):
    """A library an implementation needs is missing, unrelated or too old."""


class KernelCheckError(ValueError, RuntimeError):
    """An argument upstream rejects in its C++ layer (a RuntimeError there) and this build
    rejects in Python, like every other argument (a ValueError): both types, so a caller that
    catches either sees it (``numpy.exceptions.AxisError`` is a ValueError and an IndexError for
    the same reason)."""
