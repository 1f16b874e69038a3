"""Argument checks whose messages name the argument, the expected and the received value.

Every check reads only shapes, strides, dtypes and devices: never tensor values, so the
checks cost no host synchronization and stay legal inside CUDA/MUSA graph capture.
"""

from __future__ import annotations

import torch


def describe(x) -> str:
    """Say what ``x`` is in a short, readable way for an error message."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)} and strides {tuple(x.stride())} on {x.device}"
    if isinstance(x, torch.dtype):
        return str(x)
    return repr(x)


def fail(exc: type[Exception], arg: str, expected: str, got) -> None:
    """Raise ``exc("expected <expected> for `<arg>`, got <got>")``.

    ``got`` is described with :func:`describe` unless it is already a string.
    """
    got_text = got if isinstance(got, str) else describe(got)
    raise exc(f"expected {expected} for `{arg}`, got {got_text}")


def check_tensor(x, arg: str, exc: type[Exception] = TypeError) -> None:
    """Require ``x`` to be a tensor."""
    if not isinstance(x, torch.Tensor):
        fail(exc, arg, "a torch.Tensor", x)


def check_dtype(x: torch.Tensor, arg: str, allowed, exc: type[Exception] = ValueError) -> None:
    """Require ``x.dtype`` to be one of ``allowed`` (a dtype or a tuple of dtypes)."""
    if isinstance(allowed, torch.dtype):
        allowed = (allowed,)
    if x.dtype not in allowed:
        names = " or ".join(str(d) for d in allowed)
        fail(exc, arg, f"dtype {names}", f"dtype {x.dtype}")


def check_ndim(x: torch.Tensor, arg: str, ndims, exc: type[Exception] = ValueError) -> None:
    """Require ``x.dim()`` to be one of ``ndims`` (an int or a tuple of ints)."""
    if isinstance(ndims, int):
        ndims = (ndims,)
    if x.dim() not in ndims:
        names = " or ".join(f"{n}-D" for n in ndims)
        fail(exc, arg, f"a {names} tensor", f"a {x.dim()}-D tensor of shape {tuple(x.shape)}")


def check_shape(x: torch.Tensor, arg: str, shape, exc: type[Exception] = ValueError) -> None:
    """Require ``tuple(x.shape) == tuple(shape)``."""
    if tuple(x.shape) != tuple(shape):
        fail(exc, arg, f"shape {tuple(shape)}", f"shape {tuple(x.shape)}")


def check_device(x: torch.Tensor, arg: str, device: torch.device, ref_arg: str) -> None:
    """Require ``x`` to live on ``device`` (the device of ``ref_arg``)."""
    if x.device != device:
        fail(ValueError, arg, f"a tensor on {device} (the device of `{ref_arg}`)", f"a tensor on {x.device}")


def check_last_dim_contiguous(x: torch.Tensor, arg: str, exc: type[Exception] = ValueError) -> None:
    """Require unit stride in the last dimension (other strides are free)."""
    if x.dim() and x.shape[-1] > 1 and x.stride(-1) != 1:
        fail(
            exc, arg, "a tensor whose last dimension is contiguous (stride 1)", f"strides {tuple(x.stride())}"
        )


def check_contiguous(x: torch.Tensor, arg: str, exc: type[Exception] = ValueError) -> None:
    """Require ``x`` to be contiguous."""
    if not x.is_contiguous():
        fail(exc, arg, "a contiguous tensor", f"shape {tuple(x.shape)} with strides {tuple(x.stride())}")


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of two tensors intersect (a cheap, conservative test)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    sa = a.untyped_storage().data_ptr()
    sb = b.untyped_storage().data_ptr()
    if sa != sb:
        return False
    a0 = a.data_ptr()
    b0 = b.data_ptr()
    a1 = a0 + _span_bytes(a)
    b1 = b0 + _span_bytes(b)
    return a0 < b1 and b0 < a1


def _span_bytes(x: torch.Tensor) -> int:
    last = sum((s - 1) * abs(st) for s, st in zip(x.shape, x.stride()))
    return (last + 1) * x.element_size()


def check_no_overlap(out: torch.Tensor, arg: str, inputs: dict) -> None:
    """Reject an output buffer that shares memory with an input."""
    for name, x in inputs.items():
        if isinstance(x, torch.Tensor) and overlaps(out, x):
            fail(ValueError, arg, f"a buffer that does not overlap `{name}`", "a buffer sharing its memory")
