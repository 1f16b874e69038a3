"""Upstream's module path ``flashinfer.gemm.gemm_base``, re-exporting the five GEMM APIs."""

from ._bmm import bmm_bf16, bmm_fp8
from ._grouped import batch_deepgemm_fp8_nt_groupwise, group_deepgemm_fp8_nt_groupwise
from ._groupwise import gemm_fp8_nt_groupwise

__all__ = [
    "batch_deepgemm_fp8_nt_groupwise",
    "bmm_bf16",
    "bmm_fp8",
    "gemm_fp8_nt_groupwise",
    "group_deepgemm_fp8_nt_groupwise",
]
