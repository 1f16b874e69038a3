"""The masked grouped FP8 GEMM at decode sizes, for Hopper (sm_90) in Gluon: each expert's weights
streamed once, experts without tokens never read.

``out[g, r, j] = sum_kb a_scale[g, r, kb] * b_scale[g, j // 128, kb] * sum_{k in kb} a[g, r, k] * b[g, j, k]``
for ``r < clamp(masked_m[g], 0, m)``: DeepSeek's MoE layers at decode, where an expert holds a few
tokens (``expected_m`` up to 64) and the job is reading ``b``, ``G x n x k`` bytes of weights, once.

The schedule of :mod:`.gluon_fp8_decode_gemm` (read its docstring first), persistent and grouped:

- **Swap-AB.** The weights are the wgmma's 64-row side (``BLOCK_W`` rows a tile: one math
  warpgroup a 64-row share), an expert's tokens its narrow side (``BLOCK_T``, 16 to 128), so a
  tile of few tokens wastes no weight bytes.
- **Work items, compacted on the device.** An item is ``(group, token tile, weight tile)``; group
  ``g`` has ``ceil(rows_g / BLOCK_T) * ceil(n / BLOCK_W)`` of them, none when ``masked_m[g]`` is 0.
  Every partition of every program loads ``masked_m`` once, forms the inclusive prefix sum of the
  groups' item counts in registers, and walks items ``pid, pid + programs, ...`` up to the total,
  finding each one's group by counting the prefix sums at or below it. No host work reads
  ``masked_m`` (graph-capturable), no program is launched for an empty expert, and the load is
  balanced over the programs whatever the counts.
- **One ring across items.** The producer warp streams, item after item, each 128-deep K step's
  ``BLOCK_W x 128`` weight box and ``BLOCK_T x 128`` token box by TMA and the step's token and
  weight-row scales by ``cp.async`` into a ``STAGES``-deep ring; the math warpgroups take the
  stages in the same order, so the next items' weights are in flight while a math warpgroup
  stores an item's tile. ``K`` is not split.

Layout
------
- ``a (G, m, k)`` and ``b (G, n, k)``: FP8 e4m3, read by TMA as ``[G * m, k]`` and ``[G * n, k]``
  (unit k stride, 16-byte aligned base and row stride, groups packed). A box that runs past a
  group's valid rows reads rows whose products are discarded (never stored); past the tensor,
  zeros.
- ``a_scale (G, m, ceil(k / 128))``, ``b_scale (G, ceil(n / 128), ceil(k / 128))``: float32, any
  strides.
- ``out (G, m, n)``: bf16 or fp16, any strides; rows past a group's valid rows are not written.
- ``masked_m (G,)``: int32. Runs on the Triton releases ``flashinfer._core.kernel_tier`` lists
  (the names that differ between them come from ``flashinfer._core.triton_compat``).
"""

from __future__ import annotations

import dataclasses

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from ...._core.triton_compat import cp_async_load, tma_load
from ...._core.triton_launch import FastLaunch
from ....utils import ceil_div
from .. import group_strides, multiprocessors
from ..gluon_tma import SUB_M, tma_rows_descriptor
from .gluon_fp8_decode_gemm import launch_options, operand_rings, stages_for

# The producer warp holds its pointers, masks and the group table (GROUPS / 32 values of two
# vectors); the second math warpgroup takes what the decode GEMM's does (launch_options).
PRODUCER_REGISTERS = gl.constexpr(56)
MATH_REGISTERS = gl.constexpr(232)
# Tokens a tile can take, and the experts a launch can take (the group table lives in registers).
MAX_BLOCK_T = 128
MAX_GROUPS = 1024


@dataclasses.dataclass(frozen=True)
class MaskedDecodeConfig:
    """Tile of :func:`group_gemm_masked`: ``block_w`` weight rows (64 or 128) by ``block_t``
    tokens (16 to 128, a power of two), a ``stages``-deep ring."""

    block_w: int
    block_t: int
    stages: int


def pick_config(expected_m: int) -> MaskedDecodeConfig:
    """The tile for ``expected_m`` tokens an expert: room for twice the expected count (counts
    drawn around it seldom need a second token tile, which reads the weights again), 128
    weight rows (two math warpgroups), the decode GEMM's ring (4 stages at 128 tokens, 6 at 64:
    as measured on an H100; a deeper ring, which shared memory allows, is the next thing to time
    at 32-64 tokens an expert, ``benchmarks/notes_decode_gemm.md``)."""
    block_t = min(MAX_BLOCK_T, max(16, triton.next_power_of_2(2 * expected_m)))
    return MaskedDecodeConfig(128, block_t, stages_for(128, block_t))


@gluon.jit
def _add(x, y):
    return x + y


@gluon.jit
def _group_table(masked_m_ptr, G, M, N, BLOCK_T: gl.constexpr, BLOCK_W: gl.constexpr,
                 GROUPS: gl.constexpr, LAYOUT: gl.constexpr):  # fmt: skip
    # each group's valid rows (masked_m clamped to [0, M]) and the inclusive prefix sum of the
    # groups' work items; the last is the total
    ids = gl.arange(0, GROUPS, layout=LAYOUT)
    rows = gl.load(masked_m_ptr + ids, mask=ids < G, other=0)
    rows = gl.minimum(gl.maximum(rows, 0), M)
    items = gl.cdiv(rows, BLOCK_T) * gl.cdiv(N, BLOCK_W)
    ends = gl.associative_scan(items, 0, _add)
    return ids, rows, ends


@gluon.jit
def _item(item, table, N, BLOCK_W: gl.constexpr):
    # (group, token tile, weight tile, the group's valid rows) of a work item: its group is the
    # number of groups whose items all come before it
    ids, rows, ends = table
    before = ends <= item
    group = gl.sum(before.to(gl.int32), 0)
    first = gl.max(gl.where(before, ends, 0), 0)
    valid = gl.sum(gl.where(ids == group, rows, 0), 0)
    tiles_w = gl.cdiv(N, BLOCK_W)
    local = item - first
    return group, local // tiles_w, local % tiles_w, valid


@gluon.jit
def _producer(a_desc, b_desc, scales, masked_m_ptr, rings, G, M, N, K, STAGES: gl.constexpr,
              GROUPS: gl.constexpr):  # fmt: skip
    a_scale_ptr, b_scale_ptr, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn, stride_sbk = scales
    a_ring, b_ring, sa_ring, sb_ring, full, empty = rings
    BLOCK_T: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_W: gl.constexpr = b_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    STEP_BYTES: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    table = _group_table(masked_m_ptr, G, M, N, BLOCK_T, BLOCK_W, GROUPS, lanes)
    steps = gl.cdiv(K, BK)
    i = 0  # the ring's position, continued from item to item
    for item in range(gl.program_id(0), gl.max(table[2], 0), gl.num_programs(0)):
        group, tile_t, tile_w, valid = _item(item, table, N, BLOCK_W)
        offs_t = tile_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=lanes)
        offs_w = tile_w * BLOCK_W + gl.arange(0, BLOCK_W, layout=lanes)
        # scales of tokens past the group's rows, and of weight rows past n, arrive as zeros
        sa_ptrs = a_scale_ptr + group * stride_sag + offs_t * stride_sam
        sb_ptrs = b_scale_ptr + group * stride_sbg + (offs_w // 128) * stride_sbn
        t_ok = offs_t < valid
        w_ok = offs_w < N
        for step in range(steps):
            stage = i % STAGES
            mbarrier.wait(empty.index(stage), ((i // STAGES) & 1) ^ 1)
            # the scales' arrival raises the stage's pending count before expect-tx lowers it
            cp_async_load(sa_ring.index(stage), sa_ptrs + step * stride_sak, mask=t_ok)
            cp_async_load(sb_ring.index(stage), sb_ptrs + step * stride_sbk, mask=w_ok)
            async_copy.mbarrier_arrive(full.index(stage))
            mbarrier.expect(full.index(stage), STEP_BYTES)
            tma_load(
                b_desc, [group * N + tile_w * BLOCK_W, step * BK], full.index(stage), b_ring.index(stage)
            )
            tma_load(
                a_desc, [group * M + tile_t * BLOCK_T, step * BK], full.index(stage), a_ring.index(stage)
            )
            i += 1


@gluon.jit
def _math(rings, out_ptr, masked_m_ptr, sizes, STAGES: gl.constexpr, GROUPS: gl.constexpr,
          WARPGROUP: gl.constexpr):  # fmt: skip
    G, M, N, K, stride_og, stride_om, stride_on = sizes
    a_ring, b_ring, sa_ring, sb_ring, full, empty = rings
    BLOCK_T: gl.constexpr = a_ring.type.shape[1]
    BLOCK_W: gl.constexpr = b_ring.type.shape[1]
    BK: gl.constexpr = a_ring.type.shape[2]
    ROW0: gl.constexpr = WARPGROUP * SUB_M
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_T, 32]
    )
    # stores coalesced along the weight rows (out's columns): 32 lanes a column of the tile
    store_layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 4], [0, 1])
    table = _group_table(
        masked_m_ptr, G, M, N, BLOCK_T, BLOCK_W, GROUPS, gl.BlockedLayout([1], [32], [4], [0])
    )
    steps = gl.cdiv(K, BK)
    i = 0
    for item in range(gl.program_id(0), gl.max(table[2], 0), gl.num_programs(0)):
        group, tile_t, tile_w, valid = _item(item, table, N, BLOCK_W)
        acc = gl.zeros([SUB_M, BLOCK_T], gl.float32, layout=mma_layout)
        part = gl.zeros([SUB_M, BLOCK_T], gl.float32, layout=mma_layout)
        for _ in range(steps):
            stage = i % STAGES
            mbarrier.wait(full.index(stage), (i // STAGES) & 1)
            b_rows = b_ring.index(stage).slice(ROW0, SUB_M, dim=0)
            part = warpgroup_mma(
                b_rows, a_ring.index(stage).permute((1, 0)), part, use_acc=False, is_async=True
            )
            sa = sa_ring.index(stage).load(gl.SliceLayout(0, mma_layout))
            sb = sb_ring.index(stage).slice(ROW0, SUB_M).load(gl.SliceLayout(1, mma_layout))
            part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
            mbarrier.arrive(empty.index(stage), count=1)
            acc += part * sb[:, None] * sa[None, :]
            i += 1
        values = gl.convert_layout(acc, store_layout)
        rows = tile_w * BLOCK_W + ROW0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, store_layout))
        tokens = tile_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, store_layout))
        mask = (rows < N)[:, None] & (tokens < valid)[None, :]
        out_ptrs = (out_ptr + group.to(gl.int64) * stride_og + tokens.to(gl.int64)[None, :] * stride_om
                    + rows.to(gl.int64)[:, None] * stride_on)  # fmt: skip
        gl.store(out_ptrs, values.to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def fp8_masked_decode_gemm_ws_kernel(
    # TMA descriptors of a [G * m, k] in BLOCK_T-row boxes and b [G * n, k] in BLOCK_W-row boxes;
    # scales; out (G, m, n); the groups' valid rows
    a_desc, b_desc, a_scale_ptr, b_scale_ptr, out_ptr, masked_m_ptr,
    G, M, N, K,
    # strides, in elements
    stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn, stride_sbk, stride_og, stride_om, stride_on,
    # ring depth; the group table's width (a power of two >= G)
    STAGES: gl.constexpr, GROUPS: gl.constexpr,
):  # fmt: skip
    MATH_WARPGROUPS: gl.constexpr = b_desc.block_type.shape[0] // SUB_M
    rings = operand_rings(a_desc, b_desc, STAGES)
    sizes = (G, M, N, K, stride_og, stride_om, stride_on)
    scales = (a_scale_ptr, b_scale_ptr, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbn, stride_sbk)  # fmt: skip
    # the constexprs go into each partition's own argument tuple: a tuple assigned to a name
    # carries them as int32 values (Triton 3.6), which gl.arange cannot take
    if MATH_WARPGROUPS == 2:
        gl.warp_specialize(
            [
                (_math, (rings, out_ptr, masked_m_ptr, sizes, STAGES, GROUPS, 0)),
                (_math, (rings, out_ptr, masked_m_ptr, sizes, STAGES, GROUPS, 1)),
                (_producer, (a_desc, b_desc, scales, masked_m_ptr, rings, G, M, N, K, STAGES, GROUPS)),
            ],
            [4, 1],
            [MATH_REGISTERS, PRODUCER_REGISTERS],
        )
    else:
        gl.warp_specialize(
            [
                (_math, (rings, out_ptr, masked_m_ptr, sizes, STAGES, GROUPS, 0)),
                (_producer, (a_desc, b_desc, scales, masked_m_ptr, rings, G, M, N, K, STAGES, GROUPS)),
            ],
            [1],
            [PRODUCER_REGISTERS],
        )


_LAUNCH = FastLaunch(fp8_masked_decode_gemm_ws_kernel, varying=("M",))


def takes(call) -> bool:
    """Whether the kernel takes a masked call (:class:`flashinfer.gemm._args.GroupedMasked`) whose
    operands TMA reads: bf16/fp16 output, at most :data:`MAX_GROUPS` experts."""
    return call.out.dtype.itemsize == 2 and call.a.shape[0] <= MAX_GROUPS


def group_gemm_masked(call, config: MaskedDecodeConfig | None = None) -> None:
    """Launch ``out[g, r] = dequant(a[g])[r] @ dequant(b[g]).T`` for ``r < masked_m[g]`` (clamped
    to ``[0, m]``), streaming each expert's weights once.

    Parameters
    ----------
    call : flashinfer.gemm._args.GroupedMasked
        TMA-readable ``a (G, m, k)`` (groups packed) and ``b (G, n, k)``, e4m3; 1x128 ``a_scale``
        and 128x128 ``b_scale`` (any strides); ``out (G, m, n)`` bf16/fp16 (any strides), its rows
        past ``masked_m[g]`` left untouched; ``expected_m`` picks the tile, never the result.
    config : MaskedDecodeConfig, optional
        A fixed tile instead of :func:`pick_config`'s.
    """
    a, b, a_scale, b_scale, masked_m, expected_m, out = call
    groups, m, k = a.shape
    n = b.shape[1]
    config = config or pick_config(max(1, min(expected_m, m)))
    most_items = groups * ceil_div(m, config.block_t) * ceil_div(n, config.block_w)
    _LAUNCH.launch(
        (min(most_items, multiprocessors(a.device)),),
        tma_rows_descriptor(a, groups * m, config.block_t), tma_rows_descriptor(b, groups * n, config.block_w),
        a_scale, b_scale, out, masked_m, groups, m, n, k,
        *group_strides(a_scale), *group_strides(b_scale), *group_strides(out),
        STAGES=config.stages, GROUPS=max(32, triton.next_power_of_2(groups)),
        **launch_options(config.block_w),
    )  # fmt: skip
