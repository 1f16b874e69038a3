"""``flashinfer.rope``: RoPE + FP8 quantization, at FlashInfer's import path.

The functions are defined in :mod:`flashinfer.mla._rope`, beside the implementations they
dispatch to (``flashinfer.mla._reference`` / ``_cuda`` / ``_mate``); this module re-exports the
same objects.
"""

from .mla._rope import mla_rope_quantize_fp8, rope_quantize_fp8

__all__ = ["mla_rope_quantize_fp8", "rope_quantize_fp8"]
