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
values are loaded as bf16. The launch also sets ``LENGTH_MODE`` to :attr:`Lengths.PER_TOKEN`
(``lengths[b * q_len + t]`` per query token) or :attr:`Lengths.ALL` (no lengths: the whole
list) instead of :attr:`Lengths.CAUSAL`, and ``SINK_IN_LSE``: the LSE is ``log2(sum_j 2^s_j + 2^sink)``, ``-inf`` for a token with no key.
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
normalized fp32 partial output and its LSE to the workspace and the combine kernel of
:mod:`.mla_decode_shared` merges them.
"""

from __future__ import annotations

import dataclasses

import triton
import triton.language as tl

from ..._core import constants
from ..._core.triton_launch import FastLaunch
from ...utils import ceil_div
from .mla_decode_shared import (
    KeyRows,
    Lengths,
    SplitPlan,
    host_args,
    key_row_offsets,
    launch_combine,
    list_length,
    mla_combine_kernel,
    replay_decode,
    split_count,
)

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
    # Chosen with `benchmarks/bench_mla.py --tune` on an H200 (benchmarks/RESULTS.md, "The
    # portable tl tier"; the candidates and their times: results/tune_mla_h200_round*.json).
    # 64 heads fill the M of one Hopper wgmma; 8 warps split the [64, 512] fp32 accumulator over
    # two warpgroups, which leaves one program a multiprocessor. Fewer heads are memory-bound and
    # run on mma.sync: small tiles, two programs a multiprocessor, FP8 rows upcast for QK^T
    # (mma.sync's FP8 operands spill).
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


# FP8 Q K^T dots add their partial sums into float32 every this many columns, or once a dot
# (Triton's max_num_imprecise_acc; sm_90's wgmma only): Hopper keeps an FP8 chain's running sum at reduced
# precision, and the 576-column chain missed the op table's LSE rule (benchmarks/decode_qk_precision.py).
QK_IMPRECISE_ACC = 64


@triton.jit
def _scores(q, k, acc, UPCAST_QK: tl.constexpr, QK_IMPRECISE_ACC: tl.constexpr):
    # one slice of the scores: [BLOCK_H, BLOCK_N] += q k^T
    if UPCAST_QK:
        k = k.to(tl.bfloat16)
    return tl.dot(q, tl.trans(k), acc, max_num_imprecise_acc=min(QK_IMPRECISE_ACC, k.shape[1]))


@triton.jit
def _online_softmax_step(s, k_lo, k_hi, m_i, l_i, acc_lo, acc_hi):
    # fold one block of scores (exp2 domain) into the running maximum, sum and output; a row
    # with nothing seen yet keeps m = -inf, exponentiated against 0
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    # a bf16 PV dot: FP8 values are upcast (a no-op for bf16 rows)
    p = p.to(tl.bfloat16)
    acc_lo = tl.dot(p, k_lo.to(tl.bfloat16), acc_lo * alpha[:, None])
    acc_hi = tl.dot(p, k_hi.to(tl.bfloat16), acc_hi * alpha[:, None])
    return m_new, l_i, acc_lo, acc_hi


@triton.jit
def _store_output(
    # the chunk's running state (the whole list: one split)
    acc_lo, acc_hi, m_i, l_i, heads, head_ok, dh, batch, token,
    # sinks, output scale, outputs and their strides
    sinks_ptr, bmm2_scale, out_ptr, lse_ptr, stride_ob, stride_ot, stride_oh, stride_lb, stride_lt, stride_lh,
    # meta-parameters
    D_V: tl.constexpr, HAS_SINKS: tl.constexpr, HAS_LSE: tl.constexpr, SCALE2_ON_DEVICE: tl.constexpr,
    SINK_IN_LSE: tl.constexpr,
):  # fmt: skip
    # the final output rows, normalized by the sum (and the sinks' mass), and their LSE
    seen = l_i > 0.0
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


@triton.jit
def _store_partials(
    acc_lo, acc_hi, m_i, l_i, heads, head_ok, dh, workspace_ptr, workspace_pad,
    split, row, head_blocks, num_heads, num_splits, D_V: tl.constexpr,
):  # fmt: skip
    # one split's share for the combine kernel: its output normalized by its own sum, and its LSE.
    # [num_splits, rows * H, D_V] outputs, then [num_splits, rows * H] LSEs, float32 from the
    # first 16-byte boundary of the byte workspace
    seen = l_i > 0.0
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
def mla_decode_kernel(
    # query, key pool, key list (indices or block table), lengths, per-head sinks
    q_ptr, kv_ptr, list_ptr, seq_lens_ptr, sinks_ptr,
    # scales: a float, or a pointer to a 0-dim float32 tensor (SCALE*_ON_DEVICE)
    bmm1_scale, bmm2_scale,
    # outputs: final (one split) or the workspace partials (several splits)
    out_ptr, lse_ptr, workspace_ptr, workspace_pad,
    # sizes
    q_len, num_heads, list_width, num_kv_rows, num_splits,
    # strides, in elements
    stride_qb, stride_qt, stride_qh, stride_kv_row, stride_kv_tok, stride_list_row,
    stride_ob, stride_ot, stride_oh, stride_lb, stride_lt, stride_lh,
    # meta-parameters
    D_V: tl.constexpr, D_ROPE: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, HAS_SINKS: tl.constexpr, HAS_LSE: tl.constexpr,
    SCALE1_ON_DEVICE: tl.constexpr, SCALE2_ON_DEVICE: tl.constexpr, UPCAST_QK: tl.constexpr,
    QK_IMPRECISE_ACC: tl.constexpr, PACKED: tl.constexpr, LENGTH_MODE: tl.constexpr,
    SINK_IN_LSE: tl.constexpr, SLOT_PAGE: tl.constexpr = 0,
):  # fmt: skip
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
    n = list_length(seq_lens_ptr, batch, row, token, q_len, list_width, LENGTH_MODE)
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
        kv_off, valid = key_row_offsets(
            list_row, pos, end, num_kv_rows, stride_kv_row, stride_kv_tok, PAGE_SIZE, SLOT_PAGE
        )
        kv_row = kv_ptr + kv_off[:, None]
        if PACKED:
            k_lo = _packed_latent_half(kv_ptr + kv_off, dh, valid, 0, D_V)
            k_hi = _packed_latent_half(kv_ptr + kv_off, dh, valid, 1, D_V)
        else:
            k_lo = tl.load(kv_row + dh[None, :], mask=valid[:, None], other=0.0)  # [BLOCK_N, D_V / 2]
            k_hi = tl.load(kv_row + D_V // 2 + dh[None, :], mask=valid[:, None], other=0.0)
        s = _scores(q_lo, k_lo, None, UPCAST_QK, QK_IMPRECISE_ACC)
        s = _scores(q_hi, k_hi, s, UPCAST_QK, QK_IMPRECISE_ACC)
        if D_ROPE > 0:
            if PACKED:  # bf16 values after the codes and the four scales
                rope_row = (kv_row + D_V + 4 * (D_V // 128)).to(tl.pointer_type(tl.bfloat16))
            else:
                rope_row = kv_row + D_V
            k_rope = tl.load(rope_row + dr[None, :], mask=valid[:, None], other=0.0)
            s = _scores(q_rope, k_rope, s, UPCAST_QK, QK_IMPRECISE_ACC)
        s = tl.where(valid[None, :], s * scale_log2, float("-inf"))

        m_i, l_i, acc_lo, acc_hi = _online_softmax_step(s, k_lo, k_hi, m_i, l_i, acc_lo, acc_hi)

    if not SPLIT:
        _store_output(
            acc_lo, acc_hi, m_i, l_i, heads, head_ok, dh, batch, token,
            sinks_ptr, bmm2_scale, out_ptr, lse_ptr, stride_ob, stride_ot, stride_oh, stride_lb, stride_lt, stride_lh,
            D_V, HAS_SINKS, HAS_LSE, SCALE2_ON_DEVICE, SINK_IN_LSE,
        )  # fmt: skip
    else:
        _store_partials(
            acc_lo, acc_hi, m_i, l_i, heads, head_ok, dh, workspace_ptr, workspace_pad,
            split, row, head_blocks, num_heads, num_splits, D_V,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class DecodePlan(SplitPlan):
    """This kernel's schedule of one decode call shape: the split plan (``head_blocks`` of
    ``config.block_h``-head tiles) and the tile shapes.

    Attributes
    ----------
    fp8_config, bf16_config : DecodeConfig
        Tile shapes for e4m3 and bf16 operands (the plan is made before the dtype is known).
    packed_config : DecodeConfig or None
        Tile shape of the packed mode; None takes ``bf16_config``. Its ``block_h`` must give the
        same ``head_blocks``.
    """

    fp8_config: DecodeConfig
    bf16_config: DecodeConfig
    packed_config: DecodeConfig | None = None


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
    num_splits = split_count(batch * q_len * head_blocks, num_sms * fp8_config.programs_per_sm, list_len)
    return DecodePlan(num_splits, head_blocks, fp8_config, bf16_config, packed_config)


_DECODE = FastLaunch(mla_decode_kernel)
_COMBINE = FastLaunch(mla_combine_kernel)


def mla_decode(call, rows: KeyRows, plan=None, *, packed: bool = False, lengths: Lengths = Lengths.CAUSAL):
    """Launch the decode kernel (and the combine when split) on a validated call; returns the
    replay (:func:`.mla_decode_shared.replay_decode`).

    Parameters
    ----------
    call : flashinfer.mla._args.Decode
        ``query`` bf16 or e4m3; ``table`` the slot indices (sparse) or the block table (paged),
        rows contiguous.
    rows : KeyRows
        :func:`.mla_decode_shared.key_rows` of the call.
    plan : DecodePlan, optional
        From :func:`plan_decode`; None takes ``call.plan``.
    packed : bool
        ``call.kv_cache`` holds the 656-byte packed rows (bf16 query, ``bmm2_scale`` 1.0); the
        LSE then includes the sinks and is ``-inf`` for an empty row.
    lengths : Lengths
        What ``call.seq_lens`` means: ``CAUSAL`` ``seq_lens[b] - (q_len - 1 - t)`` entries for
        token ``t`` of request ``b``, ``PER_TOKEN`` ``seq_lens[b * q_len + t]``, ``ALL`` every
        entry (``seq_lens`` may be None).
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
    decode = _DECODE.bind(
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
        UPCAST_QK=fp8 and config.upcast_qk, QK_IMPRECISE_ACC=QK_IMPRECISE_ACC, PACKED=packed, LENGTH_MODE=lengths.value, SINK_IN_LSE=packed,
        SLOT_PAGE=rows.slot_page, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    combine = launch_combine(_COMBINE, call, host, sink_in_lse=packed) if num_splits > 1 else None
    return replay_decode(call, host, decode, combine)
