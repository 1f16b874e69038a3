"""Triton, where these tests import it, is imported in interpreter mode.

Triton decides at import whether ``triton.language``'s own helpers are interpreted; a run that
also collects ``tests/{gemm,mla}/triton`` (which interpret their kernels on CPU) needs the first
import of Triton to see ``TRITON_INTERPRET=1``. The core tests launch no kernel.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"
