"""Triton kernels of the NVIDIA MLA path.

Each module reads top to bottom like Triton's tutorials: the layout, the configs beside the
kernel, the kernel, then a launcher. Importing a module here imports Triton; only
``flashinfer.mla._cuda`` imports them, lazily, on the first CUDA call.
"""
