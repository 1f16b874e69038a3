"""STAND-IN for MATE 0.2.2's separate GEMM functions (spec/mate-api.md sections 3.7 and 9).

Not MATE. Installed over the 0.2.6 stand-in's ``mate.gemm`` by the ``mate_v022`` fixture (which
also removes the unified ``bmm``), to test the adapter's capability detection. Same conventions
as ``tests/standin/mate/gemm.py``: MATE 0.2.2's signatures and documented argument rules,
float64 math, every call recorded.
"""

from __future__ import annotations

import math
import sys

import torch

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def record(name, **args):
    # The `mate` stand-in is re-imported for every test, so look its recorder up at call time.
    sys.modules["mate"].record(name, **args)


def _require(cond, message, exc=ValueError):
    if not cond:
        raise exc(message)


def bmm_fp16(a, b, out_dtype, out=None, backend="auto", c=None):
    record("gemm.bmm_fp16", a=a, b=b, out_dtype=out_dtype, out=out, backend=backend, c=c)
    _require(backend in ("auto", "mudnn"), "backend must be one of ['auto', 'mudnn']")
    _require(b.stride(1) == 1, "b must be contiguous at k dimension", RuntimeError)
    _require(out_dtype in (torch.bfloat16, torch.float16, torch.float32), "unsupported out_dtype")
    result = a.double() @ b.double()
    if out is None:
        out = torch.empty(result.shape, dtype=out_dtype)
    _require(
        out.stride(-1) == 1 and out.dtype == out_dtype,
        "d must be contiguous at the last dimension",
        RuntimeError,
    )
    out.copy_(result)
    return out


def bmm_fp8(
    a, b, a_scale, b_scale, out_dtype, out=None, backend="auto", scale_granularity_mnk=None, output_scale=None
):
    record(
        "gemm.bmm_fp8", a=a, b=b, a_scale=a_scale, b_scale=b_scale, out_dtype=out_dtype, out=out, backend=backend,
        scale_granularity_mnk=scale_granularity_mnk, output_scale=output_scale,
    )  # fmt: skip
    _require(a.is_contiguous(), "a must be contiguous", RuntimeError)
    _require(b.stride(1) == 1, "b must be contiguous at k dimension", RuntimeError)
    _require(b_scale.dim() == 0, "b_scale must be a scalar tensor")
    granularity = tuple(scale_granularity_mnk or (-1, -1, -1))
    if granularity == (-1, -1, -1):
        _require(a_scale.dim() == 0, "a_scale must be a scalar tensor")
    else:
        _require(granularity == (1, -1, -1), "unsupported scale_granularity_mnk")
        _require(
            a_scale.shape == (a.shape[0], a.shape[1], 1) and a_scale.is_contiguous(), "a_scale (batch, m, 1)"
        )
    result = (a.double() @ b.double()) * a_scale.double() * b_scale.double()
    _require(out is not None and out.stride(-1) == 1 and out.dtype == out_dtype, "out", RuntimeError)
    out.copy_(result)
    return out


def gemm_fp8_nt_groupwise(
    a,
    b,
    a_scale,
    b_scale,
    scale_major_mode=None,
    mma_sm=None,
    scale_granularity_mnk=None,
    out=None,
    out_dtype=None,
    backend="auto",
    output_scale=None,
):
    record(
        "gemm.gemm_fp8_nt_groupwise", a=a, b=b, a_scale=a_scale, b_scale=b_scale, scale_major_mode=scale_major_mode,
        mma_sm=mma_sm, scale_granularity_mnk=scale_granularity_mnk, out=out, out_dtype=out_dtype, backend=backend,
        output_scale=output_scale,
    )  # fmt: skip
    _require(
        a.is_contiguous() and b.is_contiguous() and a_scale.is_contiguous(),
        "a, b, a_scale contiguous",
        RuntimeError,
    )
    _require(scale_major_mode == "K", "the stand-in models K-major scales only")
    _require(tuple(scale_granularity_mnk) == (1, 128, 128), "unsupported granularity")
    _require(mma_sm in (None, 1), "mma_sm != 1 prints a warning in MATE 0.2.2")
    m, k = a.shape
    n = b.shape[0]
    a_deq = a.double() * a_scale.double().repeat_interleave(128, 1)[:, :k]
    b_deq = b.double() * b_scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    result = a_deq @ b_deq.t()
    if output_scale is None:
        _require(backend in ("auto", "mudnn"), "backend")
        _require(out.stride(-1) == 1 and out.dtype in (torch.bfloat16, torch.float16), "out", RuntimeError)
        out.copy_(result)
        return out
    _require(
        backend == "mubin" and out.is_contiguous() and out.dtype == torch.float8_e4m3fn, "mubin FP8 output"
    )
    nb = math.ceil(n / 128)
    padded = torch.nn.functional.pad(result, (0, nb * 128 - n))
    scale = padded.abs().view(m, nb, 128).amax(-1).clamp_min(1e-12) / 448.0
    output_scale.copy_(scale)
    out.copy_((result / scale.repeat_interleave(128, 1)[:, :n]).clamp(-448, 448).to(torch.float8_e4m3fn))
    return out


def without_backend(fn):
    """MATE 0.2.2's grouped GEMMs: the 0.2.6 stand-in's function, minus the `backend` parameter."""

    def grouped(*args, **kwargs):
        _require(
            "backend" not in kwargs,
            f"{fn.__name__}() got an unexpected keyword argument 'backend'",
            TypeError,
        )
        return fn(*args, **kwargs)

    grouped.__name__ = fn.__name__
    return grouped
