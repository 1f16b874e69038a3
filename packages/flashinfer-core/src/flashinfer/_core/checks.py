"""What the API layers' argument checks share: messages that name the argument, the expected and
the received value, the non-tensor and the overlap tests.

Every check reads only shapes, strides, dtypes and devices, never tensor values, so checks cost
no host synchronization and stay legal inside CUDA/MUSA graph capture. A non-tensor where a tensor
belongs shows up as an ``AttributeError`` while the rules read it; the op then calls
:func:`require_tensors`, which names it.

The rules both op packages state are written here once, each a function that reads what it needs
and calls :func:`fail` only when the rule is broken (the vocabulary: :func:`check_device`,
:func:`check_last_dim_contiguous`, :func:`check_k_major`, :func:`check_fp8`, :func:`check_scale`,
:func:`check_out`, :func:`check_no_overlap`). A rule raises ``ValueError`` unless the op passes
its upstream type (``exc``). No op module defines a function of these names. On a hot path the
call site guards a rule with its cheapest test (``if x.dtype not in E4M3: check_fp8(...)``,
``if not x.is_contiguous(): check_k_major(...)``) so that the passing path costs an attribute read,
not a call; the rule then states the message. This keeps the API layers' host time inside
``benchmarks/host_time.py --section api-layer``'s budgets. Rules that belong to
one op (a shape relation, a backend name's rule) stay with the op.
"""

from __future__ import annotations

from typing import NoReturn

import torch

E4M3 = (torch.float8_e4m3fn,)
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FLOAT32 = torch.float32


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


def check_last_dim_contiguous(
    x: torch.Tensor, arg: str, exc: type[Exception] = ValueError, why: str = ""
) -> None:
    """``x`` has unit stride in its last dimension (or a last dimension of at most one element;
    a 0-dim tensor passes), the layout every kernel reads rows with; ``why`` adds upstream's words
    for the rule."""
    # one C call on the common path: the stride tuple (`x.stride(-1)` parses its argument, and
    # `is_contiguous` first would cost a second call for the strided views the APIs take)
    strides = x.stride()
    if strides and strides[-1] != 1 and x.shape[-1] > 1:
        fail(
            exc, arg, f"a tensor whose last dimension is contiguous (stride 1{'; ' + why if why else ''})", x
        )


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


def check_device(
    x: torch.Tensor, arg: str, device: torch.device, anchor: str, exc: type[Exception] = ValueError
) -> None:
    """``x`` lives on ``device``, the device of the argument named ``anchor``; else ``exc`` (the
    op's upstream type: ``ValueError`` from Python checks, ``RuntimeError`` from C++ ones)."""
    if x.device != device:
        fail(exc, arg, f"a tensor on {device} (the device of `{anchor}`)", f"a tensor on {x.device}")


def check_k_major(x: torch.Tensor, arg: str, k_dim: int = -1) -> None:
    """``x`` is K-major: unit stride along its reduction dimension ``k_dim`` (a K of one element
    passes), the layout the GEMM kernels read without a copy."""
    # cheapest first (benchmarks/host_time.py --section api-layer): a contiguous tensor has unit
    # stride along its last dimension, and the stride tuple is read before `x.stride(k_dim)`,
    # which parses its argument
    if (k_dim != -1 or not x.is_contiguous()) and x.stride()[k_dim] != 1 and x.shape[k_dim] > 1:
        fail(ValueError, arg, f"a K-major tensor (stride 1 along k, dimension {k_dim % x.dim()})", x)


def check_fp8(x: torch.Tensor, arg: str, dtypes: tuple = E4M3, exc: type[Exception] = ValueError) -> None:
    """``x`` has one of the FP8 ``dtypes`` (:data:`E4M3` or :data:`FP8`)."""
    if x.dtype not in dtypes:
        names = " or ".join(str(dtype) for dtype in dtypes)
        fail(exc, arg, f"dtype {names} (FP8 operand)", f"dtype {x.dtype}")


def check_scale(scale: torch.Tensor, arg: str, shape, device: torch.device, anchor: str) -> None:
    """A float32 dequantization scale on ``device`` (the device of ``anchor``), of ``shape`` when
    one is given (None: any shape; the op checks the layout)."""
    if scale.dtype != FLOAT32:
        fail(ValueError, arg, "dtype torch.float32 (dequantization multipliers)", f"dtype {scale.dtype}")
    if shape is not None and scale.shape != shape:
        fail(ValueError, arg, f"shape {tuple(shape)}", f"shape {tuple(scale.shape)}")
    if scale.device != device:
        check_device(scale, arg, device, anchor)


def check_out(
    out: torch.Tensor,
    shape: tuple,
    dtype: torch.dtype,
    device: torch.device,
    why: str = "",
    shape_error: type[Exception] = ValueError,
) -> None:
    """A caller's output: ``shape`` (else ``shape_error``, the op's upstream type), ``dtype``
    (``why`` says where the dtype comes from, e.g. ``"with `out_dtype`"``) and ``device``.
    Overlap with the inputs is :func:`check_no_overlap`'s rule."""
    if out.shape != shape:
        fail(shape_error, "out", f"shape {tuple(shape)} (output shape mismatch)", f"shape {tuple(out.shape)}")
    if out.dtype != dtype:
        fail(
            ValueError,
            "out",
            f"dtype {dtype} (output dtype mismatch{' ' + why if why else ''})",
            f"dtype {out.dtype}",
        )
    if out.device != device:
        fail(ValueError, "out", f"a tensor on {device} (output device mismatch)", f"a tensor on {out.device}")
