"""``bmm_bf16_cutile`` and ``make_bmm_bf16_tune_cache`` under upstream's import path.

Upstream v0.6.17 keeps its cuTile BF16 batched GEMM in this module. The functions are API
functions here and live with ``bmm_bf16`` in :mod:`flashinfer.gemm._bmm`; this module only
gives them upstream's path.
"""

from flashinfer.gemm._bmm import bmm_bf16_cutile, make_bmm_bf16_tune_cache

__all__ = ["bmm_bf16_cutile", "make_bmm_bf16_tune_cache"]
