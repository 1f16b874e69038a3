"""Decode-size block-scaled FP8 GEMM: weights on the MMA's row side, K split over programs.

``out[i, j] = sum_kb a_scale[i // SCALE_BM, kb] * b_scale[j // SCALE_BN, kb] * sum_{k in kb} a[i, k] * b[j, k]``

At decode sizes (``m`` = the batch, 1-256 rows) the job is streaming the weights ``b (n, k)``
through every multiprocessor once; the arithmetic is a few percent of the tensor cores' rate.
A tile of the usual orientation puts ``m`` on the MMA's row side (64 rows a wgmma: three
quarters wasted at m = 16) and leaves most multiprocessors idle at ``n = 2112`` with 128-column
tiles. Here the product is computed transposed, ``out.T = b @ a.T``:

- ``BLOCK_N`` weight rows fill the MMA's row side (64 or 128: wgmma; 16 or 32: ``mma.sync``),
  ``BLOCK_M`` tokens its column side (16 to 128, a power of two);
- the K loop (``BLOCK_K = 128``, one scale block a step: the block product is promoted into the
  fp32 accumulator with both scales applied exactly, so the tensor cores' reduced-precision
  accumulation never spans more than one scale block) is cut into ``SPLIT`` contiguous ranges,
  one program each, so that ``tiles x SPLIT`` programs give every multiprocessor a share of the
  weights even where ``n / BLOCK_N`` tiles alone would not.

From m = 32 the table may also take DeepGEMM's orientation (``swap=False``: 64 or 128 tokens on
the row side, 16-64 weight rows on the column side). Operands arrive by TMA (descriptors, rows
past the end read as zeros) or through pointer loads that Triton's pipeline copies
asynchronously, as the table says; the scales are loaded a step ahead of their use.

With ``SPLIT > 1`` each program writes its fp32 partial sum to ``partial (SPLIT, m, n)`` and
:func:`fp8_splitk_reduce_kernel` adds the parts in split order and writes ``out``: the result
does not depend on which program finishes first (deterministic), and the workspace is the
current stream's scratch (``flashinfer._core.scratch``: stream-ordered, capturable in a CUDA
graph, nothing to reset).
With ``SPLIT == 1`` the GEMM kernel writes ``out`` itself.

Layout
------
- ``a (m, k)`` and ``b (n, k)``: FP8 (e4m3 or e5m2), unit stride along k, any row stride.
- ``a_scale``: the logical ``(ceil(m / SCALE_BM), ceil(k / 128))`` float32 view, any strides
  (a column-major ``(m, k / 128)`` view, as upstream's kernel and cuBLASLt keep it, reads
  coalesced); ``SCALE_BM`` is 1 or 128.
- ``b_scale``: the logical ``(ceil(n / SCALE_BN), ceil(k / 128))`` float32 view, any strides;
  ``SCALE_BN`` is 128 (DeepSeek's 128 x 128 weight blocks) or 1 (one scale per row and 128
  columns).
- ``out (m, n)``: bf16 or fp16, any strides.

Nothing is read on the host and nothing synchronizes: every launch can be captured in a CUDA
graph. Which tile and split each shape takes is :func:`pick_config`'s, from the table
``decode_gemm_table.TABLE`` that ``benchmarks/decode_gemm_sweep.py`` writes on the H200.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ...._core import scratch
from ...._core.triton_launch import FastLaunch
from ....utils import ceil_div, get_compute_capability, next_positive_power_of_2
from .. import multiprocessors
from .decode_gemm_table import GLUON_TABLE, TABLE

BLOCK_K = 128
# The largest m this kernel serves: above it the tiles of the regular kernels are full.
MAX_M = 256


@dataclasses.dataclass(frozen=True)
class DecodeGemmConfig:
    """One launch shape of the decode-size GEMM.

    Attributes
    ----------
    block_n : int
        Weight rows a program computes (the MMA's row side): 16, 32, 64 or 128.
    block_m : int
        Tokens a program computes (the MMA's column side): 16, 32, 64 or 128.
    split : int
        Programs the K loop of one tile is cut into (1: no partial sums).
    stages : int
        Depth of the software pipeline of the K loop.
    warps : int
        Warps a program (4 or 8).
    tma : bool
        Whether A and B arrive by TMA (Hopper and later, operands TMA can read; elsewhere the
        kernel loads through pointers whatever this says).
    swap : bool
        Whether weight rows fill the MMA's row side (``out.T = b @ a.T``); else tokens do, and
        ``block_m`` tokens take one wgmma's 64 rows (``block_m`` >= 64).
    gluon : bool
        Whether the launch is of the warp-specialized Gluon kernel
        (:mod:`.gluon_fp8_decode_gemm`: ``block_n`` 64 or 128, ``block_m`` 8-128 a power of two,
        ``swap``, ``tma``; ``warps`` unused) rather than this module's.
    """

    block_n: int
    block_m: int
    split: int
    stages: int = 6
    warps: int = 4
    tma: bool = True
    swap: bool = True
    gluon: bool = False


def _heuristic(m: int, n: int, k: int, num_sms: int, gluon: bool) -> DecodeGemmConfig:
    # Untabled shapes: 64 weight rows (one wgmma row side), all tokens in one column tile up to
    # 128, and as many K ranges as it takes to give every multiprocessor a program, keeping at
    # least 4 K steps a range (a shorter range spends more time filling its pipeline than
    # streaming).
    block_m = min(max(8 if gluon else 16, next_positive_power_of_2(m)), 128)
    block_n = 64
    tiles = ceil_div(n, block_n) * ceil_div(m, block_m)
    k_steps = ceil_div(k, BLOCK_K)
    split = max(1, min(ceil_div(num_sms, tiles), k_steps // 4))
    if gluon:
        from .gluon_fp8_decode_gemm import stages_for

        return DecodeGemmConfig(block_n, block_m, split, stages_for(block_n, block_m), gluon=True)
    return DecodeGemmConfig(block_n, block_m, split, 6, 8 if block_m == 128 else 4)


def _table_row(m: int, n: int, k: int, num_sms: int, gluon: bool):
    # the measured row for m: the smallest tabled row count at least m (None: not tabled)
    for max_m, config, cublas_ahead in (GLUON_TABLE if gluon else TABLE).get((n, k, num_sms), ()):
        if m <= max_m:
            return DecodeGemmConfig(*config), cublas_ahead
    return None


@functools.lru_cache(maxsize=1024)
def pick_config(m: int, n: int, k: int, num_sms: int, gluon: bool = False) -> DecodeGemmConfig:
    """The launch shape for ``m x n x k`` (of the Gluon kernel where ``gluon``): the measured one
    where the table has ``(n, k)`` and a row count at least ``m`` (the smallest such), else
    :func:`_heuristic`'s. Memoized (a frozen config per shape: eager calls repeat a few shapes)."""
    row = _table_row(m, n, k, num_sms, gluon)
    return row[0] if row else _heuristic(m, n, k, num_sms, gluon)


def cublas_ahead(m: int, n: int, k: int, device: torch.device, gluon: bool = False) -> bool:
    """Whether the sweep measured cuBLASLt's block-scaled GEMM ahead of the best launch shape for
    ``m x n x k`` on ``device`` of this kernel (of the Gluon one where ``gluon``): the caller takes
    cuBLASLt then, where it takes the operands."""
    row = _table_row(m, n, k, multiprocessors(device), gluon)
    return bool(row and row[1])


@triton.jit
def fp8_swapab_splitk_kernel(
    # operands (pointers, or TMA descriptors with TMA), scales, output or fp32 partial sums
    a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, out_ptr, partial_ptr,
    # problem size, and the K steps of one range of the split
    M, N, K, steps_per_split,
    # strides, in elements
    stride_am, stride_bn, stride_sam, stride_sak, stride_sbn, stride_sbk, stride_om, stride_on,
    # scale granularity along m (1 or 128) and n (1 or 128)
    SCALE_BM: tl.constexpr, SCALE_BN: tl.constexpr,
    # tile: BLOCK_N weight rows x BLOCK_M tokens, K steps of BLOCK_K; PARTIAL: write fp32 partial
    # sums of a split K loop instead of out; EVEN_K: K is a multiple of BLOCK_K (no K mask, so
    # that the loads are 16-byte vectors the pipeline copies asynchronously); TMA: a and b arrive
    # as TMA descriptors (Hopper: one bulk copy a box, deep rings at little issue cost); SWAP:
    # weight rows on the MMA's row side (else tokens, DeepGEMM's orientation for m >= 32)
    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, PARTIAL: tl.constexpr,
    EVEN_K: tl.constexpr, TMA: tl.constexpr, SWAP: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    n_ok = offs_n < N
    m_ok = offs_m < M
    k_steps = tl.cdiv(K, BLOCK_K)
    first = pid_s * steps_per_split
    last = tl.minimum(first + steps_per_split, k_steps)
    if not TMA:
        # b rows along dim 0, a^T tokens along dim 1; k is contiguous in both
        b_ptrs = b_ptr + offs_n.to(tl.int64)[:, None] * stride_bn + offs_k[None, :]
        a_ptrs = a_ptr + offs_m.to(tl.int64)[None, :] * stride_am + offs_k[:, None]
    # The scales of a step are loaded a step ahead: Triton's pipeline prefetches only the
    # operands of the dot, and a scale load waited on in its own step costs a memory round trip
    # a step. (Two steps ahead, rotated through the loop, stops Triton pipelining the operands;
    # prefetching every scale of the range into L1 at the start measured no better overall.)
    sb_ptrs = b_scale_ptr + (offs_n // SCALE_BN) * stride_sbn + first * stride_sbk
    sa_ptrs = a_scale_ptr + (offs_m // SCALE_BM) * stride_sam + first * stride_sak
    sb = tl.load(sb_ptrs, mask=n_ok, other=0.0)
    sa = tl.load(sa_ptrs, mask=m_ok, other=0.0)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(first, last):
        k0 = step * BLOCK_K
        if TMA:
            # descriptors of (n, k) and (m, k) in (BLOCK_N, BLOCK_K) and (BLOCK_M, BLOCK_K)
            # boxes: rows past the end arrive as zeros, without memory traffic
            b = b_ptr.load([pid_n * BLOCK_N, k0])
            a = a_ptr.load([pid_m * BLOCK_M, k0]).T
        elif EVEN_K:
            b = tl.load(b_ptrs + k0, mask=n_ok[:, None], other=0.0)
            a = tl.load(a_ptrs + k0, mask=m_ok[None, :], other=0.0)
        else:
            k_ok = offs_k < K - k0
            b = tl.load(b_ptrs + k0, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            a = tl.load(a_ptrs + k0, mask=k_ok[:, None] & m_ok[None, :], other=0.0)
        more = step + 1 < last
        sb_next = tl.load(sb_ptrs + (step + 1 - first) * stride_sbk, mask=n_ok & more, other=0.0)
        sa_next = tl.load(sa_ptrs + (step + 1 - first) * stride_sak, mask=m_ok & more, other=0.0)
        # the 128-deep block product in a fresh accumulator, then promoted with both scales
        if SWAP:
            acc += tl.dot(b, a) * sb[:, None] * sa[None, :]
        else:
            acc += tl.dot(a.T, b.T) * sa[:, None] * sb[None, :]
        sb = sb_next
        sa = sa_next
    if not SWAP:
        acc = acc.T
    mask = n_ok[:, None] & m_ok[None, :]
    if not PARTIAL:
        out_ptrs = out_ptr + offs_m.to(tl.int64)[None, :] * stride_om + offs_n[:, None] * stride_on
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # partial (SPLIT, M, N), contiguous: the reduction reads along n
        part_ptrs = partial_ptr + (pid_s * M + offs_m.to(tl.int64))[None, :] * N + offs_n[:, None]
        tl.store(part_ptrs, acc, mask=mask)


@triton.jit
def fp8_splitk_reduce_kernel(
    partial_ptr, out_ptr, M, N, stride_om, stride_on,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # out = sum over s (in order) of partial[s]: a fixed order, so the result is deterministic
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    rows = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    total = tl.load(partial_ptr + rows, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        total += tl.load(partial_ptr + s * M * N + rows, mask=mask, other=0.0)
    out_ptrs = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, total.to(out_ptr.dtype.element_ty), mask=mask)


def _tma_takes(a, b) -> bool:
    """Whether TMA reads both operands: a CUDA device of compute capability 9.0 or later, 16-byte
    aligned bases and row strides (unit k stride is the record's)."""
    return (
        a.is_cuda
        and get_compute_capability(a.device)[0] >= 9
        and all(t.data_ptr() % 16 == 0 and t.stride(0) % 16 == 0 for t in (a, b))
    )


def _rows_descriptor(t, box_rows: int) -> TensorDescriptor:
    # built without TensorDescriptor's checks (host time): _tma_takes checked what TMA needs
    descriptor = object.__new__(TensorDescriptor)
    descriptor.__dict__.update(
        base=t, shape=list(t.shape), strides=[t.stride(0), 1], block_shape=[box_rows, BLOCK_K], padding="zero"
    )
    return descriptor


_GEMM = FastLaunch(fp8_swapab_splitk_kernel, varying=("M", "steps_per_split", "stride_sak", "stride_om"))
_REDUCE = FastLaunch(fp8_splitk_reduce_kernel, varying=("M", "stride_om"))
_REDUCE_BLOCK_N = 256


def gemm_groupwise(call, config: DecodeGemmConfig | None = None, gluon: bool = False):
    """Launch the decode-size GEMM ``out = dequant(a) @ dequant(b).T``.

    Parameters
    ----------
    call : flashinfer.gemm._args.Groupwise
        FP8 ``a (m, k)`` and ``b (n, k)`` with unit k stride; block granularity ``(1 or 128,
        1 or 128, 128)``; the logical scale views (any strides); ``out (m, n)`` bf16/fp16 (any
        strides); no ``output_scale``.
    config : DecodeGemmConfig, optional
        A fixed launch shape instead of :func:`pick_config`'s.
    gluon : bool
        Whether the Gluon tier runs on this device (the caller's ``use_gluon``): the launch shape
        is then the Gluon kernel's, where TMA reads the operands.

    Returns
    -------
    callable
        The replay: repeats the launches for a record of the same call signature.
    """
    a, b, a_scale, b_scale, out = call.a, call.b, call.a_scale, call.b_scale, call.out
    m, k = a.shape
    n = b.shape[0]
    gluon = gluon and _tma_takes(a, b)
    if config is None:
        config = pick_config(m, n, k, multiprocessors(a.device), gluon)
    if config.gluon:
        from . import gluon_fp8_decode_gemm

        return gluon_fp8_decode_gemm.gemm_groupwise(call, config)
    k_steps = ceil_div(k, BLOCK_K)
    steps = ceil_div(k_steps, min(config.split, k_steps))
    split = ceil_div(k_steps, steps)  # no empty range
    grid = (ceil_div(n, config.block_n), split, ceil_div(m, config.block_m))
    tma = config.tma and _tma_takes(a, b)

    def partial_sums(call):
        # the current stream's scratch (flashinfer._core.scratch): the reduce reads it before the
        # next call in the stream writes it; flat (the launches read its pointer)
        if split == 1:
            return call.out
        return scratch.take(call.a.device, "decode GEMM partial sums", split * m * n, torch.float32)

    partial = partial_sums(call)
    launch = _GEMM.bind(
        grid,
        *((_rows_descriptor(a, config.block_m), _rows_descriptor(b, config.block_n)) if tma else (a, b)),
        a_scale, b_scale, out, partial, m, n, k, steps,
        a.stride(0), b.stride(0), *a_scale.stride(), *b_scale.stride(), *out.stride(),
        SCALE_BM=call.block_m, SCALE_BN=call.block_n, BLOCK_N=config.block_n, BLOCK_M=config.block_m,
        BLOCK_K=BLOCK_K, PARTIAL=split > 1, EVEN_K=k % BLOCK_K == 0, TMA=tma, SWAP=config.swap, num_warps=config.warps, num_stages=config.stages,
    )  # fmt: skip
    # a descriptor's place takes its base: the geometry is the signature's
    if split == 1:
        return lambda call: launch(call.a, call.b, call.a_scale, call.b_scale, call.out, call.out)
    reduce = splitk_reduce(partial, split, out)

    def replay(call):
        partial = partial_sums(call)
        launch(call.a, call.b, call.a_scale, call.b_scale, call.out, partial)
        reduce(partial, call.out)

    return replay


def splitk_reduce(partial: torch.Tensor, split: int, out: torch.Tensor):
    """``out = partial[0] + partial[1] + ...`` in split order (deterministic), converted to
    ``out``'s dtype: ``partial`` float32, the ``(split, m, n)`` sums contiguous from its start (a
    longer flat buffer too); ``out (m, n)`` any strides. Returns the launch, bound
    (:meth:`~flashinfer._core.triton_launch.FastLaunch.bind`: call it with another ``partial`` and
    ``out`` of the same dtypes and ``out`` of the same shape and strides)."""
    m, n = out.shape
    block_m = min(next_positive_power_of_2(m), 16)
    return _REDUCE.bind(
        (ceil_div(n, _REDUCE_BLOCK_N), ceil_div(m, block_m)), partial, out, m, n, *out.stride(),
        SPLIT=split, BLOCK_M=block_m, BLOCK_N=_REDUCE_BLOCK_N, num_warps=4,
    )  # fmt: skip
