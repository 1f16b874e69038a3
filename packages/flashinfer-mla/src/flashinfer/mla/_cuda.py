"""The NVIDIA implementation of the MLA ops: Triton kernels on CUDA tensors.

Same functions and normalized arguments as ``_reference`` and ``_mate`` (docs/internals.md);
the API layer has validated everything. Triton and the kernel modules are imported on the
first call, never at import. FP8 decode needs FP8 tensor cores (compute capability 8.9+);
older devices run FP8 decode through the reference implementation, BF16 decode through Triton.
Float16 decode runs the reference on every device.
"""

from __future__ import annotations

import functools

import torch

from .._core.constants import FP8_TENSOR_CORE_CAPABILITY
from ..utils import get_compute_capability, get_device_sm_count

__all__ = ["decode_plan", "dense_decode", "rope_quantize", "sparse_decode"]


@functools.cache
def _kernels():
    from .kernels import mla_decode
    from .kernels import rope_quantize as rope

    return rope, mla_decode


def rope_quantize(
    q_rope,
    k_rope,
    q_nope,
    k_nope,
    cos_sin_cache,
    pos_ids,
    is_neox,
    quant_scale_q,
    quant_scale_kv,
    q_rope_out,
    k_rope_out,
    q_nope_out,
    k_nope_out,
) -> None:
    """RoPE + FP8 quantize of q and k in one Triton launch (see ``kernels/rope_quantize.py``)."""
    _kernels()[0].rope_quantize(
        q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox,
        quant_scale_q, quant_scale_kv, q_rope_out, k_rope_out, q_nope_out, k_nope_out,
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def decode_plan(batch: int, q_len: int, heads: int, topk: int, device):
    """The split schedule of a decode call shape, from the device's multiprocessor count.

    Memoized (bounded): planning costs a few microseconds of host time, and a decode without
    ``metadata=`` plans on every call.

    Returns
    -------
    DecodePlan
        Frozen; depends on the shape and device only, never on ``seq_lens`` values.
    """
    return _kernels()[1].plan_decode(batch, q_len, heads, topk, get_device_sm_count(device))


def _fp8_on_reference(query) -> bool:
    # FP8 x FP8 tensor-core dots need sm_89+; float16 decode has not been run through the
    # Triton kernels on a GPU yet, so it takes the reference.
    if query.dtype == torch.float16:
        return True
    return query.element_size() == 1 and get_compute_capability(query.device) < FP8_TENSOR_CORE_CAPABILITY


def _reference():
    from . import _reference

    return _reference


def sparse_decode(
    query, kv, indices, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, plan, workspace
) -> None:
    """Sparse MLA decode over per-token top-k slot lists (see ``kernels/mla_decode.py``)."""
    if _fp8_on_reference(query):
        _reference().sparse_decode(
            query, kv, indices, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, plan, workspace
        )
        return
    if plan is None:
        plan = decode_plan(*query.shape[:3], indices.shape[-1], query.device)
    _kernels()[1].mla_decode(
        query, kv, indices, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, workspace, plan,
        0, kv.shape[0], kv.stride(0), 0,
    )  # fmt: skip


def dense_decode(
    query, kv_pages, block_tables, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, workspace
) -> None:
    """Paged MLA decode: token ``t`` attends positions ``0 .. L-1`` through the block table."""
    if _fp8_on_reference(query):
        _reference().dense_decode(
            query, kv_pages, block_tables, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, workspace
        )
        return
    page_size = kv_pages.shape[1]
    plan = decode_plan(*query.shape[:3], block_tables.shape[-1] * page_size, query.device)
    _kernels()[1].mla_decode(
        query, kv_pages, block_tables, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, workspace, plan,
        page_size, kv_pages.shape[0], kv_pages.stride(0), kv_pages.stride(1),
    )  # fmt: skip
