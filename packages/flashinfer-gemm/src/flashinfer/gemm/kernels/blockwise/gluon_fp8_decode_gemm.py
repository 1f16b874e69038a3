"""Decode-size block-scaled FP8 GEMM for Hopper (sm_90) in Gluon: weights on the wgmma's row side,
K split over programs, a producer warp bringing operands *and* scales into the ring.

``out[i, j] = sum_kb a_scale[i // SCALE_BM, kb] * b_scale[j // SCALE_BN, kb] * sum_{k in kb} a[i, k] * b[j, k]``

The same product, layouts and split as :mod:`.fp8_decode_gemm` (read its docstring first); what
differs is the schedule. There a program's K loop waits about one memory round trip a step on its
scale loads, which Triton's pipeline does not prefetch (``benchmarks/notes_decode_gemm.md``). Here
the scales travel with their operands:

- the **producer** (one warp) issues, for each 128-deep K step of its range, the TMA loads of the
  ``BLOCK_W x 128`` weight box and the ``BLOCK_T x 128`` token box, and ``cp.async`` copies of the
  step's ``BLOCK_T`` token scales and ``BLOCK_W`` weight-row scales, into one stage of a
  ``STAGES``-deep shared-memory ring whose ``full`` mbarrier completes only when all four have
  landed (the TMA bytes by expect-tx, the copies by ``cp.async.mbarrier.arrive``);
- **math warpgroups** (``BLOCK_W / 64``: one or two) each take 64 weight rows: a wgmma of
  ``64 x BLOCK_T x 128`` into a fresh accumulator (the tensor cores' reduced-precision
  accumulation never spans more than one scale block), the scales read from the stage, the stage
  released (``empty`` mbarrier), and the product promoted into the fp32 sum with both scales.

Nothing in the math loop waits on global memory; the ring is as deep as shared memory allows.

Grid ``(ceil(n / BLOCK_W), SPLIT, ceil(m / BLOCK_T))``, one tile a program. With ``SPLIT > 1``
the ranges of a tile meet in the kernel, without a second launch: each thread stores its share of
the fp32 sum and counts its arrival on a per-tile, per-thread counter; the last thread to arrive
adds every range's share in range order (deterministic), writes ``out`` and resets the counter
(:func:`_reduce_split`). With ``SPLIT == 1`` the math warpgroups write ``out`` directly.

Layout
------
- ``a (m, k)`` and ``b (n, k)``: FP8, read by TMA (unit k stride, 16-byte aligned base and row
  stride; boxes past the end read zeros, so ``m``, ``n`` and ``k`` need not be multiples of the
  tile).
- ``a_scale``, ``b_scale``: the logical float32 views of :mod:`.fp8_decode_gemm`, any strides
  (4-byte aligned, as every float32 tensor is).
- ``out (m, n)``: bf16 or fp16, any strides.

Shared memory a stage: ``(BLOCK_W + BLOCK_T) * 128`` bytes of operands and ``4 * (BLOCK_W +
BLOCK_T)`` of scales; :func:`stages_for` takes the deepest ring within :data:`SHARED_BUDGET`.
Runs on the Triton releases ``flashinfer._core.kernel_tier`` lists (it compiles under 3.6 to 3.9; the names that differ between them come from ``flashinfer._core.triton_compat``).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ...._core import scratch
from ...._core.triton_compat import cp_async_load, tma_load
from ...._core.triton_launch import FastLaunch
from ....utils import ceil_div
from ..gluon_tma import BLOCK_K, SUB_M, ring_barriers, tma_rows_descriptor

# Of the 227 KB a block may hold: the ring, with room for the barriers and the epilogue's
# layout conversion (64 x BLOCK_T fp32 a math warpgroup).
SHARED_BUDGET = 160 * 1024
MAX_STAGES = 12
# Register budgets (setmaxnreg): the producer warp's pointers and masks of up to 128 scales, the
# math warpgroups the accumulator and the product of 64 x BLOCK_T (BLOCK_T <= 128).
PRODUCER_REGISTERS = gl.constexpr(40)


def stages_for(block_w: int, block_t: int) -> int:
    """The deepest ring of ``block_w`` weight rows and ``block_t`` tokens a stage within
    :data:`SHARED_BUDGET` (at most :data:`MAX_STAGES`)."""
    stage_bytes = (block_w + block_t) * (BLOCK_K + 4)
    return max(2, min(MAX_STAGES, SHARED_BUDGET // stage_bytes))


def launch_options(block_w: int) -> dict:
    """Warps of the default partition (the first math warpgroup) and the launch's register cap.

    The partitions' budgets are carved from ``maxnreg`` times the launch's warps (rounded up to
    whole warpgroups; the padding warps keep 16 registers): the workers take what
    :func:`fp8_decode_gemm_ws_kernel` asks, the default partition the rest, which must stay within
    the 256 a thread may hold. One math warpgroup: 2 warpgroups at 136 leave the default about 250
    (and two programs fit a multiprocessor's registers); two: 3 warpgroups at 168 (the math worker
    232, the producer 40) leave it about 250.
    """
    return {"num_warps": 4, "maxnreg": 136 if block_w == SUB_M.value else 168}


@gluon.jit
def _k_range(K, steps_per_split):
    # the K steps of this program's range of the split (the launcher leaves none empty)
    first = gl.program_id(1) * steps_per_split
    return first, gl.minimum(first + steps_per_split, gl.cdiv(K, 128))


@gluon.jit
def _producer(
    a_desc, b_desc, a_scale_ptr, b_scale_ptr, rings, M, N, K, steps_per_split,
    stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_BM: gl.constexpr, SCALE_BN: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    a_ring, b_ring, sa_ring, sb_ring, full, empty = rings
    BLOCK_T: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_W: gl.constexpr = b_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    STEP_BYTES: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    off_w = gl.program_id(0) * BLOCK_W
    off_t = gl.program_id(2) * BLOCK_T
    first, last = _k_range(K, steps_per_split)
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    offs_t = off_t + gl.arange(0, BLOCK_T, layout=lanes)
    offs_w = off_w + gl.arange(0, BLOCK_W, layout=lanes)
    t_ok = offs_t < M
    w_ok = offs_w < N
    # scales of rows past the end arrive as zeros (cp.async's zero fill), never read
    sa_ptrs = a_scale_ptr + (offs_t // SCALE_BM) * stride_sam + first * stride_sak
    sb_ptrs = b_scale_ptr + (offs_w // SCALE_BN) * stride_sbn + first * stride_sbk
    for i in range(last - first):
        stage = i % STAGES
        # a stage is free once every math warpgroup released its previous use
        mbarrier.wait(empty.index(stage), ((i // STAGES) & 1) ^ 1)
        # the scales first, their completion tracked by the stage's mbarrier: the arrive below
        # raises its pending count before expect-tx lowers it, so that the phase cannot complete
        # on the TMA bytes alone
        cp_async_load(sa_ring.index(stage), sa_ptrs + i * stride_sak, mask=t_ok)
        cp_async_load(sb_ring.index(stage), sb_ptrs + i * stride_sbk, mask=w_ok)
        async_copy.mbarrier_arrive(full.index(stage))
        mbarrier.expect(full.index(stage), STEP_BYTES)
        k0 = (first + i) * BK
        tma_load(b_desc, [off_w, k0], full.index(stage), b_ring.index(stage))
        tma_load(a_desc, [off_t, k0], full.index(stage), a_ring.index(stage))


@gluon.jit
def _math(rings, outputs, sizes, STAGES: gl.constexpr, PARTIAL: gl.constexpr, WARPGROUP: gl.constexpr):
    out_ptr, partial_ptr, counter_ptr = outputs
    M, N, K, steps_per_split, stride_om, stride_on = sizes
    a_ring, b_ring, sa_ring, sb_ring, full, empty = rings
    BLOCK_T: gl.constexpr = a_ring.type.shape[1]
    BLOCK_W: gl.constexpr = b_ring.type.shape[1]
    ROW0: gl.constexpr = WARPGROUP * SUB_M
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_T, 32]
    )
    first, last = _k_range(K, steps_per_split)
    acc = gl.zeros([SUB_M, BLOCK_T], gl.float32, layout=mma_layout)
    # the wgmma accumulator of one K step: its registers are reused step after step
    part = gl.zeros([SUB_M, BLOCK_T], gl.float32, layout=mma_layout)
    for i in range(last - first):
        stage = i % STAGES
        mbarrier.wait(full.index(stage), (i // STAGES) & 1)
        b_rows = b_ring.index(stage).slice(ROW0, SUB_M, dim=0)
        part = warpgroup_mma(b_rows, a_ring.index(stage).permute((1, 0)), part, use_acc=False, is_async=True)
        # the step's scales, read from the stage while the wgmma runs
        sa = sa_ring.index(stage).load(gl.SliceLayout(0, mma_layout))
        sb = sb_ring.index(stage).slice(ROW0, SUB_M).load(gl.SliceLayout(1, mma_layout))
        part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
        mbarrier.arrive(empty.index(stage), count=1)
        # promotion: the 128-deep block product, scaled, into the fp32 sum
        acc += part * sb[:, None] * sa[None, :]
    row0 = gl.program_id(0) * BLOCK_W + ROW0
    col0 = gl.program_id(2) * BLOCK_T
    if PARTIAL:
        # one tile a math warpgroup's share: (token tile, weight tile, warpgroup)
        tiles = gl.num_programs(2) * gl.num_programs(0) * (BLOCK_W // SUB_M)
        tile = (gl.program_id(2) * gl.num_programs(0) + gl.program_id(0)) * (BLOCK_W // SUB_M) + WARPGROUP
        _reduce_split(
            acc, partial_ptr, counter_ptr, out_ptr, M, N, stride_om, stride_on, row0, col0, tile, tiles
        )
    else:
        # stores coalesced along the weight rows (out's columns): 32 lanes a column of the tile
        store_layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 4], [0, 1])
        values = gl.convert_layout(acc, store_layout)
        rows = row0 + gl.arange(0, SUB_M, layout=gl.SliceLayout(1, store_layout))
        cols = col0 + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, store_layout))
        mask = (rows < N)[:, None] & (cols < M)[None, :]
        out_ptrs = out_ptr + cols.to(gl.int64)[None, :] * stride_om + rows.to(gl.int64)[:, None] * stride_on
        gl.store(out_ptrs, values.to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def _reduce_split(
    acc, partial_ptr, counter_ptr, out_ptr, M, N, stride_om, stride_on, row0, col0, tile, tiles
):
    # The split's ranges of one 64 x BLOCK_T tile meet here, in whichever order they finish: each
    # thread stores its share of the fp32 sum, then counts its arrival on its own counter of the
    # tile (acq_rel: its stores are released with it, and the other ranges' stores of the same
    # share are acquired). The thread that arrives last adds the shares of every range in range
    # order (so the result does not depend on the order of arrival), writes out and resets its
    # counter for the next launch. Each thread owns the same elements in every program (the same
    # layout), so no thread waits for another: no barrier, nothing to spin on.
    BLOCK_T: gl.constexpr = acc.type.shape[1]
    PER_THREAD: gl.constexpr = SUB_M * BLOCK_T // 128
    TILE: gl.constexpr = SUB_M * BLOCK_T
    # thread t holds elements e * 128 + t of the tile, flattened token-major (token, row) =
    # divmod(index, 64): a warp's 32 consecutive elements are 32 consecutive weight rows (out's
    # columns), so both the shares and the output are stored coalesced
    share: gl.constexpr = gl.BlockedLayout([PER_THREAD, 1], [1, 32], [1, 4], [1, 0])
    values = gl.convert_layout(gl.reshape(gl.permute(acc, (1, 0)), [PER_THREAD, 128]), share)
    lane = gl.arange(0, 128, layout=gl.SliceLayout(0, share))
    index = gl.arange(0, PER_THREAD, layout=gl.SliceLayout(1, share))[:, None] * 128 + lane[None, :]
    split = gl.program_id(1)
    splits = gl.num_programs(1)
    gl.store(partial_ptr + (split * tiles + tile).to(gl.int64) * TILE + index, values)
    counters = counter_ptr + tile * 128 + lane
    one = gl.full([128], 1, gl.int32, layout=gl.SliceLayout(0, share))
    last = (gl.atomic_add(counters, one, sem="acq_rel", scope="gpu") == splits - 1)[None, :]
    total = gl.zeros([PER_THREAD, 128], gl.float32, layout=share)
    for s in range(splits):
        total += gl.load(partial_ptr + (s * tiles + tile).to(gl.int64) * TILE + index, mask=last, other=0.0)
    tokens = col0 + index // SUB_M
    rows = row0 + index % SUB_M
    ok = last & (tokens < M) & (rows < N)
    out_ptrs = out_ptr + tokens.to(gl.int64) * stride_om + rows.to(gl.int64) * stride_on
    gl.store(out_ptrs, total.to(out_ptr.dtype.element_ty), mask=ok)
    gl.store(counters[None, :], one[None, :] * 0, mask=last)


@gluon.jit
def operand_rings(a_desc, b_desc, STAGES: gl.constexpr):
    # the ring: per stage, the token and weight boxes and their scales, with its barriers
    BLOCK_T: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_W: gl.constexpr = b_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_T, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_W, BK], b_desc.layout)
    scale_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    sa_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_T], scale_layout)
    sb_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_W], scale_layout)
    full, empty = ring_barriers(STAGES, BLOCK_W // SUB_M)
    return a_ring, b_ring, sa_ring, sb_ring, full, empty


@gluon.jit
def fp8_decode_gemm_ws_kernel(
    # TMA descriptors of a (m, k) in BLOCK_T-row boxes and b (n, k) in BLOCK_W-row boxes; scales;
    # out (m, n); where PARTIAL, the fp32 shares of the split's ranges and the arrival counters
    a_desc, b_desc, a_scale_ptr, b_scale_ptr, out_ptr, partial_ptr, counter_ptr,
    # problem size, and the K steps of one range of the split
    M, N, K, steps_per_split,
    # strides, in elements
    stride_sam, stride_sak, stride_sbn, stride_sbk, stride_om, stride_on,
    # scale granularity along m (1 or 128) and n (1 or 128); ring depth; K split over programs
    SCALE_BM: gl.constexpr, SCALE_BN: gl.constexpr, STAGES: gl.constexpr, PARTIAL: gl.constexpr,
):  # fmt: skip
    MATH_WARPGROUPS: gl.constexpr = b_desc.block_type.shape[0] // SUB_M
    rings = operand_rings(a_desc, b_desc, STAGES)
    outputs = (out_ptr, partial_ptr, counter_ptr)
    sizes = (M, N, K, steps_per_split, stride_om, stride_on)
    producer_args = (a_desc, b_desc, a_scale_ptr, b_scale_ptr, rings, M, N, K, steps_per_split,
                     stride_sam, stride_sak, stride_sbn, stride_sbk, SCALE_BM, SCALE_BN, STAGES)  # fmt: skip
    if MATH_WARPGROUPS == 2:
        gl.warp_specialize(
            [
                (_math, (rings, outputs, sizes, STAGES, PARTIAL, 0)),
                (_math, (rings, outputs, sizes, STAGES, PARTIAL, 1)),
                (_producer, producer_args),
            ],
            [4, 1],
            [232, PRODUCER_REGISTERS],
        )
    else:
        gl.warp_specialize(
            [(_math, (rings, outputs, sizes, STAGES, PARTIAL, 0)), (_producer, producer_args)],
            [1],
            [PRODUCER_REGISTERS],
        )


# row counts (and what follows from them) take many values: keyed by specialization only
_LAUNCH = FastLaunch(fp8_decode_gemm_ws_kernel, varying=("M", "steps_per_split", "stride_sak", "stride_om"))


def gemm_groupwise(call, config):
    """Launch the decode-size GEMM ``out = dequant(a) @ dequant(b).T`` on the Gluon tier.

    Parameters
    ----------
    call : flashinfer.gemm._args.Groupwise
        TMA-readable FP8 ``a (m, k)`` and ``b (n, k)``; block granularity ``(1 or 128, 1 or 128,
        128)``; the logical scale views (any strides); ``out (m, n)`` bf16/fp16 (any strides); no
        ``output_scale``.
    config : flashinfer.gemm.kernels.blockwise.fp8_decode_gemm.DecodeGemmConfig
        ``block_n`` weight rows (64 or 128), ``block_m`` tokens (8-128, a multiple of 8), ``split``
        and ``stages``.

    Returns
    -------
    callable
        The replay: repeats the launch for a record of the same call signature (new operands,
        the current stream's partial sums and counters).
    """
    a, b, a_scale, b_scale, out = call.a, call.b, call.a_scale, call.b_scale, call.out
    m, k = a.shape
    n = b.shape[0]
    k_steps = ceil_div(k, BLOCK_K)
    steps = ceil_div(k_steps, min(config.split, k_steps))
    split = ceil_div(k_steps, steps)  # no empty range
    grid = (ceil_div(n, config.block_n), split, ceil_div(m, config.block_m))
    # a 64 x block_m share a math warpgroup and range of the split
    tiles = grid[0] * grid[2] * (config.block_n // SUB_M.value)
    partial_size = split * tiles * SUB_M.value * config.block_m

    def buffers(call):
        # (partial sums, arrival counters): the output stands in for both without a split; with
        # one, the current stream's scratch (flashinfer._core.scratch): each launch in a stream
        # reads its partial sums before the next one writes them and leaves the counters zero
        if split == 1:
            return call.out, call.out
        device = call.a.device
        return (
            scratch.take(device, "decode GEMM partial sums", partial_size, torch.float32),
            scratch.take(device, "decode GEMM arrival counters", tiles * 128, torch.int32, zeroed=True),
        )

    a_descriptor, b_descriptor = (
        tma_rows_descriptor(a, m, config.block_m),
        tma_rows_descriptor(b, n, config.block_n),
    )
    launch = _LAUNCH.bind(
        grid, a_descriptor, b_descriptor, a_scale, b_scale, out, *buffers(call), m, n, k, steps, *a_scale.stride(),
        *b_scale.stride(), *out.stride(), SCALE_BM=call.block_m, SCALE_BN=call.block_n, STAGES=config.stages,
        PARTIAL=split > 1, **launch_options(config.block_n),
    )  # fmt: skip
    # the descriptors' places take their bases: their geometry is the signature's
    return lambda call: launch(call.a, call.b, call.a_scale, call.b_scale, call.out, *buffers(call))
