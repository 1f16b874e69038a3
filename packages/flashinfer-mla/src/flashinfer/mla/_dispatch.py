"""Implementation resolution for ``flashinfer.rope`` and ``flashinfer.mla`` / ``flashinfer.decode``.

``DISPATCH.module(device)`` returns ``flashinfer.mla._reference``, ``._cuda`` or ``._mate``;
each has ``rope_quantize``, ``decode_plan``, ``sparse_decode`` and ``dense_decode`` with the
normalized arguments of ``docs/internals.md``. ``DESCRIPTION`` says what each op runs on each
implementation, for ``python -m flashinfer show-config``.
"""

from __future__ import annotations

from .._core import Dispatcher

DISPATCH = Dispatcher("flashinfer.mla")

DESCRIPTION = {
    "rope_quantize_fp8": {
        "reference": "PyTorch, float32 math, saturating FP8 cast",
        "cuda": "Triton fused RoPE + FP8 quantize kernel (one launch for q and k)",
        "mate": "mate mla_rope_quantize_fp8 (BF16, 2-D K, nope 512 / rope 64, e4m3); reference otherwise",
    },
    "trtllm_batch_decode_with_kv_cache_mla (sparse)": {
        "reference": "PyTorch, float32 math, chunked online softmax",
        "cuda": "Triton split-K MLA decode kernel (FP8 needs compute capability 8.9+, else reference)",
        "mate": "mate sparse_mla_fp8_decode (FP8 e4m3, dims 512/64, float bmm1); reference for BF16",
    },
    "trtllm_batch_decode_with_kv_cache_mla (dense)": {
        "reference": "PyTorch, float32 math, chunked online softmax",
        "cuda": "Triton split-K paged MLA decode kernel (FP8 needs compute capability 8.9+, else reference)",
        "mate": "reference (PyTorch on the MUSA tensors; MATE has no FP8/576-row dense decode)",
    },
}
