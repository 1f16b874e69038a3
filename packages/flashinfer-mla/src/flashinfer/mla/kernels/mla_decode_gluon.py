"""MLA decode for Hopper (sm_90) in Gluon: a gather warp feeding two wgmma warpgroups.

The same problem, layouts and workspace format as :mod:`.mla_decode` (read its docstring
first); this module replaces only the decode kernel on Hopper, and the split partials are
merged by the same combine kernel.

Schedule
--------
A program takes 64 query heads of one query token and one chunk of its key list (the heads
fill the M of a wgmma; fewer heads are padded). Its warps are split into two partitions
(``gl.warp_specialize``):

- the **gather** partition (one warp, few registers) walks the chunk ``BLOCK_N`` keys at a
  time, reads the slot indices (or pages), and copies each valid row with 16-byte ``cp.async``
  into a ``STAGES``-deep ring of shared-memory tiles (latent ``[BLOCK_N, D_V]`` and rope
  ``[BLOCK_N, D_ROPE]``, NVMMA-swizzled so wgmma reads them directly). Invalid or past-the-end
  rows are never read: their copies are predicated off and land as zeros. Each thread arrives
  on the stage's ``ready`` barrier when its copies complete;
- the **attention** partition (two warpgroups, the default partition) waits for a stage and
  computes ``S = Q K^T`` as asynchronous wgmma (FP8 x FP8 for e4m3, the query staged once in
  shared memory), masks invalid keys, runs the online softmax in the exp2 domain, and adds
  ``P V`` with a 16-bit wgmma whose accumulator ``[64, D_V]`` is split by columns over the two
  warpgroups. FP8 rows are converted to float16 for ``P V`` (exact: every e4m3 value is an
  fp16 value; ``P`` in fp16 keeps 3 more mantissa bits than bf16) into a shared tile while the
  ``Q K^T`` wgmma runs; the FP8 stage is then released at once. BF16 rows feed both products
  from the ring, and the stage is released when ``P V`` has read it.

Per-token limits, sinks, base-2 LSE, float or on-device scales, strided outputs and the split
partials are as in :mod:`.mla_decode`.
"""

from __future__ import annotations

import dataclasses

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..._core import constants
from ..._core.triton_launch import FastLaunch
from ...utils import next_positive_power_of_2
from .mla_decode import DecodePlan, _scale_arg, _workspace_splits, mla_combine_kernel, plan_decode

LOG2E = gl.constexpr(constants.LOG2E)
BLOCK_H = gl.constexpr(64)  # heads a program takes: the M of one wgmma


@dataclasses.dataclass(frozen=True)
class GluonDecodeConfig:
    """Tile of the Gluon decode kernel for one operand dtype.

    Attributes
    ----------
    block_n : int
        Keys a stage holds.
    stages : int
        Depth of the gather ring.
    gather_warps : int
        Warps of the gather partition.
    qk_promote : int
        FP8 only: add the ``Q K^T`` wgmma products into float32 every this many dims (0: one
        chain over all 576, accumulated at the tensor core's FP8 accumulation precision).
    """

    block_n: int
    stages: int
    gather_warps: int = 4
    qk_promote: int = 0
    ablate: int = 0  # timing experiments only: 1 skips the copies, 2 the attention math
    prefetch: bool = False


# Shared memory (of 227 KB): FP8 holds the query (36 KB), a 3-deep ring of 36 KB stages and the
# fp16 copy of V (64 KB); BF16 holds a 72 KB query and 36 KB stages of 32 keys.
FP8_CONFIG = GluonDecodeConfig(block_n=64, stages=3, gather_warps=4)
BF16_CONFIG = GluonDecodeConfig(block_n=32, stages=3, gather_warps=4)


@gluon.jit
def _key_rows(list_row, pos, end, num_kv_rows, stride_kv_row, stride_kv_tok, PAGE_SIZE: gl.constexpr):
    # element offsets of the key rows at list positions `pos`, and which of them exist
    in_range = pos < end
    if PAGE_SIZE > 0:
        page = gl.load(list_row + pos // PAGE_SIZE, mask=in_range, other=-1)
        valid = in_range & (page >= 0) & (page < num_kv_rows)
        offs = page.to(gl.int64) * stride_kv_row + (pos % PAGE_SIZE) * stride_kv_tok
    else:
        slot = gl.load(list_row + pos, mask=in_range, other=-1)
        valid = in_range & (slot >= 0) & (slot < num_kv_rows)
        offs = slot.to(gl.int64) * stride_kv_row
    return offs, valid


@gluon.jit
def _prefetch_rows(kv_ptr, offs, valid, ROW_BYTES: gl.constexpr, GATHER_WARPS: gl.constexpr):
    # L2 prefetch of every 128-byte line of the rows (two lines a lane, eight lanes a row, as
    # the copies are laid out); rows that do not exist prefetch row 0 instead
    layout: gl.constexpr = gl.BlockedLayout([1, 2], [4, 8], [GATHER_WARPS, 1], [1, 0])
    LINES: gl.constexpr = ROW_BYTES // 128 + 1  # a row may start mid-line
    ELEMENTS_PER_LINE: gl.constexpr = 128 * 8 // kv_ptr.dtype.element_ty.primitive_bitwidth
    offs = gl.convert_layout(gl.where(valid, offs, 0), gl.SliceLayout(1, layout))
    line = gl.minimum(gl.arange(0, 16, layout=gl.SliceLayout(0, layout)), LINES - 1)
    gl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;",
        "=r,l",
        [kv_ptr + offs[:, None] + (line * ELEMENTS_PER_LINE)[None, :]],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def _gather_partition(
    kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
    lat_ring, rope_ring, ready, empty,
    D_V: gl.constexpr, D_ROPE: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, GATHER_WARPS: gl.constexpr, ABLATE: gl.constexpr, PREFETCH: gl.constexpr,
):  # fmt: skip
    # Eight lanes share a row: each copies D_V / 8 latent and D_ROPE / 8 rope values of it (16-byte
    # copies, 8-byte for an FP8 rope part), so a lane handles BLOCK_N / (4 * GATHER_WARPS) rows
    # with one index and one row offset each, the same rows in both layouts.
    lat_layout: gl.constexpr = gl.BlockedLayout([1, D_V // 8], [4, 8], [GATHER_WARPS, 1], [1, 0])
    rope_layout: gl.constexpr = gl.BlockedLayout([1, D_ROPE // 8], [4, 8], [GATHER_WARPS, 1], [1, 0])
    row_layout: gl.constexpr = gl.SliceLayout(1, lat_layout)
    lat_cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, lat_layout))
    rope_cols = D_V + gl.arange(0, D_ROPE, layout=gl.SliceLayout(0, rope_layout))
    rows = gl.arange(0, BLOCK_N, layout=row_layout)

    num_blocks = gl.cdiv(end - start, BLOCK_N)
    ROW_BYTES: gl.constexpr = (D_V + D_ROPE) * kv_ptr.dtype.element_ty.primitive_bitwidth // 8
    # the list entries of the next block are read one block ahead, so their latency overlaps
    # the copies of this one; with PREFETCH, those of the block after are read two blocks ahead
    # and their rows prefetched into L2, which puts one more block in flight than the ring holds
    offs, valid = _key_rows(list_row, start + rows, end, num_kv_rows, stride_kv_row, stride_kv_tok, PAGE_SIZE)
    next_offs, next_valid = _key_rows(
        list_row, start + BLOCK_N + rows, end, num_kv_rows, stride_kv_row, stride_kv_tok, PAGE_SIZE
    )
    if PREFETCH:
        _prefetch_rows(kv_ptr, next_offs, next_valid, ROW_BYTES, GATHER_WARPS)
    for block in range(num_blocks):
        stage = block % STAGES
        ahead_offs, ahead_valid = _key_rows(
            list_row, start + (block + 2) * BLOCK_N + rows, end, num_kv_rows, stride_kv_row, stride_kv_tok,
            PAGE_SIZE,
        )  # fmt: skip
        if PREFETCH:
            _prefetch_rows(kv_ptr, ahead_offs, ahead_valid, ROW_BYTES, GATHER_WARPS)
        # a stage is free once the attention partition released its previous use
        mbarrier.wait(empty.index(stage), ((block // STAGES) & 1) ^ 1)
        if ABLATE != 1:
            async_copy.async_copy_global_to_shared(
                lat_ring.index(stage), kv_ptr + offs[:, None] + lat_cols[None, :], mask=valid[:, None]
            )
            rope_offs = gl.convert_layout(offs, gl.SliceLayout(1, rope_layout))
            rope_valid = gl.convert_layout(valid, gl.SliceLayout(1, rope_layout))
            async_copy.async_copy_global_to_shared(
                rope_ring.index(stage),
                kv_ptr + rope_offs[:, None] + rope_cols[None, :],
                mask=rope_valid[:, None],
            )
        # every gather thread arrives when its own copies of this stage have landed
        async_copy.mbarrier_arrive(ready.index(stage), increment_count=False)
        offs = next_offs
        valid = next_valid
        next_offs = ahead_offs
        next_valid = ahead_valid


@gluon.jit
def _attention_partition(
    q_lat, q_rope, lat_ring, rope_ring, v16, ready, empty,
    list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok, scale_log2,
    sinks_ptr, scale2, out_row, stride_oh, lse_row, stride_lh, part_ptr, part_lse_ptr,
    head0, num_heads,
    D_V: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    HALF: gl.constexpr, SPLIT: gl.constexpr, HAS_SINKS: gl.constexpr, HAS_LSE: gl.constexpr,
    QK_PROMOTE: gl.constexpr, ABLATE: gl.constexpr,
):  # fmt: skip
    # One warpgroup: all 64 heads' scores (the other warpgroup computes the same ones: FP8 Q K^T
    # is cheap, and each then owns whole rows, so the softmax needs no exchange) and the output
    # columns [HALF * D_V / 2, (HALF + 1) * D_V / 2).
    FP8: gl.constexpr = q_lat.dtype.primitive_bitwidth == 8
    D_HALF: gl.constexpr = D_V // 2
    QK_K: gl.constexpr = 256 // q_lat.dtype.primitive_bitwidth
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, QK_K]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D_HALF, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    p_dtype: gl.constexpr = gl.float16 if FP8 else gl.bfloat16
    # the FP8 -> fp16 copy of this half of V, 16 rows at a time (32 values a thread)
    v_layout: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])
    V_ROWS: gl.constexpr = 16

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_H, D_HALF], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    key_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    num_blocks = gl.cdiv(end - start, BLOCK_N)
    for block in range(num_blocks):
        stage = block % STAGES
        # which keys of this block exist (the gather skipped the others): read before the wait
        _, valid = _key_rows(
            list_row, start + block * BLOCK_N + key_cols, end, num_kv_rows, stride_kv_row, stride_kv_tok,
            PAGE_SIZE,
        )  # fmt: skip
        mbarrier.wait(ready.index(stage), (block // STAGES) & 1)
        if ABLATE == 2:
            mbarrier.arrive(empty.index(stage), count=1)
        else:
            # the rows were written by cp.async (generic proxy); wgmma reads through the async proxy
            fence_async_shared()
            lat = lat_ring.index(stage)
            v_half = lat.slice(HALF * D_HALF, D_HALF, dim=1)
            s = warpgroup_mma(q_lat, lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma(q_rope, rope_ring.index(stage).permute((1, 0)), s, is_async=True)
            if FP8:
                # the FP8 -> fp16 copy of this half of V runs on the CUDA cores beside Q K^T
                for r in gl.static_range(BLOCK_N // V_ROWS):
                    v = v_half.slice(r * V_ROWS, V_ROWS, dim=0).load(v_layout)
                    v16.slice(r * V_ROWS, V_ROWS, dim=0).store(v.to(gl.float16))
                fence_async_shared()
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
            if FP8:
                mbarrier.arrive(empty.index(stage), count=1)

            # online softmax; a row with nothing seen yet keeps m = -inf, exponentiated against 0
            s = gl.where(valid[None, :], s * scale_log2, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, 1))
            m_ref = gl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = gl.exp2(m_i - m_ref)
            p = gl.exp2(s - m_ref[:, None])
            l_i = l_i * alpha + gl.sum(p, 1)
            m_i = m_new
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
            p_op = gl.convert_layout(p.to(p_dtype), p_layout)
            # P V is waited for at once: a wgmma still in flight across the loop's back edge makes
            # ptxas serialize every wgmma of the kernel (C7512). The other warpgroup's softmax and
            # V copy run on the CUDA cores meanwhile.
            if FP8:
                acc = warpgroup_mma(p_op, v16, acc, is_async=True)
            else:
                acc = warpgroup_mma(p_op, v_half, acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            if not FP8:
                mbarrier.arrive(empty.index(stage), count=1)  # P V has read the BF16 stage

    # epilogue: this half's output columns (and, from the first half, the LSE)
    m_i = gl.convert_layout(m_i, gl.SliceLayout(1, o_layout))
    l_i = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, o_layout))
    head_ok = heads < num_heads
    dv = HALF * D_HALF + gl.arange(0, D_HALF, layout=gl.SliceLayout(0, o_layout))
    seen = l_i > 0.0
    if not SPLIT:
        denom = l_i
        if HAS_SINKS:
            sink = gl.load(sinks_ptr + heads, mask=head_ok, other=0.0) * LOG2E
            denom += gl.exp2(sink - gl.where(seen, m_i, 0.0))
        o_scale = gl.where(seen, scale2 / gl.where(seen, denom, 1.0), 0.0)
        gl.store(
            out_row + heads[:, None] * stride_oh + dv[None, :],
            (acc * o_scale[:, None]).to(out_row.dtype.element_ty),
            mask=head_ok[:, None],
        )
        if HAS_LSE and HALF == 0:
            lse = gl.where(seen, m_i + gl.log2(gl.where(seen, l_i, 1.0)), float("inf"))
            gl.store(lse_row + heads * stride_lh, lse, mask=head_ok)
    else:
        # partials in mla_decode's workspace format, merged by mla_combine_kernel
        o_scale = gl.where(seen, 1.0 / gl.where(seen, l_i, 1.0), 0.0)
        head_rows = heads.to(gl.int64)
        gl.store(
            part_ptr + head_rows[:, None] * D_V + dv[None, :], acc * o_scale[:, None], mask=head_ok[:, None]
        )
        if HALF == 0:
            lse = gl.where(seen, m_i + gl.log2(gl.where(seen, l_i, 1.0)), float("-inf"))
            gl.store(part_lse_ptr + head_rows, lse, mask=head_ok)


@gluon.jit
def mla_decode_gluon_kernel(
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
    D_V: gl.constexpr, D_ROPE: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, GATHER_WARPS: gl.constexpr, SPLIT: gl.constexpr, HAS_SINKS: gl.constexpr,
    HAS_LSE: gl.constexpr, SCALE1_ON_DEVICE: gl.constexpr, SCALE2_ON_DEVICE: gl.constexpr,
    QK_PROMOTE: gl.constexpr = 0, ABLATE: gl.constexpr = 0, PREFETCH: gl.constexpr = False,
):  # fmt: skip
    # program -> (head block, split, query token), as in mla_decode_kernel
    pid = gl.program_id(0)
    head_blocks = gl.cdiv(num_heads, BLOCK_H)
    head_block = pid % head_blocks
    split = (pid // head_blocks) % num_splits
    row = pid // (head_blocks * num_splits)  # b * q_len + t
    batch = row // q_len
    token = row % q_len
    head0 = head_block * BLOCK_H

    n = gl.load(seq_lens_ptr + batch) - (q_len - 1 - token)
    n = gl.maximum(gl.minimum(n, list_width), 0)
    chunk = gl.cdiv(gl.cdiv(n, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = gl.minimum(start + chunk, n)
    list_row = list_ptr + row.to(gl.int64) * stride_list_row
    if PAGE_SIZE > 0:
        list_row = list_ptr + batch.to(gl.int64) * stride_list_row
    if SCALE1_ON_DEVICE:
        scale_log2 = gl.load(bmm1_scale) * LOG2E
    else:
        scale_log2 = bmm1_scale * LOG2E
    if SCALE2_ON_DEVICE:
        scale2 = gl.load(bmm2_scale)
    else:
        scale2 = bmm2_scale
    out_row = out_ptr + batch.to(gl.int64) * stride_ob + token * stride_ot
    lse_row = lse_ptr + batch.to(gl.int64) * stride_lb + token * stride_lt
    # split partials: [num_splits, rows * H, D_V] outputs, then [num_splits, rows * H] LSEs,
    # float32 from the first 16-byte boundary of the byte workspace
    workspace_f32 = (workspace_ptr + workspace_pad).to(gl.pointer_type(gl.float32))
    part_rows = (gl.num_programs(0) // (head_blocks * num_splits)) * num_heads
    part_row0 = split.to(gl.int64) * part_rows + row * num_heads
    part_ptr = workspace_f32 + part_row0 * D_V
    part_lse_ptr = workspace_f32 + num_splits * part_rows.to(gl.int64) * D_V + part_row0

    # stage the query in shared memory once: the A operand of every Q K^T
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    q_layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, q_layout))
    q_row = q_ptr + batch.to(gl.int64) * stride_qb + token * stride_qt + heads[:, None] * stride_qh
    head_ok = (heads < num_heads)[:, None]
    lat_cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, q_layout))
    rope_cols = D_V + gl.arange(0, D_ROPE, layout=gl.SliceLayout(0, q_layout))
    lat_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
    rope_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_ROPE], dtype)
    q_lat = gl.allocate_shared_memory(
        dtype, [BLOCK_H, D_V], lat_smem, gl.load(q_row + lat_cols[None, :], mask=head_ok, other=0.0)
    )
    q_rope = gl.allocate_shared_memory(
        dtype, [BLOCK_H, D_ROPE], rope_smem, gl.load(q_row + rope_cols[None, :], mask=head_ok, other=0.0)
    )

    FP8: gl.constexpr = dtype.primitive_bitwidth == 8
    lat_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D_V], lat_smem)
    rope_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D_ROPE], rope_smem)
    # each warpgroup's fp16 copy of its half of V (FP8 only: BF16 rows feed P V from the ring)
    v16_rows: gl.constexpr = BLOCK_N if FP8 else 8
    v16_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([v16_rows, D_V // 2], gl.float16)
    v16 = gl.allocate_shared_memory(gl.float16, [2, v16_rows, D_V // 2], v16_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=32 * GATHER_WARPS)
        mbarrier.init(empty.index(i), count=2)  # one arrival per attention warpgroup
    fence_async_shared()

    # Registers (65536 a multiprocessor, 168 a thread at launch for 12 warps): the gather warps
    # take 40, or 56 for page lookups and prefetch addresses; the two attention warpgroups share
    # the rest equally (the default partition gets what the workers leave).
    GATHER_REGS: gl.constexpr = 56 if PAGE_SIZE > 0 or PREFETCH else 40
    ATTENTION_REGS: gl.constexpr = (2016 // 4 - GATHER_REGS) // 2 // 8 * 8
    gl.warp_specialize(
        [
            (
                _attention_partition,
                (q_lat, q_rope, lat_ring, rope_ring, v16.index(0), ready, empty,
                 list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok, scale_log2,
                 sinks_ptr, scale2, out_row, stride_oh, lse_row, stride_lh, part_ptr, part_lse_ptr,
                 head0, num_heads,
                 D_V, PAGE_SIZE, BLOCK_N, STAGES, 0, SPLIT, HAS_SINKS, HAS_LSE, QK_PROMOTE, ABLATE),
            ),
            (
                _attention_partition,
                (q_lat, q_rope, lat_ring, rope_ring, v16.index(1), ready, empty,
                 list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok, scale_log2,
                 sinks_ptr, scale2, out_row, stride_oh, lse_row, stride_lh, part_ptr, part_lse_ptr,
                 head0, num_heads,
                 D_V, PAGE_SIZE, BLOCK_N, STAGES, 1, SPLIT, HAS_SINKS, HAS_LSE, QK_PROMOTE, ABLATE),
            ),
            (
                _gather_partition,
                (kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
                 lat_ring, rope_ring, ready, empty,
                 D_V, D_ROPE, PAGE_SIZE, BLOCK_N, STAGES, GATHER_WARPS, ABLATE, PREFETCH),
            ),
        ],
        [4, GATHER_WARPS],
        [ATTENTION_REGS, GATHER_REGS],
    )  # fmt: skip


def plan_decode_gluon(batch: int, q_len: int, heads: int, list_len: int, num_sms: int) -> DecodePlan:
    """The split schedule for this kernel: one 64-head program a multiprocessor at a time.

    Same rule as :func:`.mla_decode.plan_decode` (about one wave of programs, a split at least
    ``MIN_KEYS_PER_SPLIT`` keys), with this kernel's head blocks.
    """
    # plan_decode's 64-head tiles are this kernel's: one program a multiprocessor
    return plan_decode(batch, q_len, max(heads, BLOCK_H.value), list_len, num_sms)


_DECODE = FastLaunch(mla_decode_gluon_kernel)
_COMBINE = FastLaunch(mla_combine_kernel)


def mla_decode(
    query, kv, key_list, seq_lens, bmm1_scale, bmm2_scale, sinks, out, lse, workspace, plan,
    page_size, num_kv_rows, stride_kv_row, stride_kv_tok,
):  # fmt: skip
    """Launch the Gluon decode kernel (and the combine when split) on validated arguments.

    Same arguments as :func:`.mla_decode.mla_decode`; ``plan`` from :func:`plan_decode_gluon`.
    Needs a Hopper GPU, ``D_V = 512`` and ``D_ROPE = 64``, e4m3 or bf16 operands.
    """
    batch, q_len, heads, dim = query.shape
    d_v = out.shape[-1]
    config = FP8_CONFIG if query.element_size() == 1 else BF16_CONFIG
    part_rows = batch * q_len * heads
    num_splits = plan.num_splits
    if num_splits > 1:
        num_splits = _workspace_splits(num_splits, part_rows, d_v, workspace.numel())
    workspace_pad = (-workspace.data_ptr()) % 16
    scale1, scale1_on_device = _scale_arg(bmm1_scale)
    scale2, scale2_on_device = _scale_arg(bmm2_scale)
    has_sinks = sinks is not None
    has_lse = lse is not None
    lse_arg = lse if has_lse else out
    lse_strides = lse.stride() if has_lse else (0, 0, 0)
    sinks_arg = sinks if has_sinks else seq_lens
    _DECODE.launch(
        (batch * q_len * plan.head_blocks * num_splits,),
        query, kv, key_list, seq_lens, sinks_arg, scale1, scale2,
        out, lse_arg, workspace, workspace_pad,
        q_len, heads, key_list.shape[-1] * max(page_size, 1), num_kv_rows, num_splits,
        query.stride(0), query.stride(1), query.stride(2), stride_kv_row, stride_kv_tok,
        key_list.stride(-2),
        *out.stride()[:3], *lse_strides,
        D_V=d_v, D_ROPE=dim - d_v, PAGE_SIZE=page_size, BLOCK_N=config.block_n, STAGES=config.stages,
        GATHER_WARPS=config.gather_warps, QK_PROMOTE=config.qk_promote, ABLATE=config.ablate, PREFETCH=config.prefetch, SPLIT=num_splits > 1, HAS_SINKS=has_sinks, HAS_LSE=has_lse,
        SCALE1_ON_DEVICE=scale1_on_device, SCALE2_ON_DEVICE=scale2_on_device,
        num_warps=4, maxnreg=168,
    )  # fmt: skip
    if num_splits > 1:
        _COMBINE.launch(
            (part_rows,),
            workspace, workspace_pad, sinks_arg, scale2, out, lse_arg, heads, q_len, num_splits,
            *out.stride()[:3], *lse_strides,
            D_V=d_v, SPLITS_POW2=next_positive_power_of_2(num_splits),
            HAS_SINKS=has_sinks, HAS_LSE=has_lse, SCALE2_ON_DEVICE=scale2_on_device,
            num_warps=4,
        )  # fmt: skip
