"""MLA benchmark on one CUDA device: sparse decode (Triton) and fused RoPE + FP8 quantize.

- Sparse decode (``_harness.sparse_case``): batch {1, 8, 32, 64, 128} x heads {16, 64, 128} x q_len
  {1, 2} x {FP8, BF16}, top-k 2048, fresh random slots of a pool far past the L2: the median,
  the time in a CUDA graph, TFLOP/s, GB/s and the floor (``decode_roofline``), eager time at
  batch 1, the float32 reference on a few shapes. ``--targets-only``: the target shapes.
- RoPE (``rope_case``, sglang's call) at 1-16384 tokens against a copy of its bytes: kernel
  median, in a graph, eager through the public API.
- ``--packed``: the decode on the packed 656-byte rows (bf16 query), per cache layout
  (``--layouts``) and kernel tier (``--tiers``); ``--flashmla`` adds FlashMLA's sparse FP8 decode
  (``flashmla_anchor.sh``) on the same bytes: its time and the largest difference of the outputs.
- ``--tune``: candidate tl decode tiles on the key shapes. ``--upstream``: upstream FlashInfer's
  RoPE (its wheel alone on ``PYTHONPATH``) timed the same way.

Writes ``bench_mla.json`` (``packed_mla``, ``tune_mla``, ``upstream_mla``) to ``--out``; the
commands of each table are in RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
from pathlib import Path

import torch
from _harness import (
    D_V,
    DIM,
    DTYPES,
    OUT,
    PACKED_ROW,
    PEAK_FLOPS,
    TOPK,
    copy_bandwidth,
    decode_record,
    decode_roofline,
    eager_wall_us,
    flashmla_decode,
    graph_time_ms,
    jit_launch,
    median_ms,
    oracle_error,
    packed_case,
    require_cuda_gpu,
    rope_case,
    run_meta,
    run_packed,
    run_sparse,
    sparse_case,
    write_json,
)

# (dtype, batch, heads, q_len) of the targets, for a short run
TARGET_SHAPES = [("fp8", 128, 128, 1), ("fp8", 128, 64, 1), ("fp8", 1, 128, 1), ("fp8", 128, 16, 1),
                 ("fp8", 32, 128, 2), ("bf16", 128, 128, 1), ("bf16", 8, 16, 1)]  # fmt: skip
# (dtype, batch, heads, q_len) where the float32 reference is timed too
REFERENCE_SHAPES = {("fp8", 1, 128, 1), ("bf16", 1, 128, 1), ("fp8", 8, 16, 1), ("fp8", 32, 128, 1)}
# (batch, heads, q_len) of the packed decode's targets, FlashMLA's side by side
PACKED_TARGET_SHAPES = [(1, 128, 1), (32, 128, 1), (128, 128, 1), (128, 64, 1), (64, 64, 1), (32, 128, 2),
                        (128, 128, 2)]  # fmt: skip


def decode_shapes(targets_only):
    if targets_only:
        return TARGET_SHAPES
    return [(kind, batch, heads, q_len) for kind in DTYPES for heads in (16, 64, 128) for q_len in (1, 2)
            for batch in (1, 8, 32, 64, 128)]  # fmt: skip


def bench_decode(copy_bw, rows, reference_shapes, targets_only):
    """Each decode shape through ``_cuda``: median, in a graph, eager at batch 1, the reference's
    time on ``reference_shapes``."""
    from flashinfer.mla import _cuda, _reference

    for kind, batch, heads, q_len in decode_shapes(targets_only):
        dtype = DTYPES[kind]
        case = sparse_case(batch, heads, q_len, dtype, seed=len(rows))
        plan = _cuda.decode_plan(batch, q_len, heads, TOPK, case["query"].device)
        # the kernel module of the tier that runs this case, and its plan
        kernel, kernel_plan, _ = _cuda._decode_kernel(decode_record(case, plan), paged=False)
        run_sparse(_cuda, case, plan)
        err = oracle_error(case)
        ms = median_ms(lambda case=case, plan=plan: run_sparse(_cuda, case, plan))
        graph_ms = graph_time_ms(lambda case=case, plan=plan: run_sparse(_cuda, case, plan))
        nbytes, flops, floor_ms = decode_roofline(batch, heads, q_len, kind, copy_bw)
        row = {
            "op": "sparse_decode", "dtype": kind, "batch": batch, "heads": heads,
            "q_len": q_len, "topk": TOPK, "splits": kernel_plan.num_splits, "ms": ms, "graph_us": graph_ms * 1e3,
            "tflops": flops / ms * 1e-9, "gbps": nbytes / ms * 1e-6,
            "floor_ms": floor_ms, "rel_err": err,
        }  # fmt: skip
        if batch == 1:  # host-bound: eager wall time per call, cached kernel vs Triton's JIT launch
            row["eager_us"] = eager_wall_us(lambda case=case, plan=plan: run_sparse(_cuda, case, plan))
            with jit_launch(kernel._DECODE, kernel._COMBINE):
                row["eager_jit_us"] = eager_wall_us(
                    lambda case=case, plan=plan: run_sparse(_cuda, case, plan)
                )
        if (kind, batch, heads, q_len) in reference_shapes:
            row["reference_ms"] = median_ms(lambda case=case: run_sparse(_reference, case, None))
        rows.append(row)
        print(
            f"decode {kind:4s} B={batch:3d} H={heads:3d} q_len={q_len} splits={kernel_plan.num_splits:2d} "
            f"{ms * 1e3:8.1f} us (graph {graph_ms * 1e3:8.1f} us) {row['tflops']:6.1f} TFLOP/s {row['gbps']:6.0f} GB/s "
            f"floor {floor_ms * 1e3:6.1f} us err {err:.1e}"
            + (f" ref {row['reference_ms'] * 1e3:9.1f} us" if "reference_ms" in row else "")
            + (
                f" eager {row['eager_us']:.1f} us (JIT launch {row['eager_jit_us']:.1f})"
                if "eager_us" in row
                else ""
            ),
            flush=True,
        )
        del case


# ----------------------------------------------------------------------------- packed cache


def padded_pages(rows, page_size=64):
    """FlashMLA's cache layout of the same rows: pages of ``page_size`` rows, ``page_size + 1``
    rows apart (the padding row all-ones bytes: NaN codes and scales, never read)."""
    pages = rows.shape[0] // page_size
    storage = torch.full(((page_size + 1) * pages, PACKED_ROW), 0xFF, dtype=torch.uint8, device=rows.device)
    paged = storage.as_strided((pages, page_size, PACKED_ROW), ((page_size + 1) * PACKED_ROW, PACKED_ROW, 1))
    paged.copy_(rows[: pages * page_size].view(pages, page_size, PACKED_ROW))
    return paged


def unpack(rows):
    """float64 K rows of packed rows (for the error check)."""
    latent = rows[:, :D_V].view(torch.float8_e4m3fn).double()
    scales = rows[:, D_V : D_V + 16].contiguous().view(torch.float32).double()
    rope = rows[:, D_V + 16 :].contiguous().view(torch.bfloat16).double()
    return torch.cat((latent * scales.repeat_interleave(128, -1), rope), -1)


def packed_error(case, out) -> float:
    """max |out - ref| / max |ref| against float64 (first two requests' last token)."""
    worst = 0.0
    for b in range(min(2, out.shape[0])):
        keys = unpack(case["rows"][case["indices"][b, -1].long()])
        s = case["bmm1_scale"] * case["query"][b, -1].double() @ keys.T
        ref = torch.softmax(s, -1) @ keys[:, :D_V]
        worst = max(worst, ((out[b, -1, : ref.shape[0]].double() - ref).abs().max() / ref.abs().max()).item())
    return worst


def bench_packed(copy_bw, rows, args):
    """Each shape on each cache layout of ``args.layouts`` (``dense``: one-row pages; ``padded``:
    FlashMLA's pages of 64 rows, 65 apart) and kernel tier of ``args.tiers``
    (``FLASHINFER_KERNEL_TIER``), FlashMLA (``args.flashmla``) once per shape."""
    from flashinfer._core.kernel_tier import KERNEL_TIER_ENV
    from flashinfer.mla import _cuda

    targets_only, with_flashmla = args.targets_only, args.flashmla
    tiers, layouts = args.tiers.split(","), args.layouts.split(",")

    shapes = sorted({(batch, heads, q_len) for _, batch, heads, q_len in decode_shapes(False)})
    for batch, heads, q_len in PACKED_TARGET_SHAPES if targets_only else shapes:
        case = packed_case(batch, heads, q_len, seed=len(rows))
        plan = _cuda.decode_plan(batch, q_len, heads, TOPK, case["query"].device)
        tokens = batch * q_len
        nbytes = tokens * (heads * DIM * 2 + TOPK * PACKED_ROW + heads * D_V * 2)
        flops = 2.0 * heads * TOPK * (DIM + D_V) * tokens
        floor_ms = max(nbytes / copy_bw, flops / PEAK_FLOPS["bf16"]) * 1e3
        anchor = {}
        if with_flashmla:
            call, padded = flashmla_decode(case)
            theirs = call()[0]
            anchor = {"flashmla_heads": padded, "flashmla_ms": median_ms(call),
                      "flashmla_graph_us": graph_time_ms(call) * 1e3, "flashmla_err": packed_error(case, theirs)}  # fmt: skip
        for layout in layouts:
            cache = case["rows"].unsqueeze(1) if layout == "dense" else padded_pages(case["rows"])
            for tier in tiers:
                os.environ[KERNEL_TIER_ENV] = tier
                gluon = tier != "tl" and _cuda.use_gluon(
                    case["query"].device, auto_ok=_cuda.PACKED_GLUON_AUTO
                )
                splits = (plan.gluon if gluon else plan.portable).num_splits
                run = functools.partial(run_packed, case, plan, cache)
                case["out"].fill_(math.nan)
                run()
                err = packed_error(case, case["out"])
                ms = median_ms(run)
                graph_ms = graph_time_ms(run)
                row = {
                    "op": "packed_decode", "batch": batch, "heads": heads, "q_len": q_len, "topk": TOPK,
                    "tier": tier, "kernel": "gluon" if gluon else "tl", "layout": layout, "splits": splits,
                    "ms": ms, "graph_us": graph_ms * 1e3, "tflops": flops / ms * 1e-9, "gbps": nbytes / ms * 1e-6,
                    "floor_ms": floor_ms, "rel_err": err, **anchor,
                }  # fmt: skip
                line = (
                    f"packed B={batch:3d} H={heads:3d} q_len={q_len} {layout:6s} {row['kernel']:5s} splits={splits:2d} "
                    f"{ms * 1e3:8.1f} us (graph {graph_ms * 1e3:8.1f} us) {row['tflops']:6.1f} TFLOP/s "
                    f"floor {floor_ms * 1e3:6.1f} us err {err:.1e}"
                )
                if anchor:
                    diff = (theirs[:, :, :heads].double() - case["out"].double()).abs().max()
                    row["max_diff_vs_flashmla"] = (diff / theirs[:, :, :heads].double().abs().max()).item()
                    line += (
                        f" | FlashMLA (H={padded}) graph {row['flashmla_graph_us']:8.1f} us "
                        f"FlashMLA/ours {row['flashmla_graph_us'] / row['graph_us']:.2f}x diff {row['max_diff_vs_flashmla']:.1e}"
                    )
                rows.append(row)
                print(line, flush=True)
            del cache
        os.environ.pop(KERNEL_TIER_ENV, None)
        del case


# DecodeConfig fields (block_h, block_n, num_warps, num_stages, upcast_qk) tried per (dtype, more
# than 32 heads); the first is the planner's. Variants measured slower and since removed from the
# kernel (keys-major scores, FP8 PV, query reload, register caps) are in the raw tuning runs,
# benchmarks/results/tune_mla_h200_round{1,2,3}.json.
TUNE_TILES = {
    ("fp8", True): [(64, 64, 8, 2, 0), (64, 64, 8, 3, 0), (64, 32, 8, 3, 0), (32, 32, 4, 3, 1)],
    ("bf16", True): [(64, 64, 8, 3, 0), (64, 64, 8, 2, 0), (64, 32, 8, 3, 0), (32, 32, 4, 3, 0)],
    ("fp8", False): [(16, 32, 4, 3, 1), (16, 64, 4, 3, 1), (16, 64, 4, 4, 1)],
    ("bf16", False): [(16, 64, 4, 3, 0), (16, 64, 4, 4, 0), (16, 32, 4, 3, 0)],
}
TUNE_SHAPES = ((128, 128), (128, 64), (128, 16), (1, 128), (32, 128), (8, 16))


def tune(copy_bw, rows):
    """Time candidate tiles at the plan's split count on the key decode shapes, then the best
    tile at half and twice that count. The batch-128 shapes try every tile; the others only the
    two fastest so far of their class (each tile costs a compile)."""
    from flashinfer.mla import _cuda

    os.environ["FLASHINFER_KERNEL_TIER"] = "tl"  # the tiles tuned here are the portable kernel's
    ranking = {}  # (dtype, many heads) -> {tile: summed time}
    for kind, dtype in DTYPES.items():
        for batch, heads in TUNE_SHAPES:
            case = sparse_case(batch, heads, 1, dtype)
            base = _cuda.decode_plan(batch, 1, heads, TOPK, case["query"].device).portable
            cls = (kind, heads > 32)
            seen = ranking.setdefault(cls, {})
            tiles = TUNE_TILES[cls] if batch == 128 or not seen else sorted(seen, key=seen.get)[:2]
            results = {}
            for tile in tiles:
                results[tile] = tune_one(copy_bw, rows, kind, case, batch, heads, tile, base.num_splits)
            best = min((t for t in results if results[t] is not None), key=results.get, default=None)
            if batch == 128:
                for tile, ms in results.items():
                    if ms is not None:
                        seen[tile] = seen.get(tile, 0.0) + ms
            if best is None:
                continue
            for splits in sorted(
                {max(1, base.num_splits // 2), min(64, base.num_splits * 2)} - {base.num_splits}
            ):
                tune_one(copy_bw, rows, kind, case, batch, heads, best, splits)
            del case


def tune_one(copy_bw, rows, kind, case, batch, heads, tile, splits):
    """Time one (tile, splits) on ``case``; None when it does not compile or fit."""
    import triton

    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode

    block_h, block_n, warps, stages, upcast_qk = tile
    config = mla_decode.DecodeConfig(block_h, block_n, warps, stages, 1, bool(upcast_qk))
    plan = _cuda.DecodePlans(mla_decode.DecodePlan(splits, triton.cdiv(heads, block_h), config, config), None)
    try:
        run_sparse(_cuda, case, plan)
        err = oracle_error(case)
        # in a CUDA graph, as in serving: the launch overhead of small shapes does not count
        ms = graph_time_ms(lambda: run_sparse(_cuda, case, plan))
    except Exception as exc:  # a config that does not compile or fit is reported
        print(f"tune {kind} B={batch} H={heads} {tile}: {type(exc).__name__}: {exc}"[:300], flush=True)
        return None
    _, flops, floor_ms = decode_roofline(batch, heads, 1, kind, copy_bw)
    rows.append({"op": "tune", "dtype": kind, "batch": batch, "heads": heads,
                 "config": dataclasses.asdict(config), "splits": splits, "ms": ms, "rel_err": err})  # fmt: skip
    print(
        f"tune {kind:4s} B={batch:3d} H={heads:3d} bh={block_h:3d} bn={block_n:3d} w={warps:2d} st={stages} "
        f"up={upcast_qk} splits={splits:2d} {ms * 1e3:8.1f} us "
        f"{flops / ms * 1e-9:6.1f} TFLOP/s floor {floor_ms * 1e3:6.1f} us err {err:.1e}",
        flush=True,
    )
    return ms


# ----------------------------------------------------------------------------- RoPE


def bench_rope(copy_bw, rows, upstream=False):
    """RoPE + quantize by tokens: kernel median against a copy of its bytes, in a graph, eager."""
    import flashinfer.rope

    if not upstream:
        from flashinfer.mla import _cuda
        from flashinfer.mla.kernels import rope_quantize as rope_kernels

    for tokens in (1, 128, 1024, 4096, 16384):
        public, internal, nbytes = rope_case(tokens, with_record=not upstream)

        def api(public=public):
            flashinfer.rope.mla_rope_quantize_fp8(**public)

        def launcher(internal=internal):
            _cuda.rope_quantize(internal)

        # upstream is timed through its public API only (its kernel launcher is private)
        kernel = api if upstream else launcher
        kernel_ms = median_ms(kernel)
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_ms = median_ms(lambda src=src, dst=dst: dst.copy_(src))
        graph_ms = graph_time_ms(kernel)
        api_us = eager_wall_us(api)
        launcher_us = eager_wall_us(kernel)
        row = {
            "op": "rope_quantize", "tokens": tokens, "bytes": nbytes, "ms": kernel_ms,
            "copy_ms": copy_ms, "copy_fraction": copy_ms / kernel_ms, "gbps": nbytes / kernel_ms * 1e-6,
            "graph_us": graph_ms * 1e3, "eager_api_us": api_us, "eager_launcher_us": launcher_us,
        }  # fmt: skip
        if not upstream:  # the same eager calls through Triton's own JIT launch (no FastLaunch)
            with jit_launch(rope_kernels._ROPE_QUANTIZE):
                row["eager_api_jit_us"] = eager_wall_us(api)
        rows.append(row)
        print(
            f"rope T={tokens:6d} {kernel_ms * 1e3:8.1f} us ({row['gbps']:6.0f} GB/s, "
            f"{row['copy_fraction'] * 100:5.1f}% of copy {copy_ms * 1e3:7.1f} us) graph {row['graph_us']:6.2f} us "
            f"eager API {api_us:6.1f} us launcher {launcher_us:6.1f} us"
            + (f" API with Triton's JIT launch {row['eager_api_jit_us']:6.1f} us" if not upstream else ""),
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    parser.add_argument("--tune", action="store_true", help="time candidate decode tile configs")
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--skip-rope", action="store_true")
    parser.add_argument("--targets-only", action="store_true", help="decode at the target shapes only")
    parser.add_argument("--upstream", action="store_true", help="time upstream FlashInfer's RoPE instead")
    parser.add_argument("--packed", action="store_true", help="decode on the packed 656-byte cache only")
    parser.add_argument("--flashmla", action="store_true", help="with --packed: FlashMLA on the same bytes")
    parser.add_argument(
        "--tiers", default="auto", help="with --packed: kernel tiers, comma-separated (auto,gluon,tl)"
    )
    parser.add_argument(
        "--layouts", default="dense", help="with --packed: cache layouts, comma-separated (dense,padded)"
    )
    args = parser.parse_args()
    require_cuda_gpu("bench_mla.py")
    import flashinfer

    copy_bw = copy_bandwidth()
    implementation = f"flashinfer {getattr(flashinfer, '__version__', '?')} ({flashinfer.__file__})"
    meta = run_meta(copy_bandwidth_gbps=copy_bw * 1e-9, implementation=implementation)
    print(meta, flush=True)
    rows = []
    try:
        if args.upstream:
            bench_rope(copy_bw, rows, upstream=True)
        elif args.packed:
            bench_packed(copy_bw, rows, args)
        elif args.tune:
            tune(copy_bw, rows)
        else:
            if not args.skip_rope:
                bench_rope(copy_bw, rows)
            if not args.skip_decode:
                bench_decode(copy_bw, rows, REFERENCE_SHAPES, args.targets_only)
    finally:  # a run cut short (SIGINT) keeps what it measured; the file is named by the mode
        modes = {"packed_mla": args.packed, "tune_mla": args.tune, "upstream_mla": args.upstream}
        name = next((mode for mode, on in modes.items() if on), "bench_mla")
        write_json(Path(args.out, name + ".json"), {"meta": meta, "rows": rows})


if __name__ == "__main__":
    main()
