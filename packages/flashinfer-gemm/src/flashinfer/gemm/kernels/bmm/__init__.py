"""The batched FP8 GEMM kernels (``bmm_fp8``): the portable Triton kernel (:mod:`.fp8_bmm`) and
its Hopper Gluon tier (:mod:`.gluon_fp8_bmm`)."""
