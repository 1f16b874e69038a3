"""Fused RoPE + FP8 quantization of q and k, rope and nope parts, in one launch.

Layout
------
- ``q_rope (nnz, Hq, R)``, ``q_nope (nnz, Hq, N)``, ``k_rope (nnz, Hk, R)``,
  ``k_nope (nnz, Hk, N)``: fp16 or bf16 (one dtype); ``N`` may be 0. Only the last dim is
  contiguous; token and head strides are free, including 0 (an expanded ``k_pe``).
- The four outputs have the same shapes, float8 e4m3 or e5m2 (one dtype), their own strides
  (typically slices of a merged ``(nnz, Hq, N + R)`` buffer with row stride ``N + R``).
- ``cos_sin_cache (max_pos, R)``: float32 or bf16, contiguous; row ``p`` is
  ``[cos(p f_0) .. cos(p f_{R/2-1}), sin(p f_0) .. sin(p f_{R/2-1})]``.
- ``pos_ids (nnz,)``: int32 or int64, contiguous.

Math (fp32, from the 16-bit input): with ``c_i, s_i`` the cache entries of the token's position,
NeoX pairs element ``i`` with ``i + R/2`` and interleaved (GPT-J) pairs ``2i`` with ``2i + 1``;
for a pair ``(a, b)``: ``a' = a c - b s``, ``b' = b c + a s``. Every output is
``fp8(clamp(y * scale, -FP8_MAX, FP8_MAX))`` (saturating, as upstream's ``satfinite``), with
``quant_scale_q`` for q and ``quant_scale_kv`` for k. A position outside ``[0, max_pos)`` is
never read: that token's rope outputs are NaN (its nope outputs are still exact).

Grid: ``(nnz, cdiv(Hq, BLOCK_H) + cdiv(Hk, BLOCK_H))``. A program quantizes ``BLOCK_H`` heads of
one token: the first ``cdiv(Hq, BLOCK_H)`` head blocks are q's, the rest k's, so q and k share
one launch and one read of the token's cos/sin row.
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl

from ..._core import constants
from ..._core.triton_launch import FastLaunch
from ...utils import ceil_div, next_positive_power_of_2

# Elements one program moves per part (heads x width): 8192 16-bit elements (16 KiB read,
# 8 KiB written) keep enough bytes in flight per multiprocessor without spilling.
TILE_ELEMENTS = 8192
NUM_WARPS = 4


# a constexpr: kernels read no other globals
FP8_NAN_BITS = tl.constexpr(constants.FP8_NAN_BITS)


@triton.jit
def _quantize(y, scale, pos_ok, out_ty: tl.constexpr, FP8_MAX: tl.constexpr):
    # saturating cast; clamp keeps NaN inputs NaN (PropagateNan.ALL) as `satfinite` does
    y = tl.clamp(y * scale, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL).to(out_ty)
    # an invalid position writes the NaN bit pattern itself: the interpreter's float -> fp8
    # conversion does not map NaN to NaN
    bits = tl.where(pos_ok[None, :], y.to(tl.uint8, bitcast=True), FP8_NAN_BITS)
    return bits.to(out_ty, bitcast=True)


@triton.jit
def _saturate(y, scale, FP8_MAX: tl.constexpr):
    return tl.clamp(y * scale, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _rope_quantize_heads(
    rope_ptr,
    nope_ptr,
    rope_out_ptr,
    nope_out_ptr,
    # (token, head) strides, in elements, of the four tensors
    stride_rt,
    stride_rh,
    stride_nt,
    stride_nh,
    stride_rot,
    stride_roh,
    stride_not,
    stride_noh,
    token,
    head_start,
    num_heads,
    # the token's rotation, shared by q and k: ``half = arange(R/2)`` and its cos/sin values
    half,
    cos,
    sin,
    pos_ok,
    scale,
    NOPE_DIM: tl.constexpr,
    BLOCK_NOPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    IS_NEOX: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    heads = head_start + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    if IS_NEOX:
        first = half
        second = half + half.shape[0]
    else:
        first = 2 * half
        second = 2 * half + 1
    out_ty = rope_out_ptr.dtype.element_ty
    t64 = token.to(tl.int64)

    src = rope_ptr + t64 * stride_rt + heads[:, None] * stride_rh
    a = tl.load(src + first[None, :], mask=head_ok[:, None], other=0.0).to(tl.float32)
    b = tl.load(src + second[None, :], mask=head_ok[:, None], other=0.0).to(tl.float32)
    a_rot = _quantize(a * cos[None, :] - b * sin[None, :], scale, pos_ok, out_ty, FP8_MAX)
    b_rot = _quantize(b * cos[None, :] + a * sin[None, :], scale, pos_ok, out_ty, FP8_MAX)
    dst = rope_out_ptr + t64 * stride_rot + heads[:, None] * stride_roh
    tl.store(dst + first[None, :], a_rot, mask=head_ok[:, None])
    tl.store(dst + second[None, :], b_rot, mask=head_ok[:, None])

    if NOPE_DIM > 0:
        cols = tl.arange(0, BLOCK_NOPE)
        mask = head_ok[:, None] & (cols[None, :] < NOPE_DIM)
        x = tl.load(
            nope_ptr + t64 * stride_nt + heads[:, None] * stride_nh + cols[None, :], mask=mask, other=0.0
        )
        y = _saturate(x.to(tl.float32), scale, FP8_MAX)
        tl.store(
            nope_out_ptr + t64 * stride_not + heads[:, None] * stride_noh + cols[None, :],
            y.to(out_ty),
            mask=mask,
        )


@triton.jit
def rope_quantize_kernel(
    # inputs (16-bit) and outputs (fp8)
    q_rope_ptr,
    k_rope_ptr,
    q_nope_ptr,
    k_nope_ptr,
    q_rope_out_ptr,
    k_rope_out_ptr,
    q_nope_out_ptr,
    k_nope_out_ptr,
    cos_sin_ptr,
    pos_ptr,
    # (token, head) strides in elements; the last dim of every tensor is contiguous
    stride_qrt,
    stride_qrh,
    stride_krt,
    stride_krh,
    stride_qnt,
    stride_qnh,
    stride_knt,
    stride_knh,
    stride_qrot,
    stride_qroh,
    stride_krot,
    stride_kroh,
    stride_qnot,
    stride_qnoh,
    stride_knot,
    stride_knoh,
    # sizes and quantization multipliers
    num_q_heads,
    num_k_heads,
    max_pos,
    quant_scale_q,
    quant_scale_kv,
    # meta-parameters
    ROPE_DIM: tl.constexpr,
    NOPE_DIM: tl.constexpr,
    BLOCK_NOPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    IS_NEOX: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    token = tl.program_id(0)
    head_block = tl.program_id(1)

    # cos/sin of this token's position, shared by every head of q and k; an out-of-range
    # position is never read and poisons the rope outputs with NaN
    half = tl.arange(0, ROPE_DIM // 2)
    # the position broadcast to a vector first: the interpreter rejects masks built from a
    # scalar condition
    pos = tl.load(pos_ptr + token + half * 0).to(tl.int64)
    pos_ok = (pos >= 0) & (pos < max_pos)
    row = cos_sin_ptr + pos * ROPE_DIM
    cos = tl.load(row + half, mask=pos_ok, other=float("nan")).to(tl.float32)
    sin = tl.load(row + ROPE_DIM // 2 + half, mask=pos_ok, other=float("nan")).to(tl.float32)

    q_blocks = tl.cdiv(num_q_heads, BLOCK_H)
    if head_block < q_blocks:
        _rope_quantize_heads(
            q_rope_ptr, q_nope_ptr, q_rope_out_ptr, q_nope_out_ptr,
            stride_qrt, stride_qrh, stride_qnt, stride_qnh,
            stride_qrot, stride_qroh, stride_qnot, stride_qnoh,
            token, head_block * BLOCK_H, num_q_heads, half, cos, sin, pos_ok, quant_scale_q,
            NOPE_DIM, BLOCK_NOPE, BLOCK_H, IS_NEOX, FP8_MAX,
        )  # fmt: skip
    else:
        _rope_quantize_heads(
            k_rope_ptr, k_nope_ptr, k_rope_out_ptr, k_nope_out_ptr,
            stride_krt, stride_krh, stride_knt, stride_knh,
            stride_krot, stride_kroh, stride_knot, stride_knoh,
            token, (head_block - q_blocks) * BLOCK_H, num_k_heads, half, cos, sin, pos_ok, quant_scale_kv,
            NOPE_DIM, BLOCK_NOPE, BLOCK_H, IS_NEOX, FP8_MAX,
        )  # fmt: skip


@functools.lru_cache(maxsize=256)
def launch_meta(rope_dim: int, nope_dim: int, num_q_heads: int, num_k_heads: int, out_dtype) -> tuple:
    """``(constexpr meta-parameters, head blocks)`` of a call shape (memoized: a few us of host
    arithmetic otherwise, on every eager call)."""
    block_nope = next_positive_power_of_2(nope_dim) if nope_dim else 0
    width = block_nope + rope_dim
    block_h = max(1, min(TILE_ELEMENTS // width, next_positive_power_of_2(max(num_q_heads, num_k_heads))))
    block_h = 1 << (block_h.bit_length() - 1)  # a power of two for tl.arange
    meta = {
        "ROPE_DIM": rope_dim,
        "NOPE_DIM": nope_dim,
        "BLOCK_NOPE": block_nope,
        "BLOCK_H": block_h,
        "FP8_MAX": constants.FP8_MAX[out_dtype],
    }
    return meta, ceil_div(num_q_heads, block_h) + ceil_div(num_k_heads, block_h)


def _token_head(k):
    # (token, head) strides of a K tensor; a 2-D one has a single head
    strides = k.stride()
    return strides[:2] if len(strides) == 3 else (strides[0], 0)


_ROPE_QUANTIZE = FastLaunch(rope_quantize_kernel)


def rope_quantize(call):
    """Launch :func:`rope_quantize_kernel` on a validated call; returns the replay (repeats the
    launch for a record of the same call signature).

    Parameters
    ----------
    call : flashinfer.mla._args.Rope
        fp16/bf16 ``q_rope (nnz, Hq, R)``, ``q_nope (nnz, Hq, N)`` and K parts (3-D, or 2-D for one
        head), ``stride(-1) == 1`` (or last dim <= 1), N may be 0; the cos/sin cache and
        positions; FP8 outputs shaped like the inputs, written in place.
    """
    (q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox, quant_scale_q, quant_scale_kv,
     q_rope_out, k_rope_out, q_nope_out, k_nope_out) = call  # fmt: skip
    nnz, num_q_heads, rope_dim = q_rope.shape
    num_k_heads = k_rope.shape[1] if k_rope.dim() == 3 else 1
    nope_dim = q_nope.shape[2]
    meta, head_blocks = launch_meta(rope_dim, nope_dim, num_q_heads, num_k_heads, q_rope_out.dtype)
    launch = _ROPE_QUANTIZE.bind(
        (nnz, head_blocks),
        q_rope, k_rope, q_nope, k_nope,
        q_rope_out, k_rope_out, q_nope_out, k_nope_out,
        cos_sin_cache, pos_ids,
        *q_rope.stride()[:2], *_token_head(k_rope), *q_nope.stride()[:2], *_token_head(k_nope),
        *q_rope_out.stride()[:2], *_token_head(k_rope_out),
        *q_nope_out.stride()[:2], *_token_head(k_nope_out),
        num_q_heads, num_k_heads, cos_sin_cache.shape[0],
        float(quant_scale_q), float(quant_scale_kv),
        IS_NEOX=bool(is_neox), num_warps=NUM_WARPS, **meta,
    )  # fmt: skip
    return lambda call: launch(
        call.q_rope, call.k_rope, call.q_nope, call.k_nope, call.q_rope_out, call.k_rope_out, call.q_nope_out,
        call.k_nope_out, call.cos_sin_cache, call.pos_ids,
    )  # fmt: skip
