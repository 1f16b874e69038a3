"""``flashinfer.jit``: the names callers and upstream tests import from FlashInfer's JIT layer.

This build compiles nothing ahead of time with nvcc; Triton kernels compile on first use.
"""

__all__ = ["MissingJITCacheError"]


class MissingJITCacheError(RuntimeError):
    """A kernel module is missing from the JIT cache (kept for upstream compatibility)."""

    def __init__(self, message: str = "", spec=None):
        super().__init__(message)
        self.spec = spec
