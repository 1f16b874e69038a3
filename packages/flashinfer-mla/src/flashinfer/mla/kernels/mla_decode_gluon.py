"""MLA decode for Hopper (sm_90) in Gluon: a gather partition feeding two wgmma warpgroups.

The same problem, layouts and workspace format as :mod:`.mla_decode` (read its docstring
first); this module replaces only the decode kernel on Hopper, and the split partials are
merged by the same combine kernel.

Schedule
--------
A program takes 64 query heads of one query token and one chunk of its key list (the heads
fill the M of a wgmma; fewer heads are padded). Its twelve warps form three partitions
(``gl.warp_specialize``) that hand work over through mbarriers:

- **gather** (4 warps, few registers): walks the chunk ``BLOCK_N`` keys at a time, reads the
  slot indices (or pages) one block ahead, and copies each valid row with ``cp.async`` into a
  ``STAGES``-deep ring of NVMMA-swizzled tiles (latent ``[BLOCK_N, D_V]``, rope
  ``[BLOCK_N, D_ROPE]``) that wgmma reads directly. Rows that do not exist are never read (their
  copies are predicated off and land as zeros); a per-key bias row (0, or -inf for them) goes
  beside each stage.
- **score** (the default warpgroup): ``S = Q K^T`` as asynchronous wgmma (FP8 x FP8 for e4m3;
  the query is staged in shared memory once; FP8 as four chains of 128 latent columns, each
  from a fresh accumulator and added in float32, because Hopper keeps an FP8 chain's running
  sum at reduced precision), bias, online softmax in the exp2 domain, and
  ``P`` into a double-buffered shared tile for both warpgroups. The running maximum is raised
  (and the output rescaled, by a factor handed over with ``P``) only when some row's grows by
  more than ``2^max_slack_log2`` (:class:`GluonDecodeConfig`). FP8 rows take it lazily (2^8, so
  ``P <= 256``) with ``P`` in fp16 (11 bits). BF16 rows raise it exactly, so a row's largest
  ``P`` is exactly 1 and never rounded where one key dominates, and take ``P`` in bf16: with a
  lazy maximum one bf16 ``P`` failed upstream's BF16 bound (``8e-4 + 2e-2 |ref|``) on elements
  near 0, and two parts (``hi + lo``) cost a second ``P V`` (12% at B128 H128).
- **output** (the second warpgroup) and score each own half of the output columns: ``O[:, h] +=
  P V[:, h]`` as a 16-bit wgmma reading ``P`` from shared memory. FP8 rows are converted to
  fp16 first (exact: every e4m3 value is an fp16 value), each warpgroup its own half, and the
  FP8 stage is released once both have; BF16 stages are read by ``P V`` directly and released
  when it completes.

Every wgmma is waited for within its loop iteration: one still in flight across the loop's back
edge makes ptxas serialize all wgmma of the kernel (its warning C7512).

Per-token limits, sinks, base-2 LSE, float or on-device scales, strided outputs and the split
partials are as in :mod:`.mla_decode`.

Packed mode
-----------
``PACKED`` reads the 656-byte rows of ``flashinfer.mla._packed_cache`` (a bf16 query; FlashMLA's
sparse FP8 cache) with ``LENGTH_MODE`` and ``SINK_IN_LSE`` as in :mod:`.mla_decode`. Only the
gather differs: it copies each row's 512 codes, 4 scales and 64 RoPE values with ``cp.async``
into a raw ring ``RAW_LAG + 1`` blocks deep (one commit group a block), and ``RAW_LAG`` blocks
later converts a landed block into the bf16 stage, ``bf16(code x scale)`` (FlashMLA's K and V),
RoPE values and bias copied beside it. The score and output warpgroups then run the BF16
pipeline, with ``P`` as one bf16 tile (FlashMLA's rounding). Shared memory of 227 KB decides the
tile: the bf16 query 72 KB; two bf16 stages of 32 keys 72 KB; the raw ring, three blocks of
32 x 656 bytes, 61.5 KB; ``P`` 8 KB; about 4 KB of vectors, barriers and the unused fp16 tile:
215 KB. A third bf16 stage (36 KB) or 64-key stages (72 KB more) do not fit; two raw blocks in
flight (42 KB) cover the copies' latency at one program a multiprocessor.
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
from ..._core.triton_compat import cp_async_load, cta_barrier
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
    max_slack_log2 : float
        How far (log2) a row's maximum may grow before the running maximum is raised (and the
        output rescaled): ``P <= 2^max_slack_log2``; 0 raises it exactly, so ``P <= 1`` and the
        largest ``P`` of a row is exactly 1.
    """

    block_n: int
    stages: int
    max_slack_log2: float


# Shared memory (of 227 KB): FP8 holds the query (36 KB), two 36 KB stages, the two fp16 halves
# of V (64 KB) and two P tiles (16 KB); BF16 holds a 72 KB query, three 36 KB stages of 32 keys
# and two P tiles (8 KB). The packed form's budget is in the kernel's docstring.
FP8_CONFIG = GluonDecodeConfig(block_n=64, stages=2, max_slack_log2=8.0)
BF16_CONFIG = GluonDecodeConfig(block_n=32, stages=3, max_slack_log2=0.0)
PACKED_CONFIG = GluonDecodeConfig(block_n=32, stages=2, max_slack_log2=8.0)
# the packed gather copies a block's raw bytes this many blocks before it dequantizes them (a
# ring of RAW_LAG + 1 raw blocks): the copies of two blocks are in flight while one is converted
RAW_LAG = gl.constexpr(2)
GATHER_WARPS = gl.constexpr(4)
# FP8 Q K^T as four wgmma chains summed in float32: Hopper keeps an FP8 chain's running sum at
# reduced precision, and one 576-column chain missed the op table's LSE rule
# (benchmarks/decode_qk_precision.py; benchmarks/notes_gluon_decode.md). BF16 takes one chain.
QK_CHAINS_FP8 = 4


@gluon.constexpr_function
def gather_layout(row_elements, elements_per_lane):
    """Register layout of the gather's copies of ``[BLOCK_N, row_elements]`` tiles.

    Eight lanes share a row and a lane a handful of rows (``BLOCK_N / 16``: one index and one
    row offset each). With 16-byte pieces (``elements_per_lane``), one copy instruction of eight
    lanes fills one 128-byte swizzle segment: no bank conflicts on the NVMMA tiles.
    """
    return gl.BlockedLayout([1, elements_per_lane], [4, 8], [GATHER_WARPS.value, 1], [1, 0])


# The FP8 -> fp16 copy of V: 8 values a lane, 16 lanes a row; loads from the FP8 tile and stores
# to the fp16 tile are both free of bank conflicts.
V_CONVERT_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]))


@gluon.jit
def _gather_partition(
    kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
    lat_ring, rope_ring, bias_ring, raw_codes, raw_scales, raw_rope, raw_bias, ready, empty,
    D_V: gl.constexpr, D_ROPE: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, SLOT_PAGE: gl.constexpr, PACKED: gl.constexpr,
):  # fmt: skip
    if PACKED:
        _gather_packed(
            kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
            lat_ring, rope_ring, bias_ring, raw_codes, raw_scales, raw_rope, raw_bias, ready, empty,
            D_V, D_ROPE, BLOCK_N, STAGES, SLOT_PAGE,
        )  # fmt: skip
    else:
        _gather_rows(
            kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
            lat_ring, rope_ring, bias_ring, ready, empty, D_V, D_ROPE, PAGE_SIZE, BLOCK_N, STAGES, SLOT_PAGE,
        )  # fmt: skip


@gluon.jit
def _gather_rows(
    kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
    lat_ring, rope_ring, bias_ring, ready, empty,
    D_V: gl.constexpr, D_ROPE: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, SLOT_PAGE: gl.constexpr,
):  # fmt: skip
    # the plain cache: rows copied with cp.async straight into the stage wgmma reads
    # 16-byte copies of the latent part; the rope part in eighths (8 bytes a lane for FP8), so
    # that a lane's rows are the same in both layouts
    lat_layout: gl.constexpr = gather_layout(D_V, 128 // kv_ptr.dtype.element_ty.primitive_bitwidth)
    rope_layout: gl.constexpr = gather_layout(D_ROPE, D_ROPE // 8)
    row_layout: gl.constexpr = gl.SliceLayout(1, lat_layout)
    lat_cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, lat_layout))
    rope_cols = D_V + gl.arange(0, D_ROPE, layout=gl.SliceLayout(0, rope_layout))
    rows = gl.arange(0, BLOCK_N, layout=row_layout)

    num_blocks = gl.cdiv(end - start, BLOCK_N)
    # the list entries of the next block are read one block ahead, so their latency overlaps
    # the copies of this one
    offs, valid = key_row_offsets(
        list_row, start + rows, end, num_kv_rows, stride_kv_row, stride_kv_tok, PAGE_SIZE, SLOT_PAGE
    )
    for block in range(num_blocks):
        stage = block % STAGES
        next_offs, next_valid = key_row_offsets(
            list_row, start + (block + 1) * BLOCK_N + rows, end, num_kv_rows, stride_kv_row, stride_kv_tok,
            PAGE_SIZE, SLOT_PAGE,
        )  # fmt: skip
        # a stage is free once both attention warpgroups released its previous use
        mbarrier.wait(empty.index(stage), ((block // STAGES) & 1) ^ 1)
        cp_async_load(lat_ring.index(stage), kv_ptr + offs[:, None] + lat_cols[None, :], mask=valid[:, None])
        rope_offs = gl.convert_layout(offs, gl.SliceLayout(1, rope_layout))
        rope_valid = gl.convert_layout(valid, gl.SliceLayout(1, rope_layout))
        cp_async_load(
            rope_ring.index(stage),
            kv_ptr + rope_offs[:, None] + rope_cols[None, :],
            mask=rope_valid[:, None],
        )
        bias_ring.index(stage).store(gl.where(valid, 0.0, float("-inf")))
        # each gather thread arrives when its own copies have landed; one more arrival (after
        # the partition's barrier) publishes the bias row
        async_copy.mbarrier_arrive(ready.index(stage), increment_count=False)
        mbarrier.arrive(ready.index(stage), count=1)
        offs = next_offs
        valid = next_valid


@gluon.jit
def _gather_packed(
    kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
    lat_ring, rope_ring, bias_ring, raw_codes, raw_scales, raw_rope, raw_bias, ready, empty,
    D_V: gl.constexpr, D_ROPE: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    SLOT_PAGE: gl.constexpr,
):  # fmt: skip
    # the packed cache: each 656-byte row's codes, scales and RoPE values are copied with
    # cp.async into the raw ring (a commit group a block), and RAW_LAG blocks later dequantized
    # into the bf16 stage wgmma reads
    code_layout: gl.constexpr = gather_layout(D_V, 16)
    scale_layout: gl.constexpr = gather_layout(4, 4)  # a row's four float32 scales: 16 bytes
    rope_layout: gl.constexpr = gather_layout(D_ROPE, 8)
    row_layout: gl.constexpr = gl.SliceLayout(1, code_layout)
    code_cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, code_layout))
    scale_cols = gl.arange(0, 4, layout=gl.SliceLayout(0, scale_layout))
    rope_cols = gl.arange(0, D_ROPE, layout=gl.SliceLayout(0, rope_layout))
    rows = gl.arange(0, BLOCK_N, layout=row_layout)
    RAW_STAGES: gl.constexpr = RAW_LAG + 1

    num_blocks = gl.cdiv(end - start, BLOCK_N)
    offs, valid = key_row_offsets(
        list_row, start + rows, end, num_kv_rows, stride_kv_row, stride_kv_tok, 0, SLOT_PAGE
    )
    for block in range(num_blocks + RAW_LAG):
        if block < num_blocks:
            # raw slot `block % RAW_STAGES` was converted last iteration, before its barrier
            raw = block % RAW_STAGES
            next_offs, next_valid = key_row_offsets(
                list_row, start + (block + 1) * BLOCK_N + rows, end, num_kv_rows, stride_kv_row,
                stride_kv_tok, 0, SLOT_PAGE,
            )  # fmt: skip
            row_ptr = kv_ptr + offs
            cp_async_load(raw_codes.index(raw), row_ptr[:, None] + code_cols[None, :], mask=valid[:, None])
            scale_ptr = (gl.convert_layout(row_ptr, gl.SliceLayout(1, scale_layout)) + D_V).to(
                gl.pointer_type(gl.float32)
            )
            scale_valid = gl.convert_layout(valid, gl.SliceLayout(1, scale_layout))
            cp_async_load(
                raw_scales.index(raw), scale_ptr[:, None] + scale_cols[None, :], mask=scale_valid[:, None]
            )
            rope_ptr = (gl.convert_layout(row_ptr, gl.SliceLayout(1, rope_layout)) + D_V + 16).to(
                gl.pointer_type(gl.bfloat16)
            )
            rope_valid = gl.convert_layout(valid, gl.SliceLayout(1, rope_layout))
            cp_async_load(
                raw_rope.index(raw), rope_ptr[:, None] + rope_cols[None, :], mask=rope_valid[:, None]
            )
            raw_bias.index(raw).store(gl.where(valid, 0.0, float("-inf")))
            offs = next_offs
            valid = next_valid
        # one group a block, empty past the last, so that RAW_LAG groups pending means the
        # block RAW_LAG back has landed
        async_copy.commit_group()
        if block >= RAW_LAG:
            ready_block = block - RAW_LAG
            async_copy.wait_group(RAW_LAG)
            cta_barrier()  # every thread's copies of that block
            stage = ready_block % STAGES
            mbarrier.wait(empty.index(stage), ((ready_block // STAGES) & 1) ^ 1)
            _dequantize(
                raw_codes.index(ready_block % RAW_STAGES), raw_scales.index(ready_block % RAW_STAGES),
                raw_rope.index(ready_block % RAW_STAGES), raw_bias.index(ready_block % RAW_STAGES),
                lat_ring.index(stage), rope_ring.index(stage), bias_ring.index(stage), BLOCK_N,
            )  # fmt: skip
            # the stores reach wgmma (async proxy) once every thread has fenced them; the arrive
            # synchronizes the partition first (one thread arrives), which also frees the raw slot
            fence_async_shared()
            mbarrier.arrive(ready.index(stage), count=1)


@gluon.jit
def _dequantize(codes, scales, rope_raw, bias_raw, lat, rope, bias, BLOCK_N: gl.constexpr):
    # one raw block into a bf16 stage: latent value = bf16(e4m3 code x its 128-value block's scale)
    # (FlashMLA's K and V), 16 rows x 128 codes at a time; RoPE values and the bias row copied
    for r in gl.static_range(BLOCK_N // 16):
        row_codes = codes.slice(r * 16, 16, dim=0)
        row_scales = scales.slice(r * 16, 16, dim=0)
        for c in gl.static_range(codes.shape[1] // 128):
            code = row_codes.slice(c * 128, 128, dim=1).load(V_CONVERT_LAYOUT)
            scale = row_scales.slice(c, 1, dim=1).load(V_CONVERT_LAYOUT)
            value = code.to(gl.float8e4nv, bitcast=True).to(gl.float32) * scale
            lat.slice(r * 16, 16, dim=0).slice(c * 128, 128, dim=1).store(value.to(gl.bfloat16))
    rope.store(rope_raw.load(gather_layout(rope.shape[1], 8)))
    bias.store(bias_raw.load(gl.BlockedLayout([1], [32], [GATHER_WARPS.value], [0])))


@gluon.jit
def _wait_ready(ready, block, STAGES: gl.constexpr):
    # the ring stage of key block `block`, once the gather partition has filled it
    stage = block % STAGES
    mbarrier.wait(ready.index(stage), (block // STAGES) & 1)
    return stage


@gluon.jit
def _copy_v_half(v_fp8, v16, BLOCK_N: gl.constexpr):
    # FP8 -> fp16 copy of one half of V, 16 rows at a time (32 values a thread)
    for r in gl.static_range(BLOCK_N // 16):
        v = v_fp8.slice(r * 16, 16, dim=0).load(V_CONVERT_LAYOUT)
        v16.slice(r * 16, 16, dim=0).store(v.to(gl.float16))
    fence_async_shared()


@gluon.jit
def _p_times_v(p_ring, buf, v, acc):
    # acc += P V with P in buffer `buf`, waited for within the iteration
    acc = warpgroup_mma(p_ring.index(buf), v, acc, is_async=True)
    return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))


@gluon.jit
def _chain(q_lat, lat, acc, C0: gl.constexpr, C1: gl.constexpr):
    # Q K^T over latent columns C0 .. C1 into `acc`'s registers, its value unused
    return warpgroup_mma(
        q_lat.slice(C0, C1 - C0, dim=1),
        lat.slice(C0, C1 - C0, dim=1).permute((1, 0)),
        acc,
        use_acc=False,
        is_async=True,
    )


@gluon.jit
def _scores(q_lat, q_rope, lat, rope, s_zero, QK_CHAINS: gl.constexpr):
    # S = Q K^T over the latent and rope columns: one wgmma chain, or four chains of a quarter
    # of the latent columns each (rope with the last) summed in float32, two accumulators live
    D_V: gl.constexpr = q_lat.shape[1]
    if QK_CHAINS == 1:
        s = _chain(q_lat, lat, s_zero, 0, D_V)
        s = warpgroup_mma(q_rope, rope.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    else:
        gl.static_assert(QK_CHAINS == 4, "Q K^T runs as one chain or four")
        C: gl.constexpr = D_V // 4
        s = _chain(q_lat, lat, s_zero, 0, C)
        t = _chain(q_lat, lat, s_zero, C, 2 * C)
        s, t = warpgroup_mma_wait(num_outstanding=0, deps=(s, t))
        s = s + t
        # the spent accumulator is the next chain's (use_acc=False): no third tile of registers
        t = _chain(q_lat, lat, t, 2 * C, 3 * C)
        t = warpgroup_mma_wait(num_outstanding=0, deps=(t,))
        s = s + t
        t = _chain(q_lat, lat, t, 3 * C, D_V)
        t = warpgroup_mma(q_rope, rope.permute((1, 0)), t, is_async=True)
        t = warpgroup_mma_wait(num_outstanding=0, deps=(t,))
        s = s + t
    return s


@gluon.jit
def _score_partition(
    q_lat, q_rope, lat_ring, rope_ring, bias_ring, v16, p_ring, alpha_ring, ready, empty,
    p_ready, p_free, o_scale_smem, done,
    start, end, scale_log2, sinks_ptr, scale2, out_row, stride_oh, lse_row, stride_lh,
    part_ptr, part_lse_ptr, head0, num_heads,
    D_V: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
    HAS_SINKS: gl.constexpr, HAS_LSE: gl.constexpr, QK_CHAINS: gl.constexpr, SINK_IN_LSE: gl.constexpr,
    MAX_SLACK_LOG2: gl.constexpr,
):  # fmt: skip
    FP8: gl.constexpr = q_lat.dtype.primitive_bitwidth == 8
    D_HALF: gl.constexpr = D_V // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 256 // q_lat.dtype.primitive_bitwidth]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D_HALF, 16]
    )
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=row_s)  # the maximum P is taken against
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK_H, D_HALF], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)

    num_blocks = gl.cdiv(end - start, BLOCK_N)
    for block in range(num_blocks):
        stage = _wait_ready(ready, block, STAGES)
        buf = block % 2
        # the rows were written by cp.async (generic proxy); wgmma reads through the async proxy
        fence_async_shared()
        lat = lat_ring.index(stage)
        if FP8:  # this half of V, on the CUDA cores beside Q K^T
            _copy_v_half(lat.slice(0, D_HALF, dim=1), v16, BLOCK_N)
        s = _scores(q_lat, q_rope, lat, rope_ring.index(stage), s_zero, QK_CHAINS)
        if FP8:
            mbarrier.arrive(empty.index(stage), count=1)

        # online softmax, the maximum raised as MAX_SLACK_LOG2 lets; a row with nothing seen yet
        # keeps -inf
        bias = bias_ring.index(stage).load(gl.SliceLayout(0, s_layout))
        s = s * scale_log2 + bias[None, :]
        m_new = gl.maximum(m_i, gl.max(s, 1))
        raise_max = gl.max((m_new > m_i + MAX_SLACK_LOG2).to(gl.int32), 0) > 0
        alpha = gl.full([BLOCK_H], 1.0, gl.float32, layout=row_s)
        if raise_max:
            alpha = gl.exp2(m_i - gl.where(m_new == float("-inf"), 0.0, m_new))
            m_i = m_new
            l_i = l_i * alpha
        p = gl.exp2(s - gl.where(m_i == float("-inf"), 0.0, m_i)[:, None])
        l_i += gl.sum(p, 1)

        # hand P (and the rescale factor, when the maximum rose) to the output warpgroup
        mbarrier.wait(p_free.index(buf), ((block // 2) & 1) ^ 1)
        p_ring.index(buf).store(p.to(p_ring.dtype))
        alpha_ring.index(buf).store(gl.where(raise_max, alpha, -1.0))
        fence_async_shared()
        mbarrier.arrive(p_ready.index(buf), count=1)

        if raise_max:
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        if FP8:
            acc = _p_times_v(p_ring, buf, v16, acc)
        else:
            acc = _p_times_v(p_ring, buf, lat.slice(0, D_HALF, dim=1), acc)
        if not FP8:
            mbarrier.arrive(empty.index(stage), count=1)  # P V has read the BF16 stage

    # epilogue: the row scales for both halves, this half's columns, and the LSE
    seen = l_i > 0.0
    if SPLIT:
        o_scale = gl.where(seen, 1.0 / gl.where(seen, l_i, 1.0), 0.0)
    else:
        denom = l_i
        if HAS_SINKS:
            heads_s = head0 + gl.arange(0, BLOCK_H, layout=row_s)
            sink = gl.load(sinks_ptr + heads_s, mask=heads_s < num_heads, other=0.0) * LOG2E
            denom += gl.exp2(sink - gl.where(seen, m_i, 0.0))
        o_scale = gl.where(seen, scale2 / gl.where(seen, denom, 1.0), 0.0)
    o_scale_smem.store(o_scale)
    mbarrier.arrive(done, count=1)
    _store_half(
        acc, gl.convert_layout(o_scale, row_o), out_row, stride_oh, part_ptr, head0, num_heads, 0, D_V, SPLIT
    )
    heads = head0 + gl.arange(0, BLOCK_H, layout=row_s)
    head_ok = heads < num_heads
    lse = m_i + gl.log2(gl.where(seen, l_i, 1.0))
    if SPLIT:
        gl.store(part_lse_ptr + heads, gl.where(seen, lse, float("-inf")), mask=head_ok)
    elif HAS_LSE:
        if SINK_IN_LSE:  # the packed form: the sinks' mass included, -inf where there is none
            some = denom > 0.0
            lse = gl.where(
                some, gl.where(seen, m_i, 0.0) + gl.log2(gl.where(some, denom, 1.0)), float("-inf")
            )
        else:
            lse = gl.where(seen, lse, float("inf"))
        gl.store(lse_row + heads * stride_lh, lse, mask=head_ok)


@gluon.jit
def _store_half(acc, o_scale, out_row, stride_oh, part_ptr, head0, num_heads, HALF: gl.constexpr,
                D_V: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
    # one half of the output columns: final bf16 rows, or float32 split partials
    o_layout: gl.constexpr = acc.type.layout
    D_HALF: gl.constexpr = D_V // 2
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, o_layout))
    cols = HALF * D_HALF + gl.arange(0, D_HALF, layout=gl.SliceLayout(0, o_layout))
    mask = (heads < num_heads)[:, None]
    if SPLIT:
        ptrs = part_ptr + heads.to(gl.int64)[:, None] * D_V + cols[None, :]
        gl.store(ptrs, acc * o_scale[:, None], mask=mask)
    else:
        ptrs = out_row + heads[:, None] * stride_oh + cols[None, :]
        gl.store(ptrs, (acc * o_scale[:, None]).to(out_row.dtype.element_ty), mask=mask)


@gluon.jit
def _output_partition(
    lat_ring, v16, p_ring, alpha_ring, ready, empty, p_ready, p_free, o_scale_smem, done,
    start, end, out_row, stride_oh, part_ptr, head0, num_heads,
    D_V: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
):  # fmt: skip
    FP8: gl.constexpr = lat_ring.dtype.primitive_bitwidth == 8
    D_HALF: gl.constexpr = D_V // 2
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D_HALF, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    acc = gl.zeros([BLOCK_H, D_HALF], gl.float32, layout=o_layout)

    num_blocks = gl.cdiv(end - start, BLOCK_N)
    for block in range(num_blocks):
        stage = _wait_ready(ready, block, STAGES)
        buf = block % 2
        v_half = lat_ring.index(stage).slice(D_HALF, D_HALF, dim=1)
        if FP8:
            _copy_v_half(v_half, v16, BLOCK_N)
            mbarrier.arrive(empty.index(stage), count=1)
        mbarrier.wait(p_ready.index(buf), (block // 2) & 1)
        alpha = alpha_ring.index(buf).load(row_o)
        if gl.max(alpha, 0) >= 0.0:  # the score warpgroup raised the maximum
            acc = acc * alpha[:, None]
        fence_async_shared()
        if FP8:
            acc = _p_times_v(p_ring, buf, v16, acc)
        else:
            acc = _p_times_v(p_ring, buf, v_half, acc)
        mbarrier.arrive(p_free.index(buf), count=1)
        if not FP8:
            mbarrier.arrive(empty.index(stage), count=1)

    mbarrier.wait(done, 0)
    _store_half(acc, o_scale_smem.load(row_o), out_row, stride_oh, part_ptr, head0, num_heads, 1, D_V, SPLIT)


@gluon.jit
def _partial_pointers(
    workspace_ptr, workspace_pad, split, row, head_blocks, num_heads, num_splits, D_V: gl.constexpr
):
    # where this program's split partials go: [num_splits, rows * H, D_V] outputs, then
    # [num_splits, rows * H] LSEs, float32 from the first 16-byte boundary of the byte workspace
    workspace_f32 = (workspace_ptr + workspace_pad).to(gl.pointer_type(gl.float32))
    part_rows = (gl.num_programs(0) // (head_blocks * num_splits)) * num_heads
    part_row0 = split.to(gl.int64) * part_rows + row * num_heads
    part_ptr = workspace_f32 + part_row0 * D_V
    part_lse_ptr = workspace_f32 + num_splits * part_rows.to(gl.int64) * D_V + part_row0
    return part_ptr, part_lse_ptr


@gluon.jit
def _stage_query(
    q_ptr, batch, token, head0, num_heads, stride_qb, stride_qt, stride_qh,
    lat_smem: gl.constexpr, rope_smem: gl.constexpr, D_V: gl.constexpr, D_ROPE: gl.constexpr,
):  # fmt: skip
    # the query of this program's heads in shared memory, loaded once: the A operand of every
    # Q K^T (latent and rope parts in the stages' swizzles)
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    q_layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, q_layout))
    q_row = q_ptr + batch.to(gl.int64) * stride_qb + token * stride_qt + heads[:, None] * stride_qh
    head_ok = (heads < num_heads)[:, None]
    q_lat = gl.allocate_shared_memory(dtype, [BLOCK_H, D_V], lat_smem)
    for c in gl.static_range(D_V // 128):  # 128 columns at a time: few registers
        cols = c * 128 + gl.arange(0, 128, layout=gl.SliceLayout(0, q_layout))
        q_lat.slice(c * 128, 128, dim=1).store(gl.load(q_row + cols[None, :], mask=head_ok, other=0.0))
    rope_cols = D_V + gl.arange(0, D_ROPE, layout=gl.SliceLayout(0, q_layout))
    q_rope = gl.allocate_shared_memory(
        dtype, [BLOCK_H, D_ROPE], rope_smem, gl.load(q_row + rope_cols[None, :], mask=head_ok, other=0.0)
    )
    return q_lat, q_rope


@gluon.jit
def _raw_ring(
    lat_ring, rope_ring, bias_ring, vec_smem: gl.constexpr,
    BLOCK_N: gl.constexpr, D_V: gl.constexpr, D_ROPE: gl.constexpr, PACKED: gl.constexpr,
):  # fmt: skip
    # the packed gather's raw ring (RAW_LAG + 1 blocks of codes, scales, RoPE values and bias);
    # without PACKED the bf16 rings stand in (never read)
    if PACKED:
        # row-major, unswizzled: 8 lanes of a copy or a load cover 128 contiguous bytes of one row
        raw_smem: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
        raw_codes = gl.allocate_shared_memory(gl.uint8, [RAW_LAG + 1, BLOCK_N, D_V], raw_smem)
        raw_scales = gl.allocate_shared_memory(gl.float32, [RAW_LAG + 1, BLOCK_N, 4], raw_smem)
        raw_rope = gl.allocate_shared_memory(gl.bfloat16, [RAW_LAG + 1, BLOCK_N, D_ROPE], raw_smem)
        raw_bias = gl.allocate_shared_memory(gl.float32, [RAW_LAG + 1, BLOCK_N], vec_smem)
        return raw_codes, raw_scales, raw_rope, raw_bias
    else:
        return lat_ring, lat_ring, rope_ring, bias_ring


@gluon.jit
def _init_barriers(ready, empty, p_ready, p_free, done, READY_COUNT: gl.constexpr, STAGES: gl.constexpr):
    # the ring's stages are filled by the gather (READY_COUNT arrivals) and released by both
    # attention warpgroups; P is handed over through two buffers; `done` publishes the row scales
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=READY_COUNT)
        mbarrier.init(empty.index(i), count=2)  # both attention warpgroups
    for i in gl.static_range(2):
        mbarrier.init(p_ready.index(i), count=1)
        mbarrier.init(p_free.index(i), count=1)
    mbarrier.init(done, count=1)
    fence_async_shared()


@gluon.jit
def _read_scale(scale, ON_DEVICE: gl.constexpr):
    # a scale argument: a float, or read from a 0-dim float32 tensor
    if ON_DEVICE:
        return gl.load(scale)
    else:
        return scale


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
    STAGES: gl.constexpr, SPLIT: gl.constexpr, HAS_SINKS: gl.constexpr, HAS_LSE: gl.constexpr,
    SCALE1_ON_DEVICE: gl.constexpr, SCALE2_ON_DEVICE: gl.constexpr, QK_CHAINS: gl.constexpr,
    SLOT_PAGE: gl.constexpr = 0, PACKED: gl.constexpr = False,
    LENGTH_MODE: gl.constexpr = 0, SINK_IN_LSE: gl.constexpr = False, MAX_SLACK_LOG2: gl.constexpr = 8.0,
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

    n = list_length(seq_lens_ptr, batch, row, token, q_len, list_width, LENGTH_MODE)
    chunk = gl.cdiv(gl.cdiv(n, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = gl.minimum(start + chunk, n)
    list_row = list_ptr + row.to(gl.int64) * stride_list_row
    if PAGE_SIZE > 0:
        list_row = list_ptr + batch.to(gl.int64) * stride_list_row
    scale_log2 = _read_scale(bmm1_scale, SCALE1_ON_DEVICE) * LOG2E
    scale2 = _read_scale(bmm2_scale, SCALE2_ON_DEVICE)
    out_row = out_ptr + batch.to(gl.int64) * stride_ob + token * stride_ot
    lse_row = lse_ptr + batch.to(gl.int64) * stride_lb + token * stride_lt
    part_ptr, part_lse_ptr = _partial_pointers(
        workspace_ptr, workspace_pad, split, row, head_blocks, num_heads, num_splits, D_V
    )

    # the key tiles' swizzled layouts, which the query's copy in shared memory shares
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    lat_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
    rope_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_ROPE], dtype)
    q_lat, q_rope = _stage_query(
        q_ptr, batch, token, head0, num_heads, stride_qb, stride_qt, stride_qh,
        lat_smem, rope_smem, D_V, D_ROPE,
    )  # fmt: skip

    FP8: gl.constexpr = dtype.primitive_bitwidth == 8
    p_dtype: gl.constexpr = gl.float16 if FP8 else gl.bfloat16
    lat_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D_V], lat_smem)
    rope_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D_ROPE], rope_smem)
    # per-row vectors: a 1-D layout, leading dims index the buffers
    vec_smem: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    bias_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_N], vec_smem)
    # each warpgroup's fp16 copy of its half of V (FP8 only: BF16 rows feed P V from the ring)
    v16_rows: gl.constexpr = BLOCK_N if FP8 else 8
    v16_cols: gl.constexpr = D_V // 2 if FP8 else 64
    v16_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([v16_rows, v16_cols], gl.float16)
    v16 = gl.allocate_shared_memory(gl.float16, [2, v16_rows, v16_cols], v16_layout)
    p_ring = gl.allocate_shared_memory(  # two buffers of P
        p_dtype,
        [2, BLOCK_H, BLOCK_N],
        gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], p_dtype),
    )
    alpha_ring = gl.allocate_shared_memory(gl.float32, [2, BLOCK_H], vec_smem)
    o_scale_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vec_smem)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    p_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    p_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    raw_codes, raw_scales, raw_rope, raw_bias = _raw_ring(
        lat_ring, rope_ring, bias_ring, vec_smem, BLOCK_N, D_V, D_ROPE, PACKED
    )
    # a stage is ready after the packed gather's one arrival past its stores, or after every
    # gather thread's copies and then the bias row
    ready_count: gl.constexpr = 1 if PACKED else 32 * GATHER_WARPS + 1
    _init_barriers(ready, empty, p_ready, p_free, done, ready_count, STAGES)

    # Registers (65536 a multiprocessor: 168 a thread at launch for 12 warps): the gather takes
    # 40, or 56 for page lookups; the output warpgroup 216, or 200 beside the page lookups; the
    # score warpgroup what is left (it holds half of O and two S tiles: no spills at 248).
    # The packed gather converts on the CUDA cores: 88 for it, 184 for the output warpgroup.
    GATHER_REGS: gl.constexpr = 88 if PACKED else (56 if PAGE_SIZE > 0 else 40)
    OUTPUT_REGS: gl.constexpr = 184 if PACKED else (200 if PAGE_SIZE > 0 else 216)
    gl.warp_specialize(
        [
            (
                _score_partition,
                (q_lat, q_rope, lat_ring, rope_ring, bias_ring, v16.index(0), p_ring, alpha_ring, ready, empty,
                 p_ready, p_free, o_scale_smem, done,
                 start, end, scale_log2, sinks_ptr, scale2, out_row, stride_oh, lse_row, stride_lh,
                 part_ptr, part_lse_ptr, head0, num_heads,
                 D_V, BLOCK_N, STAGES, SPLIT, HAS_SINKS, HAS_LSE, QK_CHAINS, SINK_IN_LSE, MAX_SLACK_LOG2),
            ),
            (
                _output_partition,
                (lat_ring, v16.index(1), p_ring, alpha_ring, ready, empty, p_ready, p_free, o_scale_smem, done,
                 start, end, out_row, stride_oh, part_ptr, head0, num_heads,
                 D_V, BLOCK_N, STAGES, SPLIT),
            ),
            (
                _gather_partition,
                (kv_ptr, list_row, start, end, num_kv_rows, stride_kv_row, stride_kv_tok,
                 lat_ring, rope_ring, bias_ring, raw_codes, raw_scales, raw_rope, raw_bias, ready, empty,
                 D_V, D_ROPE, PAGE_SIZE, BLOCK_N, STAGES, SLOT_PAGE, PACKED),
            ),
        ],
        [4, GATHER_WARPS],
        [OUTPUT_REGS, GATHER_REGS],
    )  # fmt: skip


def plan_decode_gluon(batch: int, q_len: int, heads: int, list_len: int, num_sms: int) -> SplitPlan:
    """The split schedule for this kernel: one 64-head program a multiprocessor at a time
    (about one wave of programs, :func:`.mla_decode_shared.split_count`)."""
    head_blocks = ceil_div(heads, BLOCK_H.value)
    return SplitPlan(split_count(batch * q_len * head_blocks, num_sms, list_len), head_blocks)


_DECODE = FastLaunch(mla_decode_gluon_kernel)
_COMBINE = FastLaunch(mla_combine_kernel)


def mla_decode(call, rows: KeyRows, plan=None, *, packed: bool = False, lengths: Lengths = Lengths.CAUSAL):
    """Launch the Gluon decode kernel (and the combine when split) on a validated call; returns
    the replay (:func:`.mla_decode_shared.replay_decode`).

    Same arguments as the portable kernel's ``mla_decode``; ``plan`` (or ``call.plan``) from
    :func:`plan_decode_gluon`. Needs a Hopper GPU, ``D_V = 512`` and ``D_ROPE = 64``, e4m3 or
    bf16 operands (or, ``packed``, a bf16 query over 656-byte rows), and key rows (the cache's
    pointer and ``rows``' strides) 16-byte aligned.
    """
    query, key_list, out = call.query, call.table, call.out
    plan = call.plan if plan is None else plan
    batch, q_len, heads, dim = query.shape
    d_v = out.shape[-1]
    fp8 = query.element_size() == 1
    config = PACKED_CONFIG if packed else FP8_CONFIG if fp8 else BF16_CONFIG
    host = host_args(call, plan.num_splits)
    num_splits = host.num_splits
    decode = _DECODE.bind(
        (batch * q_len * plan.head_blocks * num_splits,),
        query, call.kv_cache, key_list, host.seq_lens, host.sinks, host.scale1, host.scale2,
        out, host.lse, call.workspace, host.workspace_pad,
        q_len, heads, rows.list_width, rows.num_kv_rows, num_splits,
        *query.stride()[:3], rows.stride_kv_row, rows.stride_kv_tok,
        key_list.stride(-2),
        *out.stride()[:3], *host.lse_strides,
        D_V=d_v, D_ROPE=dim - d_v, PAGE_SIZE=rows.page_size, BLOCK_N=config.block_n, STAGES=config.stages,
        SPLIT=num_splits > 1, HAS_SINKS=call.sinks is not None, HAS_LSE=call.lse is not None,
        SCALE1_ON_DEVICE=host.scale1_on_device, SCALE2_ON_DEVICE=host.scale2_on_device,
        QK_CHAINS=QK_CHAINS_FP8 if fp8 else 1, SLOT_PAGE=rows.slot_page,
        PACKED=packed, LENGTH_MODE=lengths.value, SINK_IN_LSE=packed, MAX_SLACK_LOG2=config.max_slack_log2,
        num_warps=4, maxnreg=168,
    )  # fmt: skip
    # the 576-wide form's LSE leaves the sinks out, the packed form's takes them in
    combine = launch_combine(_COMBINE, call, host, sink_in_lse=packed) if num_splits > 1 else None
    return replay_decode(call, host, decode, combine)
