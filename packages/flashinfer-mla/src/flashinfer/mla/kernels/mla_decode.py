"""MLA decode (DeepSeek absorbed attention, one shared latent KV head) over a top-k slot list
or a page table, split over the key list, then a combine over splits.

Layout
------
- ``query (B, q_len, H, D)``: bf16 or float8 e4m3, ``D = D_V + D_ROPE`` (576 = 512 + 64,
  320 = 256 + 64); strides free but the last dim is contiguous.
- Keys: a flat row-contiguous pool of ``S`` rows of ``D`` elements, same dtype as the query.
  ``V`` of a row is its first ``D_V`` elements. Sparse mode reads rows ``indices[b, t, p]``
  (int32 ``(B, q_len, topk)``; with pages padded apart, ``SLOT_PAGE`` splits a slot into page
  and row, read through both strides); paged mode reads position ``p`` at row
  ``block_tables[b, p // PAGE_SIZE] * PAGE_SIZE + p % PAGE_SIZE`` through the page and
  in-page strides of ``kv_pages (P, PAGE_SIZE, D)``.
- ``seq_lens (B,)`` int32. Token ``t`` attends list positions ``p < n`` with
  ``n = seq_lens[b] - (q_len - 1 - t)``, capped at the list width (``topk``, or the table width
  in positions). Entries outside
  ``[0, S)`` (pages outside ``[0, P)``) are skipped and never loaded; positions ``>= n`` are
  never read, so work is bounded by ``seq_lens``, not by the list or table width.
- ``out (B, q_len, H, D_V)`` bf16 with its own strides; ``lse (B, q_len, H)`` float32 view,
  base 2, without the sinks. Rows with nothing to attend: ``out = 0``, ``lse = +inf``.

Packed mode (``PACKED``, upstream's ``sparse`` backend form): the pool rows are the 656-byte
rows of ``flashinfer.mla._packed_cache`` (uint8: 512 e4m3 latent values, 4 float32 scales, 64
bf16 RoPE values) and the query is bf16. Each latent half is loaded as FP8 codes, multiplied by
its two 128-value blocks' float32 scales and rounded to bf16 in registers, then serves both the
QK^T and the PV dot (FlashMLA's scheme: no dequantized copy of the cache ever exists); RoPE
values are loaded as bf16. The launch also sets ``LENGTH_MODE = 1`` (``lengths[b * q_len + t]``
per query token) or ``2`` (no lengths: the whole list) instead of the causal ``0``, and
``SINK_IN_LSE``: the LSE is ``log2(sum_j 2^s_j + 2^sink)``, ``-inf`` for a token with no key.
These three constexprs and :func:`_packed_latent_half` are all a sibling kernel needs to mirror.

Math: ``s_j = bmm1 * <q, K_j>`` in the exp2 domain (``bmm1 * log2(e)``), online softmax over
``BLOCK_N`` keys at a time, ``out = bmm2 * sum_j p_j V_j / (sum_j p_j + exp(sink_h))``.

Schedule: all heads share the gathered rows (MQA), so a program takes ``BLOCK_H`` heads of one
query token and one chunk of its key list: QK^T is a ``[BLOCK_H, D] x [D, BLOCK_N]``
tensor-core dot (FP8 x FP8 with fp32 accumulation for e4m3, bf16 otherwise) and PV a bf16
``[BLOCK_H, BLOCK_N] x [BLOCK_N, D_V]`` dot (FP8 V upcast), both on rows loaded once; the
latent dims are loaded, dotted and accumulated in two halves so that the upcast holds half a
tile of V in registers at a time. The list of each token
is cut into ``num_splits`` chunks sized from its own ``n`` on the device, so the split count is
fixed per call shape (graph-capturable, independent of ``seq_lens``) while every split gets an
even share. With one split the program writes ``out``/``lse`` itself; otherwise it writes a
normalized fp32 partial output and its LSE to the workspace and :func:`mla_combine_kernel`
merges them.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..._core import constants
from ..._core.triton_launch import FastLaunch
from ...utils import ceil_div, next_positive_power_of_2

# globals read inside kernels must be constexpr
LOG2E = tl.constexpr(constants.LOG2E)


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """Tile shape and launch parameters of one decode kernel variant.

    Attributes
    ----------
    block_h : int
        Heads per program (a power of two; the last head block is masked).
    block_n : int
        Keys gathered per step.
    num_warps, num_stages : int
        Triton launch parameters.
    programs_per_sm : int
        Programs of this shape that fit on one multiprocessor at a time; the split count
        targets this many per multiprocessor.
    upcast_qk : bool
        FP8 operands only: QK^T as a bf16 dot on upcast rows. Tiles under 64 heads run on
        mma.sync, whose FP8 operand path spills registers; they are memory-bound anyway.
    """

    block_h: int
    block_n: int
    num_warps: int
    num_stages: int
    programs_per_sm: int
    upcast_qk: bool = False


def decode_config(heads: int, fp8: bool) -> DecodeConfig:
    """The tile shape for ``heads`` query heads (FP8 or BF16 operands)."""
    # Chosen with `benchmarks/bench_mla.py --tune` on an H200 (the candidates and their times:
    # "How the decode tile was chosen", benchmarks/RESULTS.md). 64 heads fill the M of one
    # Hopper wgmma; 8 warps split the [64, 512] fp32 accumulator over two warpgroups, which
    # leaves one program a multiprocessor. Fewer heads are memory-bound and run on mma.sync:
    # small tiles, two programs a multiprocessor, FP8 rows upcast for QK^T (mma.sync's FP8
    # operands spill).
    if heads > 32:
        return DecodeConfig(64, 64, num_warps=8, num_stages=2 if fp8 else 3, programs_per_sm=1)
    if heads > 16:
        return DecodeConfig(32, 32, num_warps=8, num_stages=3, programs_per_sm=2, upcast_qk=fp8)
    return DecodeConfig(16, 32 if fp8 else 64, num_warps=4, num_stages=3, programs_per_sm=2, upcast_qk=fp8)


def packed_decode_config(heads: int) -> DecodeConfig:
    """The tile shape of the packed mode (bf16 query, 656-byte rows dequantized in registers)."""
    # Not timed yet: chosen from an offline sm_90 compile (Triton 3.6), where the bf16 tiles'
    # 64-key steps spill about 2 KB a thread in this mode (the FP8 codes, their float32 products
    # and the bf16 K of a half are live at once) and 32-key steps 0.1-0.3 KB.
    if heads > 32:
        return DecodeConfig(64, 32, num_warps=8, num_stages=3, programs_per_sm=1)
    if heads > 16:
        return DecodeConfig(32, 32, num_warps=8, num_stages=3, programs_per_sm=2)
    return DecodeConfig(16, 32, num_warps=4, num_stages=3, programs_per_sm=2)


@triton.jit
def _load_q(ptrs, offs, head_ok, UPCAST_QK: tl.constexpr):
    q = tl.load(ptrs + offs[None, :], mask=head_ok[:, None], other=0.0)
    if UPCAST_QK:
        q = q.to(tl.bfloat16)
    return q


@triton.jit
def _packed_latent_half(row_ptr, dh, valid, HALF: tl.constexpr, D_V: tl.constexpr):
    """Latent values ``HALF * D_V/2 ..`` of packed rows as bf16: each e4m3 code times the float32
    scale of its 128-value block (the scales sit right after the ``D_V`` codes)."""
    tl.static_assert(D_V == 512, "packed rows hold 512 latent values in four 128-value blocks")
    codes = tl.load(row_ptr[:, None] + HALF * (D_V // 2) + dh[None, :], mask=valid[:, None], other=0)
    scales = (row_ptr + D_V).to(tl.pointer_type(tl.float32)) + 2 * HALF  # this half's two blocks
    first = tl.load(scales, mask=valid, other=0.0)
    second = tl.load(scales + 1, mask=valid, other=0.0)
    scale = tl.where(dh[None, :] < D_V // 4, first[:, None], second[:, None])
    return (codes.to(tl.float8e4nv, bitcast=True).to(tl.float32) * scale).to(tl.bfloat16)


@triton.jit
def _scores(q, k, acc, UPCAST_QK: tl.constexpr):
    # one slice of the scores: [BLOCK_H, BLOCK_N] += q k^T
    if UPCAST_QK:
        k = k.to(tl.bfloat16)
    return tl.dot(q, tl.trans(k), acc)


@triton.jit
def mla_decode_kernel(
    # query, key pool, key list (indices or block table), lengths, per-head sinks
    q_ptr,
    kv_ptr,
    list_ptr,
    seq_lens_ptr,
    sinks_ptr,
    # scales: a float, or a pointer to a 0-dim float32 tensor (SCALE*_ON_DEVICE)
    bmm1_scale,
    bmm2_scale,
    # outputs: final (one split) or the workspace partials (several splits)
    out_ptr,
    lse_ptr,
    workspace_ptr,
    workspace_pad,
    # sizes
    q_len,
    num_heads,
    list_width,
    num_kv_rows,
    num_splits,
    # strides, in elements
    stride_qb,
    stride_qt,
    stride_qh,
    stride_kv_row,
    stride_kv_tok,
    stride_list_row,
    stride_ob,
    stride_ot,
    stride_oh,
    stride_lb,
    stride_lt,
    stride_lh,
    # meta-parameters
    D_V: tl.constexpr,
    D_ROPE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    HAS_LSE: tl.constexpr,
    SCALE1_ON_DEVICE: tl.constexpr,
    SCALE2_ON_DEVICE: tl.constexpr,
    UPCAST_QK: tl.constexpr,
    PACKED: tl.constexpr,
    LENGTH_MODE: tl.constexpr,
    SINK_IN_LSE: tl.constexpr,
    SLOT_PAGE: tl.constexpr = 0,
):
    # program -> (head block, split, query token): head blocks of one chunk are neighbours, so
    # the second gather of the same rows hits L2
    pid = tl.program_id(0)
    head_blocks = tl.cdiv(num_heads, BLOCK_H)
    head_block = pid % head_blocks
    split = (pid // head_blocks) % num_splits
    row = pid // (head_blocks * num_splits)  # b * q_len + t
    batch = row // q_len
    token = row % q_len

    # this token's list length, cut into num_splits chunks of whole BLOCK_N steps
    if LENGTH_MODE == 0:  # FlashInfer: the request's KV length, shifted for earlier tokens
        n = tl.load(seq_lens_ptr + batch) - (q_len - 1 - token)
    elif LENGTH_MODE == 1:  # one length per query token
        n = tl.load(seq_lens_ptr + row)
    else:
        n = list_width
    n = tl.maximum(tl.minimum(n, list_width), 0)
    chunk = tl.cdiv(tl.cdiv(n, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, n)

    heads = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    # the latent part is handled in two halves (lo, hi) so that the register round trip of V
    # (the FP8 upcast for the PV dot) holds half a tile at a time
    dh = tl.arange(0, D_V // 2)
    q_row = q_ptr + batch.to(tl.int64) * stride_qb + token * stride_qt + heads[:, None] * stride_qh
    q_lo = _load_q(q_row, dh, head_ok, UPCAST_QK)
    q_hi = _load_q(q_row + D_V // 2, dh, head_ok, UPCAST_QK)
    if D_ROPE > 0:
        dr = tl.arange(0, D_ROPE)
        q_rope = _load_q(q_row + D_V, dr, head_ok, UPCAST_QK)

    if SCALE1_ON_DEVICE:
        scale_log2 = tl.load(bmm1_scale) * LOG2E
    else:
        scale_log2 = bmm1_scale * LOG2E

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc_lo = tl.zeros([BLOCK_H, D_V // 2], tl.float32)
    acc_hi = tl.zeros([BLOCK_H, D_V // 2], tl.float32)
    # the page table has one row per request, the index list one per query token
    list_row = list_ptr + row.to(tl.int64) * stride_list_row
    if PAGE_SIZE > 0:
        list_row = list_ptr + batch.to(tl.int64) * stride_list_row
    for pos0 in range(start, end, BLOCK_N):
        pos = pos0 + tl.arange(0, BLOCK_N)
        in_range = pos < end
        if PAGE_SIZE > 0:
            page = tl.load(list_row + pos // PAGE_SIZE, mask=in_range, other=-1)
            valid = in_range & (page >= 0) & (page < num_kv_rows)
            kv_off = page.to(tl.int64) * stride_kv_row + (pos % PAGE_SIZE) * stride_kv_tok
        else:
            slot = tl.load(list_row + pos, mask=in_range, other=-1)
            valid = in_range & (slot >= 0) & (slot < num_kv_rows)
            if SLOT_PAGE > 0:  # a padded page stride: slot = page * SLOT_PAGE + row
                kv_off = (slot // SLOT_PAGE).to(tl.int64) * stride_kv_row + (slot % SLOT_PAGE) * stride_kv_tok
            else:
                kv_off = slot.to(tl.int64) * stride_kv_row
        kv_row = kv_ptr + kv_off[:, None]
        if PACKED:
            k_lo = _packed_latent_half(kv_ptr + kv_off, dh, valid, 0, D_V)
            k_hi = _packed_latent_half(kv_ptr + kv_off, dh, valid, 1, D_V)
        else:
            k_lo = tl.load(kv_row + dh[None, :], mask=valid[:, None], other=0.0)  # [BLOCK_N, D_V / 2]
            k_hi = tl.load(kv_row + D_V // 2 + dh[None, :], mask=valid[:, None], other=0.0)
        s = _scores(q_lo, k_lo, None, UPCAST_QK)
        s = _scores(q_hi, k_hi, s, UPCAST_QK)
        if D_ROPE > 0:
            if PACKED:  # bf16 values after the codes and the four scales
                rope_row = (kv_row + D_V + 4 * (D_V // 128)).to(tl.pointer_type(tl.bfloat16))
            else:
                rope_row = kv_row + D_V
            k_rope = tl.load(rope_row + dr[None, :], mask=valid[:, None], other=0.0)
            s = _scores(q_rope, k_rope, s, UPCAST_QK)
        s = tl.where(valid[None, :], s * scale_log2, float("-inf"))

        # online softmax; a row with nothing seen yet keeps m = -inf, exponentiated against 0
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_ref)
        p = tl.exp2(s - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        # a bf16 PV dot: FP8 values are upcast (a no-op for bf16 rows)
        p = p.to(tl.bfloat16)
        acc_lo = tl.dot(p, k_lo.to(tl.bfloat16), acc_lo * alpha[:, None])
        acc_hi = tl.dot(p, k_hi.to(tl.bfloat16), acc_hi * alpha[:, None])
        m_i = m_new

    seen = l_i > 0.0
    if not SPLIT:
        denom = l_i
        if HAS_SINKS:
            sink = tl.load(sinks_ptr + heads, mask=head_ok, other=0.0) * LOG2E
            denom += tl.exp2(sink - tl.where(seen, m_i, 0.0))
        if SCALE2_ON_DEVICE:
            scale2 = tl.load(bmm2_scale)
        else:
            scale2 = bmm2_scale
        o_scale = tl.where(seen, scale2 / tl.where(seen, denom, 1.0), 0.0)[:, None]
        o_row = out_ptr + batch.to(tl.int64) * stride_ob + token * stride_ot + heads[:, None] * stride_oh
        o_type = out_ptr.dtype.element_ty
        tl.store(o_row + dh[None, :], (acc_lo * o_scale).to(o_type), mask=head_ok[:, None])
        tl.store(o_row + D_V // 2 + dh[None, :], (acc_hi * o_scale).to(o_type), mask=head_ok[:, None])
        if HAS_LSE:
            if SINK_IN_LSE:
                some = denom > 0.0
                lse = tl.where(
                    some, tl.where(seen, m_i, 0.0) + tl.log2(tl.where(some, denom, 1.0)), float("-inf")
                )
            else:
                lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("inf"))
            tl.store(lse_ptr + batch * stride_lb + token * stride_lt + heads * stride_lh, lse, mask=head_ok)
    else:
        # partials: [num_splits, rows * H, D_V] outputs, then [num_splits, rows * H] LSEs,
        # float32 from the first 16-byte boundary of the byte workspace
        workspace_ptr = (workspace_ptr + workspace_pad).to(tl.pointer_type(tl.float32))
        part_rows = (tl.num_programs(0) // (head_blocks * num_splits)) * num_heads
        part_row = (split * part_rows + row * num_heads + heads).to(tl.int64)
        o_scale = tl.where(seen, 1.0 / tl.where(seen, l_i, 1.0), 0.0)[:, None]
        o_part = workspace_ptr + part_row[:, None] * D_V
        tl.store(o_part + dh[None, :], acc_lo * o_scale, mask=head_ok[:, None])
        tl.store(o_part + D_V // 2 + dh[None, :], acc_hi * o_scale, mask=head_ok[:, None])
        lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        lse_part = workspace_ptr + num_splits * part_rows.to(tl.int64) * D_V
        tl.store(lse_part + part_row, lse, mask=head_ok)


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


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """The reusable schedule of one decode call shape (never depends on ``seq_lens``).

    Attributes
    ----------
    num_splits : int
        Chunks each query token's key list is cut into (before the workspace cap).
    head_blocks : int
        ``cdiv(heads, config.block_h)``.
    fp8_config, bf16_config : DecodeConfig
        Tile shapes for e4m3 and bf16 operands (the plan is made before the dtype is known).
    packed_config : DecodeConfig or None
        Tile shape of the packed mode; None takes ``bf16_config``. Its ``block_h`` must give the
        same ``head_blocks``.
    """

    num_splits: int
    head_blocks: int
    fp8_config: DecodeConfig
    bf16_config: DecodeConfig
    packed_config: DecodeConfig | None = None


# Fewest keys a split is worth: below this, the combine costs more than the parallelism gains.
MIN_KEYS_PER_SPLIT = 128
MAX_SPLITS = 64


def plan_decode(batch: int, q_len: int, heads: int, list_len: int, num_sms: int) -> DecodePlan:
    """Choose the split count so that about one wave of programs fills every multiprocessor.

    Parameters
    ----------
    batch, q_len, heads : int
        The query's shape.
    list_len : int
        The key list length bound: ``topk`` (sparse) or the page-table width in positions
        (paged). Only caps the split count; chunk sizes follow each token's real length.
    num_sms : int
        Multiprocessors of the device.
    """
    fp8_config, bf16_config = decode_config(heads, True), decode_config(heads, False)
    packed_config = packed_decode_config(heads)
    head_blocks = ceil_div(heads, fp8_config.block_h)
    programs = batch * q_len * head_blocks
    slots = num_sms * fp8_config.programs_per_sm
    # with at least a wave already, one split writes out directly and skips the combine
    num_splits = max(1, slots // programs) if programs < slots else 1
    num_splits = max(1, min(num_splits, list_len // MIN_KEYS_PER_SPLIT, MAX_SPLITS))
    return DecodePlan(num_splits, head_blocks, fp8_config, bf16_config, packed_config)


def _workspace_splits(plan_splits: int, part_rows: int, d_v: int, workspace_bytes: int) -> int:
    # a partial row is D_V floats plus its LSE; 16 bytes are kept for alignment
    per_split = part_rows * (d_v + 1) * 4
    return max(1, min(plan_splits, (workspace_bytes - 16) // per_split))


_DECODE = FastLaunch(mla_decode_kernel)
_COMBINE = FastLaunch(mla_combine_kernel)


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
    seq_lens: torch.Tensor  # any int32 tensor where the kernel never reads it (length_mode 2)
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


def launch_combine(launcher: FastLaunch, call, host: HostArgs, sink_in_lse: bool) -> None:
    """Merge the ``host.num_splits`` partial results in the workspace into ``out`` (and the LSE)."""
    out = call.out
    batch, q_len, heads, d_v = out.shape
    launcher.launch(
        (batch * q_len * heads,),
        call.workspace, host.workspace_pad, host.sinks, host.scale2, out, host.lse, heads, q_len,
        host.num_splits, *out.stride()[:3], *host.lse_strides,
        D_V=d_v, SPLITS_POW2=next_positive_power_of_2(host.num_splits),
        HAS_SINKS=call.sinks is not None, HAS_LSE=call.lse is not None,
        SCALE2_ON_DEVICE=host.scale2_on_device, SINK_IN_LSE=sink_in_lse,
        num_warps=4,
    )  # fmt: skip


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


def mla_decode(call, rows: KeyRows, plan=None, *, packed: bool = False, length_mode: int = 0) -> None:
    """Launch the decode kernel (and the combine when split) on a validated call.

    Parameters
    ----------
    call : flashinfer.mla._args.Decode
        ``query`` bf16 or e4m3; ``table`` the slot indices (sparse) or the block table (paged),
        rows contiguous.
    rows : KeyRows
        :func:`key_rows` of the call.
    plan : DecodePlan, optional
        From :func:`plan_decode`; None takes ``call.plan``.
    packed : bool
        ``call.kv_cache`` holds the 656-byte packed rows (bf16 query, ``bmm2_scale`` 1.0); the
        LSE then includes the sinks and is ``-inf`` for an empty row.
    length_mode : int
        How many list entries token ``t`` of request ``b`` considers: 0 ``seq_lens[b] - (q_len - 1
        - t)``, 1 ``seq_lens[b * q_len + t]``, 2 all of them (``seq_lens`` may be None).
    """
    query, table, out = call.query, call.table, call.out
    plan = call.plan if plan is None else plan
    batch, q_len, heads, dim = query.shape
    d_v = out.shape[-1]
    fp8 = query.element_size() == 1
    config = plan.fp8_config if fp8 else plan.bf16_config
    if packed and plan.packed_config is not None:
        config = plan.packed_config
    host = host_args(call, plan.num_splits)
    num_splits = host.num_splits
    _DECODE.launch(
        (batch * q_len * plan.head_blocks * num_splits,),
        query, call.kv_cache, table, host.seq_lens, host.sinks, host.scale1, host.scale2,
        out, host.lse, call.workspace, host.workspace_pad,
        q_len, heads, rows.list_width, rows.num_kv_rows, num_splits,
        *query.stride()[:3], rows.stride_kv_row, rows.stride_kv_tok,
        table.stride(-2),
        *out.stride()[:3], *host.lse_strides,
        D_V=d_v, D_ROPE=dim - d_v, PAGE_SIZE=rows.page_size,
        BLOCK_H=config.block_h, BLOCK_N=config.block_n, SPLIT=num_splits > 1,
        HAS_SINKS=call.sinks is not None, HAS_LSE=call.lse is not None,
        SCALE1_ON_DEVICE=host.scale1_on_device, SCALE2_ON_DEVICE=host.scale2_on_device,
        UPCAST_QK=fp8 and config.upcast_qk, PACKED=packed, LENGTH_MODE=length_mode, SINK_IN_LSE=packed,
        SLOT_PAGE=rows.slot_page, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if num_splits > 1:
        launch_combine(_COMBINE, call, host, sink_in_lse=packed)
