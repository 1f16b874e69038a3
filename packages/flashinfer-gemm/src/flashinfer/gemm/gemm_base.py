"""Upstream's module path ``flashinfer.gemm.gemm_base``: the GEMM APIs and ``CUDNN_AVAILABLE``."""

from ._bmm import bmm_bf16, bmm_fp8
from ._deepgemm_fp8_nt import batch_deepgemm_fp8_nt_groupwise, group_deepgemm_fp8_nt_groupwise
from ._fp8_blockscale_gemm_sm90 import fp8_blockscale_gemm_sm90
from ._gemm_fp8_nt import gemm_fp8_nt_blockscaled, gemm_fp8_nt_groupwise
from ._group_gemm_fp8_nt import group_gemm_fp8_nt_groupwise

# Upstream sets this when ``import cudnn`` succeeds; no name runs through cuDNN here (``cudnn``
# means the best implementation on the device), so FlashInfer's tests skip their cuDNN-only cases.
CUDNN_AVAILABLE = False

__all__ = [
    "batch_deepgemm_fp8_nt_groupwise",
    "bmm_bf16",
    "bmm_fp8",
    "fp8_blockscale_gemm_sm90",
    "gemm_fp8_nt_blockscaled",
    "gemm_fp8_nt_groupwise",
    "group_deepgemm_fp8_nt_groupwise",
    "group_gemm_fp8_nt_groupwise",
]
