"""Block-scaled FP8 GEMMs (DeepSeek-V3 style): dense, grouped-contiguous and grouped-masked.

``out[i, j] = sum_kb a_scale[i // SCALE_BM, kb] * b_scale[g, j // SCALE_BN, kb] * sum_{k in kb} a[i, k] * b[g, j, k]``

One persistent kernel serves three layouts (``LAYOUT``):

- ``DENSE``: ``a (m, k)``, ``b (n, k)``, one group. Any block granularity whose K block is a
  multiple of 16; optional FP8 E4M3 output with a per-(row, 128-column block) output scale
  computed in the epilogue (``output_scale[i, jb] = max(amax_jb |acc[i, :]|, 1e-12) / 448``).
- ``CONTIGUOUS``: ``a (m, k)`` rows belong to group ``m_indices[i]`` of ``b (G, n, k)``. A row
  whose group id is outside ``[0, G)`` is never read, computed or written. A row tile is
  processed once per distinct valid group id it holds (once when groups are aligned to
  ``BLOCK_M`` rows, as DeepGEMM requires; a tile of -1 padding exits at once), so any
  assignment of rows to groups is exact.
- ``MASKED``: ``a (G, m, k)``, ``b (G, n, k)``; rows ``i >= masked_m[g]`` (clamped to
  ``[0, m]``) are never read or written, and a row tile past ``masked_m[g]`` exits at once.

Scales are float32 *logical* views with their own strides (row-major, column-major or
broadcast): ``a_scale (G?, ceil(m / SCALE_BM), ceil(k / SCALE_BK))`` and
``b_scale (G?, ceil(n / SCALE_BN), ceil(k / SCALE_BK))``. Each K step of ``BLOCK_K`` lies in one
scale block (``BLOCK_K`` divides ``SCALE_BK``), so the block product is scaled once per step and
added to the fp32 accumulator: the tensor cores' reduced-precision accumulation never spans
more than one scale block (DeepGEMM's promotion scheme). ``a`` and ``b`` are read along k (``stride(-1) == 1`` expected,
not required). ``out`` has any strides.

Scheduling: the grid holds one program per multiprocessor; each walks the tile list
``group x row tile x column tile`` with a stride of the grid size. Row tiles are ordered in bands
of ``GROUP_M`` so that tiles in flight together share B columns in L2. The device decides which
tiles have work (no host synchronization), so every launch can be captured in a CUDA graph.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from ...._core.constants import E4M3_MAX as _E4M3_MAX
from ...._core.constants import OUTPUT_SCALE_BLOCK, OUTPUT_SCALE_FLOOR
from ...._core.triton_launch import TunedLaunch
from ....utils import next_positive_power_of_2
from .. import banded_tile, group_strides, multiprocessors

# layouts and the e4m3 limit, as constexpr globals so the kernel can read them
DENSE = tl.constexpr(0)
CONTIGUOUS = tl.constexpr(1)
MASKED = tl.constexpr(2)
E4M3_MAX = tl.constexpr(_E4M3_MAX)
SCALE_FLOOR = tl.constexpr(OUTPUT_SCALE_FLOOR)


def _configs():
    # (BLOCK_M, BLOCK_N, num_warps, num_stages); BLOCK_K comes from the scale granularity.
    # 128 x 128 tiles match the 128-row group alignment of the grouped layouts and the 128 x
    # 128 weight-scale blocks; 64-row tiles serve small m (decode, masked with small
    # expected_m).
    shapes = [
        (128, 128, 8, 4),
        (128, 128, 4, 4),
        (128, 256, 8, 3),
        (64, 128, 4, 4),
        (64, 64, 4, 5),
    ]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 8}, num_warps=w, num_stages=s)
        for bm, bn, w, s in shapes
    ]


def _prune_configs(configs, named_args, **kwargs):
    # FP8 output needs each column tile to be exactly one 128-column output-scale block.
    if kwargs.get("OUT_FP8", False):
        return [c for c in configs if c.kwargs["BLOCK_N"] == OUTPUT_SCALE_BLOCK]
    return configs


@triton.jit
def _row_tile_group(tile_groups, tile_valid, after, num_groups):
    # smallest valid group id in the row tile that is larger than `after` (num_groups if none)
    return tl.min(tl.where(tile_valid & (tile_groups > after), tile_groups, num_groups), axis=0)


@triton.jit
def fp8_blockwise_kernel(
    # operands and output
    a_ptr,
    b_ptr,
    out_ptr,
    a_scale_ptr,
    b_scale_ptr,
    # CONTIGUOUS: int32 group id per row; MASKED: int32 valid rows per group; else unused
    rows_ptr,
    # DENSE with FP8 output: float32 (m, ceil(n / 128)) output scales, written here
    out_scale_ptr,
    # problem size; M_BUCKET is only an autotune key
    M,
    N,
    K,
    NUM_GROUPS,
    M_BUCKET,
    # strides, in elements ("g" is the group dimension; 0 where there is none)
    stride_ag,
    stride_am,
    stride_ak,
    stride_bg,
    stride_bn,
    stride_bk,
    stride_og,
    stride_om,
    stride_on,
    stride_sag,
    stride_sam,
    stride_sak,
    stride_sbg,
    stride_sbn,
    stride_sbk,
    stride_osm,
    # scale granularity
    SCALE_BM: tl.constexpr,
    SCALE_BN: tl.constexpr,
    SCALE_BK: tl.constexpr,
    # layout and epilogue
    LAYOUT: tl.constexpr,
    OUT_FP8: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    # tile shape
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = tiles_m * tiles_n
    if LAYOUT == MASKED:
        num_tiles = NUM_GROUPS * tiles_per_group
    else:
        num_tiles = tiles_per_group
    k_steps = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)

    for tile in range(tl.program_id(0), num_tiles, NUM_PROGRAMS):
        # tile -> (group, row tile, column tile), row tiles in bands of GROUP_M
        pid_m, pid_n = banded_tile(tile % tiles_per_group, tiles_m, tiles_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N

        # which group(s) this row tile computes, and which rows each one owns
        if LAYOUT == CONTIGUOUS:
            tile_groups = tl.load(rows_ptr + offs_m, mask=offs_m < M, other=-1)
            tile_valid = (tile_groups >= 0) & (tile_groups < NUM_GROUPS)
            group = _row_tile_group(tile_groups, tile_valid, -1, NUM_GROUPS)
            row_limit = M
        elif LAYOUT == MASKED:
            group = (tile // tiles_per_group).to(tl.int32)
            row_limit = tl.minimum(tl.maximum(tl.load(rows_ptr + group), 0), M)
            group = tl.where(pid_m * BLOCK_M < row_limit, group, NUM_GROUPS)
        else:
            group = tl.program_id(0) * 0
            row_limit = M

        while group < NUM_GROUPS:
            if LAYOUT == CONTIGUOUS:
                mask_m = tile_groups == group
            else:
                mask_m = offs_m < row_limit
            g = group.to(tl.int64)
            rows = offs_m.to(tl.int64)
            a_ptrs = a_ptr + g * stride_ag + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
            b_ptrs = b_ptr + g * stride_bg + offs_n[:, None] * stride_bn + offs_k[None, :] * stride_bk
            sa_ptrs = a_scale_ptr + g * stride_sag + (offs_m // SCALE_BM) * stride_sam
            sb_ptrs = b_scale_ptr + g * stride_sbg + (offs_n // SCALE_BN) * stride_sbn

            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in range(0, k_steps):
                k0 = step * BLOCK_K
                mask_k = offs_k < K - k0
                a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
                b = tl.load(b_ptrs, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
                kb = k0 // SCALE_BK
                sa = tl.load(sa_ptrs + kb * stride_sak, mask=mask_m, other=0.0)
                sb = tl.load(sb_ptrs + kb * stride_sbk, mask=mask_n, other=0.0)
                acc += tl.dot(a, tl.trans(b)) * sa[:, None] * sb[None, :]
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk

            out_ptrs = out_ptr + g * stride_og + rows[:, None] * stride_om + offs_n[None, :] * stride_on
            out_mask = mask_m[:, None] & mask_n[None, :]
            if OUT_FP8:
                # one column tile is one 128-column output-scale block (BLOCK_N == 128)
                amax = tl.max(tl.abs(acc), axis=1)
                row_scale = tl.maximum(amax, SCALE_FLOOR) / E4M3_MAX
                tl.store(out_scale_ptr + rows * stride_osm + pid_n, row_scale, mask=mask_m)
                quantized = tl.clamp(acc / row_scale[:, None], -E4M3_MAX, E4M3_MAX)
                tl.store(out_ptrs, quantized.to(out_ptr.dtype.element_ty), mask=out_mask)
            else:
                tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)

            if LAYOUT == CONTIGUOUS:
                group = _row_tile_group(tile_groups, tile_valid, group, NUM_GROUPS)
            else:
                group = group * 0 + NUM_GROUPS  # stays an int32 tensor when NUM_GROUPS == 1 is specialized


fp8_blockwise_tuned = triton.autotune(
    configs=_configs(),
    key=["M_BUCKET", "N", "K", "NUM_GROUPS", "LAYOUT", "OUT_FP8"],
    prune_configs_by={"early_config_prune": _prune_configs},
)(fp8_blockwise_kernel)
_TUNED = TunedLaunch(fp8_blockwise_tuned, varying=("M",))


def _launch(layout, operands: tuple, m_hint: int, scale_block: tuple, config) -> None:
    """Shared launcher. ``operands`` is ``(a, b, a_scale, b_scale, rows, out, output_scale)``:
    ``a``/``b``/``out``/scales are 3-D (group, rows, cols), or 2-D and shared by every group
    (group stride 0, read without making a view); ``rows`` is ``m_indices`` (contiguous),
    ``masked_m`` (masked) or None; ``output_scale`` None but for FP8 output."""
    a, b, a_scale, b_scale, rows, out, output_scale = operands
    m, k = a.shape[-2:]
    n = b.shape[-2]
    groups = b.shape[0] if b.dim() == 3 else 1
    scale_bm, scale_bn, scale_bk = scale_block
    block_k = math.gcd(scale_bk, 128)
    out_fp8 = output_scale is not None
    rows_arg = rows if rows is not None else a_scale
    out_scale_arg = output_scale if out_fp8 else a_scale
    num_programs = multiprocessors(a.device)
    args = (
        a, b, out, a_scale, b_scale, rows_arg, out_scale_arg,
        m, n, k, groups, next_positive_power_of_2(m_hint),
        *group_strides(a), *group_strides(b), *group_strides(out), *group_strides(a_scale), *group_strides(b_scale),
        output_scale.stride(0) if out_fp8 else 0,
    )  # fmt: skip
    constants = {
        "SCALE_BM": scale_bm,
        "SCALE_BN": scale_bn,
        "SCALE_BK": scale_bk,
        "LAYOUT": layout.value,
        "OUT_FP8": out_fp8,
        "NUM_PROGRAMS": num_programs,
        "BLOCK_K": block_k,
    }
    if config is None:
        key = (args[11], n, k, groups, a.dtype, b.dtype, out.dtype, *constants.values())
        _TUNED.launch((num_programs,), key, *args, **constants)
    else:
        fp8_blockwise_kernel[(num_programs,)](*args, **constants, **config)


def gemm_groupwise(call, config=None):
    """Launch the dense groupwise-scaled FP8 GEMM ``out = dequant(a) @ dequant(b).T``.

    Parameters
    ----------
    call : flashinfer.gemm._args.Groupwise
        ``a (m, k)``, ``b (n, k)`` FP8; the logical scale views (any strides); a granularity whose
        K block is a multiple of 16 (one K step never straddles two scale blocks); ``out``
        bf16/fp16, or float8_e4m3fn with ``output_scale`` (``(m, ceil(n / 128))`` float32, last
        stride 1, written here).
    config : dict, optional
        Fixed ``BLOCK_M``/``BLOCK_N``/``GROUP_M`` (and ``num_warps``/``num_stages``) instead of
        autotuning; with ``output_scale``, ``BLOCK_N`` must be 128.
    """
    scale_block = (call.block_m, call.block_n, call.block_k)
    a, out, output_scale = call.a, call.out, call.output_scale
    operands = (a, call.b, call.a_scale, call.b_scale, None, out, output_scale)
    _launch(DENSE, operands, a.shape[0], scale_block, config)


def group_gemm_contiguous(call, config=None):
    """Launch the contiguous grouped GEMM: row ``r`` of ``a`` times group ``m_indices[r]`` of ``b``.

    Parameters
    ----------
    call : flashinfer.gemm._args.GroupedContiguous
        Rows with ids outside ``[0, G)`` are left untouched.
    config : dict, optional
        Fixed tile parameters instead of autotuning.
    """
    a, b, a_scale, b_scale, m_indices, out = call
    # a, a_scale and out (2-D) are shared by all groups
    _launch(CONTIGUOUS, (a, b, a_scale, b_scale, m_indices, out, None), a.shape[0], (1, 128, 128), config)


def group_gemm_masked(call, config=None):
    """Launch the masked grouped GEMM: ``out[g, r] = dequant(a[g])[r] @ dequant(b[g]).T`` for ``r < masked_m[g]``.

    Parameters
    ----------
    call : flashinfer.gemm._args.GroupedMasked
        Rows past ``masked_m[g]`` (clamped to ``[0, m]`` on the device) are never read or written;
        ``expected_m`` selects the tuned configuration, never the result.
    config : dict, optional
        Fixed tile parameters instead of autotuning.
    """
    a, b, a_scale, b_scale, masked_m, expected_m, out = call
    hint = min(expected_m, a.shape[1])
    _launch(MASKED, (a, b, a_scale, b_scale, masked_m, out, None), hint, (1, 128, 128), config)
