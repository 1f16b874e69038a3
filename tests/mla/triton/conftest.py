"""Run the MLA Triton kernels on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first imported;
the kernel modules are imported inside the tests, after this file has run. Should an earlier
test of the session have imported them compiled, the ``kernels`` fixture drops them from
``sys.modules`` so they are decorated again under the interpreter.

Four bugs of the interpreter are patched for these tests; none touches a GPU run:

- it stores bfloat16 as raw uint16 bits and ``tl.dot`` multiplies those bits as integers:
  :func:`_patch_bf16_dot` upcasts bfloat16 operands to float32 first, as the tensor cores do;
- its float -> FP8 conversion rounds half up and drops the carry of a mantissa that rounds up
  into the next binade (7.8 becomes 4.0 in e4m3) and maps NaN to a finite value, and its
  float32 -> bfloat16 cast truncates: :func:`_patch_float_conversion` converts both with
  PyTorch's round-to-nearest-even instead, as the GPU's ``cvt.rn`` does;
- its scalars are one-element arrays, which ``range(start, end)`` in a kernel turns into ints
  with ``int(array)``: NumPy 2.4 refuses that for arrays of one dimension (Triton 3.6's
  interpreter with NumPy 2.4), so :func:`_patch_scalar_index` converts with ``.item()``.
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


def _patch_float_conversion():
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    convert = interpreter._convert_float
    if getattr(convert, "rounds_to_nearest", False):
        return
    narrow_types = {
        tl.float8e4nv: torch.float8_e4m3fn,
        tl.float8e5: torch.float8_e5m2,
        tl.bfloat16: torch.bfloat16,
    }
    wide_types = {tl.float32: torch.float32, tl.float16: torch.float16, tl.bfloat16: torch.bfloat16}
    same_width_int = {32: np.int32, 16: np.int16}
    narrow_bits = {8: torch.uint8, 16: torch.int16}

    def convert_rounding(input, input_dtype, output_dtype, rounding_mode):
        narrowing = output_dtype.primitive_bitwidth < input_dtype.primitive_bitwidth
        if not narrowing or output_dtype not in narrow_types or input_dtype not in wide_types:
            return convert(input, input_dtype, output_dtype, rounding_mode)
        bits = np.ascontiguousarray(input).view(same_width_int[input_dtype.primitive_bitwidth])
        values = torch.from_numpy(bits).view(wide_types[input_dtype]).to(narrow_types[output_dtype])
        return values.view(narrow_bits[output_dtype.primitive_bitwidth]).numpy()

    convert_rounding.rounds_to_nearest = True
    interpreter._convert_float = convert_rounding


def _patch_scalar_index():
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "indexes_by_item", False):
        return

    def patch_tensor_by_item(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patch_tensor_by_item.indexes_by_item = True
    interpreter._patch_lang_tensor = patch_tensor_by_item


# kernel module -> its kernel, whose type tells whether it was decorated under the interpreter
KERNELS = {
    "flashinfer.mla.kernels.rope_quantize": "rope_quantize_kernel",
    "flashinfer.mla.kernels.mla_decode": "mla_decode_kernel",
}


@pytest.fixture(scope="session")
def kernels():
    """``(rope_quantize, mla_decode)`` kernel modules, decorated under the interpreter."""
    _patch_bf16_dot()
    _patch_float_conversion()
    _patch_scalar_index()
    for name, kernel in KERNELS.items():
        module = sys.modules.get(name)
        if module is not None and type(getattr(module, kernel)).__name__ != "InterpretedFunction":
            del sys.modules[name]
    return tuple(importlib.import_module(name) for name in KERNELS)
