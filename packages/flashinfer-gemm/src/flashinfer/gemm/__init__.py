"""FlashInfer v0.6.17's GEMM APIs on MUSA (through MATE) and on every other PyTorch device.

``bmm_bf16`` and ``bmm_fp8`` (batched 16-bit and FP8 GEMMs), ``gemm_fp8_nt_groupwise``
(groupwise-scaled FP8 NT GEMM) and its block-scaled form ``gemm_fp8_nt_blockscaled``,
``fp8_blockscale_gemm_sm90`` (block-scaled FP8 GEMM that quantizes 16-bit operands itself), the
grouped GEMM over row segments ``group_gemm_fp8_nt_groupwise``, and the DeepGEMM-style grouped
FP8 GEMMs ``group_deepgemm_fp8_nt_groupwise`` (contiguous) and
``batch_deepgemm_fp8_nt_groupwise`` (masked). The implementation is chosen by the tensors' device: MATE on MUSA, the NVIDIA path on
CUDA, the float32 PyTorch reference elsewhere. Importing this package imports neither MATE nor
Triton.
"""

from . import gemm_base
from .gemm_base import *  # noqa: F403 (the GEMM APIs: gemm_base.__all__ names them)


def is_cuda_tile_available() -> bool:
    """Whether upstream's cuTile backend is usable; always False (the ``cutile`` name still runs)."""
    return False


__all__ = [*gemm_base.__all__, "is_cuda_tile_available"]
