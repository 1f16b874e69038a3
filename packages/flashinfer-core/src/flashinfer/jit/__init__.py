"""``flashinfer.jit``: the names callers and upstream tests import from FlashInfer's JIT layer.

This build compiles nothing ahead of time with nvcc; Triton kernels compile on first use.
"""

__all__ = ["JitSpec", "MissingJITCacheError", "build_jit_specs"]


class MissingJITCacheError(RuntimeError):
    """A kernel module is missing from the JIT cache (kept for upstream compatibility)."""

    def __init__(self, message: str = "", spec=None):
        super().__init__(message)
        self.spec = spec


class JitSpec:
    """The name of a kernel module upstream would compile ahead of time; nothing to compile here."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"JitSpec({self.name!r})"


def build_jit_specs(specs, verbose: bool = False, skip_prebuilt: bool = True) -> None:
    """Upstream compiles ``specs`` with nvcc/ninja; this build's kernels are Triton kernels that
    compile on first use, so there is nothing to do (the arguments are accepted and ignored)."""
