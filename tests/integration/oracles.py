"""Float64 oracles and input makers for the cross-package tests (independent of the package)."""

from __future__ import annotations

import math

import torch

E4M3 = torch.float8_e4m3fn


def fp8(shape, gen, dtype=E4M3) -> torch.Tensor:
    """Random FP8 values (exactly representable by construction)."""
    return (torch.randn(shape, generator=gen) * 2).to(dtype)


def pow2_scales(shape, gen) -> torch.Tensor:
    """Random power-of-two float32 scales, so dequantized products are exact in float32."""
    return torch.exp2(torch.randint(-3, 3, shape, generator=gen).float())


def bmm_fp8(A, B, sa, sb) -> torch.Tensor:
    return (A.double() @ B.double()) * sa.double() * sb.double()


def groupwise(a, b, a_scale, b_scale, block=128) -> torch.Tensor:
    """K-major scales: a_scale [m, ceil(k/128)], b_scale [ceil(n/128), ceil(k/128)]."""
    m, k = a.shape
    n = b.shape[0]
    sa = a_scale.double().repeat_interleave(block, 1)[:, :k]
    sb = b_scale.double().repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return (a.double() * sa) @ (b.double() * sb).T


def rope_cache(max_pos: int, rope_dim: int) -> torch.Tensor:
    half = rope_dim // 2
    freqs = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / rope_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * freqs[None]
    return torch.cat([angles.cos(), angles.sin()], dim=1).float()


def rope(x, cache, pos, is_neox) -> torch.Tensor:
    """Rotate [nnz, H, R] by the cache rows at pos, in float64."""
    x = x.double()
    half = x.shape[-1] // 2
    cos = cache.double()[pos][:, None, :half]
    sin = cache.double()[pos][:, None, half:]
    if is_neox:
        lo, hi = x[..., :half], x[..., half:]
        return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def sparse_decode(query, kv_flat, indices, seq_lens, topk, bmm1, bmm2, kv_lora_rank=512):
    """FlashMLA-style float64 reference: returns (out [B,q,H,512], lse2 [B,q,H])."""
    B, q_len, H, D = query.shape
    S = kv_flat.shape[0]
    out = torch.zeros(B, q_len, H, kv_lora_rank, dtype=torch.float64)
    lse = torch.full((B, q_len, H), math.inf, dtype=torch.float64)
    for b in range(B):
        for t in range(q_len):
            n = min(topk, int(seq_lens[b]) - (q_len - 1 - t))
            row = [int(i) for i in indices[b, t, : max(n, 0)] if 0 <= int(i) < S]
            if not row:
                continue
            keys = kv_flat[row].double()
            s = bmm1 * (query[b, t].double() @ keys.T)
            p = torch.softmax(s, dim=-1)
            out[b, t] = bmm2 * (p @ keys[:, :kv_lora_rank])
            lse[b, t] = torch.logsumexp(s, dim=-1) / math.log(2)
    return out, lse
