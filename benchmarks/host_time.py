"""Host time of flashinfer calls, one section of RESULTS.md's "Host time" per ``--section``.

- ``api-layer`` (CPU): each public function on tiny tensors while the implementation functions are
  no-ops: validation, argument records, dispatch and (without ``out=``) allocation, minus a no-op
  call; best of interleaved rounds, in the thread's CPU time. Budgets, outputs given: 5 us a GEMM
  call with tensor scales, 10 us a decode call with metadata and a RoPE call.
- ``eager-cpu`` (CPU): the eager calls' whole NVIDIA path on CPU tensors against a stubbed H200
  (``tests/core/launch_protocol.py``), the real ``FastLaunch`` in front of a launcher that does
  nothing: all but the driver and the GPU. Compare rows across trees, not with a GPU's times.
- ``launch`` (GPU): eager wall time per call with ``FastLaunch``, with Triton's ``kernel[grid]``
  and, for the autotuned GEMMs, with the Autotuner on every call; cProfile of RoPE and decode.
- ``calls`` (GPU): eager wall time of one public call (2,000 back to back, best of three): ours
  (``--impl ours``, FlashMLA's decode beside it where importable) or upstream's (``--impl
  upstream``, in its own process); ``--join`` joins the runs' files and prints the table.
- ``split`` (GPU): the same calls' host issue time (CPU time of 200 unsynchronized calls) beside
  their GPU time (20 calls in a CUDA graph); ``--profile`` adds cProfile.
- ``decode-layers`` (GPU): an eager batch-1 decode's (and one RoPE token's) host time layer by
  layer: the compiled launchers, + ``FastLaunch``, + ``_cuda``, + the public API (``--tier``).

``--baseline REV`` (CPU sections): REV's packages and this tree's, each in fresh processes,
alternately, ``--repeat`` times each, best per row. Run from the repository root with the
packages' sources on ``PYTHONPATH``; each section's command is in RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
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
import types
from pathlib import Path

import torch
from _harness import (
    BF16,
    E4M3,
    OUT,
    PACKAGES,
    ROOT,
    capture,
    decode_api_call,
    eager_wall_us,
    flashmla_decode,
    host_us,
    jit_launch,
    packed_case,
    profile,
    replay_us,
    require_cuda_gpu,
    rope_case,
    run_sparse,
    sparse_case,
)
from report_sections.host import EAGER_CALLS, eager_calls_table, eager_split_table

GEMM_BUDGET_US, DECODE_BUDGET_US, ROPE_BUDGET_US = 5.0, 10.0, 10.0
EAGER_ROWS = list(EAGER_CALLS)  # the eager calls, in the table's order


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- api-layer


def gemm_cases():
    """(api, case, budget in us or None, call) with tiny tensors."""
    import flashinfer.gemm as G

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
        ("gemm_fp8_nt_groupwise", "MN, out=", g, lambda: G.gemm_fp8_nt_groupwise(a, b, sa_mn, sb_mn, "MN", out=o2)),
        ("gemm_fp8_nt_groupwise", "trtllm, out=", g,
         lambda: G.gemm_fp8_nt_groupwise(a, b, sa_trtllm, sb, out=o2, backend="trtllm")),
        ("gemm_fp8_nt_groupwise", "(128, 128, 128), out=", g,
         lambda: G.gemm_fp8_nt_groupwise(a, b, sa_block, sb, "K", scale_granularity_mnk=(128, 128, 128), out=o2)),
        ("gemm_fp8_nt_groupwise", "FP8 output, out=", g,
         lambda: G.gemm_fp8_nt_groupwise(a, b, sa, sb, "K", out=o8, output_scale=out_scale)),
        ("group_deepgemm_fp8_nt_groupwise", "out=", g,
         lambda: G.group_deepgemm_fp8_nt_groupwise(a, bg, sa, sbg, ids, out=o2)),
        ("batch_deepgemm_fp8_nt_groupwise", "out=", g,
         lambda: G.batch_deepgemm_fp8_nt_groupwise(a3, bg, sa3, sbg, masked, 8, out=o3)),
        ("group_gemm_fp8_nt_groupwise", "K, out=", g,
         lambda: G.group_gemm_fp8_nt_groupwise(a, bg, sa, sbg, indptr, scale_major_mode="K", out=o2)),
        ("gemm_fp8_nt_blockscaled", "MN, out=", g, lambda: G.gemm_fp8_nt_blockscaled(a, b, sa_block_mn, sb_mn, out=o2)),
        ("fp8_blockscale_gemm_sm90", "FP8 input, out=", g, lambda: G.fp8_blockscale_gemm_sm90(x8, w8, xs, ws, out=o2)),
        ("fp8_blockscale_gemm_sm90", "BF16 input, out= (vLLM; quantizes)", None,
         lambda: G.fp8_blockscale_gemm_sm90(x16, w8, None, ws, out=o2)),
    ]  # fmt: skip


def mla_cases():
    """sglang's RoPE call (2-D K slices, merged q output) and sparse/dense decode calls."""
    import flashinfer.decode
    import flashinfer.rope

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


# the implementation functions the api-layer section replaces with a no-op
IMPLEMENTATION_FUNCTIONS = {
    "flashinfer.gemm._reference": ("bmm", "gemm_groupwise", "group_gemm_contiguous", "group_gemm_masked",
                                   "group_gemm_segments", "quantize_fp8_blocks"),
    "flashinfer.mla._reference": ("rope_quantize", "sparse_decode", "packed_sparse_decode", "dense_decode",
                                  "decode_plan"),
}  # fmt: skip


def _noop(*args, **kwargs):
    return None


def api_layer_rows(iters, rounds) -> list[dict]:
    """Per case, its best round minus the best round of a no-op call, in us. Every round times
    every call in turn, so a burst of other work on the machine hits all of them alike and the
    best rounds come from the quiet moments."""
    import importlib

    torch.set_num_threads(1)
    cases = gemm_cases() + mla_cases()
    modules = {name: importlib.import_module(name) for name in IMPLEMENTATION_FUNCTIONS}
    saved = [(modules[m], name, getattr(modules[m], name)) for m, names in IMPLEMENTATION_FUNCTIONS.items()
             for name in names]  # fmt: skip
    calls = [case[3] for case in cases]
    best, best_noop = [float("inf")] * len(calls), float("inf")
    try:
        for module, name, _ in saved:
            setattr(module, name, _noop)
        for call in calls:
            for _ in range(200):
                call()
        gc.disable()
        for _ in range(rounds):
            for i, call in enumerate(calls):
                best[i] = min(best[i], host_us(call, iters, 1, clock=time.thread_time_ns))
            best_noop = min(best_noop, host_us(_noop, iters, 1, clock=time.thread_time_ns))
    finally:
        gc.enable()
        for module, name, fn in saved:
            setattr(module, name, fn)
    return [{"api": api, "case": case, "budget_us": budget, "api_layer_us": us - best_noop}
            for (api, case, budget, _), us in zip(cases, best)]  # fmt: skip


def api_layer_tree_rows(tree: Path, args, out: Path) -> dict:
    """``tree``'s own copy of this section (or of ``host_overhead.py``, its name before) on
    ``tree``'s packages, in a fresh process: (api, case) -> us."""
    script = ["benchmarks/host_time.py", "--section", "api-layer"]
    if not (tree / script[0]).exists():
        script = ["benchmarks/host_overhead.py"]
    options = ["--iters", str(args.iters), "--rounds", str(args.rounds), "--json", str(out)]
    subprocess.run([sys.executable, *script, *options], cwd=tree, env=tree_env(tree), check=True)
    return {(r["api"], r["case"]): r["api_layer_us"] for r in json.loads(out.read_text())["rows"]}


def api_layer(args) -> None:
    meta = {
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "torch": torch.__version__,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "threads": 1, "iters": args.iters, "rounds": args.rounds,
    }  # fmt: skip
    if not args.baseline:
        rows = api_layer_rows(args.iters, args.rounds)
        header = f"{'api':32} {'case':32} {'API layer us':>12} {'budget':>7}"
        print(header + "\n" + "-" * len(header))
        for r in rows:
            budget = r["budget_us"]
            verdict = "" if budget is None else ("ok" if r["api_layer_us"] <= budget else "OVER")
            budget_text = "-" if budget is None else f"{budget:.0f}"
            print(f"{r['api']:32} {r['case']:32} {r['api_layer_us']:12.2f} {budget_text:>7} {verdict}")
        print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread; thread CPU time, "
              f"best of {args.rounds} interleaved rounds of {args.iters} calls, minus a no-op call")  # fmt: skip
    else:
        with tempfile.TemporaryDirectory() as folder:
            trees = {"ours": ROOT, "base": checkout(args.baseline, Path(folder, "baseline"))}
            best = best_of_trees(trees, args.repeat, lambda tree, i: api_layer_tree_rows(tree, args, Path(folder, f"run{i}.json")))  # fmt: skip
        rows = [{"api": api, "case": case, "budget_us": budget, "api_layer_us": best["ours"][(api, case)],
                 "baseline_us": best["base"].get((api, case))} for api, case, budget, _ in gemm_cases() + mla_cases()]  # fmt: skip
        meta |= {"baseline": args.baseline, "repeat": args.repeat}
        header = f"{'api':32} {'case':32} {'API layer us':>12} {args.baseline[:10]:>10} {'delta':>6}"
        print(header + "\n" + "-" * len(header))
        for r in rows:
            base = r["baseline_us"]
            tail = "-" if base is None else f"{base:10.2f} {r['api_layer_us'] - base:+6.2f}"
            print(f"{r['api']:32} {r['case']:32} {r['api_layer_us']:12.2f} {tail}")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


# ----------------------------------------------------------------------------- trees (--baseline)


def checkout(rev: str, folder: Path) -> Path:
    """``packages/`` and ``benchmarks/`` of commit ``rev`` (``git archive``) in ``folder``."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev, "packages", "benchmarks"], cwd=ROOT, capture_output=True,
                             check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def tree_env(tree: Path) -> dict:
    """The environment of a fresh process that imports ``tree``'s packages."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tree / "packages" / p / "src") for p in PACKAGES)}
    env.pop("TRITON_INTERPRET", None)
    return env


def best_of_trees(trees: dict, repeat: int, rows_of) -> dict:
    """``{tree name: {row: best us}}`` over ``repeat`` runs of ``rows_of(tree path, run)`` each, in
    ABBA order: neither tree always runs first, so a drift of the machine over the run (or a cost
    of going first) falls on both alike."""
    best: dict = {name: {} for name in trees}
    order = list(trees)
    for i in range(repeat):
        for name in order if i % 2 == 0 else order[::-1]:
            for row, us in rows_of(trees[name], i).items():
                best[name][row] = min(us, best[name].get(row, float("inf")))
    return best


# ----------------------------------------------------------------------------- eager-cpu


def stub_launches() -> None:
    """The NVIDIA path on CPU tensors with every Triton launch reaching a no-op compiled
    launcher through the real launch layer (what a tree's FastLaunch does with it is timed)."""
    sys.path.insert(0, str(ROOT / "tests" / "core"))
    import launch_protocol
    from triton.compiler import CompiledKernel

    from flashinfer._core import triton_launch
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm, gluon_fp8_decode_gemm  # noqa: F401 (stubbed below)

    class Nothing(launch_protocol.Recorder):  # library calls (cuBLASLt) recorded as nothing
        def record(self, *args, **kwargs):
            pass

    launch = triton_launch.FastLaunch.launch
    launch_protocol.install(Nothing(), device := {})
    launch_protocol.set_device(device, "h200")
    triton_launch.FastLaunch.launch = launch  # install() records launches instead: run them
    for name in ("_current_device", "_current_stream"):  # this tree's device queries, if it has them
        if hasattr(triton_launch, name):
            setattr(triton_launch, name, (lambda: -1) if name == "_current_device" else (lambda index: 0))
    active = types.SimpleNamespace(get_current_device=lambda: -1, get_current_stream=lambda index: 0)
    triton_launch.driver = types.SimpleNamespace(active=active)

    class Launcher:  # Triton 3.6's CudaLauncher without a kernel: its C launch does nothing
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid = launch_pdl = False

        def __init__(self):
            self.launch = lambda *args: None

        def __call__(self, gx, gy, gz, stream, function, *args):
            self.launch(gx, gy, gz, stream, function, False, False, None, None, *args)

    class Compiled(CompiledKernel):
        run = None

        def __init__(self):
            self.run, self.function, self.packed_metadata, self.module = Launcher(), 0, (), None

    class Kernel:  # the JIT function's face that FastLaunch reads: its parameters, its launch
        def __init__(self, fn):
            self.params, self.__name__, self.compiled = fn.params, fn.__name__, Compiled()

        def __getitem__(self, grid):
            return lambda *args, **kwargs: self.compiled

    for module in [m for name, m in list(sys.modules.items()) if name.startswith("flashinfer") and m]:
        for value in list(vars(module).values()):
            if isinstance(value, triton_launch.FastLaunch) and not isinstance(value.kernel, Kernel):
                value.kernel, value.enabled = Kernel(value.kernel), True


def cpu_eager_calls() -> dict:
    """The eager calls (``calls``' rows) on CPU tensors."""
    import flashinfer.decode
    import flashinfer.gemm as fg
    import flashinfer.rope

    m, n, k = 1, 2112, 7168
    x16, x, w = torch.randn(m, k).to(BF16), torch.randn(m, k).to(E4M3), torch.randn(n, k).to(E4M3)
    w_scale, x_scale = torch.rand(17, k // 128) + 0.5, (torch.rand(k // 128, 4) + 0.5)[:, :m]
    out, one = torch.empty(m, n, dtype=BF16), torch.ones(())
    latent, heads = torch.randn(1, 576).to(BF16), 128
    q_out, k_out = torch.empty(1, heads, 576, dtype=E4M3), torch.empty(1, 576, dtype=E4M3)
    rope = dict(
        q_rope=torch.randn(1, heads, 64).to(BF16), k_rope=latent[:, 512:], q_nope=torch.randn(1, heads, 512).to(BF16),
        k_nope=latent[:, :512], cos_sin_cache=torch.randn(4096, 64), pos_ids=torch.randint(0, 4096, (1,)),
        is_neox=False, q_rope_out=q_out[..., 512:], q_nope_out=q_out[..., :512], k_rope_out=k_out[:, 512:],
        k_nope_out=k_out[:, :512],
    )  # fmt: skip
    query, seq_lens = torch.randn(1, 1, heads, 576).to(E4M3), torch.full((1,), 4096, dtype=torch.int32)
    decode = dict(
        query=query, kv_cache=torch.randn(64, 64, 576).to(E4M3), workspace_buffer=torch.empty(64 << 20, dtype=torch.uint8),
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64,
        block_tables=torch.randint(0, 4096, (1, 1, 2048), dtype=torch.int32), seq_lens=seq_lens, max_seq_len=4096,
        sparse_mla_top_k=2048, bmm1_scale=0.07, bmm2_scale=1.0, out=torch.empty(1, 1, heads, 512, dtype=BF16),
        metadata=flashinfer.decode.get_batch_decode_metadata_mla(query, seq_lens, 2048),
    )  # fmt: skip
    return {
        "mla_rope_quantize_fp8, 1 token": lambda: flashinfer.rope.mla_rope_quantize_fp8(**rope),
        "bmm_fp8, m=1 n=2112 k=7168": lambda: fg.bmm_fp8(
            x.unsqueeze(0), w.unsqueeze(0).transpose(1, 2), one, one, BF16, out.unsqueeze(0)
        ),
        "fp8_blockscale_gemm_sm90, BF16 input": lambda: fg.fp8_blockscale_gemm_sm90(
            x16, w, None, w_scale, out=out
        ),
        "fp8_blockscale_gemm_sm90, FP8 input": lambda: fg.fp8_blockscale_gemm_sm90(
            x, w, x_scale, w_scale, out=out
        ),
        "sparse decode B1 H128 top-k 2048, metadata, out=": lambda: (
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**decode)
        ),
    }


def eager_cpu_tree_rows(tree: Path) -> dict:
    """This script's eager-cpu rows on ``tree``'s packages, in a fresh process: call -> us."""
    command = [sys.executable, __file__, "--section", "eager-cpu", "--rows"]
    done = subprocess.run(command, env=tree_env(tree), cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def eager_cpu(args) -> None:
    if args.rows:  # one tree, in a subprocess
        stub_launches()
        rows = {name: host_us(fn, 500, 30, warmup=200, clock=time.thread_time_ns) for name, fn in cpu_eager_calls().items()}  # fmt: skip
        print(json.dumps(rows))
        return
    with tempfile.TemporaryDirectory() as folder:
        trees = {"this tree": ROOT}
        if args.baseline:
            trees[args.baseline] = checkout(args.baseline, Path(folder, "baseline"))
        by_tree = best_of_trees(trees, args.repeat, lambda tree, i: eager_cpu_tree_rows(tree))
    best = {row: {tree: by_tree[tree][row] for tree in trees} for row in by_tree["this tree"]}
    print(f"{'call':52s} " + " ".join(f"{t:>12s}" for t in trees))
    for row, times in best.items():
        print(f"{row:52s} " + " ".join(f"{times[t]:9.2f} us" for t in trees))
    if args.json:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        meta = {
            "machine": os.uname().machine, "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "this tree": f"{commit.stdout.strip()} and its working tree's changes, if any", "trees": list(trees),
        }  # fmt: skip
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": best}, indent=1))


# ----------------------------------------------------------------------------- launch


def launch(args) -> None:
    import triton

    import flashinfer.gemm
    import flashinfer.rope
    from flashinfer._core import triton_launch
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm
    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode, mla_decode_gluon
    from flashinfer.mla.kernels import rope_quantize as rope_kernels

    runtime = triton_launch.knobs.runtime if triton_launch.knobs is not None else None
    facts = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "launch_enter_hook": repr(getattr(runtime, "launch_enter_hook", None)),
        "launch_exit_hook": repr(getattr(runtime, "launch_exit_hook", None)),
        "fast_launch_enabled": rope_kernels._ROPE_QUANTIZE.enabled,
    }  # fmt: skip
    public, internal, _ = rope_case(1)
    rope_api = lambda: flashinfer.rope.mla_rope_quantize_fp8(**public)  # noqa: E731
    rope_impl = lambda: _cuda.rope_quantize(internal)  # noqa: E731
    case = sparse_case(1, 128, 1, E4M3)
    plan = _cuda.decode_plan(1, 1, 128, case["indices"].shape[-1], case["query"].device)
    decode_impl = lambda: run_sparse(_cuda, case, plan)  # noqa: E731
    rope_impl()
    decode_impl()
    facts["rope_compiled_entries"] = len(rope_kernels._ROPE_QUANTIZE._compiled)
    facts["decode_compiled_entries"] = len(mla_decode._DECODE._compiled)
    print(json.dumps(facts, indent=1), flush=True)

    A = torch.randn(128, 4, 128, device="cuda").to(E4M3)  # MLA absorb: 128 heads, 4 tokens
    B = torch.randn(128, 512, 128, device="cuda").to(E4M3).transpose(1, 2)
    one = torch.ones((), device="cuda")
    bmm_out = torch.empty(128, 4, 512, dtype=BF16, device="cuda")
    bmm_api = lambda: flashinfer.gemm.bmm_fp8(A, B, one, one, BF16, bmm_out)  # noqa: E731
    a, b = torch.randn(4, 7168, device="cuda").to(E4M3), torch.randn(2, 2048, 7168, device="cuda").to(E4M3)
    m_indices = torch.zeros(4, dtype=torch.int32, device="cuda")
    a_scale, b_scale = torch.ones(4, 56, device="cuda"), torch.ones(2, 16, 56, device="cuda")
    group_out = torch.empty(4, 2048, dtype=BF16, device="cuda")

    def group_api():
        flashinfer.gemm.group_deepgemm_fp8_nt_groupwise(a, b, a_scale, b_scale, m_indices, out=group_out)

    rows = []
    launchers = (rope_kernels._ROPE_QUANTIZE, mla_decode._DECODE, mla_decode._COMBINE, mla_decode_gluon._DECODE,
                 mla_decode_gluon._COMBINE, fp8_bmm._TUNED.fast, fp8_blockwise._TUNED.fast)  # fmt: skip
    for name, fn, tuned in (
        ("rope 1 token, public API", rope_api, None),
        ("rope 1 token, _cuda", rope_impl, None),
        ("decode B=1 H=128 fp8, _cuda (2 launches)", decode_impl, None),
        ("bmm_fp8 128 x (4 x 128) x (128 x 512), public API", bmm_api, fp8_bmm),
        ("group_deepgemm 4 rows, n 2048, k 7168, public API", group_api, fp8_blockwise),
    ):
        fn()
        fast = eager_wall_us(fn)
        with jit_launch(*launchers):
            jit = eager_wall_us(fn)
        row = {"call": name, "fast_launch_us": fast, "jit_launch_us": jit}
        if tuned is not None:  # the Autotuner's own launch on every call (the previous code)
            with autotuner_launch(tuned):
                row["autotuner_launch_us"] = eager_wall_us(fn)
        rows.append(row)
        print(f"{name:52s} FastLaunch {fast:7.1f} us   Triton JIT launch {jit:7.1f} us"
              + (f"   Autotuner launch {row['autotuner_launch_us']:7.1f} us" if tuned is not None else ""), flush=True)  # fmt: skip
    for name, fn in (("rope _cuda", rope_impl), ("decode _cuda", decode_impl)):
        print(f"--- cProfile, {name}, FastLaunch\n{profile(fn)}")
        with jit_launch(*launchers):
            print(f"--- cProfile, {name}, Triton JIT launch\n{profile(fn)}")
    write(args, "launch_overhead.json", {"meta": facts, "rows": rows})


@contextlib.contextmanager
def autotuner_launch(module):
    """Launch the module's autotuned kernel through Triton's Autotuner on every call."""
    from flashinfer._core.triton_launch import AUTOTUNED_LAUNCH

    class ThroughAutotuner:
        def launch(self, grid, key, *args, **constants):
            with AUTOTUNED_LAUNCH:
                saved.tuned[grid](*args, **constants)

    saved = module._TUNED
    module._TUNED = ThroughAutotuner()
    try:
        yield
    finally:
        module._TUNED = saved


# ----------------------------------------------------------------------------- calls and split


def gpu_eager_calls(impl: str) -> dict:
    """``{(call, who): fn}``: the GEMM calls and RoPE on one token through ``impl``'s public API,
    and in ours' process our decode and FlashMLA's where importable (upstream has no sm90 sparse
    decode). Fresh random operands; FP8 input scales MN-major, rows padded to 4 (upstream's test)."""
    import flashinfer.gemm as fg
    import flashinfer.rope

    m, n, k = 1, 2112, 7168
    kb = k // 128
    x16 = torch.randn(m, k, device="cuda", dtype=BF16)
    x, w = (torch.randn(m, k, device="cuda").to(E4M3), torch.randn(n, k, device="cuda").to(E4M3))
    w_scale = torch.rand(n // 128 + (n % 128 > 0), kb, device="cuda") + 0.5
    x_scale = (torch.rand(kb, 4, device="cuda") + 0.5)[:, :m]
    out, one = torch.empty(m, n, device="cuda", dtype=BF16), torch.ones((), device="cuda")
    public, _, _ = rope_case(1, with_record=impl == "ours")
    calls = {
        (EAGER_ROWS[1], impl): lambda: fg.bmm_fp8(
            x[None], w[None].transpose(1, 2), one, one, BF16, out[None]
        ),
        (EAGER_ROWS[2], impl): lambda: fg.fp8_blockscale_gemm_sm90(x16, w, None, w_scale, out=out),
        (EAGER_ROWS[3], impl): lambda: fg.fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out),
        (EAGER_ROWS[0], impl): lambda: flashinfer.rope.mla_rope_quantize_fp8(**public),
    }
    if impl == "ours":
        calls[(EAGER_ROWS[4], "ours")] = decode_api_call(sparse_case(1, 128, 1, E4M3))
        try:
            calls[(EAGER_ROWS[4], "FlashMLA")] = flashmla_decode(packed_case(1, 128, 1, seed=0))[0]
        except ImportError:
            pass
    return calls


def gpu_us(fn) -> float | None:
    """GPU time per call: 20 calls captured in a CUDA graph, best of five replays (None: not captured)."""
    try:
        graph = capture(fn, 20, warmup=3)
    except Exception as error:  # a call that cannot be captured: no GPU figure
        print(f"  (not captured: {type(error).__name__}: {str(error)[:120]})")
        return None
    return replay_us(graph, 20, 5)


def eager_runs(args) -> None:
    """``calls`` and ``split``: one process's rows (``--impl``), or the runs joined (``--join``)."""
    name = {"calls": "eager_calls.json", "split": "eager_split.json"}[args.section]
    table = eager_calls_table if args.section == "calls" else eager_split_table
    if args.join:
        runs = [json.loads(Path(path).read_text()) for path in args.join]
        joined = {"meta": [run["meta"] for run in runs], "rows": [r for run in runs for r in run["rows"]]}
        write(args, name, joined)
        print(table(joined["rows"]))
        return
    import flashinfer

    meta = {"impl": args.impl, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "flashinfer": f"{getattr(flashinfer, '__version__', '?')} ({flashinfer.__file__})", "date": utc_now()}  # fmt: skip
    print(meta, flush=True)
    rows = []
    for (op, who), fn in gpu_eager_calls(args.impl).items():
        if args.section == "calls":
            rows.append({"op": op, "impl": who, "wall_us": eager_wall_us(fn, 2000, 3)})
            print(f"{op:58s} {who:9s} {rows[-1]['wall_us']:8.1f} us", flush=True)
            continue
        host = host_us(fn, 200, 5, warmup=50, clock=time.thread_time_ns, sync=torch.cuda.synchronize)
        gpu = gpu_us(fn)
        rows.append({"op": op, "impl": who, "host_us": host, "gpu_us": gpu})
        print(
            f"{op:58s} {who:9s} host {host:6.1f} us  GPU {'-' if gpu is None else f'{gpu:6.1f}'} us",
            flush=True,
        )
        if args.profile:
            print(profile(fn, calls=2000, top=18, warmup=50), flush=True)
    write(args, f"eager_{args.impl}.json" if args.section == "calls" else f"eager_split_{args.impl}.json",
          {"meta": meta, "rows": rows})  # fmt: skip


# ----------------------------------------------------------------------------- decode-layers


def recorded_launches(launchers, fn):
    """(launcher, grid, args, kwargs) of each launch ``fn`` makes through ``launchers``."""
    seen = []
    originals = {id(launcher): launcher.launch for launcher in launchers}

    def recorder(launcher):
        def launch(grid, *args, **kwargs):
            seen.append((launcher, grid, args, kwargs))
            originals[id(launcher)](grid, *args, **kwargs)

        return launch

    for launcher in launchers:
        launcher.launch = recorder(launcher)
    try:
        fn()
    finally:
        for launcher in launchers:
            del launcher.launch  # the class's method again
    return seen


def raw_runs(seen):
    """A callable that launches each recorded kernel through its compiled launcher only."""
    from triton.runtime import driver

    runs = []
    for launcher, grid, args, kwargs in seen:
        ((launch, options, constexprs),) = [
            entry for key, entry in launcher._compiled.items() if key[2] == tuple(kwargs.items())
        ][-1:]
        call_args = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        stream = driver.active.get_current_stream(torch.cuda.current_device())
        dims = (*grid, *(1,) * (3 - len(grid)))
        runs.append(
            lambda launch=launch, options=options, constexprs=constexprs, call_args=call_args, dims=dims,
            stream=stream: launch(*dims, stream, *options, *call_args, *constexprs)
        )  # fmt: skip
    return lambda: [r() for r in runs]


def decode_layers(args) -> None:
    os.environ["FLASHINFER_KERNEL_TIER"] = args.tier
    import triton

    import flashinfer.rope
    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode, mla_decode_gluon
    from flashinfer.mla.kernels import rope_quantize as rope_kernels

    case = sparse_case(1, 128, 1, E4M3)
    decode_api = decode_api_call(case)
    plan = _cuda.decode_plan(1, 1, 128, case["indices"].shape[-1], case["query"].device)
    decode_impl = lambda: run_sparse(_cuda, case, plan)  # noqa: E731
    decode_api()
    seen = recorded_launches((mla_decode_gluon._DECODE, mla_decode_gluon._COMBINE, mla_decode._DECODE,
                              mla_decode._COMBINE), decode_impl)  # fmt: skip
    rope_public, rope_internal, _ = rope_case(1)
    rope_api = lambda: flashinfer.rope.mla_rope_quantize_fp8(**rope_public)  # noqa: E731
    rope_impl = lambda: _cuda.rope_quantize(rope_internal)  # noqa: E731
    rope_api()
    rope_seen = recorded_launches((rope_kernels._ROPE_QUANTIZE,), rope_impl)

    def through_fast_launch(seen):
        return lambda: [launcher.launch(grid, *a, **kw) for launcher, grid, a, kw in seen]

    facts = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "tier": args.tier, "decode_launches": [type(s[0].kernel).__name__ + ":" + s[0].kernel.__name__ for s in seen],
        "decode_grids": [s[1] for s in seen],
    }  # fmt: skip
    print(json.dumps(facts), flush=True)
    rows = []
    for op, layers in (
        ("decode B1 H128 top-k 2048 e4m3", (("run", raw_runs(seen)), ("FastLaunch", through_fast_launch(seen)),
                                            ("_cuda", decode_impl), ("public API", decode_api))),
        ("rope 1 token", (("run", raw_runs(rope_seen)), ("FastLaunch", through_fast_launch(rope_seen)),
                          ("_cuda", rope_impl), ("public API", rope_api))),
    ):  # fmt: skip
        for layer, fn in layers:
            fn()
            rows.append(
                {"op": op, "layer": layer, "host_us": host_us(fn, 200, 15, sync=torch.cuda.synchronize)}
            )
            print(f"{op:32s} {layer:12s} host {rows[-1]['host_us']:7.2f} us", flush=True)
        rows.append({"op": op, "layer": "public API, synchronized", "wall_us": eager_wall_us(layers[-1][1])})
        print(f"{op:32s} public API wall (eager, back to back) {rows[-1]['wall_us']:7.2f} us", flush=True)
    text = profile(decode_api, top=25) + profile(rope_api, top=25)
    print(text)
    write(args, f"decode_eager_{args.tier}.json", {"meta": facts, "rows": rows, "profile": text})


# ----------------------------------------------------------------------------- the command line


def write(args, name: str, report: dict) -> None:
    """``report`` to ``--json`` if given, else to ``name`` under ``--out``."""
    path = Path(args.json) if args.json else Path(args.out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))


SECTIONS = {"api-layer": api_layer, "eager-cpu": eager_cpu, "launch": launch, "calls": eager_runs,
            "split": eager_runs, "decode-layers": decode_layers}  # fmt: skip
CPU_SECTIONS = ("api-layer", "eager-cpu")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", required=True, choices=SECTIONS)
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)), help="GPU sections' output folder")
    parser.add_argument("--json", help="write the results to this file (api-layer, eager-cpu: only then)")
    parser.add_argument("--iters", type=int, default=200, help="api-layer: calls a round")
    parser.add_argument("--rounds", type=int, default=50, help="api-layer: interleaved rounds")
    parser.add_argument("--baseline", help="CPU sections: also time this commit's packages, alternately")
    parser.add_argument(
        "--repeat", type=int, default=2, help="CPU sections: runs of each tree with --baseline"
    )
    parser.add_argument("--impl", choices=("ours", "upstream"), help="calls, split: whose flashinfer this is")
    parser.add_argument("--join", nargs="+", metavar="JSON", help="calls, split: join --impl runs' files")
    parser.add_argument("--profile", action="store_true", help="split: print cProfile's top functions")
    parser.add_argument("--tier", default="auto", help="decode-layers: the decode's kernel tier")
    parser.add_argument("--rows", action="store_true", help=argparse.SUPPRESS)  # eager-cpu: one tree's rows
    args = parser.parse_args()
    if args.section in ("calls", "split") and not (args.impl or args.join):
        parser.error(f"--section {args.section} needs --impl or --join")
    if args.section not in CPU_SECTIONS and not args.join:
        require_cuda_gpu(f"host_time.py --section {args.section}")
    SECTIONS[args.section](args)


if __name__ == "__main__":
    main()
