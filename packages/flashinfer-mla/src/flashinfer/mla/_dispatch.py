"""Which implementation module serves RoPE and MLA decode, and what each one runs per op.

``DISPATCH.module(device)`` returns ``flashinfer.mla._reference``, ``._cuda`` or ``._mate``
(:mod:`flashinfer._core.dispatch`); each has ``rope_quantize``, ``decode_plan``,
``sparse_decode``, ``packed_sparse_decode`` and ``dense_decode`` with the normalized arguments
of ``docs/internals.md``. ``ROUTES`` (with the backend tables' rules) is the one description of
what runs where: the README's tables and ``python -m flashinfer show-config`` are generated from it.
"""

from __future__ import annotations

from .._core.dispatch import Dispatcher
from ._checks import DECODE_BACKENDS


def _load_reference():
    from . import _reference

    return _reference


def _load_cuda():
    from . import _cuda

    return _cuda


def _load_mate():
    from . import _mate

    return _mate


DISPATCH = Dispatcher("flashinfer.mla", reference=_load_reference, cuda=_load_cuda, mate=_load_mate)

# op -> implementation kind -> what runs
ROUTES = {
    "rope_quantize_fp8, mla_rope_quantize_fp8": {
        "reference": "PyTorch, float32 math, saturating FP8 cast",
        "cuda": "one fused Triton launch for q and k",
        "mate": "mate mla_rope_quantize_fp8 for BF16, 2-D (or one-head) K, nope 512 / rope 64, e4m3; "
        "the reference otherwise",
    },
    "trtllm_batch_decode_with_kv_cache_mla (sparse)": {
        "reference": "PyTorch, float32 math, chunked online softmax",
        "cuda": "on Hopper (sm_90) with Triton 3.6, the warp-specialized Gluon kernel for e4m3/bf16 at "
        "dims 512/64; elsewhere the portable Triton split-K kernel; the reference for FP8 below compute "
        "capability 8.9 and for float16",
        "mate": "mate sparse_mla_fp8_decode for FP8 e4m3, dims 512/64, float bmm1_scale; the reference "
        "for BF16 and tensor bmm1_scale",
    },
    "trtllm_batch_decode_with_kv_cache_mla (sparse on the packed 656-byte cache)": {
        "reference": "PyTorch, float32 math on the dequantized rows",
        "cuda": "Triton split-K MLA decode, packed mode (FP8 rows dequantized in registers)",
        "mate": "mate.flashmla flash_mla_with_kvcache (FlashMLA's sparse FP8 decode); the reference "
        "without it",
    },
    "trtllm_batch_decode_with_kv_cache_mla (dense)": {
        "reference": "PyTorch, float32 math, chunked online softmax",
        "cuda": "on Hopper (sm_90) with Triton 3.6, the Gluon kernel (page lookups in its gather "
        "warps) for e4m3/bf16 at dims 512/64; elsewhere the portable Triton split-K paged kernel; the "
        "reference for FP8 below compute capability 8.9 and for float16",
        "mate": "the reference (MATE has no dense decode for 576-wide rows)",
    },
}

BACKEND_TABLES = (DECODE_BACKENDS,)
