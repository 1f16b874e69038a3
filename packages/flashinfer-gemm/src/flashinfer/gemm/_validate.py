"""Argument checks shared by the GEMM APIs.

Each message names the argument, what was expected and what was received (through
:func:`flashinfer._core.checks.fail`), and keeps the gist of FlashInfer's own message where
FlashInfer has one. Checks read shapes, dtypes and devices only, never tensor values.
"""

from __future__ import annotations

import torch

from flashinfer._core.checks import check_no_overlap, fail, overlaps

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
E4M3 = torch.float8_e4m3fn
FLOAT32 = torch.float32


def check_tensor(x, arg: str) -> None:
    if not isinstance(x, torch.Tensor):
        fail(TypeError, arg, "a torch.Tensor", x)


def check_rank(x: torch.Tensor, arg: str, rank: int, layout: str) -> None:
    if x.dim() != rank:
        fail(ValueError, arg, f"a {rank}-D tensor {layout} (shape mismatch)", x)


def check_fp8(x: torch.Tensor, arg: str, allowed=FP8) -> None:
    if x.dtype not in allowed:
        names = " or ".join(str(d) for d in allowed)
        fail(ValueError, arg, f"dtype {names} ({arg} must be FP8)", f"dtype {x.dtype}")


def check_same_device(x: torch.Tensor, arg: str, device: torch.device, ref_arg: str) -> None:
    if x.device != device:
        fail(ValueError, arg, f"a tensor on {device} (the device of `{ref_arg}`)", f"a tensor on {x.device}")


def check_scale(scale, arg: str, device: torch.device, ref_arg: str) -> None:
    """A scale is a float32 tensor on the operands' device."""
    check_tensor(scale, arg)
    if scale.dtype != FLOAT32:
        fail(ValueError, arg, "dtype torch.float32 (dequantization multipliers)", f"dtype {scale.dtype}")
    check_same_device(scale, arg, device, ref_arg)


def check_shape(x: torch.Tensor, arg: str, shape: tuple, what: str = "shape mismatch") -> None:
    if x.shape != shape:
        fail(ValueError, arg, f"shape {shape} ({what})", f"shape {tuple(x.shape)}")


def check_out(out, shape: tuple, dtype: torch.dtype, device: torch.device, dtype_arg: str) -> None:
    """``out`` must have the result's shape, dtype and device (strides are free)."""
    check_tensor(out, "out")
    if out.shape != shape:
        fail(ValueError, "out", f"shape {shape} (output shape mismatch)", f"shape {tuple(out.shape)}")
    if out.device != device:
        fail(ValueError, "out", f"a tensor on {device} (output device mismatch)", f"a tensor on {out.device}")
    if out.dtype != dtype:
        fail(
            ValueError,
            "out",
            f"dtype {dtype} (output dtype mismatch with `{dtype_arg}`)",
            f"dtype {out.dtype}",
        )


def out_overlaps(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``out`` shares memory with operand ``a`` or ``b`` (the hot-path test).

    Distinct storages, the usual case, cost two pointer reads; the scales are compared only by
    the detailed checks, which run when any other check fails.
    """
    storage = out.untyped_storage().data_ptr()
    return (a.untyped_storage().data_ptr() == storage and overlaps(out, a)) or (
        b.untyped_storage().data_ptr() == storage and overlaps(out, b)
    )


def check_out_overlap(out: torch.Tensor, inputs: dict) -> None:
    """Reject an ``out`` that overlaps an input: the result would depend on the write order."""
    check_no_overlap(out, "out", inputs)
