"""Run the MLA Triton kernels on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first imported;
the kernel modules are imported inside the tests, after this file has run. Should an earlier
test of the session have imported them compiled, the ``kernels`` fixture drops them from
``sys.modules`` so they are decorated again under the interpreter.

The interpreter (Triton 3.9) stores bfloat16 as raw uint16 bits and ``tl.dot`` multiplies those
bits as integers; :func:`_patch_bf16_dot` upcasts bfloat16 operands to float32 first, as the
tensor cores do, so the BF16 kernels can be checked here. It changes nothing on a GPU.
"""

import importlib
import os
import sys

import pytest

os.environ["TRITON_INTERPRET"] = "1"


def _patch_bf16_dot():
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "upcasts_bf16", False):
        return
    create_dot = builder.create_dot

    def upcast(handle):
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        bits = handle.data.astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot_bf16(self, a, b, d, input_precision, max_num_imprecise_acc):
        return create_dot(self, upcast(a), upcast(b), d, input_precision, max_num_imprecise_acc)

    create_dot_bf16.upcasts_bf16 = True
    builder.create_dot = create_dot_bf16


# kernel module -> its kernel, whose type tells whether it was decorated under the interpreter
KERNELS = {
    "flashinfer.mla.kernels.rope_quantize": "rope_quantize_kernel",
    "flashinfer.mla.kernels.mla_decode": "mla_decode_kernel",
}


@pytest.fixture(scope="session")
def kernels():
    """``(rope_quantize, mla_decode)`` kernel modules, decorated under the interpreter."""
    _patch_bf16_dot()
    for name, kernel in KERNELS.items():
        module = sys.modules.get(name)
        if module is not None and type(getattr(module, kernel)).__name__ != "InterpretedFunction":
            del sys.modules[name]
    return tuple(importlib.import_module(name) for name in KERNELS)
