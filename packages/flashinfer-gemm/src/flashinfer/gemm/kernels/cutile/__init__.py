"""Upstream's cuTile kernel modules, by name (``flashinfer.gemm.kernels.cutile``).

Upstream FlashInfer ships cuTile (``cuda.tile``) kernels here; this build has no cuTile
compiler (``flashinfer.gemm.is_cuda_tile_available()`` is False). The modules keep upstream's
import paths and entry points for callers and tests that import them, and run this package's
implementations on the tensors' device.
"""
