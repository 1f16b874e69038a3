"""Independent float64 oracles and input builders for the MLA tests.

Written from the FlashInfer v0.6.17 contract (flashinfer-api.md §9, §10), FlashMLA-style:
gather every candidate key, mask, softmax, multiply by V. They share no code with the package's
reference implementation (which uses float32 and an online softmax over chunks).
"""

from __future__ import annotations

import math

import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
LOG2E = 1.0 / math.log(2.0)
INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------------------- RoPE
def cos_sin_cache(
    max_pos: int, rope_dim: int, base: float = 10000.0, yarn_mscale: float = 1.0
) -> torch.Tensor:
    """``[max_pos, rope_dim]`` float32: cos half then sin half (FlashInfer / vLLM layout)."""
    inv_freq = base ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return (torch.cat((angles.cos(), angles.sin()), dim=-1) * yarn_mscale).float()


def fp8(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round-to-nearest FP8 with saturation to the finite maximum."""
    fmax = torch.finfo(dtype).max
    return x.clamp(-fmax, fmax).to(dtype)


def rope_oracle(q_rope, k_rope, q_nope, k_nope, cache, pos_ids, is_neox, scale_q, scale_kv, dtype):
    """The four FP8 outputs of ``rope_quantize_fp8`` computed in float64 (nope may be None)."""
    rows = cache.double()[pos_ids.long()]
    half = cache.shape[1] // 2
    cos, sin = rows[:, :half], rows[:, half:]

    def rotate(x):
        x = x.double()
        c = cos.view(-1, *([1] * (x.dim() - 2)), half)
        s = sin.view(-1, *([1] * (x.dim() - 2)), half)
        y = torch.empty_like(x)
        if is_neox:
            y[..., :half] = x[..., :half] * c - x[..., half:] * s
            y[..., half:] = x[..., half:] * c + x[..., :half] * s
        else:
            y[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
            y[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
        return y

    def nope(x, scale, like):
        if x is None:
            return torch.empty(*like.shape[:-1], 0, dtype=dtype)
        return fp8(x.double() * scale, dtype)

    return (
        fp8(rotate(q_rope) * scale_q, dtype),
        fp8(rotate(k_rope) * scale_kv, dtype),
        nope(q_nope, scale_q, q_rope),
        nope(k_nope, scale_kv, k_rope),
    )


def assert_fp8_close(actual: torch.Tensor, expected: torch.Tensor, name: str = "output") -> None:
    """Every element within one FP8 rounding step (the float32 vs float64 rounding boundary)."""
    assert actual.dtype == expected.dtype, (name, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    if actual.numel() == 0:
        return
    a, e = actual.float(), expected.float()
    assert torch.equal(a.isnan(), e.isnan()), f"{name}: NaN positions differ"
    a, e = a.nan_to_num(), e.nan_to_num()
    mantissa_bits = 3 if actual.dtype == E4M3 else 2
    tiny = torch.finfo(actual.dtype).smallest_normal * 2.0**-mantissa_bits
    step = e.abs() * 2.0**-mantissa_bits + tiny
    bad = (a - e).abs() > step
    assert not bad.any(), f"{name}: {int(bad.sum())} of {a.numel()} elements off by more than one FP8 step"
    # Nearly all elements must be bit-exact; a one-step difference needs a rounding tie.
    assert (a != e).float().mean() <= 0.01, f"{name}: too many one-step differences"


# --------------------------------------------------------------------------------------- decode
def decode_oracle(query, kv_rows, candidates, bmm1, bmm2, sinks, kv_lora_rank):
    """Attention of each query token over its own candidate rows, in float64.

    ``candidates[b][t]`` is the list of key rows (ints) token t of request b attends. Returns
    ``out [B, q_len, H, kv_lora_rank]`` and the base-2 ``lse [B, q_len, H]`` (+inf when empty).
    """
    batch, q_len, heads, _ = query.shape
    out = torch.zeros(batch, q_len, heads, kv_lora_rank, dtype=torch.float64)
    lse = torch.full((batch, q_len, heads), math.inf, dtype=torch.float64)
    q = query.double()
    kv = kv_rows.double()
    for b in range(batch):
        for t in range(q_len):
            rows = candidates[b][t]
            if not rows:
                continue
            keys = kv[torch.tensor(rows)]
            scores = (q[b, t] @ keys.T) * bmm1  # [H, n]
            lse_nat = torch.logsumexp(scores, dim=-1)
            probs = torch.softmax(scores, dim=-1)
            value = probs @ keys[:, :kv_lora_rank]
            if sinks is not None:
                value = value * torch.sigmoid(lse_nat - sinks.double())[:, None]
            out[b, t] = value * bmm2
            lse[b, t] = lse_nat * LOG2E
    return out, lse


def sparse_candidates(indices, seq_lens, num_slots):
    """FlashInfer's sparse rule: the first ``min(topk, seq_len - (q_len-1-t))`` positions, valid ones."""
    batch, q_len, topk = indices.shape
    result = []
    for b in range(batch):
        per_token = []
        for t in range(q_len):
            n = min(topk, int(seq_lens[b]) - (q_len - 1 - t))
            row = [int(i) for i in indices[b, t, : max(n, 0)]]
            per_token.append([i for i in row if 0 <= i < num_slots])
        result.append(per_token)
    return result


def dense_candidates(block_tables, seq_lens, q_len, page_size, num_pages):
    """Dense rule: positions ``0 .. L-1``, ``L = seq_len - (q_len-1-t)``, through the page table."""
    result = []
    for b in range(block_tables.shape[0]):
        per_token = []
        for t in range(q_len):
            length = int(seq_lens[b]) - (q_len - 1 - t)
            rows = []
            for pos in range(max(length, 0)):
                page = int(block_tables[b, pos // page_size])
                if 0 <= page < num_pages:
                    rows.append(page * page_size + pos % page_size)
            per_token.append(rows)
        result.append(per_token)
    return result


def assert_decode_close(out, lse, expected_out, expected_lse, dtype_note=""):
    """BF16 output: rtol 1e-2 / atol 2e-3 (one bf16 rounding + float32 sums); LSE: 1e-4."""
    torch.testing.assert_close(
        out.double(), expected_out, rtol=1e-2, atol=2e-3, msg=lambda m: f"out {dtype_note}: {m}"
    )
    if lse is not None:
        torch.testing.assert_close(
            lse.double(), expected_lse, rtol=1e-5, atol=1e-4, msg=lambda m: f"lse {dtype_note}: {m}"
        )


# --------------------------------------------------------------------------------------- inputs
def quantized(shape, dtype, scale=1.0) -> torch.Tensor:
    """Random values exactly representable in ``dtype`` (so the oracle sees the same inputs)."""
    return (torch.randn(shape) * scale).clamp(-8, 8).to(dtype)


def physical_slots(batch, q_len, topk, seq_lens, page_size, num_pages, pad_to=None):
    """Per-token slot lists like the callers build them: logical positions through a random page map.

    Each request gets its own pages; token t lists logical positions ``0 .. n_t-1`` (shuffled),
    then -1 padding.
    """
    pages_per_request = num_pages // batch
    perm = torch.randperm(num_pages)
    indices = torch.full((batch, q_len, topk), -1, dtype=torch.int32)
    for b in range(batch):
        pages = perm[b * pages_per_request : (b + 1) * pages_per_request]
        length = min(int(seq_lens[b]), pages_per_request * page_size)
        for t in range(q_len):
            n = min(topk, length, pad_to if pad_to is not None else topk)
            logical = torch.randperm(length)[:n]
            indices[b, t, :n] = (pages[logical // page_size] * page_size + logical % page_size).int()
    return indices
