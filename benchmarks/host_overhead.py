"""Host time of the flashinfer API layers per call, on CPU, against the budget of issue 16.

Each case calls a public function with tiny tensors while every implementation function
(``flashinfer.gemm._reference``, ``flashinfer.mla._reference``) is replaced by a no-op, so what
is timed is the API layer alone: validation, argument records, dispatch and (without ``out=``)
output allocation. The time of a no-op call is subtracted. Each number is the best of many
short rounds (every round times every case), in CPU time of the calling thread (the best round, as ``timeit``
recommends, and the thread's CPU clock keep other processes on a shared machine out of the
result as far as they can: on a loaded machine the numbers still rise).

Budget (issue 16): at most 5 us per call for every GEMM API with tensor scales of every
accepted shape, 10 us for a decode call with metadata, 10 us for RoPE, with caller-given
outputs (the serving calls). Rows without a budget are shown for information.

Against an older commit (``--baseline REV``): this checkout's and REV's packages each run their
own copy of this script in fresh processes, alternately in ABBA order (``--repeat`` times each,
best per row), on the same machine in the same run; rows gain ``baseline_us``. Both trees come from
``packages/*/src`` of their checkout (REV through ``git archive``), not from what is installed.

Run: ``python benchmarks/host_overhead.py [--iters N] [--json PATH] [--baseline REV [--repeat N]]``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

import flashinfer.decode
import flashinfer.gemm as G
import flashinfer.rope
from flashinfer.gemm import _reference as gemm_reference
from flashinfer.mla import _reference as mla_reference

E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16
GEMM_BUDGET_US, DECODE_BUDGET_US, ROPE_BUDGET_US = 5.0, 10.0, 10.0


def gemm_cases():
    """(api, case, budget in us or None, call) with tiny tensors."""
    A16 = torch.randn(2, 16, 16).to(BF16)
    B16 = torch.randn(2, 16, 16).to(BF16).transpose(-2, -1)
    o16 = torch.empty(2, 16, 16, dtype=BF16)
    A8 = torch.randn(2, 16, 16).to(E4M3)
    B8 = torch.randn(2, 16, 16).to(E4M3).transpose(-2, -1)
    s0, s1 = torch.ones(()), torch.ones(1)
    a_rows, a_rows_t = torch.ones(2, 16, 1), torch.ones(2, 1, 16)  # (b, m, 1) and (b, 1, m)
    b_cols, b_cols_t = torch.ones(2, 1, 16), torch.ones(2, 16, 1)  # (b, 1, n) and (b, n, 1)
    a, b = torch.randn(16, 256).to(E4M3), torch.randn(256, 256).to(E4M3)
    sa, sb = torch.ones(16, 2), torch.ones(2, 2)
    sa_mn, sb_mn = sa.t().contiguous(), sb.t().contiguous()  # MN-major storage
    sa_trtllm = sa.t().contiguous().t()  # trtllm: the (m, k/128) view of MN-major storage
    sa_block = torch.ones(1, 2)  # (128, 128, 128): one 128-row block
    sa_block_mn = sa_block.t().contiguous()
    o2 = torch.empty(16, 256, dtype=BF16)
    o8, out_scale = torch.empty(16, 256, dtype=E4M3), torch.empty(16, 2)
    ids = torch.zeros(16, dtype=torch.int32)
    bg, sbg = torch.randn(2, 256, 256).to(E4M3), torch.ones(2, 2, 2)
    a3, sa3 = torch.randn(2, 16, 256).to(E4M3), torch.ones(2, 16, 2)
    masked = torch.tensor([8, 16], dtype=torch.int32)
    o3 = torch.empty(2, 16, 256, dtype=BF16)
    indptr = torch.tensor([0, 8, 16], dtype=torch.int32)
    x16, x8, xs = torch.randn(16, 256).to(BF16), torch.randn(16, 256).to(E4M3), torch.ones(2, 16).t()
    w8, ws = torch.randn(256, 256).to(E4M3), torch.ones(2, 2)
    g = GEMM_BUDGET_US
    return [
        ("bmm_bf16", "out=", g, lambda: G.bmm_bf16(A16, B16, o16)),
        ("bmm_bf16", "allocates out", None, lambda: G.bmm_bf16(A16, B16)),
        ("bmm_fp8", "() scales, out=", g, lambda: G.bmm_fp8(A8, B8, s0, s0, BF16, o16)),
        ("bmm_fp8", "(1,) scales, out= (G1)", g, lambda: G.bmm_fp8(A8, B8, s1, s1, BF16, o16)),
        ("bmm_fp8", "(b,m,1) / (b,1,n), out=", g, lambda: G.bmm_fp8(A8, B8, a_rows, b_cols, BF16, o16)),
        ("bmm_fp8", "(b,1,m) / (b,n,1), out=", g, lambda: G.bmm_fp8(A8, B8, a_rows_t, b_cols_t, BF16, o16)),
        ("bmm_fp8", "() / (b,1,n), out=", g, lambda: G.bmm_fp8(A8, B8, s0, b_cols, BF16, o16)),
        ("bmm_fp8", "(1,) scales, allocates out", None, lambda: G.bmm_fp8(A8, B8, s1, s1, BF16)),
        ("gemm_fp8_nt_groupwise", "K, out=", g, lambda: G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", out=o2)),
        (
            "gemm_fp8_nt_groupwise",
            "MN, out=",
            g,
            lambda: G.gemm_fp8_nt_groupwise(a, b, sa_mn, sb_mn, "MN", out=o2),
        ),
        (
            "gemm_fp8_nt_groupwise",
            "trtllm, out=",
            g,
            lambda: G.gemm_fp8_nt_groupwise(a, b, sa_trtllm, sb, out=o2, backend="trtllm"),
        ),
        (
            "gemm_fp8_nt_groupwise",
            "(128, 128, 128), out=",
            g,
            lambda: G.gemm_fp8_nt_groupwise(
                a, b, sa_block, sb, "K", scale_granularity_mnk=(128, 128, 128), out=o2
            ),
        ),
        (
            "gemm_fp8_nt_groupwise",
            "FP8 output, out=",
            g,
            lambda: G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", out=o8, output_scale=out_scale),
        ),
        (
            "group_deepgemm_fp8_nt_groupwise",
            "out=",
            g,
            lambda: G.group_deepgemm_fp8_nt_groupwise(a, bg, sa, sbg, ids, out=o2),
        ),
        (
            "batch_deepgemm_fp8_nt_groupwise",
            "out=",
            g,
            lambda: G.batch_deepgemm_fp8_nt_groupwise(a3, bg, sa3, sbg, masked, 8, out=o3),
        ),
        (
            "group_gemm_fp8_nt_groupwise",
            "K, out=",
            g,
            lambda: G.group_gemm_fp8_nt_groupwise(a, bg, sa, sbg, indptr, scale_major_mode="K", out=o2),
        ),
        (
            "gemm_fp8_nt_blockscaled",
            "MN, out=",
            g,
            lambda: G.gemm_fp8_nt_blockscaled(a, b, sa_block_mn, sb_mn, out=o2),
        ),
        (
            "fp8_blockscale_gemm_sm90",
            "FP8 input, out=",
            g,
            lambda: G.fp8_blockscale_gemm_sm90(x8, w8, xs, ws, out=o2),
        ),
        (
            "fp8_blockscale_gemm_sm90",
            "BF16 input, out= (vLLM; quantizes)",
            None,
            lambda: G.fp8_blockscale_gemm_sm90(x16, w8, None, ws, out=o2),
        ),
    ]


def mla_cases():
    """sglang's RoPE call (2-D K slices, merged q output) and sparse/dense decode calls."""
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
    query = torch.randn(tokens, 1, heads, 576).to(E4M3)
    kv_cache = torch.randn(4, 1, 64, 576).to(E4M3)
    indices = torch.randint(0, 256, (tokens, 1, topk), dtype=torch.int32)
    seq_lens = torch.full((tokens,), topk, dtype=torch.int32)
    workspace = torch.zeros(1 << 20, dtype=torch.uint8)
    out = torch.empty(tokens, 1, heads, 512, dtype=BF16)
    metadata = flashinfer.decode.get_batch_decode_metadata_mla(query, seq_lens, topk)
    sparse = dict(
        query=query, kv_cache=kv_cache, workspace_buffer=workspace, qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=indices, seq_lens=seq_lens, max_seq_len=topk, bmm1_scale=0.1,
        bmm2_scale=1.0, sparse_mla_top_k=topk,
    )  # fmt: skip
    tables = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    dense = dict(sparse, kv_cache=torch.randn(4, 32, 576).to(E4M3), block_tables=tables, sparse_mla_top_k=0)
    packed = dict(
        sparse, query=torch.randn(tokens, 1, heads, 576).to(BF16), kv_cache=torch.zeros(4, 64, 656, dtype=torch.uint8),
        seq_lens=seq_lens.view(tokens, 1),
    )  # fmt: skip
    decode = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla
    d = DECODE_BUDGET_US
    return [
        ("mla_rope_quantize_fp8", "sglang, 2-D K, outputs given", ROPE_BUDGET_US,
         lambda: flashinfer.rope.mla_rope_quantize_fp8(**rope)),
        ("trtllm_batch_decode_mla", "sparse, metadata, out=", d,
         lambda: decode(**sparse, out=out, metadata=metadata)),
        ("trtllm_batch_decode_mla", "sparse, metadata", d, lambda: decode(**sparse, metadata=metadata)),
        ("trtllm_batch_decode_mla", "sparse, no metadata (vLLM D3)", None, lambda: decode(**sparse)),
        ("trtllm_batch_decode_mla", "dense, out= (sglang M1)", None, lambda: decode(**dense, out=out)),
        ("trtllm_batch_decode_mla", "packed 656-byte, metadata, out=", d,
         lambda: decode(**packed, out=out, metadata=metadata)),
    ]  # fmt: skip


def per_call_ns(fn, iters):
    """Mean CPU time of one call over a loop of ``iters`` calls (timer cost amortized). The
    thread's CPU time, not the wall clock: other processes on a shared machine do not count."""
    clock = time.thread_time_ns
    start = clock()
    for _ in range(iters):
        fn()
    return (clock() - start) / iters


def _noop(*args, **kwargs):
    return None


IMPLEMENTATION_FUNCTIONS = [
    (
        gemm_reference,
        (
            "bmm",
            "gemm_groupwise",
            "group_gemm_contiguous",
            "group_gemm_masked",
            "group_gemm_segments",
            "quantize_fp8_blocks",
        ),
    ),
    (
        mla_reference,
        ("rope_quantize", "sparse_decode", "packed_sparse_decode", "dense_decode", "decode_plan"),
    ),
]


def api_layer_us(calls, iters, rounds) -> list[float]:
    """Per call, its best round minus the best round of a no-op call, in us. Every round times
    every call in turn, so a burst of other work on the machine hits all of them alike and the
    best rounds come from the quiet moments."""
    for call in calls:
        for _ in range(200):
            call()
    best = [float("inf")] * len(calls)
    best_noop = float("inf")
    gc.disable()
    try:
        for _ in range(rounds):
            for i, call in enumerate(calls):
                best[i] = min(best[i], per_call_ns(call, iters))
            best_noop = min(best_noop, per_call_ns(_noop, iters))
    finally:
        gc.enable()
    return [(t - best_noop) / 1e3 for t in best]


ROOT = Path(__file__).resolve().parent.parent


def _checkout_rows(tree: Path, args, out: Path) -> dict:
    """Run ``tree``'s copy of this script on ``tree``'s packages in a fresh process: row -> us."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in sorted(tree.glob("packages/*/src"))))
    command = [sys.executable, "benchmarks/host_overhead.py", "--iters", str(args.iters)]
    subprocess.run(
        command + ["--rounds", str(args.rounds), "--json", str(out)], cwd=tree, env=env, check=True
    )
    return {(r["api"], r["case"]): r["api_layer_us"] for r in json.loads(out.read_text())["rows"]}


def against_baseline(args) -> list[dict]:
    """This checkout's rows with ``baseline_us`` from commit ``args.baseline`` (best of
    ``args.repeat`` alternate runs each, ABBA; rows the baseline lacks get None)."""
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder, "baseline")
        base.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.baseline, "packages", "benchmarks/host_overhead.py"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(base, filter="data")
        ours, theirs = {}, {}
        pair = ((ROOT, ours), (base, theirs))
        for i in range(args.repeat):
            # ABBA order: neither tree always runs first, so a drift of the machine over the run
            # (or a cost of going first) falls on both alike
            for tree, best in pair if i % 2 == 0 else pair[::-1]:
                for key, us in _checkout_rows(tree, args, Path(folder, f"run{i}.json")).items():
                    best[key] = min(best.get(key, float("inf")), us)
    return [
        {"api": api, "case": case, "budget_us": budget, "api_layer_us": ours[(api, case)]}
        | {"baseline_us": theirs.get((api, case))}
        for api, case, budget, _ in gemm_cases() + mla_cases()
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--baseline", help="also time this commit's packages, alternately")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each tree with --baseline")
    args = parser.parse_args()
    if args.baseline:
        rows = against_baseline(args)
        header = f"{'api':32} {'case':32} {'API layer us':>12} {args.baseline[:10]:>10} {'delta':>6}"
        print(header + "\n" + "-" * len(header))
        for r in rows:
            base = r["baseline_us"]
            tail = "-" if base is None else f"{base:10.2f} {r['api_layer_us'] - base:+6.2f}"
            print(f"{r['api']:32} {r['case']:32} {r['api_layer_us']:12.2f} {tail}")
        if args.json:
            meta = _meta(args) | {"baseline": args.baseline, "repeat": args.repeat}
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
        return
    torch.set_num_threads(1)
    saved = [
        (module, name, getattr(module, name)) for module, names in IMPLEMENTATION_FUNCTIONS for name in names
    ]
    cases = gemm_cases() + mla_cases()
    try:
        for module, name, _ in saved:
            setattr(module, name, _noop)
        times = api_layer_us([case[3] for case in cases], args.iters, args.rounds)
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    rows = [
        {"api": api, "case": case, "budget_us": budget, "api_layer_us": us}
        for (api, case, budget, _), us in zip(cases, times)
    ]
    header = f"{'api':32} {'case':32} {'API layer us':>12} {'budget':>7}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        budget = r["budget_us"]
        verdict = "" if budget is None else ("ok" if r["api_layer_us"] <= budget else "OVER")
        budget_text = "-" if budget is None else f"{budget:.0f}"
        print(f"{r['api']:32} {r['case']:32} {r['api_layer_us']:12.2f} {budget_text:>7} {verdict}")
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread; thread CPU time, "
        f"best of {args.rounds} interleaved rounds of {args.iters} calls, minus a no-op call"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": _meta(args), "rows": rows}, f, indent=1)


def _meta(args) -> dict:
    return {
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "torch": torch.__version__,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "threads": 1, "iters": args.iters, "rounds": args.rounds,
    }  # fmt: skip


if __name__ == "__main__":
    main()
