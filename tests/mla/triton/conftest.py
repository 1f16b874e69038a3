"""Run the MLA Triton kernels on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first imported;
the kernel modules are imported inside the tests, after this file has run. Should an earlier
test of the session have imported them compiled, the ``kernels`` fixture drops them from
``sys.modules`` so they are decorated again under the interpreter.

Two bugs of the interpreter (Triton 3.9) are patched for these tests; neither touches a GPU run:

- it stores bfloat16 as raw uint16 bits and ``tl.dot`` multiplies those bits as integers:
  :func:`_patch_bf16_dot` upcasts bfloat16 operands to float32 first, as the tensor cores do;
- its float -> FP8 conversion rounds half up and drops the carry of a mantissa that rounds up
  into the next binade (7.8 becomes 4.0 in e4m3) and maps NaN to a finite value:
  :func:`_patch_fp8_conversion` converts with PyTorch's round-to-nearest-even instead, as the
  GPU's ``cvt.rn`` does.
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


def _patch_fp8_conversion():
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    convert = interpreter._convert_float
    if getattr(convert, "rounds_fp8", False):
        return
    fp8_types = {tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}
    wide_types = {tl.float32: torch.float32, tl.float16: torch.float16, tl.bfloat16: torch.bfloat16}
    same_width_int = {32: np.int32, 16: np.int16}

    def convert_fp8(input, input_dtype, output_dtype, rounding_mode):
        if output_dtype not in fp8_types or input_dtype not in wide_types:
            return convert(input, input_dtype, output_dtype, rounding_mode)
        bits = np.ascontiguousarray(input).view(same_width_int[input_dtype.primitive_bitwidth])
        values = torch.from_numpy(bits).view(wide_types[input_dtype])
        return values.to(fp8_types[output_dtype]).view(torch.uint8).numpy()

    convert_fp8.rounds_fp8 = True
    interpreter._convert_float = convert_fp8


# kernel module -> its kernel, whose type tells whether it was decorated under the interpreter
KERNELS = {
    "flashinfer.mla.kernels.rope_quantize": "rope_quantize_kernel",
    "flashinfer.mla.kernels.mla_decode": "mla_decode_kernel",
}


@pytest.fixture(scope="session")
def kernels():
    """``(rope_quantize, mla_decode)`` kernel modules, decorated under the interpreter."""
    _patch_bf16_dot()
    _patch_fp8_conversion()
    for name, kernel in KERNELS.items():
        module = sys.modules.get(name)
        if module is not None and type(getattr(module, kernel)).__name__ != "InterpretedFunction":
            del sys.modules[name]
    return tuple(importlib.import_module(name) for name in KERNELS)
