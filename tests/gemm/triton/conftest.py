"""Run the Triton kernels of this folder on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first
imported; the kernel modules are imported inside the tests, after this file has run.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"
