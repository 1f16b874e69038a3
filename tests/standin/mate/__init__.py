"""A STAND-IN for MATE (MUSA AI Tensor Engine), for testing the MATE adapter on CPU.

This is not MATE and says nothing about MUSA hardware. It has MATE 0.2.6's module layout and
function signatures (``mate.gemm.bmm``, ``mate.gemm.ragged_m_moe_gemm_8bit``,
``mate.gemm.masked_moe_gemm_8bit``, ``mate.sparse_mla_interface.mla_rope_quantize_fp8``,
``sparse_mla_fp8_decode``, ``get_batch_decode_metadata_mla``, ``mate.flashmla.get_mla_metadata``,
``flash_mla_with_kvcache`` for the packed 656-byte cache), enforces the argument rules the
spec documents for them (0-dim tensor scales, layout and dtype checks, natural-log LSE, ...),
computes in float64 on whatever device the tensors are on, and records every call in
:data:`CALLS` so tests can assert how the adapter mapped its arguments and that it passed
views of the caller's tensors rather than copies.
"""

__version__ = "0.2.6+standin"

from ._recorder import CALLS, record, reset  # noqa: E402,F401
