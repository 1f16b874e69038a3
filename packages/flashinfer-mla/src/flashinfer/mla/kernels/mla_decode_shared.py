"""What both MLA decode kernel tiers share: on the host, the combine kernel both launch, and the
key-row gather both kernels call.

``mla_decode`` (the portable Triton kernel) and ``mla_decode_gluon`` (Hopper) solve the same
problem over the same layouts (``mla_decode``'s docstring): this module holds, top to bottom,
the split rule of their plans, how a call's cache is walked (:func:`key_rows` on the host,
:func:`key_row_offsets` in the kernels), the host values every launch reads once
(:func:`host_args`), and the combine over splits.

Workspace partials (several splits): from the workspace's first 16-byte boundary, float32
``[num_splits, rows * H, D_V]`` normalized partial outputs, then ``[num_splits, rows * H]``
base-2 LSEs (``-inf`` for a split that saw no key). :func:`mla_combine_kernel` merges them into
``out`` (and the LSE), adding the sinks; :func:`host_args` caps the split count at what the
caller's workspace holds.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..._core import constants
from ..._core.triton_launch import FastLaunch
from ...utils import next_positive_power_of_2

# globals read inside kernels must be constexpr
LOG2E = tl.constexpr(constants.LOG2E)


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The reusable schedule of one decode call shape on one tier (never depends on ``seq_lens``).

    Attributes
    ----------
    num_splits : int
        Chunks each query token's key list is cut into (before the workspace cap).
    head_blocks : int
        Programs per query token and split: ``cdiv(heads, block_h)`` of the tier's tile.
    """

    num_splits: int
    head_blocks: int


# Fewest keys a split is worth: below this, the combine costs more than the parallelism gains.
MIN_KEYS_PER_SPLIT = 128
MAX_SPLITS = 64


def split_count(programs: int, slots: int, list_len: int) -> int:
    """Splits per query token so that about one wave of programs fills the device.

    ``programs``: decode programs of one split (query tokens x head blocks); ``slots``: programs
    the device runs at once; ``list_len``: the key list length bound (``topk``, or the page-table
    width in positions), which only caps the count (a split gets ``MIN_KEYS_PER_SPLIT`` keys at
    least); chunk sizes follow each token's real length on the device.
    """
    # with at least a wave already, one split writes out directly and skips the combine
    num_splits = max(1, slots // programs) if programs < slots else 1
    return max(1, min(num_splits, list_len // MIN_KEYS_PER_SPLIT, MAX_SPLITS))


class KeyRows(NamedTuple):
    """How a decode kernel walks the cache: rows of a flat pool (sparse) or pages (dense)."""

    page_size: int  # 0: the table holds token slots of the flat pool
    num_kv_rows: int  # slots (sparse) or pages (dense) that exist
    stride_kv_row: int  # elements between slots (sparse, flat) or pages (dense, padded sparse)
    stride_kv_tok: int  # elements between the rows of a page (dense, padded sparse), else 0
    list_width: int  # positions one table row can address
    slot_page: int = 0  # sparse over a padded page stride: slots per page (slot -> page, row)


def key_rows(call, paged: bool) -> KeyRows:
    """The cache geometry of a validated decode call, read through its strides (no view).

    ``paged``: whether ``call.table`` holds page ids (dense decode) or token slots
    ``page * page_size + row``: rows of the flat ``[pages * page_size, D]`` pool (or pages, for
    page_size 1), or, for pages padded apart (FlashMLA's), page and row through both strides.
    """
    kv, table = call.kv_cache, call.table
    pages, page_size = kv.shape[0], kv.shape[-2]
    strides = kv.stride()
    page_stride, row_stride = strides[0], strides[-2]
    if paged:
        return KeyRows(page_size, pages, page_stride, row_stride, table.shape[-1] * page_size)
    if page_size == 1:
        return KeyRows(0, pages, page_stride, 0, table.shape[-1])
    if pages <= 1 or page_stride == page_size * row_stride:
        return KeyRows(0, pages * page_size, row_stride, 0, table.shape[-1])
    return KeyRows(0, pages * page_size, page_stride, row_stride, table.shape[-1], page_size)


class Lengths(enum.IntEnum):
    """What ``seq_lens`` means to a decode kernel (its ``LENGTH_MODE``): how many list entries
    token ``t`` of request ``b`` considers (at most the list width)."""

    CAUSAL = 0  # FlashInfer: the request's KV length, shifted for earlier tokens
    PER_TOKEN = 1  # one length per query token, ``seq_lens[b * q_len + t]`` (the packed form)
    ALL = 2  # the whole list; ``seq_lens`` is never read


# the kernels' names for them (a jitted function reads module globals only as constexprs)
_CAUSAL = tl.constexpr(Lengths.CAUSAL.value)
_PER_TOKEN = tl.constexpr(Lengths.PER_TOKEN.value)


@triton.jit
def list_length(seq_lens_ptr, batch, row, token, q_len, list_width, LENGTH_MODE: tl.constexpr):
    # the list entries query row `row` (= batch * q_len + token) attends, by :class:`Lengths`
    if LENGTH_MODE == _CAUSAL:
        n = tl.load(seq_lens_ptr + batch) - (q_len - 1 - token)
    elif LENGTH_MODE == _PER_TOKEN:
        n = tl.load(seq_lens_ptr + row)
    else:
        n = list_width
    return tl.maximum(tl.minimum(n, list_width), 0)


@triton.jit
def key_row_offsets(
    list_row,
    pos,
    end,
    num_kv_rows,
    stride_kv_row,
    stride_kv_tok,
    PAGE_SIZE: tl.constexpr,
    SLOT_PAGE: tl.constexpr,
):
    # element offsets of the key rows at list positions `pos`, and which of them exist (the
    # :class:`KeyRows` geometry). Both tiers call it: in the Gluon kernel these loads and
    # arithmetic take Gluon's semantics and keep the layout `pos` carries.
    in_range = pos < end
    if PAGE_SIZE > 0:
        page = tl.load(list_row + pos // PAGE_SIZE, mask=in_range, other=-1)
        valid = in_range & (page >= 0) & (page < num_kv_rows)
        offs = page.to(tl.int64) * stride_kv_row + (pos % PAGE_SIZE) * stride_kv_tok
    else:
        slot = tl.load(list_row + pos, mask=in_range, other=-1)
        valid = in_range & (slot >= 0) & (slot < num_kv_rows)
        if SLOT_PAGE > 0:  # a padded page stride: slot = page * SLOT_PAGE + row
            offs = (slot // SLOT_PAGE).to(tl.int64) * stride_kv_row + (slot % SLOT_PAGE) * stride_kv_tok
        else:
            offs = slot.to(tl.int64) * stride_kv_row
    return offs, valid


def _workspace_splits(plan_splits: int, part_rows: int, d_v: int, workspace_bytes: int) -> int:
    # a partial row is D_V floats plus its LSE; 16 bytes are kept for alignment
    per_split = part_rows * (d_v + 1) * 4
    return max(1, min(plan_splits, (workspace_bytes - 16) // per_split))


def _scale_arg(scale):
    # (kernel argument, on-device flag): a one-element tensor is read in the kernel (as a 0-dim
    # view), never on the host
    if type(scale) is float:
        return scale, False
    if isinstance(scale, int):
        return float(scale), False
    return (scale if scale.dim() == 0 else scale.view(())), True


class HostArgs(NamedTuple):
    """The host-side values every decode kernel and the combine take, read once from a call."""

    num_splits: int  # the plan's splits, capped by what the workspace holds
    workspace_pad: int  # bytes from the workspace's pointer to its first 16-byte boundary
    scale1: float | torch.Tensor
    scale1_on_device: bool
    scale2: float | torch.Tensor
    scale2_on_device: bool
    seq_lens: torch.Tensor  # any int32 tensor where the kernel never reads it (``Lengths.ALL``)
    sinks: torch.Tensor  # ``seq_lens`` stands in when the call has no sinks (never read)
    lse: torch.Tensor  # ``out`` stands in when the call has no LSE (never written)
    lse_strides: tuple


def host_args(call, num_splits: int) -> HostArgs:
    """:class:`HostArgs` of a validated call whose plan asks for ``num_splits`` splits."""
    out, lse, workspace = call.out, call.lse3, call.workspace
    if num_splits > 1:
        batch, q_len, heads = out.shape[:3]
        num_splits = _workspace_splits(num_splits, batch * q_len * heads, out.shape[-1], workspace.numel())
    seq_lens = call.table if call.seq_lens is None else call.seq_lens
    return HostArgs(
        num_splits,
        (-workspace.data_ptr()) % 16,
        *_scale_arg(call.bmm1_scale),
        *_scale_arg(call.bmm2_scale),
        seq_lens,
        seq_lens if call.sinks is None else call.sinks,
        out if lse is None else lse,
        (0, 0, 0) if lse is None else lse.stride(),
    )


@triton.jit
def mla_combine_kernel(
    workspace_ptr,
    workspace_pad,
    sinks_ptr,
    bmm2_scale,
    out_ptr,
    lse_ptr,
    num_heads,
    q_len,
    num_splits,
    stride_ob,
    stride_ot,
    stride_oh,
    stride_lb,
    stride_lt,
    stride_lh,
    D_V: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    HAS_LSE: tl.constexpr,
    SCALE2_ON_DEVICE: tl.constexpr,
    SINK_IN_LSE: tl.constexpr,
):
    # one program per (query token, head): out = sum_s 2^lse_s o_s / (sum_s 2^lse_s + sink)
    part_row = tl.program_id(0).to(tl.int64)  # (b * q_len + t) * H + h
    part_rows = tl.num_programs(0)
    head = part_row % num_heads
    row = part_row // num_heads
    batch = row // q_len
    token = row % q_len
    workspace_ptr = (workspace_ptr + workspace_pad).to(tl.pointer_type(tl.float32))

    splits = tl.arange(0, SPLITS_POW2)
    lse_part = workspace_ptr + num_splits * part_rows.to(tl.int64) * D_V
    lse_s = tl.load(lse_part + splits * part_rows + part_row, mask=splits < num_splits, other=float("-inf"))
    m = tl.max(lse_s, 0)
    seen = m > float("-inf")
    m_ref = tl.where(seen, m, 0.0)
    w = tl.exp2(lse_s - m_ref)
    total = tl.sum(w, 0)
    dv = tl.arange(0, D_V)
    acc = tl.zeros([D_V], tl.float32)
    for s in range(num_splits):
        w_s = tl.sum(tl.where(splits == s, w, 0.0), 0)
        acc += w_s * tl.load(workspace_ptr + (s * part_rows + part_row) * D_V + dv)

    denom = total
    if HAS_SINKS:
        denom += tl.exp2(tl.load(sinks_ptr + head) * LOG2E - m_ref)
    if SCALE2_ON_DEVICE:
        scale2 = tl.load(bmm2_scale)
    else:
        scale2 = bmm2_scale
    o = acc * (scale2 / tl.where(seen, denom, 1.0))
    o_row = out_ptr + batch * stride_ob + token * stride_ot + head * stride_oh
    tl.store(o_row + dv, o.to(out_ptr.dtype.element_ty))
    if HAS_LSE:
        if SINK_IN_LSE:
            some = denom > 0.0
            lse = tl.where(some, m_ref + tl.log2(tl.where(some, denom, 1.0)), float("-inf"))
        else:
            lse = tl.where(seen, m_ref + tl.log2(tl.where(seen, total, 1.0)), float("inf"))
        tl.store(lse_ptr + batch * stride_lb + token * stride_lt + head * stride_lh, lse)


def decode_tensors(call, host: HostArgs) -> tuple:
    """The tensors a decode kernel's launch takes, in its argument order: ``query, kv_cache, table,
    seq_lens, sinks, scale1, scale2, out, lse, workspace`` (a scale only where it is a tensor)."""
    return (
        call.query, call.kv_cache, call.table, host.seq_lens, host.sinks,
        *((host.scale1,) if host.scale1_on_device else ()), *((host.scale2,) if host.scale2_on_device else ()),
        call.out, host.lse, call.workspace,
    )  # fmt: skip


def combine_tensors(call, host: HostArgs) -> tuple:
    """The tensors :func:`launch_combine` passes, in its argument order."""
    return (
        call.workspace,
        host.sinks,
        *((host.scale2,) if host.scale2_on_device else ()),
        call.out,
        host.lse,
    )


def replay_decode(call, host: HostArgs, decode, combine):
    """The replay of a decode call's launches (``decode``, and ``combine`` when split: bound
    launches): for a record of the same call signature, the same launches with its tensors.

    What the signature fixes is read once, here: the split count and workspace padding (the
    workspace's size and pointer remainder), which tensors stand in for absent ones (``host``'s
    rules) and whether a scale is a tensor.
    """
    lens_from_table, has_sinks, has_lse = call.seq_lens is None, call.sinks is not None, call.lse is not None
    scales_on_device = host.scale1_on_device or host.scale2_on_device
    num_splits = host.num_splits

    def replay(call) -> None:
        if scales_on_device:  # the scales' 0-dim views are made per call
            again = host_args(call, num_splits)
            decode(*decode_tensors(call, again))
            if combine is not None:
                combine(*combine_tensors(call, again))
            return
        seq_lens = call.table if lens_from_table else call.seq_lens
        sinks = call.sinks if has_sinks else seq_lens
        out, workspace = call.out, call.workspace
        lse = call.lse3 if has_lse else out
        decode(call.query, call.kv_cache, call.table, seq_lens, sinks, out, lse, workspace)
        if combine is not None:
            combine(workspace, sinks, out, lse)

    return replay


def launch_combine(launcher: FastLaunch, call, host: HostArgs, sink_in_lse: bool):
    """Merge the ``host.num_splits`` partial results in the workspace into ``out`` (and the LSE);
    returns the launch, bound (:meth:`~flashinfer._core.triton_launch.FastLaunch.bind`)."""
    out = call.out
    batch, q_len, heads, d_v = out.shape
    return launcher.bind(
        (batch * q_len * heads,),
        call.workspace, host.workspace_pad, host.sinks, host.scale2, out, host.lse, heads, q_len,
        host.num_splits, *out.stride()[:3], *host.lse_strides,
        D_V=d_v, SPLITS_POW2=next_positive_power_of_2(host.num_splits),
        HAS_SINKS=call.sinks is not None, HAS_LSE=call.lse is not None,
        SCALE2_ON_DEVICE=host.scale2_on_device, SINK_IN_LSE=sink_in_lse,
        num_warps=4,
    )  # fmt: skip
