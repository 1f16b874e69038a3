"""The block-scaled FP8 GEMM kernels (dense, grouped-contiguous, grouped-masked): the portable
Triton kernel (:mod:`.fp8_blockwise`), its Hopper Gluon tier (:mod:`.gluon_fp8_blockwise`), and the
block quantization that feeds ``fp8_blockscale_gemm_sm90`` (:mod:`.fp8_quantize`)."""
