"""Host overhead of the flashinfer GEMM and MLA API layers, per API, on CPU with tiny tensors.

For each case this times (best of interleaved rounds of many calls) the public function and, with the
same arguments already normalized, the implementation function it dispatches to
(``flashinfer.gemm._reference`` / ``flashinfer.mla._reference`` on CPU). The difference is what the API layer costs per call:
validation, scale views, dispatch and (without ``out=``) output allocation. Tiny tensors keep
the implementation's own time small so the difference is not lost in noise. The two are timed
interleaved, so drift affects both. A second column times the wrapper with every
implementation function replaced by a no-op (minus a no-op call): the API layer alone, free of
the implementation's own jitter.

Run: ``python benchmarks/host_overhead.py [--iters N] [--json PATH]``. Target: under 5 us for
``bmm_fp8`` and ``gemm_fp8_nt_groupwise`` with ``out=``. (The MLA rows dispatch to the float32
reference on CPU, so their "impl" column is real compute; their "API layer" column is the
number to read.)
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import torch

import flashinfer.decode
import flashinfer.gemm as G
import flashinfer.rope
from flashinfer.gemm import _reference as ref
from flashinfer.mla import _reference as mla_ref

E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16


def cases():
    """(api, case, wrapper call, direct implementation call) with tiny tensors."""
    A16 = torch.randn(1, 16, 16).to(BF16)
    B16 = torch.randn(1, 16, 16).to(BF16).transpose(-2, -1)
    o16 = torch.empty(1, 16, 16, dtype=BF16)
    A8 = torch.randn(1, 16, 16).to(E4M3)
    B8 = torch.randn(1, 16, 16).to(E4M3).transpose(-2, -1)
    s1, s0 = torch.ones(1), torch.ones(())
    a, b = torch.randn(16, 128).to(E4M3), torch.randn(128, 128).to(E4M3)
    sa, sb = torch.ones(16, 1), torch.ones(1, 1)
    sa_mn, sb_mn = sa.t().contiguous(), sb.t().contiguous()  # MN-major storage
    o2 = torch.empty(16, 128, dtype=BF16)
    ids = torch.zeros(16, dtype=torch.int32)
    bg, sbg = torch.randn(1, 128, 128).to(E4M3), torch.ones(1, 1, 1)
    a3, sa3 = torch.randn(1, 16, 128).to(E4M3), torch.ones(1, 16, 1)
    masked = torch.tensor([8], dtype=torch.int32)
    o3 = torch.empty(1, 16, 128, dtype=BF16)
    indptr = torch.tensor([0, 16], dtype=torch.int32)
    x16, w8, ws = torch.randn(16, 128).to(BF16), torch.randn(128, 128).to(E4M3), torch.ones(1, 1)
    x8, xs = torch.empty(16, 128, dtype=E4M3), torch.empty(1, 16).t()

    def blockscale_direct():  # what the API calls: quantize the input, then the groupwise GEMM
        ref.quantize_fp8_blocks(x16, 1, x8, xs)
        ref.gemm_groupwise(x8, w8, xs, ws, 1, 128, 128, o2)

    return [
        ("bmm_bf16", "out=", lambda: G.bmm_bf16(A16, B16, o16), lambda: ref.bmm(A16, B16, o16)),
        ("bmm_bf16", "allocates out", lambda: G.bmm_bf16(A16, B16), lambda: ref.bmm(A16, B16, o16)),
        (
            "bmm_fp8",
            "(1,) scales, out= (G1)",
            lambda: G.bmm_fp8(A8, B8, s1, s1, BF16, o16),
            lambda: ref.bmm(A8, B8, o16, s0, s0),
        ),
        (
            "bmm_fp8",
            "0-dim scales, out=",
            lambda: G.bmm_fp8(A8, B8, s0, s0, BF16, o16),
            lambda: ref.bmm(A8, B8, o16, s0, s0),
        ),
        (
            "bmm_fp8",
            "0-dim scales, skip_check",
            lambda: G.bmm_fp8(A8, B8, s0, s0, BF16, o16, skip_check=True),
            lambda: ref.bmm(A8, B8, o16, s0, s0),
        ),
        (
            "gemm_fp8_nt_groupwise",
            "K, out=",
            lambda: G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", out=o2),
            lambda: ref.gemm_groupwise(a, b, sa, sb, 1, 128, 128, o2),
        ),
        (
            "gemm_fp8_nt_groupwise",
            "MN, out=",
            lambda: G.gemm_fp8_nt_groupwise(a, b, sa_mn, sb_mn, "MN", out=o2),
            lambda: ref.gemm_groupwise(a, b, sa, sb, 1, 128, 128, o2),
        ),
        (
            "group_deepgemm_fp8_nt_groupwise",
            "out=",
            lambda: G.group_deepgemm_fp8_nt_groupwise(a, bg, sa, sbg, ids, out=o2),
            lambda: ref.group_gemm_contiguous(a, bg, sa, sbg, ids, o2),
        ),
        (
            "batch_deepgemm_fp8_nt_groupwise",
            "out=",
            lambda: G.batch_deepgemm_fp8_nt_groupwise(a3, bg, sa3, sbg, masked, 8, out=o3),
            lambda: ref.group_gemm_masked(a3, bg, sa3, sbg, masked, 8, o3),
        ),
        (
            "group_gemm_fp8_nt_groupwise",
            "K, out=",
            lambda: G.group_gemm_fp8_nt_groupwise(a, bg, sa, sbg, indptr, scale_major_mode="K", out=o2),
            lambda: ref.group_gemm_segments(a, bg, sa, sbg, indptr, o2),
        ),
        (
            "fp8_blockscale_gemm_sm90",
            "BF16 input, out= (vLLM)",
            lambda: G.fp8_blockscale_gemm_sm90(x16, w8, None, ws, out=o2),
            blockscale_direct,
        ),
        *mla_cases(),
    ]


def mla_cases():
    """sglang's RoPE call (2-D K slices, merged q output) and vLLM's sparse decode call (D3)."""
    tokens, heads, topk = 2, 16, 64
    q_nope = torch.randn(heads, tokens, 512).to(BF16).transpose(0, 1)
    q_rope = torch.randn(tokens, heads, 192).to(BF16)[..., 128:]
    latent = torch.randn(tokens, 576).to(BF16)
    cache, pos = torch.randn(64, 64), torch.zeros(tokens, dtype=torch.int64)
    q_out = torch.empty(tokens, heads, 576, dtype=E4M3)
    k_out = torch.empty(tokens, 576, dtype=E4M3)
    rope = dict(
        q_rope=q_rope, k_rope=latent[:, 512:], q_nope=q_nope, k_nope=latent[:, :512], cos_sin_cache=cache,
        pos_ids=pos, is_neox=False, quantize_dtype=E4M3, q_rope_out=q_out[..., 512:],
        k_rope_out=k_out[:, 512:], q_nope_out=q_out[..., :512], k_nope_out=k_out[:, :512],
    )  # fmt: skip
    rope_args = (q_rope, latent[:, None, 512:], q_nope, latent[:, None, :512], cache, pos, False, 1.0, 1.0,
                 q_out[..., 512:], k_out[:, None, 512:], q_out[..., :512], k_out[:, None, :512])  # fmt: skip
    query = torch.randn(tokens, 1, heads, 576).to(E4M3)
    kv_cache = torch.randn(4, 1, 64, 576).to(E4M3)
    indices = torch.randint(0, 256, (tokens, 1, topk), dtype=torch.int32)
    seq_lens = torch.full((tokens,), topk, dtype=torch.int32)
    workspace = torch.zeros(1 << 20, dtype=torch.uint8)
    out = torch.empty(tokens, 1, heads, 512, dtype=BF16)
    decode = dict(
        query=query, kv_cache=kv_cache, workspace_buffer=workspace, qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=indices, seq_lens=seq_lens, max_seq_len=topk, bmm1_scale=0.1,
        bmm2_scale=1.0, sparse_mla_top_k=topk,
    )  # fmt: skip
    decode_args = (
        query,
        kv_cache.view(-1, 576),
        indices,
        seq_lens,
        0.1,
        1.0,
        None,
        out,
        None,
        None,
        workspace,
    )
    return [
        ("mla_rope_quantize_fp8", "sglang, 2-D K", lambda: flashinfer.rope.mla_rope_quantize_fp8(**rope),
         lambda: mla_ref.rope_quantize(*rope_args)),
        ("trtllm_batch_decode_mla", "vLLM sparse (D3)",
         lambda: flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**decode),
         lambda: mla_ref.sparse_decode(*decode_args)),
    ]  # fmt: skip


def per_call_ns(fn, iters):
    """Mean time of one call over a loop of ``iters`` calls (timer cost amortized)."""
    clock = time.perf_counter_ns
    start = clock()
    for _ in range(iters):
        fn()
    return (clock() - start) / iters


def measure(wrapper, direct, iters, rounds=15):
    """Interleaved rounds of ``iters`` calls each; the best round of each, in microseconds.

    The best round (as ``timeit`` recommends) discards rounds slowed down by other processes on
    a shared machine.
    """
    for _ in range(200):
        wrapper()
        direct()
    wrapped, plain = [], []
    gc.disable()
    try:
        for _ in range(rounds):
            wrapped.append(per_call_ns(wrapper, iters))
            plain.append(per_call_ns(direct, iters))
    finally:
        gc.enable()
    return min(wrapped) / 1e3, min(plain) / 1e3


def _noop(*args):
    return None


IMPLEMENTATION_FUNCTIONS = [
    (
        ref,
        (
            "bmm",
            "gemm_groupwise",
            "group_gemm_contiguous",
            "group_gemm_masked",
            "group_gemm_segments",
            "quantize_fp8_blocks",
        ),
    ),
    (mla_ref, ("rope_quantize", "sparse_decode", "decode_plan")),
]


def api_layer_only(wrapper, iters):
    """The wrapper with every implementation function replaced by a no-op, minus a no-op call."""
    saved = [
        (module, name, getattr(module, name)) for module, names in IMPLEMENTATION_FUNCTIONS for name in names
    ]
    try:
        for module, name, _ in saved:
            setattr(module, name, _noop)
        wrapped_us, noop_us = measure(wrapper, _noop, iters)
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    return wrapped_us - noop_us


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for api, case, wrapper, direct in cases():
        wrapped_us, direct_us = measure(wrapper, direct, args.iters)
        rows.append(
            {
                "api": api,
                "case": case,
                "wrapper_us": wrapped_us,
                "direct_us": direct_us,
                "overhead_us": wrapped_us - direct_us,
                "api_layer_us": api_layer_only(wrapper, args.iters),
            }
        )
    header = f"{'api':32} {'case':26} {'wrapper':>8} {'impl':>8} {'overhead':>9} {'API layer':>10}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['api']:32} {r['case']:26} {r['wrapper_us']:8.2f} {r['direct_us']:8.2f} "
            f"{r['overhead_us']:9.2f} {r['api_layer_us']:10.2f}"
        )
    print(
        "us per call. overhead = wrapper - impl (real implementation, noisier); API layer = the "
        "wrapper with a no-op implementation minus a no-op call."
    )
    print(f"torch {torch.__version__}, CPU, 1 thread, best of 15 interleaved rounds of {args.iters} calls")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
