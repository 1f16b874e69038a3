"""``flashinfer.testing``: the test helpers FlashInfer's own GEMM tests import.

Only :func:`flashinfer.testing.utils.quantize_fp8` and
:func:`flashinfer.testing.utils.dequantize_fp8` (what upstream v0.6.17's
``tests/gemm/test_groupwise_scaled_gemm_fp8.py`` uses) and
:func:`flashinfer.testing.utils.per_token_cast_to_fp8` (``test_fp8_blockscale_gemm.py``), written
with PyTorch alone; upstream's benchmarking helpers are not provided. Like upstream, ``import flashinfer`` does not load it.
"""
