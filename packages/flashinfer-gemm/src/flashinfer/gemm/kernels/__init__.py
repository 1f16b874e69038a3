"""Triton kernels of the NVIDIA GEMM path.

Each module reads top to bottom like Triton's tutorials: the layout, the autotune configs, the
kernel, then a launcher that derives strides and the grid and launches. Importing a module here
imports Triton; only ``flashinfer.gemm._cuda`` imports them, lazily, on the first CUDA call.
"""

import threading

# Triton's Autotuner keeps per-call state on the shared object (it sets ``nargs`` at the start of
# every call and clears it at the end), so calls from several threads at once corrupt each
# other ("'NoneType' object is not a mapping", found on the H200). Launches of autotuned kernels
# hold this lock; an uncontended acquire costs well under a microsecond.
AUTOTUNED_LAUNCH = threading.Lock()
