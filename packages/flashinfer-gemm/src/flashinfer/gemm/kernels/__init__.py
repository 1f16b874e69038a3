"""Triton kernels of the NVIDIA GEMM path.

Each module reads top to bottom like Triton's tutorials: the layout, the autotune configs, the
kernel, then a launcher that derives strides and the grid and launches. Importing a module here
imports Triton; only ``flashinfer.gemm._cuda`` imports them, lazily, on the first CUDA call.
"""
