"""Run the Triton kernels of this folder on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first
imported; the kernel modules are imported inside the tests, after this file has run. The
interpreter's bugs are patched by ``tests/triton_interpreter.py`` (as in ``tests/mla/triton``),
here for the whole session: its float32 -> bfloat16 cast would otherwise truncate, a whole
output ulp off the rounding every GEMM rule allows (``oracles.assert_matches``).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

from triton_interpreter import patch_interpreter  # noqa: E402 (after the interpreter is on)

patch_interpreter()
