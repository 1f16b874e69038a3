"""What the API layers' argument checks share: messages that name the argument, the expected and
the received value, the non-tensor and the overlap tests.

Every check reads only shapes, strides, dtypes and devices, never tensor values, so checks cost
no host synchronization and stay legal inside CUDA/MUSA graph capture. Each rule is written once,
as an ``if`` on the hot path that calls :func:`fail` only when the rule is broken: a helper call
per rule would cost more host time than the rule itself (``benchmarks/host_overhead.py``). A
non-tensor where a tensor belongs shows up as an ``AttributeError`` while the rules read it; the
op then calls :func:`require_tensors`, which names it.
"""

from __future__ import annotations

from typing import NoReturn

import torch


def describe(x) -> str:
    """Say what ``x`` is in a short, readable way for an error message."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)} and strides {tuple(x.stride())} on {x.device}"
    if isinstance(x, torch.dtype):
        return str(x)
    return f"{x!r} (a {type(x).__name__})" if isinstance(x, str) else repr(x)


def fail(exc: type[Exception], arg: str, expected: str, got) -> NoReturn:
    """Raise ``exc("expected <expected> for `<arg>`, got <got>")``.

    ``got`` is described with :func:`describe` unless it is already a string.
    """
    got_text = got if isinstance(got, str) else describe(got)
    raise exc(f"expected {expected} for `{arg}`, got {got_text}")


def require_tensors(exc: type[Exception] = TypeError, *, optional: tuple = (), **named) -> None:
    """Raise ``exc`` naming the first of ``named`` that is not a tensor (None passes for the
    names in ``optional``)."""
    for arg, x in named.items():
        if not isinstance(x, torch.Tensor) and not (x is None and arg in optional):
            fail(exc, arg, "a torch.Tensor", describe(x))


def last_dim_contiguous(x: torch.Tensor) -> bool:
    """Unit stride in the last dimension (or a last dimension of at most one element)."""
    return x.dim() == 0 or x.shape[-1] <= 1 or x.stride(-1) == 1


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of two tensors intersect (a cheap, conservative test)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    storage = a.untyped_storage().data_ptr()
    if storage == 0 or storage != b.untyped_storage().data_ptr():  # 0: no memory (meta tensors)
        return False
    a0 = a.data_ptr()
    b0 = b.data_ptr()
    return a0 < b0 + _span_bytes(b) and b0 < a0 + _span_bytes(a)


def _span_bytes(x: torch.Tensor) -> int:
    last = sum((s - 1) * abs(st) for s, st in zip(x.shape, x.stride()))
    return (last + 1) * x.element_size()


def check_no_overlap(out: torch.Tensor, arg: str, names: tuple, *inputs) -> None:
    """Reject an output that shares memory with an input (``inputs``, named by ``names``; None
    entries are skipped): the result would depend on the write order. Only an input that starts
    inside ``out``'s allocation can share it, so distinct allocations, the usual case, cost one
    pointer read per input; the others get the exact test."""
    storage = out.untyped_storage()
    low = storage.data_ptr()
    high = low + storage.nbytes()
    for x in inputs:
        if x is not None and low <= x.data_ptr() < high:
            for name, y in zip(names, inputs):
                if y is not None and overlaps(out, y):
                    fail(
                        ValueError,
                        arg,
                        f"a buffer that does not overlap `{name}`",
                        "a buffer sharing its memory",
                    )
            return
