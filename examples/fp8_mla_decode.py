"""DeepSeek-V3.2-style FP8 sparse MLA decode, end to end, on the best device present.

BF16 query/key components -> ``flashinfer.rope.mla_rope_quantize_fp8`` with non-unit
quantization multipliers, writing into merged 576-wide FP8 buffers -> the new key rows go into
an FP8 paged KV cache -> ``flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla`` in sparse
mode (top-k physical slots per token), with one metadata object from
``get_batch_decode_metadata_mla`` reused by every layer and step. The reciprocal quantization
multipliers are folded into the decode scales:

    bmm1_scale = softmax_scale / (quant_scale_q * quant_scale_kv),  bmm2_scale = 1 / quant_scale_kv

Every output is checked against a float64 computation written here from the BF16 inputs (with
the FP8 rounding of the quantized q/k applied). Exits non-zero if the relative error is above
the FP8 tolerance. Run: ``python examples/fp8_mla_decode.py``.
"""

from __future__ import annotations

import math
import sys
import time

import torch

import flashinfer.decode
import flashinfer.rope

KV_LORA_RANK, ROPE_DIM, QK_NOPE_HEAD_DIM = 512, 64, 128
PAGE_SIZE = 64
FP8 = torch.float8_e4m3fn
QUANT_SCALE_Q, QUANT_SCALE_KV = 0.5, 4.0  # multipliers applied before the FP8 cast
TOLERANCE = 2e-2  # relative error allowed (BF16 output, float32 vs float64 rounding ties in FP8)


def pick_device() -> torch.device:
    try:
        import torch_musa  # noqa: F401  (registers the "musa" device)
    except ImportError:
        pass
    musa = getattr(torch, "musa", None)
    if musa is not None and musa.is_available():
        return torch.device("musa")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def yarn_cos_sin_cache(max_pos: int, factor: float = 40.0, original_max_pos: int = 4096) -> torch.Tensor:
    """DeepSeek's YaRN RoPE table ``[max_pos, 64]`` float32: cos half, then sin half, times mscale."""
    base, beta_fast, beta_slow = 10000.0, 32.0, 1.0
    dims = torch.arange(0, ROPE_DIM, 2, dtype=torch.float64)
    extrapolated = base ** (-dims / ROPE_DIM)
    interpolated = extrapolated / factor

    def correction_dim(rotations):
        return ROPE_DIM * math.log(original_max_pos / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), ROPE_DIM - 1)
    ramp = ((torch.arange(ROPE_DIM // 2, dtype=torch.float64) - low) / max(high - low, 1e-3)).clamp(0, 1)
    inv_freq = interpolated * ramp + extrapolated * (1 - ramp)
    mscale = 0.1 * math.log(factor) + 1.0
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return (torch.cat((angles.cos(), angles.sin()), dim=-1) * mscale).float()


# ------------------------------------------------------------------ float64 check, independent
def rope_f64(x: torch.Tensor, cache: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Interleaved (DeepSeek) RoPE in float64; ``x [n, ..., 64]``."""
    rows = cache.double()[positions]
    cos = rows[:, : ROPE_DIM // 2].view(-1, *([1] * (x.dim() - 2)), ROPE_DIM // 2)
    sin = rows[:, ROPE_DIM // 2 :].view_as(cos)
    x = x.double()
    y = torch.empty_like(x)
    y[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    y[..., 1::2] = x[..., 1::2] * cos + x[..., 0::2] * sin
    return y


def fp8_round(x: torch.Tensor, scale: float) -> torch.Tensor:
    """What the quantizer stores, dequantized: ``fp8(x * scale) / scale`` in float64."""
    return (x * scale).clamp(-448, 448).to(FP8).double() / scale


def attention_f64(q, keys, softmax_scale):
    """``q [H, 576]``, ``keys [n, 576]`` (dequantized float64) -> ``[H, 512]``."""
    if keys.shape[0] == 0:
        return torch.zeros(q.shape[0], KV_LORA_RANK, dtype=torch.float64)
    probs = torch.softmax((q @ keys.T) * softmax_scale, dim=-1)
    return probs @ keys[:, :KV_LORA_RANK]


# ---------------------------------------------------------------------------------------- main
def main() -> int:
    device = pick_device()
    on_cpu = device.type == "cpu"
    heads, batch, topk = (16, 4, 256) if on_cpu else (128, 32, 2048)
    layers, steps = 2, 3
    history = torch.randint(topk // 2, 2 * topk, (batch,))  # tokens already in the cache
    max_len = int(history.max()) + steps
    pages_per_request = -(-max_len // PAGE_SIZE)
    softmax_scale = (QK_NOPE_HEAD_DIM + ROPE_DIM) ** -0.5 * (0.1 * math.log(40.0) + 1.0) ** 2
    cache_table = yarn_cos_sin_cache(max_len + 16).to(device)
    print(f"device {device}: batch {batch}, {heads} heads, top-k {topk}, {layers} layers x {steps} steps")

    # Each request owns a shuffled set of pages; slot = page * PAGE_SIZE + offset.
    page_of = torch.randperm(batch * pages_per_request).view(batch, pages_per_request)

    def slot(b: int, position: int) -> int:
        return int(page_of[b, position // PAGE_SIZE]) * PAGE_SIZE + position % PAGE_SIZE

    # Per layer: the FP8 cache [pages, 1, PAGE_SIZE, 576] and the float64 dequantized rows it holds.
    caches, reference_rows = [], []
    for _ in range(layers):
        kv = torch.zeros(batch * pages_per_request, 1, PAGE_SIZE, 576, dtype=FP8, device=device)
        ref = torch.zeros(batch * pages_per_request * PAGE_SIZE, 576, dtype=torch.float64)
        caches.append(kv)
        reference_rows.append(ref)

    def write_keys(layer, k_nope, k_pe, positions, slots):
        """RoPE + quantize new latent keys into merged rows, then place the rows in the cache."""
        k_fp8 = torch.empty(k_nope.shape[0], 576, dtype=FP8, device=device)
        dummy_q = torch.zeros(k_nope.shape[0], 1, 576, dtype=torch.bfloat16, device=device)
        q_dummy_out = torch.empty(k_nope.shape[0], 1, 576, dtype=FP8, device=device)
        flashinfer.rope.mla_rope_quantize_fp8(
            dummy_q[..., KV_LORA_RANK:], k_pe, dummy_q[..., :KV_LORA_RANK], k_nope, cache_table, positions,
            is_neox=False, quantize_dtype=FP8, quant_scale_q=QUANT_SCALE_Q, quant_scale_kv=QUANT_SCALE_KV,
            q_rope_out=q_dummy_out[..., KV_LORA_RANK:], k_rope_out=k_fp8[:, KV_LORA_RANK:],
            q_nope_out=q_dummy_out[..., :KV_LORA_RANK], k_nope_out=k_fp8[:, :KV_LORA_RANK],
        )  # fmt: skip
        # Scatter the rows as bytes (index_copy has no FP8 kernel on every device).
        caches[layer].view(-1, 576).view(torch.uint8).index_copy_(
            0, slots.to(device), k_fp8.view(torch.uint8)
        )
        pos_cpu = positions.cpu()
        ref_k = torch.cat((k_nope.cpu().double(), rope_f64(k_pe.cpu(), cache_table.cpu(), pos_cpu)), dim=-1)
        reference_rows[layer][slots] = fp8_round(ref_k, QUANT_SCALE_KV)

    # Fill the history (as earlier prefill/decode steps would have).
    for layer in range(layers):
        positions = torch.cat([torch.arange(int(n)) for n in history])
        slots = torch.tensor([slot(b, p) for b in range(batch) for p in range(int(history[b]))])
        k = torch.randn(len(positions), 576, dtype=torch.bfloat16, device=device)
        write_keys(layer, k[:, :KV_LORA_RANK], k[:, KV_LORA_RANK:], positions.to(device), slots)

    workspace = torch.empty(128 << 20 if not on_cpu else 1 << 20, dtype=torch.uint8, device=device)
    q_fp8 = torch.empty(batch, heads, 576, dtype=FP8, device=device)
    seq_lens = history.to(torch.int32).to(device)
    metadata = flashinfer.decode.get_batch_decode_metadata_mla(
        q_fp8.view(batch, 1, heads, 576), seq_lens, topk
    )
    worst, decode_seconds = 0.0, []
    for step in range(steps):
        positions = history + step  # the new token's position
        seq_lens = (positions + 1).to(torch.int32).to(device)
        new_slots = torch.tensor([slot(b, int(positions[b])) for b in range(batch)])
        # The indexer's choice: top-k of each request's positions (always the newest), -1 padded.
        indices = torch.full((batch, 1, topk), -1, dtype=torch.int32)
        for b in range(batch):
            length = int(positions[b]) + 1
            chosen = torch.cat((torch.tensor([length - 1]), torch.randperm(length - 1)[: topk - 1]))
            indices[b, 0, : len(chosen)] = torch.tensor([slot(b, int(p)) for p in chosen], dtype=torch.int32)
        for layer in range(layers):
            q_nope = torch.randn(batch, heads, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
            q_pe = torch.randn(batch, heads, ROPE_DIM, dtype=torch.bfloat16, device=device)
            k = torch.randn(batch, 576, dtype=torch.bfloat16, device=device)
            pos_dev = positions.to(device)
            flashinfer.rope.mla_rope_quantize_fp8(
                q_pe, k[:, KV_LORA_RANK:], q_nope, k[:, :KV_LORA_RANK], cache_table, pos_dev, is_neox=False,
                quantize_dtype=FP8, quant_scale_q=QUANT_SCALE_Q, quant_scale_kv=QUANT_SCALE_KV,
                q_rope_out=q_fp8[..., KV_LORA_RANK:], k_rope_out=torch.empty(batch, ROPE_DIM, dtype=FP8, device=device),
                q_nope_out=q_fp8[..., :KV_LORA_RANK], k_nope_out=torch.empty(batch, KV_LORA_RANK, dtype=FP8, device=device),
            )  # fmt: skip
            write_keys(layer, k[:, :KV_LORA_RANK], k[:, KV_LORA_RANK:], pos_dev, new_slots)

            if device.type != "cpu":
                getattr(torch, device.type).synchronize()
            start = time.perf_counter()
            out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q_fp8.view(batch, 1, heads, 576), kv_cache=caches[layer], workspace_buffer=workspace,
                qk_nope_head_dim=QK_NOPE_HEAD_DIM, kv_lora_rank=KV_LORA_RANK, qk_rope_head_dim=ROPE_DIM,
                block_tables=indices.to(device), seq_lens=seq_lens, max_seq_len=topk, sparse_mla_top_k=topk,
                bmm1_scale=softmax_scale / (QUANT_SCALE_Q * QUANT_SCALE_KV), bmm2_scale=1.0 / QUANT_SCALE_KV,
                metadata=metadata,
            )  # fmt: skip
            if device.type != "cpu":
                getattr(torch, device.type).synchronize()
            decode_seconds.append(time.perf_counter() - start)

            q_ref = torch.cat(
                (q_nope.cpu().double(), rope_f64(q_pe.cpu(), cache_table.cpu(), positions)), dim=-1
            )
            q_ref = fp8_round(q_ref, QUANT_SCALE_Q)
            for b in range(batch):
                rows = indices[b, 0][indices[b, 0] >= 0].long()
                expected = attention_f64(q_ref[b], reference_rows[layer][rows], softmax_scale)
                error = (out[b, 0].cpu().double() - expected).norm() / expected.norm()
                worst = max(worst, float(error))
    # The median leaves out the first call's one-time costs (kernel compilation, MATE JIT).
    per_step = sorted(decode_seconds)[len(decode_seconds) // 2]
    print(f"max relative error vs float64: {worst:.2e} (tolerance {TOLERANCE:.0e})")
    print(f"decode time per layer-step (median of {len(decode_seconds)}): {per_step * 1e3:.2f} ms")
    if worst > TOLERANCE:
        print("FAILED: error above the FP8 tolerance")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
