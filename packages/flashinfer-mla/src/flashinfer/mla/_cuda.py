"""The NVIDIA implementation of the MLA ops: Triton kernels on CUDA tensors.

Same functions and argument records (:mod:`._args`) as ``_reference`` and ``_mate``; the API
layer has validated everything. Triton and the kernel modules are imported on the
first call, never at import. FP8 decode needs FP8 tensor cores (compute capability 8.9+);
older devices run FP8 decode through the reference implementation, BF16 decode through Triton.
Float16 decode runs the reference on every device.

Decode kernels come in two tiers (``flashinfer._core.kernel_tier``): on Hopper the Gluon kernel
(``kernels/mla_decode_gluon.py``) takes e4m3 and bf16 decode with 512 latent and 64 rope dims
over 16-byte aligned rows; every other device, dtype, width or layout runs the portable Triton
kernel (``kernels/mla_decode.py``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from .._core.constants import FP8_TENSOR_CORE_CAPABILITY
from .._core.fallback import warn_reference
from .._core.kernel_tier import gluon_supported, use_gluon
from .._core.replay import Replay
from ..utils import get_compute_capability, get_device_sm_count
from . import _reference

__all__ = ["decode_plan", "dense_decode", "packed_sparse_decode", "rope_quantize", "sparse_decode"]

# the Gluon decode kernel's widths: 512 latent + 64 rope dims
GLUON_DECODE_DIMS = (512, 576)
_SPARSE_OP = "trtllm_batch_decode_with_kv_cache_mla (sparse)"
_DENSE_OP = "trtllm_batch_decode_with_kv_cache_mla (dense)"
# whether ``auto`` takes the Gluon kernel for the packed form: measured faster than the portable
# kernel at every shape of RESULTS.md's packed table
PACKED_GLUON_AUTO = True


@functools.cache
def _kernels():
    from .kernels import mla_decode, mla_decode_shared
    from .kernels import rope_quantize as rope

    return rope, mla_decode, mla_decode_shared


@functools.cache
def _gluon_kernels():
    from .kernels import mla_decode_gluon

    return mla_decode_gluon


def rope_quantize(call) -> Replay | None:
    """RoPE + FP8 quantize of q and k in one Triton launch (see ``kernels/rope_quantize.py``);
    returns its replay."""
    return _kernels()[0].rope_quantize(call)


class DecodePlans(NamedTuple):
    """The split schedules of one decode call shape, per kernel tier.

    The dtype and width that pick the kernel are not known when the plan is made (metadata is
    built from the shape alone), so it holds the plan of each kernel that may run.
    """

    portable: object  # kernels.mla_decode.DecodePlan
    gluon: object  # the Gluon kernel's DecodePlan, or None where that tier cannot run


@functools.lru_cache(maxsize=256)
def decode_plan(batch: int, q_len: int, heads: int, topk: int, device) -> DecodePlans:
    """The split schedules of a decode call shape, from the device's multiprocessor count.

    Memoized (bounded): planning costs a few microseconds of host time, and a decode without
    ``metadata=`` plans on every call.

    Returns
    -------
    DecodePlans
        Frozen; depends on the shape and device only, never on ``seq_lens`` values.
    """
    device = torch.device(device)
    num_sms = get_device_sm_count(device)
    portable = _kernels()[1].plan_decode(batch, q_len, heads, topk, num_sms)
    index = torch.cuda.current_device() if device.index is None else device.index
    if not gluon_supported(index):
        return DecodePlans(portable, None)
    return DecodePlans(portable, _gluon_kernels().plan_decode_gluon(batch, q_len, heads, topk, num_sms))


def _decode_kernel(call, paged: bool):
    """(kernel module, that kernel's plan, the key rows) of a decode call: the one place a call's
    kernel tier is picked.

    Gluon on Hopper for the DeepSeek widths when the key rows are 16-byte aligned (its cp.async
    copies), else the portable kernel; ``call.plan`` holds both tiers' plans (``DecodePlans``).
    """
    _, portable, shared = _kernels()
    rows = shared.key_rows(call, paged)
    query = call.query
    if (
        (call.out.shape[-1], query.shape[-1]) == GLUON_DECODE_DIMS
        and call.kv_cache.data_ptr() % 16 == 0
        and rows.stride_kv_row % 16 == 0
        and rows.stride_kv_tok % 16 == 0
        and use_gluon(query.device)
    ):
        return _gluon_kernels(), call.plan.gluon, rows
    return portable, call.plan.portable, rows


def _on_reference(query, op: str) -> bool:
    """Whether this decode runs the reference (said once per op and reason): FP8 x FP8 tensor-core
    dots need sm_89+; float16 decode has not been run through the Triton kernels on a GPU yet."""
    if query.dtype == torch.float16:
        warn_reference(op, query.device, "float16 decode has no Triton kernel here; bf16 and e4m3 have")
        return True
    if query.element_size() == 1 and get_compute_capability(query.device) < FP8_TENSOR_CORE_CAPABILITY:
        major, minor = get_compute_capability(query.device)
        warn_reference(
            op, query.device, f"FP8 decode needs compute capability 8.9+, this GPU has {major}.{minor}"
        )
        return True
    return False


def sparse_decode(call) -> Replay | None:
    """Sparse MLA decode over per-token top-k slot lists (see ``kernels/mla_decode.py``); returns
    the kernels' replay (``flashinfer._core.replay``), None where the reference ran."""
    return _decode(call, paged=False)


def dense_decode(call) -> Replay | None:
    """Paged MLA decode: token ``t`` attends positions ``0 .. L-1`` through the block table;
    returns the kernels' replay, None where the reference ran."""
    return _decode(call, paged=True)


def _decode(call, paged: bool) -> Replay | None:
    """One decode on the tier its dtype, device and layout pick: the reference, or the kernel of
    :func:`_decode_kernel`, planned here unless the caller's metadata carries the plan."""
    query, table = call.query, call.table
    if _on_reference(query, _DENSE_OP if paged else _SPARSE_OP):
        (_reference.dense_decode if paged else _reference.sparse_decode)(call)
        return None
    if call.plan is None:
        # the positions a table row can address: the top-k, or the page table's pages
        width = table.shape[-1] * call.kv_cache.shape[-2] if paged else table.shape[-1]
        call = call._replace(plan=decode_plan(*query.shape[:3], width, query.device))
    kernel, plan, rows = _decode_kernel(call, paged)
    return kernel.mla_decode(call, rows, plan)


def packed_sparse_decode(call) -> Replay | None:
    """Sparse MLA decode over the packed 656-byte rows (:class:`~._args.Decode`, packed form),
    dequantized inside the kernel: the Gluon kernel's ``PACKED`` mode on Hopper (codes x scales
    into a bf16 tile in shared memory, then its BF16 pipeline), else the portable kernel's (in
    registers; bf16 dots, so any GPU Triton supports runs it). The packed checks guarantee the
    16-byte alignment the Gluon copies need (656-byte rows, whole rows between pages)."""
    if call.plan is None:
        call = call._replace(plan=decode_plan(*call.query.shape[:3], call.table.shape[-1], call.query.device))
    _, portable, shared = _kernels()
    rows = shared.key_rows(call, False)
    lengths = shared.Lengths.ALL if call.seq_lens is None else shared.Lengths.PER_TOKEN
    if use_gluon(call.query.device, auto_ok=PACKED_GLUON_AUTO) and call.plan.gluon is not None:
        return _gluon_kernels().mla_decode(call, rows, call.plan.gluon, packed=True, lengths=lengths)
    return portable.mla_decode(call, rows, call.plan.portable, packed=True, lengths=lengths)
