"""``flashinfer.jit.gemm``: the spec generators upstream GEMM tests import to warm up their JIT.

Nothing is compiled ahead of time here (see :mod:`flashinfer.jit`); each generator returns a
:class:`~flashinfer.jit.JitSpec` naming the module upstream would build.
"""

from __future__ import annotations

from . import JitSpec

__all__ = ["gen_fp8_blockscale_gemm_sm90_module"]


def gen_fp8_blockscale_gemm_sm90_module() -> JitSpec:
    """The spec of upstream's SM90 block-scale FP8 GEMM module (``fp8_blockscale_gemm_sm90``)."""
    return JitSpec("fp8_blockscale_gemm_sm90")
