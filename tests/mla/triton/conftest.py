"""Run the MLA Triton kernels on CPU through Triton's interpreter (its bugs patched in
``tests/triton_interpreter.py``).

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first imported;
the kernel modules are imported inside the tests, after this file has run. Should an earlier
test of the session have imported them compiled, the ``kernels`` fixture drops them from
``sys.modules`` so they are decorated again under the interpreter.
"""

import importlib
import os
import sys

import pytest

os.environ["TRITON_INTERPRET"] = "1"


# kernel module -> its kernel, whose type tells whether it was decorated under the interpreter
KERNELS = {
    "flashinfer.mla.kernels.rope_quantize": "rope_quantize_kernel",
    "flashinfer.mla.kernels.mla_decode": "mla_decode_kernel",
}
# what the decode kernels import (the combine kernel): dropped with them, decorated again first
SHARED = {"flashinfer.mla.kernels.mla_decode_shared": "mla_combine_kernel"}


@pytest.fixture(scope="session")
def kernels():
    """``(rope_quantize, mla_decode)`` kernel modules, decorated under the interpreter."""
    from triton_interpreter import patch_interpreter

    patch_interpreter()
    for name, kernel in {**SHARED, **KERNELS}.items():
        module = sys.modules.get(name)
        if module is not None and type(getattr(module, kernel)).__name__ != "InterpretedFunction":
            del sys.modules[name]
    return tuple(importlib.import_module(name) for name in KERNELS)
