"""Run the Triton kernels of this folder on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first
imported; the kernel modules are imported inside the tests, after this file has run. The
interpreter's bugs are patched by ``tests/triton_interpreter.py`` (as in ``tests/mla/triton``).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

from triton_interpreter import patch_scalar_index  # noqa: E402 (after the interpreter is on)

patch_scalar_index()
