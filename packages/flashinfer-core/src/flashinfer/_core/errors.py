"""FlashInfer's exception classes (re-exported by :mod:`flashinfer.utils`)."""


class BackendSupportedError(Exception):
    """A backend name is known but cannot run this call on this device."""


class GPUArchitectureError(Exception):
    """The device's architecture cannot run the requested kernel."""


class LibraryError(Exception):
    """A library an implementation needs is missing, unrelated or too old."""
