"""Triton's interpreter (CPU) for the tests: its bugs patched, and the CUDA implementation routed to.

``TRITON_INTERPRET=1`` must be set before Triton is first imported in the pytest process (the
conftests of ``tests/core`` and ``tests/{gemm,mla}/triton`` set it): a kernel is decorated,
interpreted or compiled, when its module is first imported.

Four bugs of the interpreter are patched; none touches a GPU run:

- it stores bfloat16 as raw uint16 bits and ``tl.dot`` multiplies those bits as integers:
  :func:`patch_bf16_dot` upcasts bfloat16 operands to float32 first, as the tensor cores do;
- its float -> FP8 conversion rounds half up and drops the carry of a mantissa that rounds up
  into the next binade (7.8 becomes 4.0 in e4m3) and maps NaN to a finite value, and its
  float32 -> bfloat16 cast truncates: :func:`patch_float_conversion` converts both with
  PyTorch's round-to-nearest-even instead, as the GPU's ``cvt.rn`` does;
- its scalars are one-element arrays, which ``range(start, end)`` in a kernel turns into ints
  with ``int(array)``: NumPy 2.4 refuses that for arrays of one dimension (Triton 3.6's
  interpreter with NumPy 2.4), so :func:`patch_scalar_index` converts with ``.item()``;
- Triton 3.9's interpreter types ``mask & scalar_condition`` as int32 (compiled code keeps i1) and
  its load and store then refuse the mask ("mask has unsupported dtype"):
  :func:`patch_mask_dtype` hands them the mask as booleans.

:func:`route_cpu_to_cuda` makes CPU tensors take ``flashinfer.*._cuda`` with its portable
Triton kernels (interpreted), as on an FP8-capable GPU without Hopper's Gluon kernels and
cuBLASLt's block scaling: the op table's ``cuda`` implementation on a machine without a GPU.
"""

from __future__ import annotations

import torch

# Small fixed tiles instead of autotuning (the Autotuner would time every config, each launch
# interpreted). BLOCK_K of the batched kernel stays 128, the autotuned tiles' smallest (its
# launcher takes k <= 128 as one K step); BLOCK_N of the blockwise kernel stays 128 (one FP8
# output-scale block).
FP8_BMM_TILE = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 128, "GROUP_M": 2, "PROGRAMS_PER_SM": 0,
                "num_warps": 4, "num_stages": 1}  # fmt: skip
FP8_BLOCKWISE_TILE = {"BLOCK_M": 16, "BLOCK_N": 128, "GROUP_M": 2, "num_warps": 4, "num_stages": 1}


def patch_interpreter() -> None:
    """All four patches (each applied once per process)."""
    patch_bf16_dot()
    patch_float_conversion()
    patch_scalar_index()
    patch_mask_dtype()


def patch_bf16_dot():
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


def patch_float_conversion():
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


def patch_scalar_index():
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "indexes_by_item", False):
        return

    def patch_tensor_by_item(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patch_tensor_by_item.indexes_by_item = True
    interpreter._patch_lang_tensor = patch_tensor_by_item


def patch_mask_dtype():
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_masked_load, "takes_any_mask", False):
        return
    load, store = builder.create_masked_load, builder.create_masked_store

    def boolean(mask):
        # masks arrive as NumPy arrays, or (3.6-3.8, on some paths) as buffers of booleans
        if not isinstance(mask.data, np.ndarray) or mask.data.dtype == np.bool_:
            return mask
        return interpreter.TensorHandle(mask.data != 0, tl.int1)

    def masked_load(self, ptrs, mask, *args, **kwargs):
        return load(self, ptrs, boolean(mask), *args, **kwargs)

    def masked_store(self, ptrs, value, mask, *args, **kwargs):
        return store(self, ptrs, value, boolean(mask), *args, **kwargs)

    masked_load.takes_any_mask = True
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store


class FixedTile:
    """Stands in for a kernel's ``TunedLaunch``: every launch takes one fixed config."""

    def __init__(self, kernel, config: dict):
        self.kernel, self.config = kernel, config

    def launch(self, grid, key, *args, **constants) -> None:
        meta = {**constants, **self.config}
        self.kernel[grid(meta) if callable(grid) else grid](*args, **meta)


def route_cpu_to_cuda(monkeypatch) -> None:
    """CPU tensors through ``flashinfer.{gemm,mla}._cuda`` and the portable Triton kernels."""
    from flashinfer._core import dispatch
    from flashinfer.gemm import _cuda as gemm_cuda
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm
    from flashinfer.mla import _cuda as mla_cuda

    patch_interpreter()
    monkeypatch.setattr(
        dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda")._replace(force_reference=False)
    )
    for module in (gemm_cuda, mla_cuda):
        monkeypatch.setattr(module, "get_compute_capability", lambda device: (8, 9))
        monkeypatch.setattr(module, "use_gluon", lambda *args, **kwargs: False)
    monkeypatch.setattr(mla_cuda, "gluon_supported", lambda index: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # decode_plan's device index
    monkeypatch.setattr(gemm_cuda, "_scaled_mm_takes", lambda *args: False)  # cuBLASLt: not here
    monkeypatch.setattr(fp8_bmm, "_TUNED", FixedTile(fp8_bmm.fp8_bmm_kernel, FP8_BMM_TILE))
    monkeypatch.setattr(
        fp8_blockwise, "_TUNED", FixedTile(fp8_blockwise.fp8_blockwise_kernel, FP8_BLOCKWISE_TILE)
    )
